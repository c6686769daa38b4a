"""Rollout efficiency: LLMEnvRunner's generated tokens/s over raw vLLM on the same token work.

    python benchmarks/rollout.py                                  # embedded model, CPU
    python benchmarks/rollout.py --model /models/Qwen2.5-7B-Instruct \\
        --tasks 8 --group-size 8 --max-turns 8 --max-new-tokens 256 \\
        --engine-option gpu_memory_utilization=0.85 --engine-option enforce_eager=false  # a GPU, a real model

On a GPU the same command line works: `--dtype` defaults to the checkpoint's
own (`auto`; float32 on CPU), `--cpu-threads` is ignored, every
`--engine-option` goes to vLLM's `LLM(...)` as is (gpu_memory_utilization,
tensor_parallel_size, enforce_eager: the project's engine defaults to eager
mode, 0.5 of GPU memory), and the target is judged on the wall-time ratio.

The runner plays a multi-turn TextCraft rollout (`sample(task_ids=...)`) with
its env in-process and over HTTP (a real `python -m envs.textcraft` server).
The limit is the same vLLM engine generating the same token work with no
environment in the loop: each turn's batch is replayed from the runner's own
trajectories (the exact prompt ids each episode had at that turn, in the same
order, turn after turn) with `ignore_eos` and `max_tokens =` the length the
runner sampled, so both sides generate exactly the same number of tokens from
the same prompts (`min_tokens` would add a logits processor the runner does
not pay for). Sampling settings, `logprobs=0` and vLLM's flat log-prob layout
are the runner's. The prefix
cache is emptied before each side so both start cold.

Ratio = runner tokens/s (over its whole `sample()` wall time: resets, env
steps, tokenization, bookkeeping) / raw tokens/s (over the `generate` calls
only). Rollouts and replays alternate; the median ratio is reported, with
the shares of the runner's wall time spent in env calls and in its own
bookkeeping (measured in the same window, so load swings between the two
sides do not move them), and the same ratio over CPU time (this process and
its env server), which other load on a small CPU machine does not stretch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/rollout.py`

from benchmarks.common import (  # noqa: E402
    cpu_seconds,
    default_dtype,
    emit,
    limit_cpu_threads,
    median,
    meta,
    model_path,
    quiet_logs,
)

TARGET = 0.85


def turn_batches(trajectories) -> list[list[tuple[list[int], int]]]:
    """Per turn, the (prompt ids, generated length) of every episode the runner generated for, in order.

    A trajectory's generated spans are its maximal runs of loss_mask == 1; the
    prompt of turn k is everything before the k-th span.
    """
    per_traj = []
    for t in trajectories:
        spans, start = [], None
        for i, m in enumerate(t.loss_mask + [0]):
            if m and start is None:
                start = i
            elif not m and start is not None:
                spans.append((list(t.token_ids[:start]), i - start))
                start = None
        per_traj.append(spans)
    turns = max((len(s) for s in per_traj), default=0)
    return [[s[k] for s in per_traj if len(s) > k] for k in range(turns)]


def replay(llm, batches, temperature: float, top_p: float) -> tuple[float, float, int]:
    """Generate each turn's batch on `llm` with forced lengths; (wall s, CPU s in generate, tokens generated)."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    seconds, cpu, tokens = 0.0, 0.0, 0
    for batch in batches:
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _ in batch]
        params = [
            SamplingParams(temperature=temperature, top_p=top_p, max_tokens=n, ignore_eos=True, logprobs=0, flat_logprobs=True)
            for _, n in batch
        ]
        t0, c0 = time.perf_counter(), cpu_seconds()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        seconds += time.perf_counter() - t0
        cpu += cpu_seconds() - c0
        tokens += sum(len(o.outputs[0].token_ids) for o in outputs)
    return seconds, cpu, tokens


def _key_value(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def make_runner(args, env_config: dict):
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

    config = (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config=env_config)
        .llm(
            model_path=args.model,
            model_dtype=args.dtype,
            inference_engine=args.engine,
            max_model_len=args.max_model_len,
            max_new_tokens=args.max_new_tokens,
            max_turns=args.max_turns,
            group_size=args.group_size,
            temperature=args.temperature,
            engine_options=dict(args.engine_option or {}),
        )
    )
    return LLMEnvRunner(config=config, worker_index=0)


def share_engine(runner, source) -> None:
    """Give `runner` the engine (and tokenizer) `source` already started: one engine in memory."""
    source._ensure_engine()
    runner._engine, runner._tokenizer, runner._chat = source._engine, source._tokenizer, source._chat


