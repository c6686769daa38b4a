"""Weight sync: seconds to push the learner's weights into the vLLM engine, against the copy limit.

    python benchmarks/weight_sync.py
    python benchmarks/weight_sync.py --model /models/Qwen2.5-7B-Instruct --dtype bfloat16

The weights are what the learner hands the env runners after an update
(`LLMRLModule.get_state()`: Hugging Face names, numpy arrays). Timed:
`LLMEnvRunner.set_weights` (numpy -> torch, then `VLLMEngine.load_weights`,
i.e. `reload_weights` through `collective_rpc`, and a prefix-cache reset),
and `VLLMEngine.load_weights` alone on ready torch tensors. The limit is the
model's bytes over the memory-copy bandwidth measured in the same run:
`dst.copy_(src)` of a large tensor, host to host on a CPU engine, host to
device on a GPU engine (what loading weights from the learner must at least
do). Efficiency = limit seconds / measured seconds (1.0 = copy-bound).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/weight_sync.py`

from benchmarks.common import emit, limit_cpu_threads, median, meta, model_path, quiet_logs  # noqa: E402


def copy_bandwidth(nbytes: int, repeats: int, device: str) -> dict[str, float]:
    """Bytes/s of the fastest `dst.copy_(src)` of a `nbytes` tensor (host -> host, or host -> `device`)."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src, device=device)
    dst.copy_(src)  # first touch of the pages
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    best = min(times)  # the limit: the fastest copy this machine managed (others were slowed by load)
    return {"bytes": src.numel() * 4, "seconds": best, "median_seconds": median(times), "bytes_per_s": src.numel() * 4 / best}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded",
                        help="model path or hub id; 'embedded' / 'embedded-25m': the project's own Qwen2s")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--copy-mib", type=int, default=256, help="size of the bandwidth probe (at least the model's size)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="CPU only: threads for the engine (0: vLLM's default)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.cpu_threads)
    args.model = model_path(args.model)

    import torch
    from gymnasium.spaces import Text

    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.core.rl_module import LLMRLModule
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

    module = LLMRLModule(observation_space=Text(8), action_space=Text(8),
                         model_config={"model": args.model, "dtype": args.dtype})
    weights = module.get_state()  # what LearnerGroup.get_weights hands the runners
    del module
    model_bytes = sum(int(v.nbytes) for v in weights.values())
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=args.model, model_dtype=args.dtype, inference_engine="vllm", max_model_len=1024)
    )
    runner = LLMEnvRunner(config=config, worker_index=0)
    try:
        runner._ensure_engine()
        engine = runner._engine
        tensors = {k: torch.as_tensor(v) for k, v in weights.items()}
        runner.set_weights(weights)  # warm-up
        set_weights_s, load_weights_s = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            runner.set_weights(weights)
            set_weights_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            engine.load_weights(tensors.items())
            load_weights_s.append(time.perf_counter() - t0)
    finally:
        runner.stop()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    probe = copy_bandwidth(max(model_bytes, args.copy_mib * 2**20), args.repeats, device)
    limit_s = model_bytes / probe["bytes_per_s"]
    measured = median(set_weights_s)
    result = {
        "benchmark": "weight_sync",
        "meta": meta(__file__, argv),
        "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, **threads},
        "model_bytes": model_bytes,
        "num_tensors": len(weights),
        "copy": {"direction": f"host->{device}", **{k: round(v, 6) for k, v in probe.items()}},
        "limit_s": round(limit_s, 6),
        "set_weights_s": round(measured, 5),
        "load_weights_s": round(median(load_weights_s), 5),
        "set_weights_runs_s": [round(x, 5) for x in set_weights_s],
        "efficiency": round(limit_s / measured, 4),
        "efficiency_load_weights": round(limit_s / median(load_weights_s), 4),
        "model_bytes_per_s": round(model_bytes / measured, 1),
    }
    return emit(result, args.out)


if __name__ == "__main__":
    main()
