"""Rollout scaling: generated tokens/s with 1 and 2 env runners (Ray actors).

    python benchmarks/scaling.py                       # 1 and 2 runners, embedded model, CPU
    python benchmarks/scaling.py --runners 1,2,4 --model /models/Qwen2.5-1.5B --dtype auto

The same rollout work (`--tasks` TextCraft tasks x `--group-size` episodes)
is split across N `LLMEnvRunner` actors of an `EnvRunnerGroup`, as
`GRPO.training_step` does (each runner samples ceil(tasks / N) tasks, all
at once through `foreach_env_runner`). Each runner has its own vLLM engine
and in-process env; on a CPU machine each actor gets `--cpus-per-runner`
cores and as many engine threads. Throughput = generated tokens / wall time
of the parallel sample call (after a warm-up call that starts the engines).
Speedup = tokens/s with N runners / tokens/s with 1; on a CPU the ideal is
min(N, cores / cpus-per-runner). "strong" splits one iteration's tasks (each
runner's batch shrinks, and a small model's decode step costs about the same
for 8 sequences as for 16, so this favours one runner); "weak" gives every
runner the whole task list (the batch per engine stays the same).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/scaling.py`

from benchmarks.common import emit, limit_cpu_threads, median, meta, model_path, quiet_logs  # noqa: E402


def _runner_threads(runner) -> dict[str, Any]:
    import torch

    return {"pid": os.getpid(), "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND")}


def _timed_sample(runner, task_ids):
    c0 = time.process_time()
    result = runner.sample(task_ids=task_ids)
    return result, time.process_time() - c0


def measure(num_runners: int, args, weak: bool) -> dict[str, Any]:
    from ray.rllib.env.env_runner_group import EnvRunnerGroup

    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.envs.registry import get_spec

    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=args.model, model_dtype=args.dtype, inference_engine="vllm", max_model_len=args.max_model_len,
             max_new_tokens=args.max_new_tokens, max_turns=args.max_turns, group_size=args.group_size)
        .env_runners(num_env_runners=num_runners, num_cpus_per_env_runner=args.cpus_per_runner,
                     num_gpus_per_env_runner=args.gpus_per_runner)
    )
    group = EnvRunnerGroup(config=config, local_env_runner=False, num_env_runners=num_runners)
    task_ids = get_spec("textcraft").split_ids("train")[: args.tasks]
    if weak:  # every runner plays the whole task list: N times the work
        shards = [task_ids] * num_runners
    else:  # GRPO's split of one iteration's tasks
        per_runner = math.ceil(len(task_ids) / num_runners)
        shards = [task_ids[i * per_runner : (i + 1) * per_runner] for i in range(num_runners)]

    def sample_all():
        # One function per runner (in worker-id order): its own shard of the tasks.
        funcs = [lambda runner, ids=ids: _timed_sample(runner, ids) for ids in shards]
        return group.foreach_env_runner(funcs, local_env_runner=False)

    try:
        sample_all()  # warm-up: engines start
        threads = group.foreach_env_runner(_runner_threads, local_env_runner=False)
        rows = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            timed = sample_all()
            wall = time.perf_counter() - t0
            results, cpu = [r for r, _ in timed], [c for _, c in timed]
            tokens = sum(r.num_generated_tokens for r in results)
            rows.append({"wall_s": round(wall, 4), "generated_tokens": tokens, "tokens_per_s": round(tokens / wall, 1),
                         "episodes": sum(len(r.trajectories) for r in results),
                         "runner_wall_s": [round(r.wall_s, 4) for r in results],
                         "runner_cpu_s": [round(c, 4) for c in cpu],
                         # Work per CPU second: how much one more runner costs, whatever else runs here.
                         "tokens_per_cpu_s": round(tokens / sum(cpu), 1)})
    finally:
        group.stop()
    return {"runners": num_runners, "tokens_per_s": median([r["tokens_per_s"] for r in rows]),
            "tokens_per_cpu_s": median([r["tokens_per_cpu_s"] for r in rows]), "repeats": rows,
            "runner_threads": threads}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded",
                        help="model path or hub id; 'embedded' / 'embedded-25m': the project's own Qwen2s")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--runners", default="1,2")
    parser.add_argument("--scaling", default="strong,weak",
                        help="strong: the same tasks split across the runners (GRPO); weak: every runner plays them all")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus-per-runner", type=int, default=1)
    parser.add_argument("--gpus-per-runner", type=float, default=0.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    # Runner actors inherit this environment: each engine gets its cores' worth of unbound threads.
    threads = limit_cpu_threads(args.cpus_per_runner)
    args.model = model_path(args.model)

    import ray

    counts = [int(x) for x in args.runners.split(",")]
    num_cpus = os.cpu_count() or 1
    result: dict[str, Any] = {
        "benchmark": "scaling",
        "meta": meta(__file__, argv),
        "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, **threads},
    }
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        ray.init(address="local", num_cpus=max(num_cpus, max(counts) * args.cpus_per_runner), include_dashboard=False,
                 _temp_dir=tmp, log_to_driver=False)
        try:
            for kind in args.scaling.split(","):
                result[kind] = {str(n): measure(n, args, weak=kind == "weak") for n in counts}
        finally:
            ray.shutdown()
    for kind in args.scaling.split(","):
        base = result[kind][str(counts[0])]["tokens_per_s"]
        for n in counts:
            entry = result[kind][str(n)]
            entry["speedup"] = round(entry["tokens_per_s"] / base * counts[0], 3)
            entry["ideal_speedup"] = min(n, max(1, num_cpus // args.cpus_per_runner)) if args.gpus_per_runner == 0 else n
    return emit(result, args.out)


if __name__ == "__main__":
    main()
