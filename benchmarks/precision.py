"""Learner precision: a training step in float32 against the same step under bfloat16 autocast.

    python benchmarks/precision.py                          # embedded-agent, 8 x 512 tokens, CPU
    python benchmarks/precision.py --model embedded-25m --batch 4 --seq-len 1024

The learner trains fp32 master weights and, for `model_dtype: bfloat16`, runs
its forward and backward under autocast, except on a CPU that only emulates
bfloat16 (`rllib_agentgym.core.precision`: no AVX512-BF16 / AMX), where it
trains in float32. This measures whether that choice is the faster one on
this machine: one causal-LM step (forward, next-token cross entropy,
backward, AdamW step) on the same random tokens, alternating float32 and
autocast (`--repeats` rounds, median wall time each), and reports
tokens/s of each, their ratio, and which one the framework picks here. On a
GPU both run on the GPU.

With `--generation`, also the inference engine's side (`cpu_engine_dtype`): vLLM,
eager as the env runners run it, generates the same batch of sampled
continuations in float32 and in bfloat16 (`--gen-prompts` prompts of about
`--gen-prompt-tokens` tokens, `--gen-tokens` new tokens each, EOS ignored), and the
report gives tokens/s of each and the dtype the framework picks for a
`model_dtype: bfloat16` engine here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/precision.py`

from benchmarks.common import emit, limit_cpu_threads, median, meta, model_path  # noqa: E402


def train_step(model, optimizer, ids, autocast_dtype) -> None:
    """One step: loss = mean over positions of -log p(ids[t+1] | ids[<=t]), backward, AdamW."""
    import contextlib

    import torch

    device = ids.device.type
    context = torch.autocast(device, dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    with context:
        logits = model(input_ids=ids).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def generation_rates(path: str, prompts: int, prompt_tokens: int, new_tokens: int) -> dict[str, float]:
    """Generated tokens/s of the framework's vLLM engine (`VLLMEngine`, as the env runners build
    it) in float32 and in bfloat16."""
    import gc
    from unittest import mock

    import torch
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from rllib_agentgym.env_runners import engines

    generator = torch.Generator().manual_seed(0)
    rates = {}
    for dtype in ("float32", "bfloat16"):
        # Each dtype as asked: `VLLMEngine` itself is timed, its CPU fallback (`cpu_engine_dtype`) patched out.
        with mock.patch.object(engines, "cpu_engine_dtype", lambda asked: asked):
            engine = engines.VLLMEngine(path, dtype=dtype, seed=0, max_model_len=prompt_tokens + new_tokens + 8)
        llm = engine.llm
        vocab = llm.get_tokenizer().vocab_size
        batch = [TokensPrompt(prompt_token_ids=torch.randint(3, vocab, (prompt_tokens,), generator=generator).tolist())
                 for _ in range(prompts)]
        params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True)
        llm.generate(batch[:2], params, use_tqdm=False)  # warm-up
        start = time.perf_counter()
        outputs = llm.generate(batch, params, use_tqdm=False)
        rates[dtype] = sum(len(o.outputs[0].token_ids) for o in outputs) / (time.perf_counter() - start)
        del engine, llm
        gc.collect()
    return rates


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="embedded-agent", help="embedded, embedded-25m, embedded-agent, or a path")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-threads", type=int, default=0, help="CPU only: torch threads (0: torch's default)")
    parser.add_argument("--generation", action="store_true", help="also vLLM generation in float32 and bfloat16")
    parser.add_argument("--gen-prompts", type=int, default=64)
    parser.add_argument("--gen-prompt-tokens", type=int, default=512)
    parser.add_argument("--gen-tokens", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    threads = limit_cpu_threads(args.cpu_threads)
    import torch
    from transformers import AutoModelForCausalLM

    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.core.precision import autocast_dtype, cpu_has_native, engine_dtype

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    path = resolve_model_path(model_path(args.model))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (args.batch, args.seq_len), generator=generator).to(device)

    modes = {"float32": None, "bfloat16_autocast": torch.bfloat16}
    for dtype in modes.values():  # warm-up: kernels, oneDNN primitives, optimizer state
        train_step(model, optimizer, ids, dtype)
    times: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, dtype in modes.items():
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            train_step(model, optimizer, ids, dtype)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)

    tokens = args.batch * args.seq_len
    rates = {name: tokens / median(t) for name, t in times.items()}
    picked = "bfloat16_autocast" if autocast_dtype(device.type, torch.bfloat16) is not None else "float32"
    other = next(name for name in modes if name != picked)
    parameters = sum(p.numel() for p in model.parameters())
    generation = None
    if args.generation:
        del model, optimizer  # the engines need the memory more
        gen = generation_rates(path, args.gen_prompts, args.gen_prompt_tokens, args.gen_tokens)
        gen_picked = engine_dtype("bfloat16")
        generation = {
            "tokens_per_s": {name: round(r, 1) for name, r in gen.items()},
            "bfloat16_over_float32": round(gen["bfloat16"] / gen["float32"], 3),
            "picked": gen_picked,
            "picked_is_not_slower": gen[gen_picked] >= 0.95 * max(gen.values()),
        }
    return emit({
        "benchmark": "precision",
        "meta": meta(__file__, argv),
        "settings": {**vars(args), **threads, "device": device.type},
        "parameters": parameters,
        "cpu_native_bfloat16": bool(cpu_has_native(torch.bfloat16)) if device.type == "cpu" else None,
        "step_s": {name: [round(x, 4) for x in t] for name, t in times.items()},
        "tokens_per_s": {name: round(r, 1) for name, r in rates.items()},
        "bfloat16_over_float32": round(rates["bfloat16_autocast"] / rates["float32"], 3),
        "picked": picked,
        # Within 5% counts as a tie: a few steps cannot tell closer rates apart.
        "picked_is_not_slower": rates[picked] >= 0.95 * rates[other],
        **({"generation": generation} if generation else {}),
    }, args.out)


if __name__ == "__main__":
    main()
