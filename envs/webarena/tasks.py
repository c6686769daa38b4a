"""WebArena task sets: config-file JSON, splits, site URL placeholders, categories.

A task is one WebArena config dict (`task_id`, `sites`, `start_url`,
`intent`, `require_reset`, `eval`, ...). A task set loads from a directory of
`*.json` files (each one task or a list of tasks) or from one JSON file
holding a list, so WebArena's own `config_files/` work unchanged: when a
directory holds numbered per-task files (`0.json`, `1.json`, ...), only those
are read, and aggregate lists beside them (`test.raw.json`, `test.json`)
are ignored. Tasks are
sorted by `task_id`; `data_idx` is the position in that order (for WebArena's
812 tasks it equals `task_id`).

Splits come from `splits.json` next to the tasks ({"train": [task_id, ...],
"test": [...]}); a set without one has every task in both "train" and
"test" (WebArena publishes no train split).

URLs in a task use WebArena's placeholders (`__SHOPPING__`, `__REDDIT__`,
`__GITLAB__`, ...). They resolve, as in WebArena, from environment variables
(SHOPPING, REDDIT, GITLAB, SHOPPING_ADMIN, WIKIPEDIA, MAP, HOMEPAGE); without
one, the shopping, reddit and gitlab placeholders resolve to the embedded
sites this server starts on loopback.

Tasks graded by `fuzzy_match` against a reference list need an LLM judge
(WEBARENA_JUDGE_URL, or the env option judge_url passed to `split_ids`).
Without one they are left out of `split_ids` and counted by `skipped_ids` /
`skipped_count`, as are tasks whose program_html uses WebArena's
site-specific `func:` helpers, which this env does not implement
(`skip_reason` says why); see evaluators.py.

The default task set is the embedded one in `tasks/`; WEBARENA_TASKS (a
directory or a JSON list file) points the module-level functions, and every
env created without a `tasks` option, at another set.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Mapping

EMBEDDED_TASKS = Path(__file__).parent / "tasks"
# WebArena's placeholders and the environment variables holding each site's URL.
PLACEHOLDERS = {
    "__SHOPPING_ADMIN__": "SHOPPING_ADMIN",
    "__SHOPPING__": "SHOPPING",
    "__REDDIT__": "REDDIT",
    "__GITLAB__": "GITLAB",
    "__WIKIPEDIA__": "WIKIPEDIA",
    "__MAP__": "MAP",
    "__HOMEPAGE__": "HOMEPAGE",
}
# Placeholders the embedded sites stand in for, with the embedded site key.
EMBEDDED_SITES = {"__SHOPPING__": "shopping", "__REDDIT__": "reddit", "__GITLAB__": "gitlab"}
SPLITS_FILE = "splits.json"
_PER_TASK_FILE = re.compile(r"\d+\.json")  # WebArena's config_files/<task_id>.json
NEEDS_JUDGE = "fuzzy_match needs an LLM judge and none is configured (WEBARENA_JUDGE_URL or the judge_url option)"
USES_FUNC = "program_html uses WebArena's func: helpers, which this env does not implement"


def judge_configured() -> bool:
    return bool(os.environ.get("WEBARENA_JUDGE_URL"))


def needs_judge(task: Mapping[str, Any]) -> bool:
    """True when grading needs the LLM judge: fuzzy_match against references (not the literal "N/A")."""
    ev = task.get("eval") or {}
    if "string_match" not in (ev.get("eval_types") or ()):
        return False
    fuzzy = (ev.get("reference_answers") or {}).get("fuzzy_match")
    return bool(fuzzy) and fuzzy != "N/A"


def uses_func_helpers(task: Mapping[str, Any]) -> bool:
    """True when a program_html target's url or locator calls one of WebArena's `func:` helpers."""
    ev = task.get("eval") or {}
    if "program_html" not in (ev.get("eval_types") or ()):
        return False
    return any(
        str(target.get(key, "")).strip().startswith("func:")
        for target in ev.get("program_html") or ()
        for key in ("url", "locator")
    )


def skip_reason(task: Mapping[str, Any], with_judge: bool) -> str | None:
    """Why the env cannot grade `task` (it is then skipped and counted, not failed), or None."""
    if uses_func_helpers(task):
        return USES_FUNC
    if needs_judge(task) and not with_judge:
        return NEEDS_JUDGE
    return None


def _read_tasks(path: Path) -> list[dict[str, Any]]:
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.name != SPLITS_FILE)
        numbered = [p for p in files if _PER_TASK_FILE.fullmatch(p.name)]
        files = numbered or files  # WebArena's per-task files, not the aggregate lists beside them
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"no WebArena task file or directory at {path}")
    tasks: list[dict[str, Any]] = []
    for file in files:
        data = json.loads(file.read_text())
        for task in data if isinstance(data, list) else [data]:
            if not isinstance(task, dict) or "task_id" not in task or "intent" not in task:
                raise ValueError(f"{file}: not a WebArena task config (needs task_id and intent)")
            tasks.append(task)
    ids = [t["task_id"] for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate task_id")
    return sorted(tasks, key=lambda t: t["task_id"])


class TaskSet:
    """The tasks of one directory / file, in task_id order, with their splits."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path or os.environ.get("WEBARENA_TASKS") or EMBEDDED_TASKS)
        self.tasks = _read_tasks(self.path)
        self._index = {t["task_id"]: i for i, t in enumerate(self.tasks)}
        splits_file = (self.path if self.path.is_dir() else self.path.parent) / SPLITS_FILE
        if self.path.is_dir() and splits_file.exists():
            raw = json.loads(splits_file.read_text())
            self.splits = {name: [self._index[tid] for tid in ids] for name, ids in raw.items()}
        else:
            everything = list(range(len(self.tasks)))
            self.splits = {"train": everything, "test": everything}

    def __len__(self) -> int:
        return len(self.tasks)

    def task(self, data_idx: int) -> dict[str, Any]:
        if not 0 <= data_idx < len(self.tasks):
            raise IndexError(f"data_idx must be in [0, {len(self.tasks)}), got {data_idx}")
        return copy.deepcopy(self.tasks[data_idx])

    def category(self, data_idx: int) -> str:
        """The task's site(s), e.g. "shopping" or "gitlab+reddit" (the paper reports per site)."""
        return "+".join(sorted(self.tasks[data_idx].get("sites") or ["unknown"]))

    def skip_reasons(self, split: str, with_judge: bool | None = None) -> dict[int, str]:
        """Task id -> why it cannot be graded, for the tasks of `split` left out (see `skip_reason`)."""
        if split not in self.splits:
            raise KeyError(split)
        judge = judge_configured() if with_judge is None else with_judge
        reasons = {i: skip_reason(self.tasks[i], judge) for i in self.splits[split]}
        return {i: why for i, why in reasons.items() if why is not None}

    def split_ids(self, split: str, with_judge: bool | None = None) -> list[int]:
        """Task ids of `split` that can be graded (judge-graded ones only when a judge is configured)."""
        skipped = self.skip_reasons(split, with_judge)
        return [i for i in self.splits[split] if i not in skipped]

    def skipped_ids(self, split: str, with_judge: bool | None = None) -> list[int]:
        """Task ids of `split` left out: they need the LLM judge and none is configured, or `func:` helpers."""
        return list(self.skip_reasons(split, with_judge))


