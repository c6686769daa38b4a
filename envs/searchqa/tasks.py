"""Deep Search task sets: the generated world by default, or FlashRAG QA files.

Which questions a process serves is settled by options or, as defaults, by
environment variables, so that the client (which calls `split_ids` and
`category` on this module, without options) and the env servers agree:

    RLLIB_AGENTGYM_SEARCHQA_QA_DIR     <dir>/<dataset>/<split>.jsonl (FlashRAG layout)
    RLLIB_AGENTGYM_SEARCHQA_QA_FILES   "nq/test=/p/nq.jsonl,hotpotqa/dev=/p/hq.jsonl"
    RLLIB_AGENTGYM_SEARCHQA_WORLD_SEED seed of the generated world (default 0)

(the env options `qa_dir`, `qa_files`, `world_seed` override them per session;
set the variables in every process, e.g. through Ray's runtime_env, when
training on user data). With neither QA variable set, tasks come from the
generated world: train/test splits, categories "gen-1hop" .. "gen-4hop".

With user data, data_idx numbers the questions of all files in a fixed order
(datasets in the paper's table order: NQ, TriviaQA, PopQA, HotpotQA, 2Wiki,
Musique, Bamboogle, then others; within one, train, dev, test; then line
order). `category(data_idx)` is the dataset name; `category_order()` lists
the categories as the paper's table orders its columns. Split "test" takes each
dataset's test file, or its dev file when it has none (HotpotQA, 2Wiki and
Musique are evaluated on dev in Search-R1 and the paper).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass

from envs.searchqa.data import PAPER_DATASET_ORDER, find_qa_files, load_qa, parse_qa_files
from envs.searchqa.world import MAX_HOPS, Question, get_world

ENV_QA_DIR = "RLLIB_AGENTGYM_SEARCHQA_QA_DIR"
ENV_QA_FILES = "RLLIB_AGENTGYM_SEARCHQA_QA_FILES"
ENV_WORLD_SEED = "RLLIB_AGENTGYM_SEARCHQA_WORLD_SEED"


@dataclass(frozen=True)
class Task:
    question: str
    answers: tuple[str, ...]
    category: str
    split: str
    world_question: Question | None = None  # set for generated questions (the expert reads it)


@dataclass(frozen=True)
class TaskSet:
    tasks: tuple[Task, ...]
    splits: Mapping[str, tuple[int, ...]]
    uses_world: bool

    def __len__(self) -> int:
        return len(self.tasks)

    def __getitem__(self, data_idx: int) -> Task:
        if not 0 <= data_idx < len(self.tasks):
            raise IndexError(f"data_idx {data_idx} out of range: this task set has {len(self.tasks)} questions")
        return self.tasks[data_idx]

    def split_ids(self, split: str) -> list[int]:
        if split not in self.splits:
            raise KeyError(f"unknown split {split!r}; this task set has {sorted(self.splits)}")
        return list(self.splits[split])


@functools.lru_cache(maxsize=8)
def _world_taskset(seed: int) -> TaskSet:
    tasks, splits = [], {"train": [], "test": []}
    for q in get_world(seed).questions:
        splits[q.split].append(len(tasks))
        tasks.append(Task(q.text, q.answers, f"gen-{q.hops}hop", q.split, q))
    return TaskSet(tuple(tasks), {k: tuple(v) for k, v in splits.items()}, uses_world=True)


@functools.lru_cache(maxsize=8)
def _qa_taskset(files: tuple[tuple[str, str, str], ...]) -> TaskSet:
    items = load_qa({(dataset, split): path for dataset, split, path in files})
    tasks = tuple(Task(it.question, it.answers, it.dataset, it.split) for it in items)
    splits: dict[str, list[int]] = {}
    for i, task in enumerate(tasks):
        splits.setdefault(task.split, []).append(i)
    test = list(splits.get("test", []))
    with_test = {t.category for t in tasks if t.split == "test"}
    test += [i for i in splits.get("dev", []) if tasks[i].category not in with_test]
    if test:
        splits["test"] = sorted(test)
    return TaskSet(tasks, {k: tuple(v) for k, v in splits.items()}, uses_world=False)


def load_tasks(qa_dir: str | None = None, qa_files: str | Mapping[str, str] | None = None, world_seed: int | None = None) -> TaskSet:
    """The task set for these options, falling back to the environment variables."""
    qa_dir = qa_dir or os.environ.get(ENV_QA_DIR) or None
    qa_files = qa_files or os.environ.get(ENV_QA_FILES) or None
    if qa_dir or qa_files:
        files = dict(find_qa_files(qa_dir)) if qa_dir else {}
        files.update(parse_qa_files(qa_files) if qa_files else {})
        return _qa_taskset(tuple(sorted((d, s, str(p)) for (d, s), p in files.items())))
    return _world_taskset(resolve_world_seed(world_seed))


def resolve_world_seed(world_seed: int | None = None) -> int:
    return world_seed if world_seed is not None else int(os.environ.get(ENV_WORLD_SEED, "0"))


def split_ids(split: str) -> list[int]:
    return load_tasks().split_ids(split)


def category(data_idx: int) -> str:
    return load_tasks()[data_idx].category


def category_order() -> list[str]:
    """Columns of a per-category table: hop counts of the generated world, then the FlashRAG
    datasets as the paper's table lists them (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, Musique,
    Bamboogle). Evaluation puts categories not named here after these."""
    return [f"gen-{hops}hop" for hops in range(1, MAX_HOPS + 1)] + list(PAPER_DATASET_ORDER)


def num_tasks() -> int:
    return len(load_tasks())
