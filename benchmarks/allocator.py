"""Memory allocator: vLLM CPU generation and a training step with and without tcmalloc preloaded.

    python benchmarks/allocator.py                                   # the TextCraft agent, float32
    python benchmarks/allocator.py --model embedded --repeats 3

vLLM's CPU backend warns "libtcmalloc is not found in LD_PRELOAD" and asks for
tcmalloc to be preloaded; the framework does not preload it (an allocator
preloaded into the driver would also go into every process it starts: Ray's
workers, the JVM of ScienceWorld, Chromium). This measures what that costs
here. Each round starts fresh child processes, one with `LD_PRELOAD` naming
tcmalloc (Debian's `libtcmalloc-minimal4`) and one without, in alternating
order, and each child times, after one warm-up:

- generation: the framework's `VLLMEngine` sampling `--new-tokens` tokens
  (EOS ignored) for `--prompts` prompts of `--prompt-tokens` random token ids, prefix
  cache emptied before each call;
- train: one forward and backward of the same causal LM (next-token cross
  entropy) on `--rows` rows of `--seq-len` random ids.

The report gives each side's median seconds and the ratio without / with
(above 1: tcmalloc is faster).
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/allocator.py`

from benchmarks.common import default_dtype, emit, median, meta, model_path  # noqa: E402

# What a child process needs to time the same work as its parent asked for.
CHILD_SETTINGS = ("model", "dtype", "prompts", "prompt_tokens", "new_tokens", "rows", "seq_len", "calls")


def find_tcmalloc() -> str:
    """The soname of a tcmalloc shared library (LD_PRELOAD resolves it on the library path);
    a clear error naming the package when there is none."""
    name = ctypes.util.find_library("tcmalloc_minimal") or ctypes.util.find_library("tcmalloc")
    if not name:
        raise SystemExit("no tcmalloc library found: install it with `apt-get install libtcmalloc-minimal4`")
    return name


def vocab_size(path: str) -> int:
    from transformers import AutoConfig

    return int(AutoConfig.from_pretrained(path).vocab_size)


def time_generation(model: str, dtype: str, prompts: int, prompt_tokens: int, new_tokens: int, calls: int) -> list[float]:
    """Seconds of each of `calls` sampled batch generations by the framework's engine (the first is warm-up)."""
    import random

    from vllm import SamplingParams

    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.env_runners.engines import VLLMEngine

    path = resolve_model_path(model_path(model))
    engine = VLLMEngine(path, dtype=dtype, max_model_len=prompt_tokens + new_tokens + 8, concurrent_sequences=prompts)
    rng = random.Random(0)
    vocab = vocab_size(path)
    batch = [{"prompt_token_ids": [rng.randrange(1, vocab) for _ in range(prompt_tokens)]} for _ in range(prompts)]
    params = SamplingParams(max_tokens=new_tokens, temperature=1.0, ignore_eos=True, seed=0)
    seconds = []
    try:
        for _ in range(calls):
            engine.llm.reset_prefix_cache()  # both sides start cold
            start = time.perf_counter()
            engine.llm.generate(batch, params, use_tqdm=False)
            seconds.append(time.perf_counter() - start)
    finally:
        engine.shutdown()
    return seconds


def time_train_step(model: str, rows: int, seq_len: int, calls: int) -> list[float]:
    """Seconds of each of `calls` forward+backward passes, loss = mean_t -log p(ids[t+1] | ids[<=t])."""
    import torch
    from transformers import AutoModelForCausalLM

    from rllib_agentgym.core.embedded import resolve_model_path

    torch.manual_seed(0)
    path = resolve_model_path(model_path(model))
    llm = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32)
    ids = torch.randint(1, llm.config.vocab_size, (rows, seq_len))
    seconds = []
    for _ in range(calls):
        start = time.perf_counter()
        llm(input_ids=ids, labels=ids).loss.backward()
        llm.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
    return seconds


def tcmalloc_mapped() -> bool:
    """Whether tcmalloc is loaded into this process (so the preload took)."""
    return any("tcmalloc" in line for line in Path("/proc/self/maps").read_text().splitlines())


def run_child(args: argparse.Namespace, preload: str | None) -> dict[str, Any]:
    """One fresh process of this script (`--child`), with `LD_PRELOAD` set to `preload` or unset."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = preload
    command = [sys.executable, __file__, "--child"]
    for name in CHILD_SETTINGS:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child ({'tcmalloc' if preload else 'default allocator'}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(without: Sequence[float], with_tcmalloc: Sequence[float]) -> dict[str, float]:
    return {"default_s": median(without), "tcmalloc_s": median(with_tcmalloc),
            "ratio": median(without) / median(with_tcmalloc)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded-agent-textcraft", help="a model name the framework resolves, or a folder")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: float32 on CPU)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=600)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=3, help="timed calls per child, after one warm-up")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of one child each way, order alternating")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    args.dtype = args.dtype or default_dtype()

    if args.child:
        generation = time_generation(args.model, args.dtype, args.prompts, args.prompt_tokens, args.new_tokens,
                                     args.calls + 1)[1:]
        train = time_train_step(args.model, args.rows, args.seq_len, args.calls + 1)[1:]
        print(json.dumps({"generation": generation, "train": train, "tcmalloc_mapped": tcmalloc_mapped()}))
        return {}

    tcmalloc = find_tcmalloc()
    samples: dict[str, dict[str, list[float]]] = {"default": {"generation": [], "train": []},
                                                   "tcmalloc": {"generation": [], "train": []}}
    mapped: dict[str, list[bool]] = {"default": [], "tcmalloc": []}
    for round_index in range(args.repeats):
        order = [("default", None), ("tcmalloc", tcmalloc)]
        for side, preload in order if round_index % 2 == 0 else order[::-1]:
            child = run_child(args, preload)
            mapped[side].append(child["tcmalloc_mapped"])
            for part in ("generation", "train"):
                samples[side][part].extend(child[part])
    result = {
        "meta": meta(__file__, argv),
        "tcmalloc": tcmalloc,
        "tcmalloc_mapped": mapped,  # per child: whether tcmalloc was in its address space
        "settings": {k: getattr(args, k) for k in (*CHILD_SETTINGS, "repeats")},
        "generation": compare(samples["default"]["generation"], samples["tcmalloc"]["generation"]),
        "train_step": compare(samples["default"]["train"], samples["tcmalloc"]["train"]),
        "samples": samples,
    }
    return emit(result, args.out)


if __name__ == "__main__":
    main()
