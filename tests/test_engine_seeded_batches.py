"""Seeded sampling on vLLM's CPU engine with more prompt tokens than one scheduler step takes.

vLLM splits such a batch across steps (chunked prefill), which rewinds each
seeded request's generator offset; CPU generators have none ("CPU Generator
does not use offset"), so VLLMEngine schedules whole prompts only on CPU.
"""

from __future__ import annotations

import numpy as np

from rllib_agentgym.env_runners.engines import SamplingConfig, VLLMEngine


def test_seeded_batch_larger_than_one_scheduler_step(embedded_model):
    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=1024, seed=0)
    try:
        rng = np.random.default_rng(0)
        # 6 x 900 prompt tokens > the 4096 tokens one step schedules.
        prompts = [rng.integers(3, 1000, size=900).tolist() for _ in range(6)]
        sampling = SamplingConfig(max_new_tokens=4, temperature=1.0)
        seeds = list(range(1, 7))
        first = [g.token_ids for g in engine.generate(prompts, sampling, seeds)]
        again = [g.token_ids for g in engine.generate(prompts, sampling, seeds)]
    finally:
        engine.shutdown()
    assert len(first) == 6 and all(1 <= len(ids) <= 4 for ids in first)
    assert first == again  # the per-request seeds fix the samples
