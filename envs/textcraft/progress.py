"""How far a TextCraft episode got towards its goal (``info["progress"]``).

The requirements of a task are what the expert's plan from the listed
commands obtains: each item it fetches or crafts, with the total count it
gets of that item (the goal itself is one of them). An episode meets a
requirement once it has fetched or crafted that many of the item in all,

    progress = |{item : obtained(item) >= need(item)}| / |need|,

where obtained(item) counts every ``Got``/``Crafted`` so far and is never
lowered by crafting, so progress never falls within an episode; it is 1 once
the goal is held (also through a recipe the plan does not use). AgentGym's
reward is unchanged (1 on the goal); trainers may add progress as a dense
reward (GRPO's ``progress_reward``), which separates the samples of a group
that all fail: the one that fetched the goal's ingredients from the one that
fetched an item the task never mentions.
"""

from __future__ import annotations

import re

from envs.textcraft.expert import expert_actions

_OBTAINS = re.compile(r"(?:get|craft) (\d+) (.+?)(?: using .+)?")


def requirements(task_text: str) -> dict[str, int]:
    """item -> total count the expert's plan fetches or crafts of it, for a fresh task."""
    needs: dict[str, int] = {}
    for action in expert_actions(task_text):
        match = _OBTAINS.fullmatch(action)
        if match is None:  # the plan only gets and crafts; anything else is a planner bug
            raise ValueError(f"unexpected expert action {action!r}")
        item = match.group(2)
        needs[item] = needs.get(item, 0) + int(match.group(1))
    return needs


def progress(needs: dict[str, int], obtained: dict[str, int]) -> float:
    """Share of `needs` met by the running totals `obtained` (module doc); 0 with no needs."""
    if not needs:
        return 0.0
    met = sum(obtained.get(item, 0) >= count for item, count in needs.items())
    return met / len(needs)