def site_urls(overrides: Mapping[str, str] | None = None, embedded: Mapping[str, str] | None = None) -> dict[str, str]:
    """Placeholder -> URL: `overrides` (by placeholder or env-var name) first, then env vars, then embedded."""
    urls: dict[str, str] = {}
    overrides = dict(overrides or {})
    for placeholder, var in PLACEHOLDERS.items():
        url = overrides.get(placeholder) or overrides.get(var) or os.environ.get(var)
        if not url and embedded is not None and placeholder in EMBEDDED_SITES:
            url = embedded.get(EMBEDDED_SITES[placeholder])
        if url:
            urls[placeholder] = url.rstrip("/")
    return urls


def placeholders_in(task: Mapping[str, Any]) -> set[str]:
    text = json.dumps(task)
    return {p for p in PLACEHOLDERS if p in text}


def resolve(value: Any, urls: Mapping[str, str]) -> Any:
    """`value` with every placeholder string replaced; raises ValueError for a site without a URL."""
    if isinstance(value, str):
        for placeholder, url in urls.items():
            value = value.replace(placeholder, url)
        missing = [p for p in PLACEHOLDERS if p in value]
        if missing:
            var = PLACEHOLDERS[missing[0]]
            raise ValueError(f"the task needs site {missing[0]}: set the environment variable {var} to its URL")
        return value
    if isinstance(value, list):
        return [resolve(v, urls) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, urls) for k, v in value.items()}
    return value


_default_lock = threading.Lock()
_default: TaskSet | None = None


def default_set() -> TaskSet:
    global _default
    with _default_lock:
        if _default is None:
            _default = TaskSet()
        return _default


def split_ids(split: str, judge_url: str | None = None) -> list[int]:
    """The default set's gradable ids of `split`; a `judge_url` (the env option) counts as a configured judge."""
    return default_set().split_ids(split, with_judge=True if judge_url else None)


def skipped_ids(split: str, judge_url: str | None = None) -> list[int]:
    return default_set().skipped_ids(split, with_judge=True if judge_url else None)


def skip_reasons(split: str, judge_url: str | None = None) -> dict[int, str]:
    return default_set().skip_reasons(split, with_judge=True if judge_url else None)


def skipped_count(split: str, judge_url: str | None = None) -> int:
    return len(skipped_ids(split, judge_url))


def category(data_idx: int) -> str:
    return default_set().category(data_idx)


def num_tasks() -> int:
    return len(default_set())
