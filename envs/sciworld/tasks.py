"""SciWorld task ids: every (task, variation) pair AgentGym uses, as one flat list.

`data_idx` indexes the list built the way AgentGym's SciWorld server builds
it: the engine's tasks in the engine's order ("1-1" boil, "1-2" melt, ...,
"10-2"), minus the groups AgentGym leaves out (5-1, 5-2 growing plants, 9-x
inclined planes, 10-x Mendelian genetics), and for each task its variations
0 .. max-1 in order. 23 tasks, 4,639 pairs with scienceworld 1.2.3.

Splits are the engine's own: each task's variations are divided into train /
dev / test by `get_variations_train/dev/test`, so `split_ids(split)` never
mixes variations across splits.

The variation counts and splits come from the engine, which needs a JVM.
They are stored in `data/tasks.json` so listing tasks never starts one;
`python -m envs.sciworld.tasks` regenerates that file (a few seconds).

Categories (per-category metrics, the AgentGym-RL paper's SciWorld columns),
derived from the engine's task groups:

    1-1 Boil, 1-2 Melt, 1-3 Freeze, 1-4 Change-State (any change of state)
    2-1, 2-2, 2-3    Measure      (use a thermometer, melting points)
    3-1, 3-2         Power-Comp   (build a circuit, renewable power)
    3-3, 3-4         Test-Cond    (test electrical conductivity)
    4-1 .. 4-4       Find         (a living / non-living thing, plant, animal)
    6-1, 6-2, 6-3    Chem-Mix     (chemistry, secondary / tertiary paints)
    7-1, 7-2, 7-3    Lifespan     (longest / shortest-lived animals)
    8-1, 8-2         Life-Stage   (identify plant / animal life stages)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parent / "data" / "tasks.json"

EXCLUDED_TASK_IDS = frozenset({"5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2"})

SPLITS = ("train", "dev", "test")

CATEGORIES = {
    "1-1": "Boil",
    "1-2": "Melt",
    "1-3": "Freeze",
    "1-4": "Change-State",
    "2-1": "Measure",
    "2-2": "Measure",
    "2-3": "Measure",
    "3-1": "Power-Comp",
    "3-2": "Power-Comp",
    "3-3": "Test-Cond",
    "3-4": "Test-Cond",
    "4-1": "Find",
    "4-2": "Find",
    "4-3": "Find",
    "4-4": "Find",
    "6-1": "Chem-Mix",
    "6-2": "Chem-Mix",
    "6-3": "Chem-Mix",
    "7-1": "Lifespan",
    "7-2": "Lifespan",
    "7-3": "Lifespan",
    "8-1": "Life-Stage",
    "8-2": "Life-Stage",
}


@dataclass(frozen=True)
class Task:
    """One playable task: an engine task at one variation."""

    data_idx: int
    task_id: str  # engine id, e.g. "1-1"
    task_name: str  # engine name, e.g. "boil"
    variation: int
    split: str  # "train", "dev" or "test"

    @property
    def category(self) -> str:
        return CATEGORIES[self.task_id]


@lru_cache(maxsize=1)
def engine_table() -> tuple[dict, ...]:
    """The stored engine data: per engine task, its variation count and split lists."""
    with open(TABLE_PATH, encoding="utf-8") as f:
        return tuple(json.load(f)["tasks"])


@lru_cache(maxsize=1)
def all_tasks() -> tuple[Task, ...]:
    """The flat task list that `data_idx` indexes."""
    flat: list[Task] = []
    for entry in engine_table():
        if entry["task_id"] in EXCLUDED_TASK_IDS:
            continue
        split_of = {v: split for split in SPLITS for v in entry[split]}
        for variation in range(entry["max_variations"]):
            flat.append(Task(len(flat), entry["task_id"], entry["task_name"], variation, split_of[variation]))
    return tuple(flat)


def num_tasks() -> int:
    return len(all_tasks())


def task(data_idx: int) -> Task:
    """The task at `data_idx`; IndexError outside [0, num_tasks())."""
    flat = all_tasks()
    if not 0 <= data_idx < len(flat):
        raise IndexError(f"data_idx must be in [0, {len(flat)}), got {data_idx}")
    return flat[data_idx]


@cache
def _split_ids(split: str) -> tuple[int, ...]:
    return tuple(t.data_idx for t in all_tasks() if t.split == split)


def split_ids(split: str) -> list[int]:
    """data_idx of every task in `split` ("train", "dev" or "test"); KeyError otherwise."""
    if split not in SPLITS:
        raise KeyError(split)
    return list(_split_ids(split))


def category(data_idx: int) -> str:
    return task(data_idx).category


def build_table() -> dict:
    """Ask the engine (one JVM) for every task's variation count and splits."""
    from importlib.metadata import version

    from envs.sciworld.engine import Engine

    engine = Engine()
    try:
        entries = []
        for task_id, task_name in engine.task_ids().items():
            engine.load(task_name, 0)
            splits = engine.variation_splits()
            count = engine.max_variations(task_name)
            if sorted(v for s in SPLITS for v in splits[s]) != list(range(count)):
                raise RuntimeError(f"engine splits of {task_id} do not partition its {count} variations")
            entries.append({"task_id": task_id, "task_name": task_name, "max_variations": count, **splits})
    finally:
        engine.close()
    return {"engine": f"scienceworld {version('scienceworld')}", "tasks": entries}


def write_table(path: Path = TABLE_PATH) -> None:
    """Regenerate `data/tasks.json` (one task per line, so diffs stay readable)."""
    table = build_table()
    lines = ",\n".join("    " + json.dumps(entry) for entry in table["tasks"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"engine": {json.dumps(table["engine"])},\n "tasks": [\n{lines}\n]}}\n', encoding="utf-8")


if __name__ == "__main__":
    write_table()
    print(f"wrote {TABLE_PATH}")
