"""ExpertAgent: replays the engine's gold action sequence for the current task.

ScienceWorld plans a gold path for every task variation (`load(...,
generateGoldPath=True)`). Replaying it reached the goal in 229 of 230
variations sampled at random, 10 per task (scienceworld 1.2.3); the miss
(freeze, variation 19) is the engine's own plan stopping at score 82, in a
fresh JVM too. Deterministic for a given env: the same task, loaded after
the same earlier tasks in that JVM, gives the same actions and thoughts (the
engine's plan can differ with the JVM's load history). After the sequence
ends (only when the plan fell short) the agent keeps looking around.

Two thought styles (`ExpertAgent(env, thoughts=...)`):

* ``"steps"`` (default): "Step 3 of 14 of the known solution: go to kitchen."
* ``"task"``: every thought restates the task ("My task: find a(n) animal.
  First, focus on the thing. Then, move it to the red box in the workshop."),
  so the room and box an action names stand a few tokens above it, in the
  same words, instead of only in the first observation.

`list_on_arrival=True` checks the valid actions after each `go to` (unless
the path's next action does that, or there is none). Some gold paths act on
what a room holds without looking at it, and name objects by the engine's
reference names, which only that list shows: Lifespan's goes to the outside
and focuses on "egg giant tortoise" while "You move to the outside." names no
animal and `look around` says "a giant tortoise egg". With the list, the name
the action uses is in the observation above it. Off by default: the plain
gold path is the engine's own.
"""

from __future__ import annotations

import re

from envs.sciworld.env import CHECK_VALID_ACTIONS, SciWorldEnv


THOUGHT_STYLES = ("steps", "task")
_TASK = re.compile(r"Your task is to (.+)")


def task_text(first_observation: str) -> str:
    """The task as the first observation states it, without "Your task is to"."""
    match = _TASK.search(first_observation)
    if match is None:
        raise ValueError("the observation states no task ('Your task is to ...')")
    return match.group(1).strip()


def list_on_arrival_path(actions: list[str]) -> list[str]:
    """`actions` with `check valid actions` after each `go to` not already followed by one (nor last)."""
    path: list[str] = []
    for action, following in zip(actions, actions[1:] + [None]):
        path.append(action)
        if action.startswith("go to ") and following not in (None, CHECK_VALID_ACTIONS):
            path.append(CHECK_VALID_ACTIONS)
    return path


class ExpertAgent:
    """Gold-path player; build it right after `env.reset(data_idx)`."""

    def __init__(self, env: SciWorldEnv, thoughts: str = "steps", list_on_arrival: bool = False):
        if thoughts not in THOUGHT_STYLES:
            raise ValueError(f"thoughts must be one of {THOUGHT_STYLES}, not {thoughts!r}")
        self._task = task_text(env.observation()) if thoughts == "task" else None
        self._actions = list_on_arrival_path(env.gold_actions()) if list_on_arrival else env.gold_actions()
        self._next = 0

    @property
    def actions(self) -> list[str]:
        """The whole gold action sequence."""
        return list(self._actions)

    def act(self, observation: str) -> tuple[str, str]:
        """(thought, action) for the next step; `observation` is not needed to replay."""
        del observation
        if self._next >= len(self._actions):
            return "The gold path is used up; I look around.", "look around"
        i, action = self._next, self._actions[self._next]
        self._next += 1
        if self._task is not None:
            return f"My task: {self._task}", action
        return f"Step {i + 1} of {len(self._actions)} of the known solution: {action}.", action
