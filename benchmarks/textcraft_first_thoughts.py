"""Does a TextCraft agent read its task? Compares, over `rllib evaluate --episodes`
files, each episode's first thought with the expert's first thought on the same task.

    rllib evaluate MODEL --env agentgym/textcraft --max-turns 15 --episodes E.jsonl
    python benchmarks/textcraft_first_thoughts.py E.jsonl [E2.jsonl.gz ...] [--json OUT]

The expert's first thought names an item and what it is for ("I need 4 birch
log for birch wood."). Counted per file: first thoughts equal to the expert's,
those naming the same item to make ("for birch wood"), those naming an item
to make that the task's text never mentions (recalled from training, not read
from the task), and first actions equal to the expert's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import episodes_report_main  # noqa: E402
from envs.textcraft.expert import ExpertAgent  # noqa: E402

# "... for birch wood." / "I need 3 stick, which I can ..." / "... I craft the goal, birch wood."
TARGET = re.compile(r"(?: for |the goal, )([a-z' ]+?)\.|I need \d+ ([a-z' ]+?), which", re.IGNORECASE)


def first_thought(response: str) -> str:
    thought = response.split("Action:")[0].strip()
    return thought.removeprefix("Thought:").strip()


def target_item(thought: str) -> str | None:
    """The item a first thought is working towards, or None when it names none."""
    match = TARGET.search(thought)
    return None if match is None else (match.group(1) or match.group(2)).strip()


def expert_first_step(task_text: str) -> tuple[str, str]:
    """(thought, action) of the expert's first turn on a task."""
    return ExpertAgent(SimpleNamespace(observation=lambda: task_text)).act(task_text)


def first_thought_stats(episodes: Sequence[dict]) -> dict:
    """Counts over episodes: the first thought is the expert's / names the expert's target /
    names a target the task's text never mentions; the first action is the expert's."""
    same = same_target = target_not_in_task = same_action = 0
    for episode in episodes:
        first_turn = episode["turns"][0]
        task_text = first_turn["observation"]
        thought = first_thought(first_turn["response"])
        expert_thought, expert_action = expert_first_step(task_text)
        same += thought == expert_thought
        target = target_item(thought)
        same_target += target is not None and target == target_item(expert_thought)
        target_not_in_task += target is not None and target not in task_text
        same_action += first_turn["action"].strip() == expert_action
    return {"episodes": len(episodes), "same_as_expert": same, "same_target_as_expert": same_target,
            "target_not_in_task": target_not_in_task, "same_first_action": same_action,
            "successes": sum(bool(e["success"]) for e in episodes)}


def describe(s: dict) -> str:
    return (f"{s['episodes']} episodes; first thought = the expert's in {s['same_as_expert']}, "
            f"same item to make in {s['same_target_as_expert']}, an item the task never mentions in "
            f"{s['target_not_in_task']}; first action = the expert's in {s['same_first_action']}; "
            f"{s['successes']} solved")


def main(argv: Sequence[str] | None = None) -> None:
    episodes_report_main(__doc__.splitlines()[0], first_thought_stats, describe, argv)


if __name__ == "__main__":
    main()
