"""Shortest primitive-action paths over the cells the agent knows.

A state is (x, y, direction); the moves are minigrid's turn left, turn right
and move forward, each costing one step, so a breadth-first search gives
paths with the fewest primitive actions. One search from the agent's state
answers every target of an observation (each object to face, each door to
stand in), which keeps a step to a single BFS over at most W*H*4 states.
Forward is expanded before turns, so among equally short paths the one that
turns later wins, deterministically.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence

# minigrid's action indices and direction vectors (0 = east, then clockwise).
LEFT, RIGHT, FORWARD, PICKUP, DROP, TOGGLE, DONE = range(7)
DIR_VECS: tuple[tuple[int, int], ...] = ((1, 0), (0, 1), (-1, 0), (0, -1))

State = tuple[int, int, int]


class Reachability:
    """BFS tree of every state reachable from `start` through passable cells.

    `passable[x][y]` says whether the agent may stand on cell (x, y).
    """

    def __init__(self, start: State, passable: Sequence[Sequence[bool]]):
        self._parent: dict[State, tuple[State, int] | None] = {start: None}
        self._dist: dict[State, int] = {start: 0}
        width, height = len(passable), len(passable[0])
        queue = deque([start])
        while queue:
            state = queue.popleft()
            x, y, d = state
            dx, dy = DIR_VECS[d]
            nx, ny = x + dx, y + dy
            moves = []
            if 0 <= nx < width and 0 <= ny < height and passable[nx][ny]:
                moves.append(((nx, ny, d), FORWARD))
            moves.append(((x, y, (d - 1) % 4), LEFT))
            moves.append(((x, y, (d + 1) % 4), RIGHT))
            for nxt, action in moves:
                if nxt not in self._dist:
                    self._dist[nxt] = self._dist[state] + 1
                    self._parent[nxt] = (state, action)
                    queue.append(nxt)

    def path_to(self, state: State) -> list[int] | None:
        """Primitive actions from the start to `state`, or None if unreachable."""
        if state not in self._parent:
            return None
        actions: list[int] = []
        link = self._parent[state]
        while link is not None:
            state, action = link
            actions.append(action)
            link = self._parent[state]
        return actions[::-1]

    def nearest(self, states: Iterable[State]) -> list[int] | None:
        """The shortest path to any of `states` (ties: first given), or None."""
        best: State | None = None
        for state in states:
            if state in self._dist and (best is None or self._dist[state] < self._dist[best]):
                best = state
        return None if best is None else self.path_to(best)


def facing_states(x: int, y: int) -> list[State]:
    """States in which the agent faces cell (x, y) from a neighbouring cell."""
    return [(x - dx, y - dy, d) for d, (dx, dy) in enumerate(DIR_VECS)]
