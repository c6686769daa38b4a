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
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/scaling_inter_ablation.py`

from benchmarks.common import emit, limit_cpu_threads, meta, quiet_logs  # noqa: E402
from benchmarks.learning_curves import ROOT, experiment_config, init_ray, plot_curves, run_curve, summarize  # noqa: E402


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
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.threads)
    config_file = args.config_file or str(ROOT / "tuned_examples" / f"{args.env}_warmstart_cpu.yaml")
    from rllib_agentgym.experiments import parse_json_arg

    common = parse_json_arg("--config", args.config)
    init_ray()
    results: dict[str, Any] = {}
    for name, overrides in arms(args.short, args.long, args.iterations).items():
        runs = []
        for seed in [int(s) for s in args.seeds.split(",")]:
            print(f"{name}, seed {seed}:", file=sys.stderr)
            config = experiment_config(config_file, {**common, **overrides, "seed": seed})
            runs.append({"seed": seed, **run_curve(config, args.iterations, args.eval_every,
                                                   log=lambda m: print(m, file=sys.stderr, flush=True))})
        results[name] = {"overrides": overrides, "runs": runs, "summary": summarize(runs)}
    out = {"meta": {**meta(__file__, argv), **threads}, "config_file": os.path.relpath(config_file, ROOT),
           "iterations": args.iterations, "overrides": common, "arms": results}
    if args.plot:
        plot_curves({name: arm["runs"] for name, arm in results.items()}, args.plot,
                    f"ScalingInter ablation on {args.env} (GRPO from embedded-agent)")
    return emit(out, args.out)


if __name__ == "__main__":
    main()
