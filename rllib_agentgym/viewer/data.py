"""What the viewer's JSON API answers, computed from a run directory.

`RunReader` re-reads a file only when its size or mtime changed, so a live
run can be watched (the page refreshes) without re-parsing every iteration's
trajectories on each request. All methods are safe to call from the HTTP
server's threads.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rllib_agentgym import run_logs

# Fields of a trajectory row in the list; the turns come with /api/trajectory.
LIST_FIELDS = (
    "iteration", "env", "data_idx", "group_id", "category", "reward", "success",
    "num_turns", "done", "truncated", "num_tokens", "num_generated_tokens",
)


class UnknownTrial(KeyError):
    pass


class TrajectoryFilter:
    """The list filters: task (a data_idx, or a category name), category, reward range, success.

    Built from query strings; a bad value raises ValueError (HTTP 400).
    """

    def __init__(self, *, task: str | None = None, category: str | None = None, min_reward: str | None = None,
                 max_reward: str | None = None, success: str | None = None):
        self.data_idx: int | None = None
        self.category = category or None
        if task not in (None, ""):
            try:
                self.data_idx = int(task)
            except ValueError:
                self.category = task
        self.min_reward = _float_or_none(min_reward, "min_reward")
        self.max_reward = _float_or_none(max_reward, "max_reward")
        self.success = _bool_or_none(success)

    def __call__(self, record: Mapping[str, Any]) -> bool:
        if self.data_idx is not None and record.get("data_idx") != self.data_idx:
            return False
        if self.category is not None and str(record.get("category", "")).lower() != self.category.lower():
            return False
        reward = record.get("reward")
        if self.min_reward is not None and not (isinstance(reward, (int, float)) and reward >= self.min_reward):
            return False
        if self.max_reward is not None and not (isinstance(reward, (int, float)) and reward <= self.max_reward):
            return False
        return self.success is None or bool(record.get("success")) == self.success


def _float_or_none(value: str | None, name: str) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def _bool_or_none(value: str | None) -> bool | None:
    if value in (None, "", "any"):
        return None
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"success must be true or false, got {value!r}")


def _light_rows(path: Path) -> list[dict[str, Any]]:
    """`LIST_FIELDS` of each record of a trajectory file, plus its line `index`."""
    iteration = int(path.stem.split("_")[-1])
    rows = []
    for index, record in enumerate(run_logs.read_jsonl(path)):
        row = {field: record.get(field) for field in LIST_FIELDS}
        row["iteration"] = record.get("iteration", iteration)
        if row["num_turns"] is None:
            row["num_turns"] = len(record.get("turns", []))
        row["index"] = index
        rows.append(row)
    return rows


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


class RunReader:
    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise FileNotFoundError(f"run directory not found: {self.run_dir}")
        self._lock = threading.Lock()
        self._cache: dict[Path, tuple[tuple[int, int], Any]] = {}

    def _cached(self, path: Path, load: Callable[[Path], Any]) -> Any:
        """load(path), reused while the file's (mtime, size) is unchanged."""
        try:
            stat = path.stat()
        except FileNotFoundError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            hit = self._cache.get(path)
        if hit and hit[0] == stamp:
            return hit[1]
        value = load(path)
        with self._lock:
            self._cache[path] = (stamp, value)
        return value

    def _trial_dir(self, trial: str | None) -> Path:
        trials = run_logs.find_trials(self.run_dir)
        if not trial:
            if len(trials) == 1:
                return next(iter(trials.values()))
            raise ValueError(f"this run has {len(trials)} trials; pass ?trial=")
        if trial not in trials:
            raise UnknownTrial(f"unknown trial {trial!r}")
        return trials[trial]

    def _results(self, trial_dir: Path) -> list[dict[str, float]]:
        source = trial_dir / run_logs.RESULT_FILE
        if not source.is_file():
            source = trial_dir / run_logs.PROGRESS_FILE
        return self._cached(source, lambda _: run_logs.load_results(trial_dir)) or []

    def _rows(self, path: Path) -> list[dict[str, Any]]:
        """The list rows of one trajectory file (no turns), cached.

        Turns can be large (web pages as observations), so the cache holds
        only these rows and `trajectory()` re-reads the one file it needs.
        """
        return self._cached(path, _light_rows) or []

    # ---- API ------------------------------------------------------------------

    def trials(self) -> list[dict[str, Any]]:
        out = []
        for name, trial_dir in run_logs.find_trials(self.run_dir).items():
            rows = self._results(trial_dir)
            last = rows[-1] if rows else {}
            out.append({
                "name": name,
                "path": str(trial_dir),
                "num_results": len(rows),
                "num_trajectory_files": len(run_logs.trajectory_files(trial_dir)),
                "last": {curve: last.get(key) for curve in run_logs.CURVES
                         if (key := run_logs.curve_key(last, curve)) is not None},
            })
        return out

    def iterations(self, trial: str | None) -> dict[str, Any]:
        trial_dir = self._trial_dir(trial)
        items = []
        categories: set[str] = set()
        for iteration, path in run_logs.trajectory_files(trial_dir):
            records = self._rows(path)
            rewards = [r["reward"] for r in records if isinstance(r.get("reward"), (int, float))]
            categories.update(str(r.get("category", "")) for r in records if r.get("category"))
            items.append({
                "iteration": iteration,
                "count": len(records),
                "mean_reward": _mean(rewards),
                "success_rate": _mean([float(bool(r.get("success"))) for r in records]),
                "mean_turns": _mean([r["num_turns"] for r in records]),
            })
        return {"iterations": items, "categories": sorted(categories)}

    def trajectories(self, trial: str | None, iteration: int | None, keep: TrajectoryFilter,
                     limit: int = 500, offset: int = 0) -> dict[str, Any]:
        """Rows (without turns) of one iteration, or of all, newest first; `index` is the line in its file."""
        trial_dir = self._trial_dir(trial)
        files = run_logs.trajectory_files(trial_dir)
        if iteration is not None:
            files = [(i, p) for i, p in files if i == iteration]
        rows = []
        for _, path in reversed(files):
            rows.extend(row for row in self._rows(path) if keep(row))
        return {"total": len(rows), "offset": offset, "trajectories": rows[offset:offset + limit]}

    def trajectory(self, trial: str | None, iteration: int, index: int) -> dict[str, Any]:
        path = run_logs.trajectory_path(self._trial_dir(trial), iteration)
        records = run_logs.read_jsonl(path) if path.is_file() else []
        if not 0 <= index < len(records):
            raise IndexError(f"no trajectory {index} in iteration {iteration}")
        return {**records[index], "index": index}

    def metrics(self, trial: str | None) -> dict[str, Any]:
        """Columns of every numeric metric (null where an iteration lacks it) and which ones are the curves."""
        rows = self._results(self._trial_dir(trial))
        columns = run_logs.columns_of(rows)
        return {
            "x": run_logs.ITERATION_KEY,
            "curves": {curve: run_logs.curve_key(columns, curve) for curve in run_logs.CURVES},
            "titles": run_logs.CURVE_TITLES,
            "series": {key: [row.get(key) for row in rows] for key in columns},
        }
