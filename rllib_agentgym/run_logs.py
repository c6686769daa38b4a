"""The on-disk layout of a training run, read and written in one place.

A run directory is what Ray Tune writes for a trial, plus our trajectory log:

    <trial_dir>/result.json                 one JSON object per iteration (nested keys)
    <trial_dir>/progress.csv                the same, flattened with "/" separators
    <trial_dir>/trajectories/iter_000001.jsonl
                                            one logged trajectory per line (see
                                            `write_trajectories`)

A directory handed to `rllib view` / `rllib plot` may be one trial or an
experiment (or storage) directory holding several; `find_trials` accepts both.
Readers are tolerant: a run still being written has a half-written last line,
older runs lack keys, so anything unreadable is skipped rather than raised.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TRAJECTORY_DIR = "trajectories"
RESULT_FILE = "result.json"
PROGRESS_FILE = "progress.csv"
ITERATION_KEY = "training_iteration"
_TRAJECTORY_FILE = re.compile(r"^iter_(\d+)\.jsonl$")
_TRIAL_SEARCH_DEPTH = 3

# The training curves every report shows, each with the keys it has gone by
# (first present wins). KL falls back to any learner key ending in "/kl".
CURVES: dict[str, tuple[str, ...]] = {
    "reward": ("env_runners/episode_return_mean", "env_runners/episode_reward_mean", "episode_reward_mean"),
    "success": ("env_runners/success_rate", "success_rate"),
    "horizon": ("env_runners/horizon", "horizon"),
    "kl": ("learners/default_policy/kl", "learners/default_policy/mean_kl_loss", "info/learner/default_policy/kl"),
}
CURVE_TITLES = {"reward": "Mean reward", "success": "Success rate", "horizon": "Horizon (max turns)", "kl": "KL to reference"}


# ---- trajectories -----------------------------------------------------------------


def trajectory_path(trial_dir: str | os.PathLike, iteration: int) -> Path:
    return Path(trial_dir) / TRAJECTORY_DIR / f"iter_{int(iteration):06d}.jsonl"


def write_trajectories(logdir: str | os.PathLike, iteration: int, summaries: Iterable[Mapping[str, Any]]) -> Path:
    """Write one iteration's trajectory summaries (`Trajectory.summary()` dicts) as JSONL.

    Each line is the summary plus "iteration"; writing the same iteration again
    (a restored run) replaces the file.
    """
    records = ({"iteration": int(iteration), **{k: v for k, v in s.items() if k != "iteration"}} for s in summaries)
    return write_jsonl(trajectory_path(logdir, iteration), records)


def write_jsonl(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> Path:
    """Write records as JSON lines (gzip-compressed when the name ends in .gz, as
    `read_jsonl` reads it), to a temp name renamed at the end, so that a viewer
    reading a live run never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=".jsonl")
    os.close(fd)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(tmp, "wt", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False, default=_json_default) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _json_default(value: Any) -> Any:
    """numpy scalars and other number-likes that `Trajectory.summary()` may carry."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def trajectory_files(trial_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """(iteration, path) of every trajectory file of a trial, by iteration."""
    folder = Path(trial_dir) / TRAJECTORY_DIR
    if not folder.is_dir():
        return []
    found = []
    for path in folder.iterdir():
        match = _TRAJECTORY_FILE.match(path.name)
        if match and path.is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (trajectories, result.json; gzip-compressed
    when the name ends in .gz); lines that are not JSON objects (a half-written
    last line) are skipped."""
    records = []
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


# ---- trials -----------------------------------------------------------------------


def is_trial_dir(path: Path) -> bool:
    return (path / RESULT_FILE).is_file() or (path / PROGRESS_FILE).is_file() or (path / TRAJECTORY_DIR).is_dir()


def find_trials(run_dir: str | os.PathLike) -> dict[str, Path]:
    """Name -> directory of every trial under `run_dir`.

    A trial directory itself gives one trial named after it; otherwise trials
    are searched a few levels down (experiment dir, or a storage dir of
    experiments) and named by their path relative to `run_dir`. Hidden and
    checkpoint directories are not searched.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"run directory not found: {root}")
    if is_trial_dir(root):
        return {root.resolve().name: root}
    trials: dict[str, Path] = {}
    frontier = [root]
    for _ in range(_TRIAL_SEARCH_DEPTH):
        next_frontier = []
        for folder in frontier:
            try:
                children = sorted(p for p in folder.iterdir() if p.is_dir())
            except OSError:
                continue
            for child in children:
                if child.name.startswith((".", "checkpoint_")):
                    continue
                if is_trial_dir(child):
                    trials[child.relative_to(root).as_posix()] = child
                else:
                    next_frontier.append(child)
        frontier = next_frontier
    return dict(sorted(trials.items()))


# ---- metrics ----------------------------------------------------------------------


def flatten(record: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {"a/b/c": value}, the way progress.csv names columns."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "/"))
        else:
            flat[name] = value
    return flat


def _number(value: Any) -> float | None:
    """A finite float, or None for anything that is not a plottable scalar."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def load_results(trial_dir: str | os.PathLike) -> list[dict[str, float]]:
    """Per-iteration numeric metrics of a trial, flattened, sorted by iteration.

    result.json is preferred (it has every key); progress.csv is the fallback.
    The trial's "config" is not a metric and is dropped. Rows without
    "training_iteration" get their 1-based position.
    """
    trial = Path(trial_dir)
    raw: list[dict[str, Any]] = []
    if (trial / RESULT_FILE).is_file():
        for record in read_jsonl(trial / RESULT_FILE):
            record.pop("config", None)
            raw.append(flatten(record))
    elif (trial / PROGRESS_FILE).is_file():
        with open(trial / PROGRESS_FILE, encoding="utf-8", errors="replace", newline="") as f:
            raw = [dict(row) for row in csv.DictReader(f)]
    rows = []
    for position, record in enumerate(raw, start=1):
        row = {k: n for k, v in record.items() if not k.startswith("config/") and (n := _number(v)) is not None}
        row.setdefault(ITERATION_KEY, float(position))
        rows.append(row)
    rows.sort(key=lambda r: r[ITERATION_KEY])
    return rows


def curve_key(columns: Iterable[str], curve: str) -> str | None:
    """The column that holds one of `CURVES` in this run, or None."""
    present = set(columns)
    for key in CURVES[curve]:
        if key in present:
            return key
    if curve == "kl":
        learner_kl = sorted(k for k in present if k.startswith("learners/") and k.endswith("/kl"))
        return learner_kl[0] if learner_kl else None
    return None


def columns_of(rows: Sequence[Mapping[str, float]]) -> list[str]:
    """Every metric name that occurs in any row, in first-seen order."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    return list(seen)


def series(rows: Sequence[Mapping[str, float]], key: str) -> tuple[list[float], list[float]]:
    """(iterations, values) of the rows that have `key`."""
    xs, ys = [], []
    for row in rows:
        if key in row:
            xs.append(row[ITERATION_KEY])
            ys.append(row[key])
    return xs, ys
