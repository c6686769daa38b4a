"""Fixed opponents for the board games, for evaluation: random and heuristic.

`opponent_action(game, agent, kind)` returns a legal action text ("place 5",
"drop 4") for `agent`, which must be the agent to move in `game` (a
`TicTacToeEnv` or `ConnectFourEnv` after reset()). It reads the game state
(`game.grid()`, the legal moves), never the engine's internals.

* "random": a uniformly random legal move.
* "heuristic": win now if a move wins; else block a cell / column where the
  opponent would win next; else avoid moves that hand the opponent an
  immediate win (in Connect Four: dropping under its winning cell); among the
  rest take the center (Tic-Tac-Toe: cell 5; Connect Four: the column closest
  to the middle), ties and everything else broken at random.

Randomness comes from `rng` when given; otherwise from a generator seeded by
the game, its data_idx and the board, so a replayed game is identical.
"""

from __future__ import annotations

import random

from envs.multiagent.board_game import BoardGameEnv

OPPONENT_KINDS = ("random", "heuristic")

Grid = list[list[str]]


_TTT_LINES = (
    tuple(tuple((r, c) for c in range(3)) for r in range(3))
    + tuple(tuple((r, c) for r in range(3)) for c in range(3))
    + (tuple((i, i) for i in range(3)), tuple((i, 2 - i) for i in range(3)))
)


class _TicTacToeRules:
    """Look-ahead on a 3x3 grid; moves are cell numbers 1-9, row by row."""

    def moves(self, grid: Grid) -> list[int]:
        return [r * 3 + c + 1 for r in range(3) for c in range(3) if grid[r][c] == "."]

    def play(self, grid: Grid, move: int, mark: str) -> Grid:
        new = [row[:] for row in grid]
        r, c = divmod(move - 1, 3)
        new[r][c] = mark
        return new

    def wins(self, grid: Grid, mark: str) -> bool:
        return any(all(grid[r][c] == mark for r, c in line) for line in _TTT_LINES)

    def center_order(self, moves: list[int]) -> list[int]:
        return [5] if 5 in moves else moves


class _ConnectFourRules:
    """Look-ahead on a 6x7 grid (top row first); moves are column numbers 1-7."""

    def moves(self, grid: Grid) -> list[int]:
        return [c + 1 for c in range(len(grid[0])) if grid[0][c] == "."]

    def play(self, grid: Grid, move: int, mark: str) -> Grid:
        new = [row[:] for row in grid]
        col = move - 1
        row = max(r for r in range(len(grid)) if grid[r][col] == ".")
        new[row][col] = mark
        return new

    def wins(self, grid: Grid, mark: str) -> bool:
        rows, cols = len(grid), len(grid[0])
        for r in range(rows):
            for c in range(cols):
                for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                    end_r, end_c = r + 3 * dr, c + 3 * dc
                    if 0 <= end_r < rows and 0 <= end_c < cols and all(grid[r + i * dr][c + i * dc] == mark for i in range(4)):
                        return True
        return False

    middle = 4

    def center_order(self, moves: list[int]) -> list[int]:
        best = min(abs(m - self.middle) for m in moves)
        return [m for m in moves if abs(m - self.middle) == best]


_RULES = {"tictactoe": _TicTacToeRules(), "connect_four": _ConnectFourRules()}


def opponent_action(game: BoardGameEnv, agent: str, kind: str, rng: random.Random | None = None) -> str:
    """A legal move text for `agent` (the agent to move) by a fixed opponent `kind`."""
    if kind not in OPPONENT_KINDS:
        raise ValueError(f"unknown opponent kind {kind!r}; known: {', '.join(OPPONENT_KINDS)}")
    if agent != game.current_agent():
        raise ValueError(f"it is {game.current_agent()}'s turn, not {agent}'s")
    grid = game.grid()
    if rng is None:
        board = "".join("".join(row) for row in grid)
        rng = random.Random(f"{game.name}:{game.data_idx}:{board}")
    legal = game.legal_move_numbers()
    if kind == "random":
        return game.move_text(rng.choice(legal))
    mark, other = game.roles[agent], game.roles[game.opponent(agent)]
    return game.move_text(_heuristic(_RULES[game.name], grid, legal, mark, other, rng))


def _heuristic(rules, grid: Grid, legal: list[int], mark: str, other: str, rng: random.Random) -> int:
    winning = [m for m in legal if rules.wins(rules.play(grid, m, mark), mark)]
    if winning:
        return rng.choice(winning)
    blocking = [m for m in legal if rules.wins(rules.play(grid, m, other), other)]
    if blocking:
        return rng.choice(blocking)
    safe = [m for m in legal if not _gives_win(rules, rules.play(grid, m, mark), other)]
    return rng.choice(rules.center_order(safe or legal))


def _gives_win(rules, grid: Grid, other: str) -> bool:
    return any(rules.wins(rules.play(grid, m, other), other) for m in rules.moves(grid))


class OpponentAgent:
    """A fixed opponent as a policy: act(observation) -> (thought, action).

    The observation text is not needed: the move comes from the game state.
    """

    def __init__(self, game: BoardGameEnv, agent: str, kind: str, seed: int = 0):
        if kind not in OPPONENT_KINDS:
            raise ValueError(f"unknown opponent kind {kind!r}; known: {', '.join(OPPONENT_KINDS)}")
        self.game, self.agent, self.kind = game, agent, kind
        self.rng = random.Random(f"{kind}:{seed}")

    def act(self, observation: str) -> tuple[str, str]:
        return f"I play as the {self.kind} opponent.", opponent_action(self.game, self.agent, self.kind, self.rng)
