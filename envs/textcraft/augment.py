"""Item renaming: a TextCraft conversation with every item name consistently swapped.

Test goals are never train goals, so an agent has to read each task's own
crafting commands and copy their names and counts into its actions. A small
model trained on real conversations learns a shortcut instead: it recalls the
recipe it saw for a goal, and names an item it knows when the goal is new.
Renaming the items of a conversation (a random one-to-one map onto other
Minecraft item names, applied to the task, the observations, the thoughts and
the actions at once) keeps the conversation valid in its own context while
making recall useless: only copying from the context predicts it.

The counts and the structure (which item is a base item, which command crafts
the goal) stay as they were, so a renamed conversation is solved by the same
plan as the original. Renamed conversations are training data only; the env
itself always plays real recipes.
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any

from envs.textcraft.recipes import load_recipe_book

_COMMAND = re.compile(r"craft (\d+) (.+?) using (.+)")
_COUNTED = re.compile(r"(\d+) (.+)")
_GOAL = re.compile(r"Goal: craft (.+)\.\s*$", re.MULTILINE)


def task_items(observation: str) -> set[str]:
    """Every item the task's first observation names: outputs and ingredients of its commands, and the goal."""
    items: set[str] = set()
    for line in observation.splitlines():
        if match := _COMMAND.fullmatch(line.strip()):
            items.add(match.group(2))
            for part in match.group(3).split(", "):
                if counted := _COUNTED.fullmatch(part.strip()):
                    items.add(counted.group(2))
    if goal := _GOAL.search(observation):
        items.add(goal.group(1))
    return items


NAME_KINDS = ("items", "compositional")


def rename_items(conversation: dict[str, Any], rng: random.Random, pool: list[str] | None = None,
                 names: str = "items") -> dict[str, Any]:
    """A copy of `conversation` with each of its task's items renamed to a distinct name from `pool`.

    `pool` defaults to every item of the recipe book (`names="items"`) or to made-up names
    (`names="compositional"`, `compositional_names`). The system prompt (generic examples, not
    the task) is left as is; the first user message must be the task's observation.
    """
    if names not in NAME_KINDS:
        raise ValueError(f"names {names!r} unknown; valid: {list(NAME_KINDS)}")
    messages = conversation["messages"]
    first_user = next((m for m in messages if m["role"] == "user"), None)
    if first_user is None:
        raise ValueError("a TextCraft conversation needs the task observation as its first user message")
    items = sorted(task_items(first_user["content"]))
    if not items:
        raise ValueError("no crafting commands or goal found in the first user message")
    if pool is None:
        pool = compositional_names(rng, len(items)) if names == "compositional" else sorted(load_recipe_book().items)
    if len(pool) < len(items):
        raise ValueError(f"a pool of {len(pool)} names cannot rename {len(items)} items")
    return rename(conversation, dict(zip(items, rng.sample(pool, len(items)))))


def compositional_names(rng: random.Random, count: int, items: list[str] | None = None) -> list[str]:
    """`count` distinct made-up item names: each real name's word count, its words drawn at random
    from the words of all item names ("copper shard", "oak beacon stairs").

    Real names keep their bigrams ("acacia" is followed by "planks", "slab", ...), so a model can
    guess the second word of a renamed item from the first; in made-up names only the context
    predicts it.
    """
    items = sorted(load_recipe_book().items) if items is None else items
    words = sorted({w for item in items for w in item.split()})
    names: list[str] = []
    while len(names) < count:
        name = " ".join(rng.choice(words) for _ in rng.choice(items).split())
        if name not in names:
            names.append(name)
    return names


def rename(conversation: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """A copy of `conversation` with every whole-name occurrence of a `mapping` key replaced by its value
    (all at once, in the non-system messages); the mapping is recorded as `renamed_items`."""
    if len(set(mapping.values())) != len(mapping):
        raise ValueError("renaming must be one-to-one: two items would get the same name")
    # One pass, longest name first: "oak planks" inside "stripped oak planks" is not touched, and
    # a name mapped onto another item's name is not renamed twice.
    names = sorted(mapping, key=len, reverse=True)
    pattern = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")
    renamed = copy.deepcopy(conversation)
    for message in renamed["messages"]:
        if message["role"] != "system":
            message["content"] = pattern.sub(lambda m: mapping[m.group(1)], message["content"])
    renamed["renamed_items"] = dict(mapping)
    return renamed
