"""SciWorldEnv: one ScienceWorld session (one JVM) behind the env contract.

Observation at reset, as AgentGym's SciWorld client shows it: the task
description, a newline, then the answer to `look around` in the start room.

Reward: the engine scores a task in [-100, 100] (partial credit for subgoals;
negative once the task has failed). We normalize it to s = clip(score / 100,
0, 1) and pay the increment of s at every step, so the return of an episode
is its final normalized score (1.0 for a completed task). An increment is
negative when the score drops: a failed task (its partial credit is lost;
the episode ends, info["task_failed"] is set) or the engine's own `reset
task` action. The raw engine score is in info["score"].

Success: info["success"] is True when the engine reports the task complete.

Invalid actions: the engine's "No known action matches that input." (and
"Unknown action." while it waits for a number after an ambiguous request)
become an observation that names the action, lists the action templates and
the objects in view (two cheap queries), sets info["invalid_action"] (False
on every other step), pays 0 and counts as a step. `check valid actions`
answers the same lists without moving the engine. The engine's full
valid-action enumeration (~0.3 s, thousands of "verb object" strings) is
never run: steps cost ~4 ms.

The JVM starts at the first reset and is reused by later resets (each loads
a new task variation into it); close() stops it. The engine carries some
state across loads in one JVM: the order in which it lists objects, and
through it the heat-transfer simulation (the same task replayed in one JVM
can read 56 then 52 degrees). Scores do not change. Gold paths do only
where the task accepts any of several objects: find-non-living-thing's
focuses on a chair in one JVM and on a cloth sittable in another.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from envs.common.env import StepResult
from envs.sciworld import tasks
from envs.sciworld.engine import Engine

CHECK_VALID_ACTIONS = "check valid actions"
INVALID_ANSWERS = ("No known action matches that input.", "Unknown action.")
EPISODE_OVER = "The task is over. Reset the environment to start a new task."


def _words(text: str) -> Counter[str]:
    return Counter(re.findall(r"[\w-]+", text))


class GoldPathUnavailable(RuntimeError):
    """The gold path was asked for after the episode had moved on."""


class SciWorldEnv:
    """A ScienceWorld session playing one (task, variation) at a time."""

    def __init__(self) -> None:
        self._engine: Engine | None = None
        self._task: tasks.Task | None = None
        self._obs = ""
        self._reset_obs = ""
        self._paid = 0  # clip(score, 0, 100) already paid out as reward
        self._raw_score = 0
        self._steps = 0
        self._done = False
        self._success = False
        self._gold: list[str] | None = None

    # -- contract ----------------------------------------------------------------

    def reset(self, data_idx: int) -> str:
        task = tasks.task(data_idx)
        engine = self._ensure_engine()
        engine.load(task.task_name, task.variation)
        self._task = task
        self._obs = self._reset_obs = self._first_observation(engine)
        self._paid = 0
        self._raw_score = 0
        self._steps = 0
        self._done = False
        self._success = False
        self._gold = None
        return self._obs

    def step(self, action: str) -> StepResult:
        engine = self._require_task()
        if self._done:
            return StepResult(EPISODE_OVER, 0.0, True, self._info())
        self._steps += 1
        action = " ".join(action.split())
        if action.lower() == CHECK_VALID_ACTIONS:
            self._obs = self._action_hint_text(engine)
            return StepResult(self._obs, 0.0, False, self._info())

        answer = engine.step(action)
        invalid = answer.startswith(INVALID_ANSWERS)
        self._raw_score = engine.score()
        failed = self._raw_score < 0
        self._success = engine.completed() and not failed
        self._done = self._success or failed
        clipped = min(max(self._raw_score, 0), 100)
        reward, self._paid = (clipped - self._paid) / 100.0, clipped

        if invalid:
            self._obs = f'Invalid action: "{action}" matches no known action.\n' + self._action_hint_text(engine)
        else:
            self._obs = answer
        info = self._info(invalid_action=invalid)
        if failed:
            info["task_failed"] = True
        return StepResult(self._obs, reward, self._done, info)

    def observation(self) -> str:
        self._require_task()
        return self._obs

    def close(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            engine.close()
        self._task = None

    # -- extras (also served over HTTP) ---------------------------------------------

    @property
    def task(self) -> tasks.Task:
        """The task loaded by the last reset."""
        if self._task is None:
            raise RuntimeError("no task loaded: call reset(data_idx) first")
        return self._task

    @property
    def jvm_pid(self) -> int | None:
        """Process id of this env's JVM, None before the first reset or after close."""
        return None if self._engine is None else self._engine.pid

    def gold_actions(self) -> list[str]:
        """The engine's gold action sequence for the current task variation.

        Planning the gold path makes a load 1-5 s slower, so resets skip it;
        the first call reloads the task with planning on and is therefore
        allowed only before the first step. The reloaded world is the same;
        only the order in which the engine lists objects may change (it
        follows the JVM's load history), so the check ignores word order.
        """
        engine = self._require_task()
        if self._gold is None:
            if self._steps:
                raise GoldPathUnavailable("the gold path can be asked for only right after reset, before any step")
            engine.load(self.task.task_name, self.task.variation, gold_path=True)
            if _words(self._first_observation(engine)) != _words(self._reset_obs):
                raise RuntimeError("reloading the task for its gold path changed the start observation")
            self._gold = engine.gold_actions()
        return list(self._gold)

    def action_hint(self) -> dict[str, list[str]]:
        """Action templates and referable objects (AgentGym's /action_hint)."""
        engine = self._require_task()
        return {"possible_actions": engine.action_templates(), "possible_objects": engine.visible_objects()}

    def goal_progress(self) -> str:
        """The engine's subgoal checklist (AgentGym's /goals)."""
        return self._require_task().goal_progress()

    # -- helpers -----------------------------------------------------------------

    def _ensure_engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine()
        return self._engine

    def _require_task(self) -> Engine:
        if self._task is None or self._engine is None:
            raise RuntimeError("no task loaded: call reset(data_idx) first")
        return self._engine

    @staticmethod
    def _first_observation(engine: Engine) -> str:
        return engine.task_description() + "\n" + engine.step("look around")

    @staticmethod
    def _action_hint_text(engine: Engine) -> str:
        return (
            "Valid action templates (OBJ / LOC: an object or place from the list below): "
            + ", ".join(engine.action_templates())
            + "\nObjects you can refer to here: "
            + ", ".join(engine.visible_objects())
        )

    def _info(self, invalid_action: bool = False) -> dict[str, Any]:
        return {"score": self._raw_score, "success": self._success, "invalid_action": invalid_action}
