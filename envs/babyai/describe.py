"""AgentGym-style text for a BabyAI state.

The wording follows AgentGym's BabyAI server so that prompts and models made
for it read our observations the same way: visible objects with their offset
in steps ("There is a red ball 1 2 steps in front of you and 1 steps to your
right."), the wall ahead, what is carried, and the available actions as a
JSON-like list.
"""

from __future__ import annotations

import json

from minigrid.minigrid_env import MiniGridEnv

from envs.babyai.view import SeenObject, View, wall_ahead


def _where(obj: SeenObject) -> str:
    if obj.right == 0:
        return f"right in front of you {obj.front} steps away."
    side = "right" if obj.right > 0 else "left"
    return f"{obj.front} steps in front of you and {abs(obj.right)} steps to your {side}."


def describe(env: MiniGridEnv, view: View) -> str:
    """Objects in sight, the wall ahead and what the agent carries."""
    if view.objects:
        parts = ["In front of you in this room, you can see several objects:"]
        parts += [f"There is a {obj.label} {_where(obj)}" for obj in view.objects]
    else:
        parts = ["You cannot see any objects within sight."]
    parts.append("The room has walls around you.")
    steps = wall_ahead(env, view)
    if steps is not None:
        parts.append(f"You are facing a wall {steps} steps away.")
    carrying = env.carrying
    if carrying is not None:
        parts.append(f"You are carrying a {carrying.color} {carrying.type}.")
    else:
        parts.append("You are not carrying anything.")
    return " ".join(parts)


def format_actions(actions: list[str]) -> str:
    return "Available actions: " + json.dumps(actions)
