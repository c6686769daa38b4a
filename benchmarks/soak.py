"""Soak: many GRPO iterations, resident memory of every process over time.

    python benchmarks/soak.py                                   # 120 iterations, vLLM, embedded model
    python benchmarks/soak.py --iterations 300 --env-runners 2 --out soak.json
    python benchmarks/soak.py --engine hf                       # where vLLM is not installed

Runs full training iterations (rollouts on TextCraft through a local env
server each runner launches, learner update, weight sync) and, after each,
records the resident set size (RSS) of
- the driver (the algorithm and its local learner),
- each env runner actor (its inference engine and env clients),
- each env server (the `python -m envs.<family>` process and its children:
  a JVM, a browser; with the `EnvServer` actor that owns it, when one does).
Growth after warm-up compares the median of the first `--window` samples
after `--warmup` iterations with the median of the last `--window`; the run
passes when every process grew less than `--max-growth` percent. Growth over
the second half (the median of `--window` samples from the middle iteration
on, against the last) tells a leak, which keeps growing, from a cache that
fills up to a bound; and the driver's and runners' resident pages are split
by kind (`rss_parts`), so heap growth shows apart from shared memory. Prints one
JSON object (with the machine and versions, see benchmarks/common.py); the
exit status is 1 when a process grew too much. Writes only under a temp dir.
The inference engine defaults to vLLM, as in training (the tuned examples).
`benchmarks/run_all.py` runs it as its `soak` row.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/soak.py`

from benchmarks.common import (  # noqa: E402
    emit,
    limit_cpu_threads,
    median,
    meta,
    model_path,
    process_tree_rss,
    quiet_logs,
)

MB = 2**20


def _is_env_server(proc) -> bool:
    """A `python -m envs.<family>` process."""
    import psutil

    try:
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    return "-m" in cmdline and any(arg.startswith("envs.") for arg in cmdline)


def env_server_rows(driver: int, runners: dict[int, int]) -> dict[str, int]:
    """RSS of every env server below the driver (this script's local Ray cluster runs there).

    A server its runner started itself (runner pid -> index in `runners`) is `server_<index>`;
    one owned by an `EnvServer` actor (`rllib_agentgym.envs.server_actor`) is
    `server_actor_<k>`, k in pid order, and counts the actor's process with it.
    """
    import psutil

    index_of = {pid: index for index, pid in runners.items()}
    rows: dict[str, int] = {}
    servers = sorted((p for p in psutil.Process(driver).children(recursive=True) if _is_env_server(p)),
                     key=lambda p: p.pid)
    owned = 0
    for server in servers:
        try:
            parent = server.ppid()
        except psutil.NoSuchProcess:
            continue
        if parent in index_of:
            key = f"server_{index_of[parent]}"
            while key in rows:
                key += "+"
            rows[key] = process_tree_rss(server.pid)
        else:
            rows[f"server_actor_{owned}"] = process_tree_rss(parent)
            owned += 1
    return rows


def rss_parts(pid: int) -> dict[str, int]:
    """Bytes of a process's resident pages by kind (Linux /proc/<pid>/status): `anon` (its heap,
    what a leak grows), `file` (mapped files: libraries, models) and `shmem` (shared memory it
    touched, such as Ray's object store, which it maps whole and reads objects from in place)."""
    parts = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                parts[key[3:].lower()] = int(value.split()[0]) * 1024
    return parts


def snapshot(algo) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """RSS per process: `driver`, `runner_<i>`, and the env servers (see env_server_rows);
    and the driver's and runners' RSS by page kind (rss_parts)."""
    import psutil

    driver = os.getpid()
    rows = {"driver": psutil.Process(driver).memory_info().rss}
    parts = {"driver": rss_parts(driver)}
    group = algo.env_runner_group
    if group.num_remote_env_runners():
        runners = dict(group.foreach_env_runner(lambda r: (r.worker_index, os.getpid()), local_env_runner=False))
    else:
        runners = {0: driver}  # the local runner lives in the driver
    for index, pid in sorted(runners.items()):
        if pid != driver:
            rows[f"runner_{index}"] = psutil.Process(pid).memory_info().rss
            parts[f"runner_{index}"] = rss_parts(pid)
    rows.update(env_server_rows(driver, runners))
    return rows, parts


def growth(series: Sequence[float], warmup: int, window: int) -> float:
    """Percent change from the median of `window` samples after warm-up to the median of the last `window`."""
    settled = list(series[warmup:])
    if len(settled) < 2 * window:
        return float("nan")
    start, end = median(settled[:window]), median(settled[-window:])
    return 100.0 * (end - start) / start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=120)
    parser.add_argument("--warmup", type=int, default=30, help="iterations before growth is measured")
    parser.add_argument("--window", type=int, default=5, help="samples per median at each end")
    parser.add_argument("--max-growth", type=float, default=5.0, help="percent; above it the run fails")
    parser.add_argument("--env", default="textcraft")
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--engine", default="vllm", choices=["hf", "vllm", "auto"])
    parser.add_argument("--env-runners", type=int, default=1, help="remote env runner actors (0: in the driver)")
    parser.add_argument("--tasks", type=int, default=2, help="tasks per iteration")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--cpu-threads", type=int, default=1, help="torch threads per process on CPU (0: default)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    if args.iterations < args.warmup + 2 * args.window:
        parser.error("--iterations must cover --warmup plus two --window samples")

    quiet_logs()
    threads = limit_cpu_threads(args.cpu_threads)
    import ray
    import ray.tune.trainable.trainable as trainable

    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        trainable.DEFAULT_STORAGE_PATH = str(Path(tmp) / "results")  # not ~/ray_results
        ray.init(address="local", num_cpus=max(2, args.env_runners + 1), include_dashboard=False,
                 _temp_dir=str(Path(tmp) / "ray"), log_to_driver=False)
        config = (
            GRPOConfig()
            .environment(f"agentgym/{args.env}", env_config={"launch_server": True})
            .llm(model_path=model_path(args.model), inference_engine=args.engine, max_model_len=args.max_model_len,
                 group_size=args.group_size, tasks_per_iteration=args.tasks, max_turns=args.max_turns,
                 max_new_tokens=args.max_new_tokens)
            .env_runners(num_env_runners=args.env_runners)
            .training(lr=1e-5)
            .debugging(seed=0)
        )
        algo = config.build_algo()
        samples: list[dict[str, Any]] = []
        try:
            for i in range(args.iterations):
                start = time.perf_counter()
                result = algo.train()
                rss, parts = snapshot(algo)
                samples.append({
                    "iteration": i + 1,
                    "wall_s": round(time.perf_counter() - start, 2),
                    "episodes": result["env_runners"].get("num_episodes"),
                    "dropped": result["env_runners"].get("num_dropped_episodes"),
                    "rss_mb": {k: round(v / MB, 1) for k, v in rss.items()},
                    "rss_parts_mb": {k: {kind: round(v / MB, 1) for kind, v in p.items()} for k, p in parts.items()},
                })
                print(f"iteration {i + 1}: {samples[-1]['rss_mb']} {samples[-1]['rss_parts_mb']}",
                      file=sys.stderr, flush=True)
        finally:
            algo.stop()
            ray.shutdown()

    processes = sorted({k for s in samples for k in s["rss_mb"]})
    growth_pct = {
        p: round(growth([s["rss_mb"].get(p, float("nan")) for s in samples], args.warmup, args.window), 2)
        for p in processes
    }
    half = len(samples) // 2
    second_half_pct = {
        p: round(growth([s["rss_mb"].get(p, float("nan")) for s in samples], half, max(1, min(args.window, (len(samples) - half) // 2))), 2)
        for p in processes
    }
    passed = all(g < args.max_growth for g in growth_pct.values())
    emit({
        "benchmark": "soak",
        "meta": meta(__file__, argv),
        "settings": {**vars(args), **threads},
        "growth_after_warmup_pct": growth_pct,
        "growth_second_half_pct": second_half_pct,
        "passed": passed,
        "rss_mb_first": samples[0]["rss_mb"],
        "rss_mb_last": samples[-1]["rss_mb"],
        "samples": samples,
    }, args.out)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
