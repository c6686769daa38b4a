"""Does credit learned on a fixed pool of train goals carry to the other goals?

Reads `rllib evaluate --json` reports of a warm start and of checkpoints trained on a pool
(`benchmarks/learning_curves.py --pool IDS --checkpoints DIR`), all scored on the same tasks
with the same generation seeds, and splits each report's successes into the pool's goals and
the rest, with the per-goal change against the warm start:

    python benchmarks/pool_transfer.py --pool 1,8,11,13,16,18,21,23 \\
        --baseline warm_start.json grpo=grpo.json control=control.json [--out transfer.json]

A goal is "up" when the checkpoint solves more of its k samples than the warm start did.

With `--pool ""` every goal counts among the others: the per-goal change of reports scored on
goals the pool does not hold, such as the test split's.

With `--held-out IDS` (the train tasks a warm start's SFT left out, `held_out_task_ids`) the other
goals are split again into those the warm start never saw and those it was fine-tuned on."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Mapping, Sequence


def successes_by_goal(report: Mapping[str, Any]) -> dict[int, int]:
    """data_idx -> successes over its k samples, from an `rllib evaluate --json` report."""
    return {int(t["data_idx"]): int(sum(bool(s) for s in t["successes"])) for t in report["tasks"]}


def split_counts(counts: Mapping[int, int], pool: set[int], k: int) -> dict[str, Any]:
    """Successes and episodes of the pool's goals and of the others."""
    inside = [n for goal, n in counts.items() if goal in pool]
    outside = [n for goal, n in counts.items() if goal not in pool]
    return {"pool": {"successes": sum(inside), "episodes": k * len(inside), "goals": len(inside)},
            "others": {"successes": sum(outside), "episodes": k * len(outside), "goals": len(outside),
                       "goals_solved": sum(1 for n in outside if n > 0)}}


def paired_change(baseline: Mapping[int, int], counts: Mapping[int, int], goals: Sequence[int]) -> dict[str, int]:
    """Goals whose successes went up / down / stayed against the baseline, and the net episodes."""
    diffs = [counts[g] - baseline[g] for g in goals]
    return {"up": sum(d > 0 for d in diffs), "down": sum(d < 0 for d in diffs),
            "level": sum(d == 0 for d in diffs), "net_episodes": sum(diffs)}


def subset_counts(counts: Mapping[int, int], goals: Sequence[int], k: int) -> dict[str, int]:
    return {"successes": sum(counts[g] for g in goals), "episodes": k * len(goals), "goals": len(goals)}


def compare(baseline: Mapping[str, Any], arms: Mapping[str, Mapping[str, Any]], pool: set[int],
            held_out: set[int] = frozenset()) -> dict[str, Any]:
    base = successes_by_goal(baseline)
    k = int(baseline["k"])
    missing = pool - set(base)
    if missing:
        raise ValueError(f"pool goals {sorted(missing)} are not among the baseline report's tasks")
    others = sorted(set(base) - pool)
    # The other goals, split by whether the warm start was fine-tuned on them (empty: no split).
    subsets = {"others_held_out": [g for g in others if g in held_out],
               "others_seen": [g for g in others if g not in held_out]} if held_out else {}
    rows: dict[str, Any] = {"baseline": {**split_counts(base, pool, k),
                                         **{name: subset_counts(base, goals, k) for name, goals in subsets.items()}}}
    for name, report in arms.items():
        counts = successes_by_goal(report)
        if set(counts) != set(base) or int(report["k"]) != k:
            raise ValueError(f"{name}: not scored on the baseline's tasks with its k")
        rows[name] = {**split_counts(counts, pool, k), "others_vs_baseline": paired_change(base, counts, others),
                      "pool_vs_baseline": paired_change(base, counts, sorted(pool))}
        for subset, goals in subsets.items():
            rows[name][subset] = subset_counts(counts, goals, k)
            rows[name][f"{subset}_vs_baseline"] = paired_change(base, counts, goals)
    return rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pool", required=True,
                        help="the pool's task ids, comma-separated; empty (\"\") when the reports are of goals "
                             "outside the pool, such as the test split: then every goal is one of the others")
    parser.add_argument("--baseline", required=True, help="the warm start's report")
    parser.add_argument("--held-out", default="", help="task ids the warm start's SFT left out, comma-separated")
    parser.add_argument("arms", nargs="+", help="NAME=REPORT for each checkpoint's report")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    pool = {int(x) for x in args.pool.split(",") if x.strip()}
    held_out = {int(x) for x in args.held_out.split(",") if x.strip()}
    arms = {}
    for item in args.arms:
        name, sep, path = item.partition("=")
        if not sep:
            parser.error(f"{item!r}: give NAME=REPORT")
        arms[name] = json.loads(Path(path).read_text())
    rows = compare(json.loads(Path(args.baseline).read_text()), arms, pool, held_out)
    for name, row in rows.items():
        o, p = row["others"], row["pool"]
        line = (f"{name:>10}: pool {p['successes']}/{p['episodes']}, others {o['successes']}/{o['episodes']} "
                f"({o['goals_solved']} of {o['goals']} goals solved at least once)")
        if "others_vs_baseline" in row:
            c = row["others_vs_baseline"]
            line += f"; others vs baseline: {c['up']} up, {c['down']} down, net {c['net_episodes']:+d} episodes"
        for subset in ("others_held_out", "others_seen"):
            if subset in row:
                line += f"\n{'':>12}{subset}: {row[subset]['successes']}/{row[subset]['episodes']}"
                if f"{subset}_vs_baseline" in row:
                    c = row[f"{subset}_vs_baseline"]
                    line += f" ({c['up']} up, {c['down']} down, net {c['net_episodes']:+d})"
        print(line)
    if args.out:
        record = {"pool": sorted(pool), **({"held_out": sorted(held_out)} if held_out else {}), "rows": rows}
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