def measure(runner, task_ids: list[int], repeats: int, args) -> dict[str, Any]:
    runner.sample(task_ids=task_ids[: max(1, len(task_ids) // 2)])  # warm-up: engine, server, sessions
    llm = runner._engine.llm
    rows = []
    for _ in range(repeats):
        llm.reset_prefix_cache()
        c0 = cpu_seconds()
        result = runner.sample(task_ids=task_ids)
        runner_cpu = cpu_seconds() - c0
        batches = turn_batches(result.trajectories)
        expected = sum(n for b in batches for _, n in b)
        llm.reset_prefix_cache()
        raw_s, raw_cpu, raw_tokens = replay(llm, batches, runner.config.temperature, runner.config.top_p)
        tokens = result.num_generated_tokens
        rows.append({
            "episodes": len(result.trajectories),
            "turns": len(batches),
            "sequences_per_turn": [len(b) for b in batches],
            "generated_tokens": tokens,
            "replayed_tokens": raw_tokens,
            "tokens_match": tokens == raw_tokens == expected,
            "runner_wall_s": round(result.wall_s, 4),
            "runner_generation_s": round(result.generation_s, 4),
            "runner_env_s": round(result.env_s, 4),
            "runner_other_s": round(result.wall_s - result.generation_s - result.env_s, 4),
            "raw_generate_s": round(raw_s, 4),
            "runner_cpu_s": round(runner_cpu, 4),
            "raw_cpu_s": round(raw_cpu, 4),
            "runner_tokens_per_s": round(tokens / result.wall_s, 1),
            "raw_tokens_per_s": round(raw_tokens / raw_s, 1),
            "ratio": round((tokens / result.wall_s) / (raw_tokens / raw_s), 4),
            "ratio_cpu_time": round((tokens / runner_cpu) / (raw_tokens / raw_cpu), 4),
            "mean_prompt_tokens": round(sum(len(p) for b in batches for p, _ in b) / max(1, sum(map(len, batches))), 1),
        })
    runner_tokens = sum(r["generated_tokens"] for r in rows)
    raw_tokens = sum(r["replayed_tokens"] for r in rows)
    pooled = (runner_tokens / sum(r["runner_wall_s"] for r in rows)) / (raw_tokens / sum(r["raw_generate_s"] for r in rows))
    wall = sum(r["runner_wall_s"] for r in rows)
    return {
        "ratio": median([r["ratio"] for r in rows]),
        "ratio_pooled": round(pooled, 4),
        "ratio_cpu_time": median([r["ratio_cpu_time"] for r in rows]),
        # Same-window shares of the runner's wall time (immune to load swings between the two sides).
        "runner_share_env": round(sum(r["runner_env_s"] for r in rows) / wall, 4),
        "runner_share_other": round(sum(r["runner_other_s"] for r in rows) / wall, 4),
        "runner_tokens_per_s": median([r["runner_tokens_per_s"] for r in rows]),
        "raw_tokens_per_s": median([r["raw_tokens_per_s"] for r in rows]),
        "repeats": rows,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded",
                        help="model path or hub id; 'embedded' / 'embedded-25m': the project's own Qwen2s")
    parser.add_argument("--engine", default="vllm", choices=["vllm"], help="the raw baseline replays on vLLM")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: float32 on CPU, auto with a GPU)")
    parser.add_argument("--tasks", type=int, default=4, help="TextCraft tasks per rollout")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--modes", default="inprocess,http")
    parser.add_argument("--engine-option", action="append", type=_key_value, metavar="KEY=VALUE",
                        help="extra vLLM LLM() option, e.g. gpu_memory_utilization=0.8 (value parsed as JSON if it can be)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="CPU only: threads for the engine (0: vLLM's default binding)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.cpu_threads)
    args.model = model_path(args.model)
    args.dtype = args.dtype or default_dtype()

    from rllib_agentgym.envs.registry import get_spec

    task_ids = get_spec("textcraft").split_ids("train")[: args.tasks]
    result: dict[str, Any] = {
        "benchmark": "rollout",
        "meta": meta(__file__, argv),
        "target_ratio": TARGET,
        "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, **threads},
        "task_ids": task_ids,
        "modes": {},
    }
    runners = {}
    try:
        for mode in args.modes.split(","):
            runner = make_runner(args, {"launch_server": True} if mode == "http" else {})
            if runners:
                share_engine(runner, next(iter(runners.values())))
            runners[mode] = runner
            result["modes"][mode] = measure(runner, task_ids, args.repeats, args)
    finally:
        engine = next(iter(runners.values()))._engine if runners else None
        for runner in runners.values():
            runner._engine = None  # the shared engine is shut down once, below
            runner.stop()
        if engine is not None:
            engine.shutdown()
    result["ratio"] = min(m["ratio"] for m in result["modes"].values())
    result["target_met"] = result["ratio"] >= TARGET
    return emit(result, args.out)


if __name__ == "__main__":
    main()
