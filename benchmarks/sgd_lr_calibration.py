"""The SGD lr that matches an Adam lr on a run's own gradients.

    python benchmarks/sgd_lr_calibration.py --config-file tuned_examples/textcraft_pretrained_cpu.yaml \\
        --pool 1,8,11,13,16,18,21,23 --adam-lr 2e-4 --config '{"model_dtype": "float32"}' --out calib.json

Adam's and SGD's lr are on different scales: Adam moves every weight by about `lr`, SGD
by `lr` times its gradient. This trains one iteration of the config with AdamW at
`--adam-lr` and records, for each optimizer step, the L1 and L2 norms of the gradient
the optimizer was handed (after `grad_clip`), and the SGD lr whose step lowers the loss
as much, to first order, as Adam's first step does (`matched_sgd_lr`). Use it as
`policy_optimizer: sgd` with that `lr`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/sgd_lr_calibration.py`

from benchmarks.common import emit, limit_cpu_threads, meta, quiet_logs  # noqa: E402
from benchmarks.learning_curves import ROOT, experiment_config, init_ray, pool_arg, pool_setting  # noqa: E402
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner  # noqa: E402


def matched_sgd_lr(adam_lr: float, grad_l1: float, grad_l2: float) -> float:
    """lr_sgd = lr_adam * |g|_1 / |g|_2^2.

    Adam's first step is lr_adam * sign(g) (its bias-corrected m / sqrt(v) is g / |g|), which
    lowers a loss with gradient g by lr_adam * |g|_1 to first order; SGD's step lr_sgd * g
    lowers it by lr_sgd * |g|_2^2. Equal first-order decrease gives the ratio above; SGD then
    reaches it with the shortest step, concentrated on the weights with large gradients.
    """
    return adam_lr * grad_l1 / grad_l2 ** 2


class GradientNormLearner(GRPOTorchLearner):
    """The production learner, recording the L1 / L2 norms of each step's applied gradient."""

    def build(self) -> None:
        super().build()
        self.gradient_norms: list[dict[str, float]] = []

    def apply_gradients(self, gradients_dict) -> None:
        grads = [g.detach().float() for g in gradients_dict.values()]
        self.gradient_norms.append({
            "l1": sum(float(g.abs().sum()) for g in grads),
            "l2": sum(float(g.square().sum()) for g in grads) ** 0.5,
            "num_weights": sum(g.numel() for g in grads),
        })
        super().apply_gradients(gradients_dict)


def calibrate(config: dict[str, Any], adam_lr: float) -> dict[str, Any]:
    """One training iteration of `config` with AdamW at `adam_lr`: each step's gradient norms
    and matched SGD lr, and their median."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPO

    cfg = GRPO.get_default_config().update_from_dict({**config, "lr": adam_lr, "policy_optimizer": "adamw"})
    cfg.learners(learner_class=GradientNormLearner)
    cfg.log_trajectories = 0
    cfg.evaluation_interval = None
    algo = cfg.build_algo()
    try:
        algo.train()
        steps = list(algo.learner_group._learner.gradient_norms)
    finally:
        algo.stop()
    for step in steps:
        step["matched_sgd_lr"] = matched_sgd_lr(adam_lr, step["l1"], step["l2"])
    return {"adam_lr": adam_lr, "steps": steps,
            "matched_sgd_lr_median": statistics.median(s["matched_sgd_lr"] for s in steps)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config-file", required=True, help="an experiment YAML")
    parser.add_argument("--config", default=None, help="JSON overrides of the config")
    parser.add_argument("--pool", type=pool_arg, default=0, help="train on these train task ids (as learning_curves)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adam-lr", type=float, required=True)
    parser.add_argument("--threads", type=int, default=0, help="torch / vLLM CPU threads (0: defaults)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.threads)
    from rllib_agentgym.experiments import parse_json_arg

    overrides = parse_json_arg("--config", args.config)
    if args.pool:
        overrides, _, _ = pool_setting(args.config_file, overrides, args.pool, k=1)
    init_ray()
    config = experiment_config(args.config_file, {**overrides, "seed": args.seed})
    result = {"meta": {**meta(__file__, argv), **threads}, "config_file": os.path.relpath(args.config_file, ROOT),
              "overrides": overrides, **calibrate(config, args.adam_lr)}
    return emit(result, args.out)


if __name__ == "__main__":
    main()
