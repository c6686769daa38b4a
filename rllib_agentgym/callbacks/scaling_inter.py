"""ScalingInter-RL: grow the allowed number of interaction turns during training.

The horizon is a pure function of the number of completed training
iterations t, so a run restored at iteration t uses exactly h(t):

* staged:    {schedule: [h_0, h_1, ...], interval: D}
             h(t) = h_k with k = min(t // D, len(schedule) - 1)
* linear:    {start: h_0, delta: dh, interval: D, max: H}
             h(t) = min(H, h_0 + dh * (t // D))   (h_{t+1} = h_t + dh every D iterations)
* fixed:     {schedule: [h]}  (or no schedule: the config's max_turns)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ray.rllib.callbacks.callbacks import RLlibCallback

HORIZON_KEY = "horizon"


@dataclass(frozen=True)
class HorizonSchedule:
    stages: tuple[int, ...] = ()
    interval: int = 1
    start: int | None = None
    delta: int = 0
    maximum: int | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None, default_max_turns: int) -> "HorizonSchedule":
        if not cfg:
            return cls(stages=(int(default_max_turns),))
        unknown = set(cfg) - {"schedule", "interval", "start", "delta", "max"}
        if unknown:
            raise ValueError(f"scaling_inter: unknown keys {sorted(unknown)}; use schedule+interval or start+delta+interval+max")
        interval = int(cfg.get("interval", 1))
        if interval < 1:
            raise ValueError("scaling_inter.interval must be >= 1")
        if "schedule" in cfg:
            stages: Sequence[int] = cfg["schedule"]
            if not stages or any(int(h) < 1 for h in stages):
                raise ValueError("scaling_inter.schedule must be a non-empty list of positive turn counts")
            return cls(stages=tuple(int(h) for h in stages), interval=interval)
        if "start" not in cfg:
            raise ValueError("scaling_inter needs either `schedule` or `start` (with `delta`, `interval`, `max`)")
        return cls(
            start=int(cfg["start"]),
            delta=int(cfg.get("delta", 0)),
            interval=interval,
            maximum=int(cfg["max"]) if cfg.get("max") is not None else None,
        )

    def horizon(self, iteration: int) -> int:
        """h(t) for t completed iterations."""
        steps = max(0, int(iteration)) // self.interval
        if self.stages:
            return self.stages[min(steps, len(self.stages) - 1)]
        h = self.start + self.delta * steps
        return min(h, self.maximum) if self.maximum is not None else h


def push_horizon(algorithm, horizon: int) -> None:
    """Set the max-turn horizon on every env runner (local and remote)."""
    group = algorithm.env_runner_group
    if group is None:
        return
    group.foreach_env_runner(
        lambda runner: runner.set_max_turns(horizon),
        local_env_runner=True,
    )
    algorithm._current_horizon = horizon


def apply_schedule(algorithm) -> int:
    """Push h(t) for the algorithm's t completed iterations to every env runner."""
    cfg = algorithm.config
    schedule = HorizonSchedule.from_config(getattr(cfg, "scaling_inter", None), getattr(cfg, "max_turns", 1))
    horizon = schedule.horizon(algorithm.iteration)
    push_horizon(algorithm, horizon)
    return horizon


class ScalingInterCallback(RLlibCallback):
    """Applies the config's `scaling_inter` schedule (see module doc)."""

    def _apply(self, algorithm) -> int:
        return apply_schedule(algorithm)

    def on_algorithm_init(self, *, algorithm, **kwargs) -> None:
        self._apply(algorithm)

    def on_checkpoint_loaded(self, *, algorithm, **kwargs) -> None:
        self._apply(algorithm)

    def on_env_runners_recreated(self, *, algorithm, **kwargs) -> None:
        self._apply(algorithm)

    def on_train_result(self, *, algorithm, result: dict, **kwargs) -> None:
        # `result` describes the iteration that just ran (with its horizon);
        # the runners now get h(t) for the next one.
        self._apply(algorithm)
