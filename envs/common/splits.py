"""Train/test splits of generated task ids, shared by the generated env families."""

from __future__ import annotations

from typing import Callable


def holdout_split(split: str, num_tasks: int, every: int, family: str,
                  group: Callable[[int], int] = lambda idx: idx) -> list[int]:
    """Task ids of `split`: "test" holds out every `every`-th group, "train" keeps the rest.

    test = {i < num_tasks : group(i) mod every == 0},  train = the complement.
    `group` maps a task id to the unit held out together (e.g. all goals of one seed),
    so that no test task shares its group with a train task.
    """
    if split == "test":
        return [i for i in range(num_tasks) if group(i) % every == 0]
    if split == "train":
        return [i for i in range(num_tasks) if group(i) % every != 0]
    raise KeyError(f"unknown split {split!r}; {family} has 'train' and 'test'")
