"""CPU KV cache sizing: a multi-turn rollout's generation with the engine's cache sized for
its episodes (`cpu_kv_cache_bytes`, the default) against vLLM's fixed 1 GiB (the default until now).

    python benchmarks/kv_cache.py                               # SmolLM2-135M, 24 episodes x 6 turns
    python benchmarks/kv_cache.py --model embedded --episodes 16 --turns 6

The workload is what LLMEnvRunner hands the engine: at every turn, each
episode's whole conversation so far (first prompt, then per earlier turn a
response and an observation) as one prompt, and a response of exactly
`--response-tokens` (greedy, `ignore_eos`), all episodes in one `generate` call.
Token ids are random with a fixed seed: the prefix cache compares ids only.
Both sizes run the same workload on a fresh engine of the project's own
(`VLLMEngine`), one after the other in this process (the sized one first), each
after two untimed turns of 4 short episodes.

Reported per size: wall seconds, and the prompt tokens vLLM prefilled
(prompt tokens less its prefix-cache hits, `RequestOutput.num_cached_tokens`).
The ratio is the 1 GiB run's wall time over the sized run's (the limit here is
a cache that keeps every episode: it prefills only each turn's new tokens).
Where the episodes fit in 1 GiB (a small model, few or short episodes) both
sizes are the same and the ratio is about 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/kv_cache.py`

from benchmarks.common import default_dtype, emit, limit_cpu_threads, meta, model_path, quiet_logs  # noqa: E402


def conversations(episodes: int, first_prompt: int, observation: int, vocab: int, seed: int):
    """Every episode's first prompt (random ids), and a function that draws one observation's ids."""
    import random

    rng = random.Random(seed)
    tokens = lambda n: [rng.randrange(10, vocab) for _ in range(n)]  # noqa: E731  (clear of special ids)
    return [tokens(first_prompt) for _ in range(episodes)], lambda: tokens(observation)


def play(engine, first_prompts: list[list[int]], next_observation, turns: int, response_tokens: int) -> dict[str, Any]:
    """Play the turns on `engine`; wall seconds and tokens prompted, prefilled and generated."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(temperature=0.0, max_tokens=response_tokens, ignore_eos=True, logprobs=0,
                            flat_logprobs=True)
    contexts = [list(p) for p in first_prompts]
    prompted = prefilled = generated = 0
    start = time.perf_counter()
    for _ in range(turns):
        outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=c) for c in contexts], params, use_tqdm=False)
        for context, out in zip(contexts, outputs):
            prompted += len(context)
            prefilled += len(context) - int(out.num_cached_tokens or 0)
            generated += len(out.outputs[0].token_ids)
            context += list(out.outputs[0].token_ids) + next_observation()
    return {"wall_s": time.perf_counter() - start, "prompt_tokens": prompted, "prefilled_tokens": prefilled,
            "generated_tokens": generated, "final_context_tokens": max(len(c) for c in contexts)}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="model path, hub id, or a project name "
                        "(embedded, smollm2-135m)")
    parser.add_argument("--dtype", default=None, help="engine dtype (default: float32 on CPU)")
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--first-prompt-tokens", type=int, default=512)
    parser.add_argument("--observation-tokens", type=int, default=96)
    parser.add_argument("--response-tokens", type=int, default=32)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--cpu-threads", type=int, default=0, help="threads for the engine (0: vLLM's default binding)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    quiet_logs()
    threads = limit_cpu_threads(args.cpu_threads)
    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.env_runners.engines import GIB, VLLMEngine

    path = resolve_model_path(model_path(args.model))
    dtype = args.dtype or default_dtype()
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(path).vocab_size
    result: dict[str, Any] = {"benchmark": "kv_cache", "meta": meta(__file__, argv),
                              "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, **threads},
                              "sizes": {}}
    for name, space in (("sized", None), ("fixed_1gib", 1)):  # the change first: what warm-up misses counts against it
        first, observation = conversations(args.episodes, args.first_prompt_tokens, args.observation_tokens, vocab,
                                           args.seed)
        engine = VLLMEngine(path, dtype=dtype, max_model_len=args.max_model_len, seed=args.seed,
                            kv_cache_space_gb=space, concurrent_sequences=args.episodes)
        try:
            cache = engine.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes
            # Untimed: the first calls of an engine build its kernels (oneDNN primitives) for new shapes.
            warm_up, warm_up_observation = conversations(4, 64, 16, vocab, args.seed + 1)
            play(engine, warm_up, warm_up_observation, 2, args.response_tokens)
            engine.llm.reset_prefix_cache()
            run = play(engine, first, observation, args.turns, args.response_tokens)
        finally:
            engine.shutdown()
        result["sizes"][name] = {"kv_cache_gib": cache / GIB, **run}
    fixed, sized = result["sizes"]["fixed_1gib"], result["sizes"]["sized"]
    result["speedup"] = fixed["wall_s"] / sized["wall_s"]
    result["prefill_ratio"] = fixed["prefilled_tokens"] / max(1, sized["prefilled_tokens"])
    return emit(result, args.out)


if __name__ == "__main__":
    main()
