"""GRPO from the warm-started agent: test-split success per iteration, over seeds.

    python benchmarks/learning_curves.py --env textcraft --seeds 0,1,2 --iterations 30 \\
        --out benchmarks/results/learning_textcraft.json --plot docs/img/learning_textcraft.png
    python benchmarks/learning_curves.py --env babyai --seeds 0,1,2 --iterations 30 ...
    python benchmarks/learning_curves.py --env searchqa --seeds 0,1,2 --iterations 15 --sampled-k 4 ...

Each seed trains `tuned_examples/<env>_warmstart_cpu.yaml` (GRPO from
an agent model, e.g. `model_path: embedded-agent`) in this process, without Tune, for
`--iterations` iterations, and evaluates the policy greedily on the same
test-split tasks (`evaluation_num_tasks` spread over the split, the config's
evaluation horizon) before training (iteration 0: the warm start) and every
`--eval-every` iterations. The JSON keeps every curve, the training batches'
success, the CPU seconds and wall time of every run, and the summary the
docs quote: final minus warm-start success, mean and spread (sample std)
over seeds. `--plot` draws the curves (one line per seed, the mean bold).
`--sampled-k K` adds Avg@K at the training temperature on the same test tasks
before and after training, with the same episode and generation seeds both
times (a paired comparison over K times the episodes of the greedy pass).
`--shuffled-advantages` is the control run for a curve: the same training,
with each batch's per-episode advantages permuted among its episodes, so the
updates have GRPO's size and no credit; what a curve shares with its control
is what update noise alone does.
`--pool N` trains on N fixed train tasks instead (drawn as the ScalingInter
ablation's `--pool` draws them, so the same N and config give the same pool)
and evaluates there: Avg@`--pool-k`, paired seeds. It compares how fast two
settings (e.g. `advantage_estimator`) learn the tasks they train on.

On a CPU shared with other work, wall time stretches with the load; CPU
seconds (this process and its env-server children) count the work itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/learning_curves.py`

from ray.rllib.utils.metrics import LEARNER_UPDATE_TIMER, SYNCH_WORKER_WEIGHTS_TIMER  # noqa: E402

from benchmarks.common import cpu_seconds, emit, limit_cpu_threads, meta, quiet_logs, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# Seconds of an iteration GRPO logs under RLlib's `timers`; with rollout_s they make up most of time_s.
ITERATION_TIMERS = {"learner_s": LEARNER_UPDATE_TIMER, "sync_s": SYNCH_WORKER_WEIGHTS_TIMER}


def experiment_config(config_file: str | os.PathLike, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `config` of the (single) experiment in a tuned-example YAML, with `overrides`."""
    from rllib_agentgym.experiments import load_yaml_file, prepare_experiments

    experiments = prepare_experiments(load_yaml_file(str(config_file)), source=str(config_file),
                                      config_overrides=dict(overrides or {}))
    (spec,) = experiments.values()
    return dict(spec["config"])


def greedy_success(algo) -> dict[str, Any]:
    """Greedy success on the evaluation split, overall and per category (the Algorithm's own
    evaluation), and its wall seconds."""
    start = time.perf_counter()
    result = algo.evaluate()["env_runners"]
    return {"success_rate": float(result["success_rate"]), "wall_s": time.perf_counter() - start,
            "by_category": {k: float(v) for k, v in dict(result.get("success_rate_by_category") or {}).items()},
            **{k: float(result[k]) for k in ("invalid_action_rate", "repeated_refusal_rate", "progress_mean")
               if k in result}}


# Far from the training calls' indices, so the sampled evaluation never replays a training draw.
SAMPLED_EVAL_CALL_INDEX = 10**7


def sampled_success(algo, k: int, task_ids: Sequence[int] | None = None, horizon: int | None = None,
                    call_index: int = SAMPLED_EVAL_CALL_INDEX) -> dict[str, Any]:
    """Avg@k at the training temperature on `task_ids` (default: the evaluation tasks), at
    `horizon` turns (default: the evaluation horizon).

    The episode seeds and generation seeds are a function of (run seed, call index), and the
    call index is fixed, so two calls in one run play the same episodes with the same random
    numbers: a paired before/after comparison. Greedy success on a few dozen tasks moves only
    when an argmax flips; this counts k times the episodes, of the policy GRPO trains."""
    from rllib_agentgym.algorithms.rewards import progress_stats
    from rllib_agentgym.evaluation import evaluation_task_ids, outcomes_from_trajectories, play_at_horizon, select_tasks

    if task_ids is None:
        task_ids = select_tasks(evaluation_task_ids(algo.config), algo.config.evaluation_num_tasks)
    task_ids = list(task_ids)
    result = play_at_horizon(algo.env_runner_group.local_env_runner, task_ids,
                             int(horizon or algo.evaluation_config.max_turns),
                             group_size=k, explore=True, call_index=call_index)
    counts = dict.fromkeys(task_ids, 0)  # a task whose episodes were all dropped counts 0
    counts.update({o.data_idx: sum(o.successes) for o in outcomes_from_trajectories(result.trajectories)})
    return {"k": k, "success_rate": sum(counts.values()) / (k * len(task_ids)), "num_dropped": result.num_dropped,
            "successes_by_task": counts, **progress_stats(result.trajectories)}


