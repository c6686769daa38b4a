"""How often does a policy recover from a refusal it once made? Played from replayed start states.

The start states (`rllib start-states`) cut a warm start's episodes after a refusal, for
example its wrong-quantity crafts on the test goals. Each policy plays k episodes from every
state, for up to `--max-turns` turns after it, with the same generation seeds, and the report
counts the episodes that reach the goal: overall, per category, and per state against the
first policy (a state is "up" when a policy recovers in more of its k episodes).

    python benchmarks/start_state_recovery.py --starts test_starts.jsonl --split test \\
        --categories "depth 1" "depth 2" --k 4 --temperature 0.7 --max-turns 8 \\
        warm=embedded-agent-textcraft grpo=CHECKPOINT [--out recovery.json]

On test goals this measures whether a recovery that training taught carries to goals the
policy never trained on, apart from everything else a greedy test score mixes in.
`--k 1 --temperature 0` plays each state once, greedily: whether the recovery reaches the
policy's first choice, which a sampled count can miss (a policy that recovers in more of its
samples can still pick another action first).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import emit, meta, quiet_logs  # noqa: E402
from benchmarks.pool_transfer import paired_change  # noqa: E402


def state_key(trajectory) -> tuple:
    """A start state as the trajectories played from it show it: its task and replayed actions."""
    return (trajectory.data_idx, tuple(turn.action for turn in trajectory.replayed_turns))


def recoveries(trajectories) -> dict[str, Any]:
    """Episodes that reached the goal, overall, per category and per start state."""
    by_state: Counter = Counter()
    played: Counter = Counter()
    by_category: dict[str, list[int]] = {}
    for t in trajectories:
        key = state_key(t)
        played[key] += 1
        by_state[key] += int(t.success)
        counts = by_category.setdefault(t.category, [0, 0])
        counts[0] += int(t.success)
        counts[1] += 1
    return {"recovered": sum(by_state.values()), "episodes": sum(played.values()),
            "states_recovered": sum(1 for key in played if by_state[key] > 0), "states": len(played),
            "by_category": {c: {"recovered": n, "episodes": m} for c, (n, m) in sorted(by_category.items())},
            "by_state": {repr(key): by_state[key] for key in played}}


def paired_by_state(baseline: dict[str, int], other: dict[str, int]) -> dict[str, int]:
    """States where `other` recovers in more / fewer / as many episodes as `baseline`."""
    if set(baseline) != set(other):
        raise ValueError("the two policies did not play the same start states")
    return paired_change(baseline, other, list(baseline))


def play_from_starts(source: str, args: argparse.Namespace):
    from rllib_agentgym.data.start_states import load_start_states
    from rllib_agentgym.evaluation import build_runner, load_policy

    num_states = len(load_start_states(args.starts))
    policy = load_policy(source)
    policy.model_dtype = args.dtype
    env_config = {"start_states": args.starts, **({"categories": args.categories} if args.categories else {})}
    runner = build_runner(policy, env=args.env, split=args.split, temperature=args.temperature,
                          max_turns=args.max_turns, engine=args.engine, env_config=env_config, seed=args.seed,
                          max_new_tokens=args.max_new_tokens, max_model_len=args.max_model_len,
                          concurrent_episodes=num_states * args.k)
    try:
        # Drawn without replacement, one sample call plays every state once, each as a group of k.
        result = runner.sample(num_tasks=num_states, group_size=args.k, explore=args.temperature > 0)
    finally:
        runner.stop()
    if result.num_dropped:
        raise RuntimeError(f"{source}: {result.num_dropped} episodes dropped by the env")
    return result.trajectories


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("policies", nargs="+", help="NAME=MODEL_OR_CHECKPOINT; the first is the baseline")
    parser.add_argument("--starts", required=True, help="start-states JSONL (rllib start-states)")
    parser.add_argument("--env", default="agentgym/textcraft")
    parser.add_argument("--split", default="test")
    parser.add_argument("--categories", nargs="*", default=None)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max-turns", type=int, default=8, help="turns after the replayed ones")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--engine", default=None, help="vllm or hf (default: the policy's)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    rows: dict[str, Any] = {}
    for item in args.policies:
        name, sep, source = item.partition("=")
        if not sep:
            parser.error(f"{item!r}: give NAME=MODEL_OR_CHECKPOINT")
        rows[name] = {"source": source, **recoveries(play_from_starts(source, args))}
        baseline = next(iter(rows.values()))
        if rows[name] is not baseline:
            rows[name]["vs_baseline"] = paired_by_state(baseline["by_state"], rows[name]["by_state"])
        row = rows[name]
        line = f"{name:>10}: {row['recovered']}/{row['episodes']} episodes, {row['states_recovered']}/{row['states']} states"
        if "vs_baseline" in row:
            c = row["vs_baseline"]
            line += f"; vs baseline {c['up']} up, {c['down']} down, net {c['net_episodes']:+d}"
        print(line, flush=True)
    return emit({"meta": meta(__file__, argv), "settings": {k: v for k, v in vars(args).items() if k != "policies"},
                 "rows": rows}, args.out)


if __name__ == "__main__":
    main()
