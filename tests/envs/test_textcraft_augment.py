"""TextCraft item renaming: renamed expert conversations stay consistent with their own task."""

from __future__ import annotations

import random
import re

import pytest

from envs.textcraft import tasks
from envs.textcraft.augment import compositional_names, rename, rename_items, task_items
from envs.textcraft.env import TextCraftEnv
from envs.textcraft.recipes import load_recipe_book
from rllib_agentgym.data.conversations import load_jsonl
from rllib_agentgym.data.experts import expert_episode, main as experts_main, with_augmented_copies
from rllib_agentgym.envs.registry import get_spec

_ACTION = re.compile(r"^Action: (.+)$", re.MULTILINE)
_CRAFT = re.compile(r"craft (\d+) (.+?) using (.+)")


@pytest.fixture(scope="module")
def conversations() -> list[dict]:
    """Expert conversations of two train tasks per depth."""
    spec, env = get_spec("agentgym/textcraft"), TextCraftEnv()
    by_depth: dict[str, list[int]] = {}
    for i in tasks.split_ids("train"):
        by_depth.setdefault(tasks.category(i), []).append(i)
    rows = [expert_episode(spec, env, i, max_steps=30) for ids in by_depth.values() for i in ids[:2]]
    assert all(row is not None and row["success"] for row in rows)
    return rows


def _commands(observation: str) -> dict[str, tuple[int, dict[str, int]]]:
    """item -> (count, {ingredient: count}) of each crafting command line."""
    commands = {}
    for line in observation.splitlines():
        if match := _CRAFT.fullmatch(line):
            using = {name: int(n) for n, name in (part.split(" ", 1) for part in match.group(3).split(", "))}
            commands[match.group(2)] = (int(match.group(1)), using)
    return commands


@pytest.mark.parametrize("names", ["items", "compositional"])
def test_renamed_actions_follow_the_renamed_commands(conversations, names):
    rng = random.Random(0)
    for original in conversations:
        renamed = rename_items(original, rng, names=names)
        mapping = renamed["renamed_items"]
        assert set(mapping) == task_items(original["messages"][1]["content"])
        assert len(set(mapping.values())) == len(mapping)
        assert renamed["messages"][0] == original["messages"][0]  # the system prompt is generic: untouched
        observation = renamed["messages"][1]["content"]
        goal = observation.rsplit("Goal: craft ", 1)[1].rstrip(".")
        assert goal == mapping[original["messages"][1]["content"].rsplit("Goal: craft ", 1)[1].rstrip(".")]
        commands = _commands(observation)
        actions = [a for m in renamed["messages"] if m["role"] == "assistant" for a in _ACTION.findall(m["content"])]
        assert actions[-1].startswith("craft ") and f" {goal} using " in actions[-1]
        for action in actions:
            if match := _CRAFT.fullmatch(action):
                count, using = int(match.group(1)), match.group(3)
                recipe_count, recipe_using = commands[match.group(2)]
                times = count // recipe_count
                assert count == times * recipe_count
                assert {name: int(n) for n, name in (p.split(" ", 1) for p in using.split(", "))} == {
                    name: n * times for name, n in recipe_using.items()}
            else:  # a get: of an item no listed command makes (a base item in this renamed world)
                item = action.split(" ", 2)[2]
                assert action.startswith("get ") and item in mapping.values() and item not in commands


def test_compositional_names_recombine_item_words():
    items = ["oak planks", "copper ingot", "stone", "dark oak log"]
    names = compositional_names(random.Random(0), 12, items)
    words = {w for item in items for w in item.split()}
    assert len(set(names)) == 12
    assert all(set(name.split()) <= words and 1 <= len(name.split()) <= 3 for name in names)
    assert len(set(names) - set(items)) >= 8  # at most 4 of 12 distinct names can be real ones


def test_renaming_back_restores_the_original(conversations):
    rng = random.Random(1)
    for original in conversations:
        renamed = rename_items(original, rng)
        restored = rename(renamed, {new: old for old, new in renamed["renamed_items"].items()})
        assert restored["messages"] == original["messages"]


def test_longer_names_are_not_renamed_through_their_parts():
    row = {"messages": [{"role": "user", "content": "craft 1 stripped oak wood using 3 oak log\n\nGoal: craft oak log."},
                        {"role": "assistant", "content": "Action: get 3 oak log"}]}
    renamed = rename(row, {"oak log": "stone", "stripped oak wood": "torch"})
    assert renamed["messages"][0]["content"] == "craft 1 torch using 3 stone\n\nGoal: craft stone."
    assert renamed["messages"][1]["content"] == "Action: get 3 stone"
    with pytest.raises(ValueError, match="one-to-one"):
        rename(row, {"oak log": "stone", "stripped oak wood": "stone"})


def test_augmented_copies_follow_each_row_and_families_without_augmentation_say_so(conversations):
    rows = list(with_augmented_copies(conversations[:3], "agentgym/textcraft", copies=2, seed=0))
    assert len(rows) == 9
    assert [r["messages"] for r in rows[::3]] == [c["messages"] for c in conversations[:3]]
    assert all("renamed_items" in r for i, r in enumerate(rows) if i % 3)
    with pytest.raises(ValueError, match="babyai has no data augmentation"):
        with_augmented_copies(conversations[:1], "agentgym/babyai", copies=1, seed=0)


def test_augment_options_reach_the_augmentation_and_bad_ones_are_named(conversations):
    rows = list(with_augmented_copies(conversations[:2], "agentgym/textcraft", copies=1, seed=0,
                                      options={"names": "compositional"}))
    real = set(load_recipe_book().items)
    assert any(name not in real for row in rows[1::2] for name in row["renamed_items"].values())
    with pytest.raises(ValueError, match=r"augment options \['name'\] unknown; rename_items takes"):
        with_augmented_copies(conversations[:1], "agentgym/textcraft", copies=1, options={"name": "x"})
    with pytest.raises(ValueError, match="names 'made-up' unknown"):
        list(with_augmented_copies(conversations[:1], "agentgym/textcraft", copies=1, options={"names": "made-up"}))


def test_experts_command_writes_renamed_copies(tmp_path):
    out = tmp_path / "tc.jsonl"
    experts_main(["--env", "agentgym/textcraft", "--num", "3", "--augmented-copies", "1", "--out", str(out)])
    rows = load_jsonl(str(out))
    assert len(rows) == 6
    assert rows[1][1]["content"] != rows[0][1]["content"]  # normalized: the message lists
    with pytest.raises(SystemExit, match="babyai has no data augmentation"):
        experts_main(["--env", "agentgym/babyai", "--num", "1", "--augmented-copies", "1", "--out", str(out)])
    with pytest.raises(SystemExit, match="--augment-options must be a JSON object"):
        experts_main(["--env", "agentgym/textcraft", "--num", "1", "--augmented-copies", "1",
                      "--augment-options", "[1]", "--out", str(out)])
