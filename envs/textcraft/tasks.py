"""TextCraft tasks: which goal a `data_idx` names, its crafting commands, splits.

Like AgentGym, task `data_idx` crafts goal ``goals[data_idx % N]`` where
`goals` are all items of crafting depth >= 1 sorted by depth, then name (see
`recipes` for the depth definition). Task ids are 0..N-1.

The commands of a task are, shuffled: one recipe for every non-base item of
the goal's recipe tree (each chosen among the item's minimum-depth recipes),
plus up to `max_distractors` recipes of items outside the tree, preferring
recipes that use an item of the tree so that they look relevant. Everything
random is seeded by `data_idx`, so a task's observation never changes.

Splits: every 5th goal (ids 0, 5, 10, ...) is a test task, the rest train.
Since goals are sorted by depth, both splits hold every depth in proportion.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from envs.common.splits import holdout_split
from envs.textcraft.recipes import Recipe, RecipeBook, load_recipe_book

TEST_EVERY = 5


@dataclass(frozen=True)
class Task:
    data_idx: int
    goal: str
    depth: int
    tree: tuple[Recipe, ...]  # the goal's recipe tree, goal first
    commands: tuple[str, ...]  # tree + distractor commands, shuffled

    def observation(self) -> str:
        return "Crafting commands:\n" + "\n".join(self.commands) + f"\n\nGoal: craft {self.goal}."


def num_tasks() -> int:
    return len(load_recipe_book().goals)


def goal(data_idx: int) -> str:
    return load_recipe_book().goals[data_idx % num_tasks()]


def goal_index(item: str) -> int:
    """The task id whose goal is `item` (ValueError if it is not a goal)."""
    return load_recipe_book().goals.index(item)


def depth(data_idx: int) -> int:
    return load_recipe_book().depth[goal(data_idx)]


def category(data_idx: int) -> str:
    """Per-depth category for evaluation tables: "depth 1" .. "depth 4"."""
    return f"depth {depth(data_idx)}"


def split_ids(split: str) -> list[int]:
    return holdout_split(split, num_tasks(), TEST_EVERY, "TextCraft")


def _recipe_tree(book: RecipeBook, target: str, rng: random.Random) -> list[Recipe]:
    """One minimum-depth recipe per non-base item needed for `target`, parents first."""
    chosen: dict[str, Recipe] = {}
    stack = [target]
    while stack:
        item = stack.pop()
        if item in chosen or item in book.base:
            continue
        recipe = rng.choice(book.min_depth_recipes(item))
        chosen[item] = recipe
        stack.extend(i for i, _ in reversed(recipe.ingredients))
    return list(chosen.values())


def _distractors(book: RecipeBook, tree: list[Recipe], k: int, rng: random.Random) -> list[Recipe]:
    involved = {r.output for r in tree} | {i for r in tree for i, _ in r.ingredients}
    outside = [g for g in book.goals if g not in involved]
    related = [g for g in outside if any(i in involved for r in book.recipes[g] for i, _ in r.ingredients)]
    picked = rng.sample(related, min(k, len(related)))
    taken = set(picked)
    others = [g for g in outside if g not in taken]
    picked += rng.sample(others, min(k - len(picked), len(others)))
    chosen = []
    for item in picked:
        options = [r for r in book.recipes[item] if any(i in involved for i, _ in r.ingredients)]
        chosen.append(rng.choice(options or list(book.recipes[item])))
    return chosen


def build_task(data_idx: int, max_distractors: int = 10) -> Task:
    book = load_recipe_book()
    target = goal(data_idx)
    rng = random.Random(data_idx % num_tasks())
    tree = _recipe_tree(book, target, rng)
    commands = [r.command() for r in tree + _distractors(book, tree, max_distractors, rng)]
    rng.shuffle(commands)
    return Task(data_idx, target, book.depth[target], tuple(tree), tuple(commands))
