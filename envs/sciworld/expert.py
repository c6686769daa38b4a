"""ExpertAgent: replays the engine's gold action sequence for the current task.

ScienceWorld plans a gold path for every task variation (`load(...,
generateGoldPath=True)`). Replaying it reached the goal in 229 of 230
variations sampled at random, 10 per task (scienceworld 1.2.3); the miss
(freeze, variation 19) is the engine's own plan stopping at score 82, in a
fresh JVM too. Deterministic for a given env: the same task, loaded after
the same earlier tasks in that JVM, gives the same actions and thoughts (the
engine's plan can differ with the JVM's load history). After the sequence
ends (only when the plan fell short) the agent keeps looking around.
"""

from __future__ import annotations

from envs.sciworld.env import SciWorldEnv


class ExpertAgent:
    """Gold-path player; build it right after `env.reset(data_idx)`."""

    def __init__(self, env: SciWorldEnv):
        self._actions = env.gold_actions()
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
        return f"Step {i + 1} of {len(self._actions)} of the known solution: {action}.", action