def training_pool(config: dict[str, Any], size: int, seed: int = 0) -> list[int]:
    """`size` task ids drawn at random (a fixed `seed`: the same pool for every arm and run)
    from the config's training split, within its categories.

    Random rather than evenly spaced: ids are often laid out by level (BabyAI's task i is
    level i % 40 + 1), so an even spacing can land on a handful of levels."""
    import numpy as np

    from rllib_agentgym.envs.registry import get_spec

    env_config = dict(config.get("env_config") or {})
    ids = get_spec(config["env"]).task_ids(env_config.get("split", "train"), env_config.get("categories"))
    if not 1 <= size <= len(ids):
        raise ValueError(f"--pool {size}: the training split has {len(ids)} tasks in its categories")
    return sorted(int(i) for i in np.random.default_rng(seed).choice(ids, size=size, replace=False))


def pool_arg(text: str) -> int | list[int]:
    """`--pool`: a number of tasks to draw, or the task ids themselves (comma-separated)."""
    parts = [p for p in text.split(",") if p.strip()]
    try:
        values = [int(p) for p in parts]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"--pool {text!r}: a number of tasks or comma-separated task ids")
    return values if "," in text else values[0]


def pool_setting(config_file: str, overrides: dict[str, Any], pool: int | list[int], k: int):
    """`--pool`: (overrides that train on the pool, its task ids, an evaluation of Avg@k on it).

    `pool` is a number of tasks to draw (`training_pool`) or the ids themselves."""
    base = experiment_config(config_file, overrides)
    task_ids = pool if isinstance(pool, list) else training_pool(base, pool)
    overrides = {**overrides, "env_config": {**dict(base.get("env_config") or {}), "task_ids": task_ids}}

    def evaluate(algo):
        return sampled_success(algo, k, task_ids=task_ids)

    return overrides, task_ids, evaluate


def shuffled_advantage_grpo():
    """GRPO whose batches carry each episode's advantage on another episode of the batch
    (a seeded permutation per iteration): `--shuffled-advantages`, the no-credit control."""
    import torch

    from rllib_agentgym.algorithms.grpo.grpo import GRPO

    class ShuffledAdvantageGRPO(GRPO):
        def _build_batch(self, trajectories):
            batch = super()._build_batch(trajectories)
            rows = batch.policy_batches["default_policy"]
            mask = torch.as_tensor(rows["response_mask"], dtype=torch.float32)
            per_episode = (torch.as_tensor(rows["advantages"]) * mask).sum(1) / mask.sum(1).clamp(min=1)
            order = torch.randperm(len(per_episode), generator=torch.Generator().manual_seed(self.iteration))
            rows["advantages"] = (per_episode[order][:, None] * mask).numpy()
            return batch

    return ShuffledAdvantageGRPO


