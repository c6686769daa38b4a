"""Does a TextCraft agent read its goal? Counts, over `rllib evaluate --episodes` files,
how often the first thought names the task's goal, and how often the item it names
instead is the goal of a train-split task (recalled rather than read).

    rllib evaluate MODEL --env agentgym/textcraft --max-turns 15 --episodes E.jsonl
    python benchmarks/textcraft_first_thoughts.py E.jsonl [E2.jsonl.gz ...] [--json OUT]

The expert's first thought ends with the goal ("I need 4 birch log for birch
wood."; "I have all the ingredients, so I craft the goal, birch wood."), so a
first thought without the goal's name is a turn that did not read the goal line.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections.abc import Sequence

from envs.textcraft import tasks
from rllib_agentgym.run_logs import read_jsonl

GOAL_LINE = re.compile(r"Goal: craft (.+)\.\s*$", re.MULTILINE)
NAMED_ITEM = re.compile(r"(?:for|the goal,) ([a-z' ]+?)\.", re.IGNORECASE)


def read_episodes(path: str) -> list[dict]:
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    return read_jsonl(path)


def first_thought(response: str) -> str:
    return response.split("Action:")[0]


def first_thought_stats(episodes: Sequence[dict], train_goals: set[str]) -> dict:
    """Counts over episodes: the first thought names the goal / names a train-split goal instead."""
    names_goal = names_train_goal = 0
    for episode in episodes:
        goal = GOAL_LINE.search(episode["turns"][0]["observation"]).group(1)
        thought = first_thought(episode["turns"][0]["response"])
        if goal in thought:
            names_goal += 1
            continue
        named = NAMED_ITEM.search(thought)
        names_train_goal += bool(named and named.group(1).strip() in train_goals)
    return {"episodes": len(episodes), "names_goal": names_goal, "names_train_goal_instead": names_train_goal,
            "successes": sum(bool(e["success"]) for e in episodes)}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("episodes", nargs="+", help="`rllib evaluate --episodes` files (.jsonl or .jsonl.gz)")
    parser.add_argument("--json", default=None, help="write the counts here")
    args = parser.parse_args(argv)
    train_goals = {tasks.goal(i) for i in tasks.split_ids("train")}
    report = {path: first_thought_stats(read_episodes(path), train_goals) for path in args.episodes}
    for path, stats in report.items():
        print(f"{path}: {stats['episodes']} episodes, first thought names the goal in {stats['names_goal']}, "
              f"a train-split goal instead in {stats['names_train_goal_instead']}; {stats['successes']} solved")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
