"""CoopCraft tasks: what a `data_idx` gives each agent to know and to hold.

Task `data_idx` has goal ``GOAL_NAMES[data_idx % 10]``. Its recipe is
``goal = 1 A + 1 B`` for two intermediates, ``A = a_keep + a_give`` and
``B = b_give + b_keep`` (which intermediate is A, and which ingredient of each
is which, are drawn by a generator seeded with `data_idx`):

* alice (role "leader") knows the goal, its recipe and the recipe of A; she
  holds a_keep and b_give.
* bob (role "helper") knows only the recipe of B; he holds a_give and b_keep.
* each also holds `n_decoys` base items outside the goal's tree (1-3 of each).

So no agent can craft the goal or either of its parts at the start; each must learn from the other
which of their items to hand over (alice cannot tell b_give from her decoys,
nor bob a_give from his), and bob only learns that alice needs B from her.
The fastest play takes five turns (ask, give, craft both halves, hand B
over, craft the goal).

Ids run 0..NUM_TASKS-1. Splits: ids whose block of ten ``data_idx // 10`` is
a multiple of 5 are test tasks (0-9, 50-59, ...), the rest train, so both
splits hold every goal equally often.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from envs.common.splits import holdout_split
from envs.multiagent.coop_craft.recipes import BASE_ITEMS, GOALS, INTERMEDIATES, Recipe

AGENTS = ("alice", "bob")
ROLES = {"alice": "leader", "bob": "helper"}
GOAL_NAMES = tuple(GOALS)
TASKS_PER_GOAL = 50
NUM_TASKS = len(GOAL_NAMES) * TASKS_PER_GOAL
TEST_EVERY = 5
MAX_DECOYS = (len(BASE_ITEMS) - 4) // 2


@dataclass(frozen=True)
class Task:
    data_idx: int
    goal: str
    known: dict[str, tuple[Recipe, ...]]  # agent -> the recipes it is told
    inventories: dict[str, dict[str, int]]  # agent -> item -> count at the start


def num_tasks() -> int:
    return NUM_TASKS


def category(data_idx: int) -> str:
    """The goal item: evaluation tables report success per goal."""
    return GOAL_NAMES[int(data_idx) % len(GOAL_NAMES)]


def split_ids(split: str) -> list[int]:
    # A seed's goals stay on one side: the test layouts are unseen in training.
    return holdout_split(split, NUM_TASKS, TEST_EVERY, "CoopCraft", group=lambda i: i // len(GOAL_NAMES))


def build_task(data_idx: int, n_decoys: int = 5) -> Task:
    if not 0 <= n_decoys <= MAX_DECOYS:
        raise ValueError(f"n_decoys must be in 0..{MAX_DECOYS}")
    data_idx = int(data_idx)
    goal = GOALS[category(data_idx)]
    rng = random.Random(f"coop_craft:{data_idx}")
    part_a, part_b = rng.sample([INTERMEDIATES[item] for item, _ in goal.ingredients], 2)
    a_keep, a_give = rng.sample(list(part_a.ingredients), 2)
    b_give, b_keep = rng.sample(list(part_b.ingredients), 2)
    tree = {item for item, _ in part_a.ingredients + part_b.ingredients}
    decoys = rng.sample([b for b in BASE_ITEMS if b not in tree], 2 * n_decoys)
    alice = dict([a_keep, b_give] + [(d, rng.randint(1, 3)) for d in decoys[:n_decoys]])
    bob = dict([a_give, b_keep] + [(d, rng.randint(1, 3)) for d in decoys[n_decoys:]])
    known = {"alice": (goal, part_a), "bob": (part_b,)}
    return Task(data_idx, goal.output, known, {"alice": alice, "bob": bob})