def run_curve(config: Mapping[str, Any], iterations: int, eval_every: int, log=print,
              checkpoint_dir: str | None = None, sampled_k: int = 0,
              evaluate: Callable[[Any], dict[str, Any]] = greedy_success,
              warm_start: Mapping[str, Any] | None = None, shuffled_advantages: bool = False) -> dict[str, Any]:
    """Train one GRPO run in-process; `evaluate(algo)` (default: greedy success on the
    evaluation split) at 0, eval_every, ..., iterations. A given `warm_start` evaluation
    stands for iteration 0's (a greedy one is the same for every seed).

    With `checkpoint_dir`, the final Algorithm is saved there (for `rllib evaluate`). With
    `sampled_k`, also Avg@k sampled success on the evaluation tasks before and after training.
    `shuffled_advantages`: the no-credit control (`shuffled_advantage_grpo`)."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPO
    from rllib_agentgym.env_runners.llm_env_runner import concurrent_episodes

    cfg = GRPO.get_default_config().update_from_dict(dict(config))
    if shuffled_advantages:
        cfg.algo_class = shuffled_advantage_grpo()
    cfg.log_trajectories = 0
    # Evaluated here, on this curve's schedule, on the training runner: its engine's KV cache
    # holds the evaluation's episodes, played at once, as well as a training batch.
    cfg.engine_options = {"concurrent_sequences": concurrent_episodes(cfg, evaluates=True),
                          **dict(cfg.engine_options or {})}
    cfg.evaluation_interval = None
    t0, c0 = time.perf_counter(), cpu_seconds()
    algo = cfg.build_algo()
    curve: list[dict[str, Any]] = []
    train: list[dict[str, Any]] = []
    sampled: list[dict[str, Any]] = []
    try:
        curve.append({"iteration": 0, **(dict(warm_start) if warm_start else evaluate(algo))})
        log(f"  iteration 0 (warm start): evaluation success {curve[-1]['success_rate']:.3f}")
        if sampled_k:
            sampled.append({"iteration": 0, **sampled_success(algo, sampled_k)})
            log(f"  iteration 0 (warm start): sampled test Avg@{sampled_k} {sampled[-1]['success_rate']:.3f}")
        for i in range(1, iterations + 1):
            result = algo.train()
            runners = result["env_runners"]
            learner = result["learners"]["default_policy"]
            train.append({"iteration": i, "success_rate": float(runners["success_rate"]),
                          "horizon": int(runners["horizon"]), "num_turns_mean": float(runners["num_turns_mean"]),
                          "invalid_action_rate": float(runners.get("invalid_action_rate", float("nan"))),
                          "repeated_refusal_rate": float(runners.get("repeated_refusal_rate", float("nan"))),
                          # DAPO's refill rounds and the informative groups the batch kept (dynamic_sampling only);
                          # the mean of each episode's most progress (envs that report it); the greedy members'
                          # success (greedy_group_members only).
                          **{k: float(runners[k]) for k in ("dynamic_sampling_rounds", "dynamic_sampling_groups_kept",
                                                            "progress_mean", "greedy_member_success_rate")
                             if k in runners},
                          **{k: float(learner[k]) for k in ("entropy", "clip_fraction", "policy_loss", "kl", "sft_loss", "trained_rows_fraction") if k in learner},
                          "time_s": float(result["time_this_iter_s"]),
                          "rollout_s": float(runners.get("rollout_wall_s", float("nan"))),
                          **{name: float(result["timers"][timer]) for name, timer in ITERATION_TIMERS.items()
                             if timer in result.get("timers", {})}})
            log(f"    iteration {i}: " + ", ".join(f"{k} {v:.3g}" for k, v in train[-1].items() if k != "iteration"))
            if i % eval_every == 0 or i == iterations:
                curve.append({"iteration": i, **evaluate(algo)})
                log(f"  iteration {i}: train success {train[-1]['success_rate']:.3f} (horizon "
                    f"{train[-1]['horizon']}), evaluation success {curve[-1]['success_rate']:.3f}, "
                    f"{cpu_seconds() - c0:.0f} cpu-s, {time.perf_counter() - t0:.0f} s")
        if sampled_k:
            sampled.append({"iteration": iterations, **sampled_success(algo, sampled_k)})
            log(f"  iteration {iterations}: sampled test Avg@{sampled_k} {sampled[-1]['success_rate']:.3f}")
        if checkpoint_dir:
            algo.save_to_path(checkpoint_dir)
    finally:
        algo.stop()
    run = {"eval": curve, "train": train, "cpu_s": cpu_seconds() - c0, "wall_s": time.perf_counter() - t0}
    return {**run, "sampled_eval": sampled} if sampled_k else run


def summarize(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Warm start, final, and final minus warm start (mean, sample std, per seed) of the eval success."""
    start = [r["eval"][0]["success_rate"] for r in runs]
    final = [r["eval"][-1]["success_rate"] for r in runs]
    gain = [f - s for s, f in zip(start, final)]

    def stats(xs: list[float]) -> dict[str, Any]:
        return {"mean": statistics.fmean(xs), "std": statistics.stdev(xs) if len(xs) > 1 else 0.0, "values": xs}

    summary = {"warm_start": stats(start), "final": stats(final), "gain": stats(gain),
               "best": stats([max(p["success_rate"] for p in r["eval"]) for r in runs])}
    if all(r.get("sampled_eval") for r in runs):
        before = [r["sampled_eval"][0]["success_rate"] for r in runs]
        after = [r["sampled_eval"][-1]["success_rate"] for r in runs]
        summary["sampled"] = {"warm_start": stats(before), "final": stats(after),
                              "gain": stats([a - b for b, a in zip(before, after)])}
    return summary


