"""Hyperparameter search for GRPO with Ray Tune: a search algorithm plus ASHA early stopping
over the learning rate, the KL coefficient and the group size.

    python examples/tune_search.py                                   # embedded model, CPU, 8 trials
    python examples/tune_search.py --model /models/Qwen2.5-3B-Instruct --engine vllm \\
        --num-samples 16 --iterations 50 --storage-path /data/runs

Each trial is one GRPO run on TextCraft. ASHA (asynchronous successive
halving) stops trials whose `env_runners/episode_return_mean` trails the
others at its rungs. The search algorithm is Optuna's TPE when `optuna` is
installed (`--search optuna`), else Tune's random / grid variant generator.
Results, checkpoints and every trial's TensorBoard files land in
STORAGE/NAME/<trial>/, so `tensorboard --logdir STORAGE/NAME` shows the
trials side by side (`rllib view STORAGE/NAME` lists their trajectories).

The same search from the classic YAML (`rllib train file`):

    config:
      lr: {loguniform: [1.0e-6, 1.0e-4]}
      kl_coef: {choice: [0.0, 0.001, 0.01]}
      group_size: {grid_search: [4, 8]}
"""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Sequence

METRIC = "env_runners/episode_return_mean"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="embedded", help="model path, hub id, or `embedded`")
    p.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"])
    p.add_argument("--env", default="agentgym/textcraft")
    p.add_argument("--num-samples", type=int, default=8, help="trials drawn from the space")
    p.add_argument("--iterations", type=int, default=8, help="training iterations per trial (ASHA's max_t)")
    p.add_argument("--grace-period", type=int, default=2, help="iterations before ASHA may stop a trial")
    p.add_argument("--search", default="auto", choices=["auto", "random", "optuna"])
    p.add_argument("--lr-range", type=float, nargs=2, default=[1e-6, 1e-4], help="log-uniform bounds")
    p.add_argument("--kl-coefs", type=float, nargs="+", default=[0.0, 0.001, 0.01])
    p.add_argument("--group-sizes", type=int, nargs="+", default=[4, 8])
    p.add_argument("--tasks-per-iteration", type=int, default=2)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--max-concurrent-trials", type=int, default=None)
    p.add_argument("--name", default="textcraft-grpo-search")
    p.add_argument("--storage-path", default=None, help="results dir (default ~/ray_results)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", type=int, default=1)
    return p


def search_space(args):
    """The GRPO config with Tune search spaces in the searched keys."""
    from ray import tune

    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    return (
        GRPOConfig()
        .environment(args.env)
        .llm(model_path=args.model, inference_engine=args.engine, max_turns=args.max_turns,
             max_new_tokens=args.max_new_tokens, max_model_len=args.max_model_len)
        .training(
            lr=tune.loguniform(*args.lr_range),
            kl_coef=tune.choice(args.kl_coefs),
            group_size=tune.choice(args.group_sizes),
            tasks_per_iteration=args.tasks_per_iteration,
        )
        .debugging(seed=args.seed)
    )


def search_algorithm(kind: str, seed: int):
    """Optuna's TPE if asked for (or `auto` and installed), else random / grid variants."""
    if kind == "auto":
        kind = "optuna" if importlib.util.find_spec("optuna") else "random"
    if kind == "optuna":
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(seed=seed)
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(random_state=seed)


def asha_scheduler(args):
    """ASHA over training iterations: at each rung (grace period, then x2) a trial whose
    metric falls below the rung's top half stops."""
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        time_attr="training_iteration",
        max_t=args.iterations,
        grace_period=min(args.grace_period, args.iterations),
        reduction_factor=2,
    )


def build_tuner(args, search_alg=None, scheduler=None):
    """The Tuner; `search_alg` / `scheduler` default to `search_algorithm(args.search)` and ASHA."""
    import rllib_agentgym  # noqa: F401  (registers GRPO and the agentgym/* envs)
    from ray import tune

    storage = os.path.abspath(os.path.expanduser(args.storage_path)) if args.storage_path else None
    return tune.Tuner(
        "GRPO",
        param_space=search_space(args),
        tune_config=tune.TuneConfig(
            metric=METRIC,
            mode="max",
            search_alg=search_alg if search_alg is not None else search_algorithm(args.search, args.seed),
            scheduler=scheduler if scheduler is not None else asha_scheduler(args),
            num_samples=args.num_samples,
            max_concurrent_trials=args.max_concurrent_trials,
        ),
        run_config=tune.RunConfig(
            name=args.name,
            storage_path=storage,
            stop={"training_iteration": args.iterations},
            verbose=args.verbose,
        ),
    )


def main(argv: Sequence[str] | None = None, search_alg=None, scheduler=None):
    args = build_parser().parse_args(argv)
    import ray

    if not ray.is_initialized():
        ray.init()
    results = build_tuner(args, search_alg, scheduler).fit()
    best = results.get_best_result(metric=METRIC, mode="max")
    print(f"best trial: {best.path}")
    print(f"  {METRIC} = {best.metrics.get('env_runners', {}).get('episode_return_mean')}")
    print("  config: " + ", ".join(f"{k}={best.config[k]}" for k in ("lr", "kl_coef", "group_size")))
    return results


if __name__ == "__main__":
    main()
