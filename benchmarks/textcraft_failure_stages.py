"""How far do a TextCraft agent's episodes get? Sorts the episodes of
`rllib evaluate --episodes` files by the last stage of the expert's plan they reach.

    rllib evaluate MODEL --env agentgym/textcraft --k 8 --temperature 1.0 --max-turns 15 --episodes E.jsonl
    python benchmarks/textcraft_failure_stages.py E.jsonl [E2.jsonl ...] [--json OUT]

From each turn's `progress` (the share of the plan's requirements met,
`envs/textcraft/progress.py`): solved; everything but the goal (every item the
plan fetches or crafts, then no goal), and of those how many ever tried a craft
of the goal item; part of it; nothing the plan needs. An agent that fetches the
right ingredients and then crafts another item does not copy the goal's name.
Failed episodes that tried the goal's craft are also counted by why the env
refused the last such craft: wrong quantities (counts that are no multiple of
the recipe's), wrong ingredients, or ingredients not held.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import episodes_report_main  # noqa: E402
from envs.textcraft.expert import parse_task  # noqa: E402
from envs.textcraft.progress import requirements  # noqa: E402

STAGES = ("solved", "all but the goal", "part", "none")


# The env's reasons for refusing a craft (envs/textcraft/env.py), by a phrase of each message.
REFUSALS = (("wrong quantities", "wrong quantities"), ("no recipe makes", "wrong ingredients"),
            ("could not find enough items", "ingredients not held"))


def crafts(action: str, item: str) -> bool:
    """Whether the action is a craft of this item (carried out or not)."""
    return action.lower().startswith("craft") and f" {item} using " in action.lower()


def goal_craft_refusal(episode: dict) -> str | None:
    """Why the env refused the episode's last craft of the goal item (None: it never tried one, or the
    last one was carried out): the answer to each action is the next turn's observation."""
    _, goal = parse_task(episode["turns"][0]["observation"])
    answers = [t["observation"] for t in episode["turns"][1:]] + [episode.get("final_observation", "")]
    reason = None
    for turn, answer in zip(episode["turns"], answers):
        if crafts(turn["action"], goal):
            answer = answer.lower()
            reason = None if answer.startswith("crafted") else next(
                (name for phrase, name in REFUSALS if phrase in answer), "other")
    return reason


def episode_stage(episode: dict) -> tuple[str, bool]:
    """(stage, whether any of its actions crafted, or tried to craft, the goal item)."""
    task_text = episode["turns"][0]["observation"]
    _, goal = parse_task(task_text)
    reached = [t.get("progress") for t in episode["turns"]]
    if any(p is None for p in reached):
        raise ValueError("an episode without per-turn progress: record it with a TextCraft server that reports "
                         "info['progress'] (rllib evaluate --episodes)")
    tried_goal = any(crafts(t["action"], goal) for t in episode["turns"])
    best = max(reached, default=0.0)
    n = len(requirements(task_text))
    if episode["success"]:
        return "solved", tried_goal
    if best >= (n - 1) / n - 1e-9:
        return "all but the goal", tried_goal
    return ("part" if best > 0 else "none"), tried_goal


def stage_counts(episodes: Sequence[dict]) -> dict:
    """Episodes per stage, and of the "all but the goal" ones those that tried a craft of the goal;
    per task category too (`by_category`) when the episodes come from more than one."""
    counts = dict.fromkeys(STAGES, 0)
    tried = 0
    refusals = dict.fromkeys([name for _, name in REFUSALS] + ["other"], 0)
    for episode in episodes:
        stage, tried_goal = episode_stage(episode)
        counts[stage] += 1
        tried += stage == "all but the goal" and tried_goal
        if not episode["success"] and (reason := goal_craft_refusal(episode)):
            refusals[reason] += 1
    summary = {"episodes": len(episodes), **counts, "all but the goal, tried the goal's craft": tried,
               "failed, the last goal craft refused for": refusals}
    categories = sorted({e["category"] for e in episodes if e.get("category")})
    if len(categories) > 1:  # a depth-2 plan has more stages to fail at than a depth-1 one
        summary["by_category"] = {c: stage_counts([e for e in episodes if e.get("category") == c])
                                  for c in categories}
    return summary


def describe(counts: dict) -> str:
    """One line of counts, then one per category."""
    line = ", ".join(f"{k} {v}" for k, v in counts.items() if not isinstance(v, dict))
    line += "; the last goal craft of a failure refused for " + ", ".join(
        f"{k} {v}" for k, v in counts["failed, the last goal craft refused for"].items())
    return "".join([line] + [f"\n  {c}: {describe(sub)}" for c, sub in counts.get("by_category", {}).items()])


def main(argv: Sequence[str] | None = None) -> None:
    episodes_report_main(__doc__.splitlines()[0], stage_counts, describe, argv)


if __name__ == "__main__":
    main()
