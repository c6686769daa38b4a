"""One ScienceWorld engine: a JVM running the `scienceworld` jar, driven over py4j.

Why a wrapper around `scienceworld.ScienceWorldEnv` instead of using it as is:

- `ScienceWorldEnv.step()` also asks the simulator for every valid
  action-object combination on every call (plus look / inventory / task
  text). That query costs ~0.3 s and lists ~2,700 actions (80K characters)
  in the kitchen, against ~5 ms for the step itself. We call the simulator's
  own `step` and read the score and completion flag directly.
- `close()` there only asks the JVM to exit. We also wait for the process
  and kill it if it lingers, so closing an env never leaks a JVM.

Each `Engine` owns exactly one JVM, started in the constructor (~1 s);
`load()` swaps the task variation inside the same JVM (~0.15-0.3 s).
"""

from __future__ import annotations

import subprocess

from py4j.protocol import Py4JError
from scienceworld import ScienceWorldEnv

JVM_EXIT_TIMEOUT_S = 5.0


class Engine:
    """A live ScienceWorld simulator (one JVM) and the calls the env needs."""

    def __init__(self) -> None:
        # An empty task name starts the JVM without loading a task.
        self._sw = ScienceWorldEnv("")
        self._sim = self._sw.server
        self._proc: subprocess.Popen = self._sw._gateway.java_process
        self._closed = False

    @property
    def pid(self) -> int:
        """Process id of this engine's JVM."""
        return self._proc.pid

    # -- task set-up ---------------------------------------------------------

    def task_ids(self) -> dict[str, str]:
        """Engine task id ("1-1") -> task name ("boil"), in the engine's order."""
        return dict(self._sw.tasks)

    def max_variations(self, task_name: str) -> int:
        return int(self._sw.get_max_variations(task_name))

    def load(self, task_name: str, variation: int, *, gold_path: bool = False) -> None:
        """Load a task variation (the world is rebuilt; the score is 0).

        With `gold_path` the simulator also plans the gold action sequence,
        which costs 1-5 s more, so it is done only on request.
        """
        self._sw.load(task_name, variation, "", generateGoldPath=gold_path)

    def variation_splits(self) -> dict[str, list[int]]:
        """Train / dev / test variations of the loaded task, as the engine defines them."""
        return {
            "train": [int(v) for v in self._sw.get_variations_train()],
            "dev": [int(v) for v in self._sw.get_variations_dev()],
            "test": [int(v) for v in self._sw.get_variations_test()],
        }

    def gold_actions(self) -> list[str]:
        """Gold action sequence of the loaded task (needs `load(..., gold_path=True)`)."""
        if not self._sw.goldPathGenerated:
            raise RuntimeError("the gold path was not generated for the loaded task")
        return [str(a) for a in self._sim.getGoldActionSequence()]

    # -- playing ---------------------------------------------------------------

    def step(self, action: str) -> str:
        """Run one action; returns the simulator's text answer."""
        return str(self._sim.step(action))

    def score(self) -> int:
        """Current score in [-100, 100] (negative once the task has failed)."""
        return round(100 * float(self._sim.getScore()))

    def completed(self) -> bool:
        """True once the task's goal sequence is complete."""
        return bool(self._sim.getCompleted())

    def task_description(self) -> str:
        return str(self._sim.freeActionTaskDesc())

    def action_templates(self) -> list[str]:
        """Action templates such as "open OBJ" (cheap: ~5 ms)."""
        return [str(a) for a in self._sim.getPossibleActions()]

    def visible_objects(self) -> list[str]:
        """Names of the objects the agent can refer to here (cheap: ~5 ms)."""
        return [str(o) for o in self._sim.getPossibleObjects()]

    def goal_progress(self) -> str:
        return str(self._sim.getGoalProgressStr())

    # -- shutdown --------------------------------------------------------------

    def close(self) -> None:
        """Stop the JVM and wait until its process is gone (idempotent)."""
        if self._closed:
            return
        self._closed = True
        try:
            self._sw.close()
        except (OSError, Py4JError):
            pass  # the JVM is already gone or unreachable: the kill below settles it
        try:
            self._proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=JVM_EXIT_TIMEOUT_S)
