"""The action list of a state: each text action and the primitive moves it expands to.

High-level actions name a visible object by its label ("red ball 1") and are
planned over the cells the agent has seen this episode:

    go to <label>                          walk until facing the object
    pickup <label>                         go to it, then pick it up
    go through <color> open door <n>       step into the doorway, then out the far side
    toggle and go through <label>          go to a closed door (or a locked one, with
                                           its key in hand), open it, walk through
    turn left | turn right | move forward | drop | toggle | check available actions

`go to` an object the agent already faces is a minigrid "done" step: it
changes nothing but lets the level check the goal (a GoTo level whose agent
starts facing the target is solved that way). Actions that name something
visible but cannot be done now get a reason in `errors`, shown to the agent
when it tries them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from minigrid.minigrid_env import MiniGridEnv

from envs.babyai.planner import DIR_VECS, DONE, DROP, FORWARD, LEFT, PICKUP, RIGHT, TOGGLE, Reachability, facing_states
from envs.babyai.view import View

CHECK = "check available actions"


@dataclass
class ActionTable:
    plans: dict[str, list[int]] = field(default_factory=dict)  # available action -> primitives
    errors: dict[str, str] = field(default_factory=dict)  # known-but-impossible action -> why

    @property
    def available(self) -> list[str]:
        return list(self.plans)


def can_stand_on(cell) -> bool:
    """Whether the agent may occupy a cell holding `cell` (None = empty floor)."""
    if cell is None:
        return True
    if cell.type == "door":
        return cell.is_open
    return cell.can_overlap() and cell.type != "lava"


def passable_map(env: MiniGridEnv, known) -> list[list[bool]]:
    """passable[x][y]: the cell is known and the agent may stand on it."""
    grid = env.grid
    return [[bool(known[x, y]) and can_stand_on(grid.get(x, y)) for y in range(env.height)] for x in range(env.width)]


def build_actions(env: MiniGridEnv, view: View, known) -> ActionTable:
    """Every action available in the current state, in AgentGym's order."""
    table = ActionTable()
    plans, errors = table.plans, table.errors
    x, y = (int(v) for v in env.agent_pos)
    fx, fy = x + DIR_VECS[env.agent_dir][0], y + DIR_VECS[env.agent_dir][1]
    front = env.grid.get(fx, fy)
    carrying = env.carrying
    reach = Reachability((x, y, env.agent_dir), passable_map(env, known))

    plans["turn left"] = [LEFT]
    plans["turn right"] = [RIGHT]
    if can_stand_on(front):
        plans["move forward"] = [FORWARD]
    else:
        errors["move forward"] = "There is a barrier in front of you, you can't move forward."

    for obj in view.objects:
        if obj.type not in ("key", "ball", "box"):
            continue
        action = f"pickup {obj.label}"
        if carrying is not None:
            errors[action] = (
                f"You cannot pickup {obj.label}, as you are already carrying a {carrying.color} {carrying.type}. Drop it first."
            )
            continue
        path = reach.nearest(facing_states(*obj.pos))
        if path is None:
            errors[action] = f"You cannot pickup {obj.label}, as there is no path leading to it."
        else:
            plans[action] = path + [PICKUP]

    if carrying is None:
        errors["drop"] = "You cannot drop the object, as you are not carrying anything."
    elif front is not None:
        errors["drop"] = "You cannot drop the object, as there is already an object in front of you."
    else:
        plans["drop"] = [DROP]

    for obj in view.objects:
        if obj.type != "door":
            continue
        door = env.grid.get(*obj.pos)
        if door.is_open:
            through = [(obj.pos[0], obj.pos[1], d) for d in range(4) if _beyond_is_not_wall(env, obj.pos, d)]
            path = reach.nearest(through)
            if path is None:
                errors[f"go through {obj.label}"] = (
                    f"You cannot go through {obj.label}, as there is no path leading to it."
                )
            else:
                plans[f"go through {obj.label}"] = path + [FORWARD]
            continue
        action = f"toggle and go through {obj.label}"
        errors[f"go through {obj.label}"] = (
            f"You cannot go through {obj.label}, as it is not open. You should toggle it first."
        )
        if door.is_locked and not (carrying is not None and carrying.type == "key" and carrying.color == door.color):
            errors[action] = (
                f"You cannot toggle and go through {obj.label}, as you are not carrying a {door.color} key."
            )
            continue
        path = reach.nearest(facing_states(*obj.pos))
        if path is None:
            errors[action] = f"You cannot toggle and go through {obj.label}, as there is no path leading to it."
        else:
            plans[action] = path + [TOGGLE, FORWARD, FORWARD]

    if _toggle_has_effect(front, carrying):
        plans["toggle"] = [TOGGLE]
    else:
        errors["toggle"] = "There is nothing in front of you that you can toggle."

    for obj in view.objects:
        action = f"go to {obj.label}"
        if obj.pos == (fx, fy):
            plans[action] = [DONE]
            continue
        path = reach.nearest(facing_states(*obj.pos))
        if path is None:
            errors[action] = f"You cannot go to {obj.label}, as there is no path leading to it."
        else:
            plans[action] = path

    plans[CHECK] = []
    return table


def _beyond_is_not_wall(env: MiniGridEnv, pos: tuple[int, int], d: int) -> bool:
    bx, by = pos[0] + DIR_VECS[d][0], pos[1] + DIR_VECS[d][1]
    if not (0 <= bx < env.width and 0 <= by < env.height):
        return False
    cell = env.grid.get(bx, by)
    return cell is None or cell.type != "wall"


def _toggle_has_effect(front, carrying) -> bool:
    if front is None:
        return False
    if front.type == "box":
        return True
    if front.type != "door":
        return False
    if front.is_locked:
        return carrying is not None and carrying.type == "key" and carrying.color == front.color
    return True
