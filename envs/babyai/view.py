"""What the agent sees right now, in world coordinates.

minigrid gives the agent a 7x7 egocentric image in which cells hidden behind
walls or closed doors are encoded as "unseen". We turn that image into the
set of visible world cells (for the episode's map of known cells) and into
the list of visible objects with their offsets from the agent, numbered per
name by distance as AgentGym does ("red ball 1" is the nearest red ball).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from minigrid.core.constants import OBJECT_TO_IDX
from minigrid.minigrid_env import MiniGridEnv

Pos = tuple[int, int]

#: Object types the agent can name in an action (walls are scenery).
NAMEABLE = ("key", "ball", "box", "door")


@dataclass(frozen=True)
class SeenObject:
    """One visible object. `front`/`right` are steps relative to the agent."""

    type: str
    color: str
    name: str  # "red ball", "grey locked door"
    label: str  # name + per-name rank by distance: "red ball 1"
    pos: Pos
    front: int
    right: int


@dataclass(frozen=True)
class View:
    cells: tuple[tuple[Pos, int, int], ...]  # visible in-grid (pos, front, right)
    objects: tuple[SeenObject, ...]  # nearest first

    def object_at(self, pos: Pos) -> SeenObject | None:
        for obj in self.objects:
            if obj.pos == pos:
                return obj
        return None


def object_name(obj) -> str:
    if obj.type == "door":
        state = "open" if obj.is_open else ("locked" if obj.is_locked else "closed")
        return f"{obj.color} {state} door"
    return f"{obj.color} {obj.type}"


def compute_view(env: MiniGridEnv, image: np.ndarray) -> View:
    """The visible world cells and objects, from the observation `image`."""
    size = env.agent_view_size
    pos = np.asarray(env.agent_pos)
    f_vec, r_vec = env.dir_vec, env.right_vec
    seen = image[:, :, 0] != OBJECT_TO_IDX["unseen"]
    cells: list[tuple[Pos, int, int]] = []
    found: list[tuple[int, int, int, object, Pos]] = []
    for i in range(size):
        for j in range(size):
            if not seen[i, j]:
                continue
            front, right = size - 1 - j, i - size // 2
            x, y = (int(v) for v in pos + f_vec * front + r_vec * right)
            if not (0 <= x < env.width and 0 <= y < env.height):
                continue
            cells.append(((x, y), front, right))
            if front == 0 and right == 0:
                continue  # the agent's own cell
            obj = env.grid.get(x, y)
            if obj is not None and obj.type in NAMEABLE:
                found.append((front + abs(right), front, right, obj, (x, y)))
    found.sort(key=lambda item: item[:3])
    counts: dict[str, int] = {}
    objects = []
    for _, front, right, obj, xy in found:
        name = object_name(obj)
        counts[name] = counts.get(name, 0) + 1
        objects.append(SeenObject(obj.type, obj.color, name, f"{name} {counts[name]}", xy, front, right))
    return View(tuple(cells), tuple(objects))


def wall_ahead(env: MiniGridEnv, view: View) -> int | None:
    """Steps to the wall straight ahead when nothing else blocks the way first."""
    visible = {pos for pos, _, _ in view.cells}
    x, y = env.agent_pos
    dx, dy = env.dir_vec
    for steps in range(1, env.agent_view_size):
        cell_pos = (int(x + dx * steps), int(y + dy * steps))
        if cell_pos not in visible:
            return None
        cell = env.grid.get(*cell_pos)
        if cell is None or (cell.type == "door" and cell.is_open):
            continue
        return steps if cell.type == "wall" else None
    return None