def plot_curves(series: Mapping[str, Sequence[Mapping[str, Any]]], out: str, title: str,
                ylabel: str = "test-split success, greedy (%)") -> None:
    """One colour per series (e.g. a horizon schedule); thin lines per seed, the mean bold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    top = 0.0
    for colour, (label, runs) in zip(plt.rcParams["axes.prop_cycle"].by_key()["color"], series.items()):
        iters = [p["iteration"] for p in runs[0]["eval"]]
        values = np.array([[p["success_rate"] for p in r["eval"]] for r in runs]) * 100
        for row in values:
            ax.plot(iters, row, color=colour, alpha=0.3, linewidth=1)
        ax.plot(iters, values.mean(axis=0), color=colour, linewidth=2.5, marker="o", label=f"{label} (mean of {len(runs)})")
        top = max(top, float(values.max()))
    # From zero: a one-task change on a few dozen tasks must look its size.
    ax.set_ylim(0, max(5.0, top * 1.2))
    ax.set_xlabel("GRPO iteration")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def init_ray() -> None:
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 _temp_dir=tempfile.mkdtemp(prefix="ray-bench-"))


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="textcraft", help="textcraft, babyai or searchqa: tuned_examples/<env>_warmstart_cpu.yaml")
    parser.add_argument("--config-file", default=None, help="another experiment YAML")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--config", default=None, help="JSON overrides of the config")
    parser.add_argument("--threads", type=int, default=0, help="torch / vLLM CPU threads (0: defaults)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--checkpoints", default=None, help="save each seed's final Algorithm under DIR/seed<k>")
    parser.add_argument("--sampled-k", type=int, default=0,
                        help="also Avg@K sampled success on the test tasks before and after training (paired seeds)")
    parser.add_argument("--pool", type=pool_arg, default=0,
                        help="train on N fixed train tasks (or these comma-separated task ids) and evaluate there "
                             "(sampled Avg@k, paired seeds) instead of on the test split")
    parser.add_argument("--pool-k", type=int, default=8, help="episodes per pool task at each evaluation")
    parser.add_argument("--warm-start-once", action="store_true",
                        help="evaluate the warm start in the first seed only (greedy: the same for every seed)")
    parser.add_argument("--warm-start-from", default=None,
                        help="take the warm start's evaluation from an earlier output JSON of the same model and tasks")
    parser.add_argument("--shuffled-advantages", action="store_true",
                        help="control run: each batch's episode advantages permuted among its episodes (no credit)")
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.threads)
    from rllib_agentgym.experiments import parse_json_arg

    config_file = args.config_file or str(ROOT / "tuned_examples" / f"{args.env}_warmstart_cpu.yaml")
    overrides = parse_json_arg("--config", args.config)
    evaluate, pool = greedy_success, None
    if args.pool:
        overrides, pool, evaluate = pool_setting(config_file, overrides, args.pool, args.pool_k)
    init_ray()
    runs = []
    warm_start = json.loads(Path(args.warm_start_from).read_text())["runs"][0]["eval"][0] if args.warm_start_from else None
    for seed in [int(s) for s in args.seeds.split(",")]:
        print(f"seed {seed}:", file=sys.stderr)
        config = experiment_config(config_file, {**overrides, "seed": seed})
        checkpoint = str(Path(args.checkpoints).resolve() / f"seed{seed}") if args.checkpoints else None
        runs.append({"seed": seed, **run_curve(config, args.iterations, args.eval_every,
                                               log=lambda m: print(m, file=sys.stderr, flush=True),
                                               checkpoint_dir=checkpoint, sampled_k=args.sampled_k,
                                               evaluate=evaluate, shuffled_advantages=args.shuffled_advantages,
                                               warm_start=warm_start or (runs[0]["eval"][0] if runs and args.warm_start_once else None))})
        result = {"meta": {**meta(__file__, argv), **threads}, "config_file": os.path.relpath(config_file, ROOT),
                  "overrides": overrides, "iterations": args.iterations,
                  "shuffled_advantages": args.shuffled_advantages, "runs": runs, "summary": summarize(runs)}
        if args.out:  # after every seed: a run stopped in a later seed keeps the seeds it finished
            write_json(result, args.out)
    if args.plot:
        name = Path(config_file).stem
        labels = {"ylabel": f"success on the {len(pool)} training tasks, Avg@{args.pool_k} (%)"} if pool else {}
        start = Path(str(config.get("model_path", "embedded-agent"))).name
        plot_curves({name: runs}, args.plot, f"GRPO from {start}: {name}", **labels)
    return emit(result, args.out)


if __name__ == "__main__":
    main()
