"""ScalingInter-RL ablation: fixed-short, fixed-long and growing horizons, same env, seeds, budget.

    python benchmarks/scaling_inter_ablation.py --env textcraft --seeds 0 --iterations 30 \\
        --out benchmarks/results/scaling_inter_textcraft.json --plot docs/img/scaling_inter_textcraft.png

The AgentGym-RL paper (Figure 7) trains the same agent with a short fixed
interaction horizon, a long fixed one, and ScalingInter-RL's schedule that
starts short and grows: the long horizon collapses, the short one plateaus,
ScalingInter ends highest. This runs the three arms on the warm-start GRPO
config (`tuned_examples/<env>_warmstart_cpu.yaml`, GRPO from
`embedded-agent`), changing only the training horizon:

    short:         max_turns = --short                  (scaling_inter off)
    long:          max_turns = --long                   (scaling_inter off)
    scaling_inter: {schedule: [short, mid, long], interval: iterations // 3}

Every arm is evaluated the same way (greedy, test split, the config's
evaluation horizon, which is --long), at iteration 0 and every --eval-every
iterations, and gets the same number of iterations, tasks and samples per
iteration. The JSON holds every curve; --plot draws success vs iteration of
the three arms (thin: seeds, bold: mean).

With `--pool N`, every arm trains on the same N train tasks (drawn at random,
with a fixed seed, from the config's training split and categories; or
`--pool ID,ID,...`) and is evaluated on them: sampled
Avg@`--pool-k` at the long horizon, with the same episode and generation seeds
at every evaluation of a run. That is the paper's view (its Figure 7 plots the
reward of the tasks trained on), and at CPU scale GRPO learns the tasks it
trains on long before it transfers to unseen ones (docs/learning.md, section 3).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/scaling_inter_ablation.py`

from benchmarks.common import emit, limit_cpu_threads, meta, quiet_logs, write_json  # noqa: E402
from benchmarks.learning_curves import (  # noqa: E402
    ROOT,
    experiment_config,
    greedy_success,
    init_ray,
    plot_curves,
    pool_arg,
    pool_setting,
    run_curve,
    summarize,
)


def arms(short: int, long: int, iterations: int) -> dict[str, dict[str, Any]]:
    """Config overrides of the three arms (the evaluation horizon is `long` in all of them)."""
    mid = (short + long) // 2
    evaluation = {"evaluation_config": {"env_config": {"split": "test"}, "max_turns": long}}
    return {
        f"short (h={short})": {"max_turns": short, "scaling_inter": None, **evaluation},
        f"long (h={long})": {"max_turns": long, "scaling_inter": None, **evaluation},
        f"ScalingInter ({short}->{mid}->{long})": {
            "max_turns": long,
            "scaling_inter": {"schedule": [short, mid, long], "interval": max(1, iterations // 3)},
            **evaluation,
        },
    }


def resumable_runs(path: str, config_file: str, iterations: int, common: dict[str, Any],
                   arm_overrides: dict[str, dict[str, Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """{arm: {seed: run}} of an earlier ablation JSON; an error where it was made with another config."""
    earlier = json.loads(Path(path).read_text())
    made_with = (earlier.get("config_file"), earlier.get("iterations"), earlier.get("overrides"))
    if made_with != (config_file, iterations, common):
        raise SystemExit(f"--resume {path}: made with (config_file, iterations, overrides) = {made_with}, "
                         f"not {(config_file, iterations, common)}")
    kept: dict[str, dict[int, dict[str, Any]]] = {}
    for name, arm in earlier.get("arms", {}).items():
        if name not in arm_overrides or arm["overrides"] != arm_overrides[name]:
            raise SystemExit(f"--resume {path}: arm {name!r} is not one of this ablation's arms "
                             f"{list(arm_overrides)} with the same overrides")
        kept[name] = {run["seed"]: run for run in arm["runs"]}
    return kept


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--config-file", default=None, help="default: tuned_examples/<env>_warmstart_cpu.yaml")
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--short", type=int, default=4)
    parser.add_argument("--long", type=int, default=15)
    parser.add_argument("--config", default=None, help="JSON overrides of the config, for every arm")
    parser.add_argument("--threads", type=int, default=0, help="torch / vLLM CPU threads (0: defaults)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--resume", default=None, help="an earlier JSON of this ablation: keep its runs")
    parser.add_argument("--pool", type=pool_arg, default=0,
                        help="train every arm on N fixed train tasks (or these comma-separated task ids) "
                             "and evaluate it there (sampled Avg@k)")
    parser.add_argument("--pool-k", type=int, default=8, help="episodes per pool task at each evaluation")
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.threads)
    config_file = args.config_file or str(ROOT / "tuned_examples" / f"{args.env}_warmstart_cpu.yaml")
    from rllib_agentgym.experiments import parse_json_arg

    common = parse_json_arg("--config", args.config)
    evaluate = greedy_success
    if args.pool:
        common, pool, evaluate = pool_setting(config_file, common, args.pool, args.pool_k)
    arm_overrides = arms(args.short, args.long, args.iterations)
    relative_config = os.path.relpath(config_file, ROOT)
    kept = resumable_runs(args.resume, relative_config, args.iterations, common, arm_overrides) if args.resume else {}
    seeds = [int(s) for s in args.seeds.split(",")]
    results: dict[str, Any] = {}

    def snapshot() -> dict[str, Any]:
        return {"meta": {**meta(__file__, argv), **threads}, "config_file": relative_config,
                "iterations": args.iterations, "overrides": common,
                "arms": {name: results[name] for name in arm_overrides if name in results}}

    def record(name: str, runs_by_seed: dict[int, dict[str, Any]]) -> None:
        runs = [runs_by_seed[seed] for seed in sorted(runs_by_seed)]
        results[name] = {"overrides": arm_overrides[name], "runs": runs, "summary": summarize(runs)}

    for name in arm_overrides:
        if kept.get(name):
            record(name, dict(kept[name]))
    ray_started = False
    for name, overrides in arm_overrides.items():
        runs_by_seed = dict(kept.get(name, {}))
        for seed in seeds:
            if seed in runs_by_seed:
                print(f"{name}, seed {seed}: kept from {args.resume}", file=sys.stderr)
                continue
            if not ray_started:
                init_ray()
                ray_started = True
            print(f"{name}, seed {seed}:", file=sys.stderr)
            config = experiment_config(config_file, {**common, **overrides, "seed": seed})
            runs_by_seed[seed] = {"seed": seed, **run_curve(config, args.iterations, args.eval_every,
                                                            log=lambda m: print(m, file=sys.stderr, flush=True),
                                                            evaluate=evaluate)}
            record(name, runs_by_seed)
            if args.out:  # an interrupted ablation keeps what it finished
                write_json(snapshot(), args.out)
    out = snapshot()
    if args.plot:
        ylabel = (f"success on the {len(pool)} training tasks, Avg@{args.pool_k} (%)" if args.pool
                  else "test-split success, greedy (%)")
        plot_curves({name: arm["runs"] for name, arm in results.items()}, args.plot,
                    f"ScalingInter ablation on {args.env} (GRPO from embedded-agent)", ylabel=ylabel)
    return emit(out, args.out)


if __name__ == "__main__":
    main()
