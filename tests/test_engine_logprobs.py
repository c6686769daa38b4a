"""The sampled tokens' log-probs the vLLM engine hands the learner (pi_old with `old_logprobs: engine`)."""

from __future__ import annotations

import pytest
from vllm import SamplingParams
from vllm.inputs import TokensPrompt
from vllm.logprobs import FlatLogprobs, Logprob

from rllib_agentgym.env_runners.engines import SamplingConfig, VLLMEngine, sampled_logprobs


def _flat(positions: list[list[tuple[int, float]]]) -> FlatLogprobs:
    flat = FlatLogprobs()
    for entries in positions:
        flat.start_indices.append(len(flat.logprobs))
        for token, logprob in entries:
            flat.token_ids.append(token)
            flat.logprobs.append(logprob)
            flat.ranks.append(None)
            flat.decoded_tokens.append(None)
        flat.end_indices.append(len(flat.logprobs))
    return flat


def test_sampled_logprobs_reads_both_of_vllms_layouts():
    tokens = [5, 9, 2]
    # logprobs=0: each position holds the sampled token alone.
    assert sampled_logprobs(tokens, _flat([[(5, -0.1)], [(9, -2.0)], [(2, -0.7)]])) == [-0.1, -2.0, -0.7]
    # logprobs=k: the top k come first, the sampled token among or after them.
    top2 = _flat([[(7, -0.05), (5, -0.1)], [(9, -2.0), (1, -2.5)], [(4, -0.3), (8, -0.6), (2, -0.7)]])
    assert sampled_logprobs(tokens, top2) == [-0.1, -2.0, -0.7]
    as_dicts = [{5: Logprob(-0.1)}, {9: Logprob(-2.0), 1: Logprob(-2.5)}, {2: Logprob(-0.7)}]
    assert sampled_logprobs(tokens, as_dicts) == [-0.1, -2.0, -0.7]
    assert sampled_logprobs(tokens, None) == []


def test_engine_logprobs_equal_vllms_default_layout(embedded_model):
    """The flat read-out gives what vLLM's per-position dicts give for the same seeded samples."""
    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=512, seed=0)
    try:
        prompts = [[1, 392, 262, 201, 41, 81], [1, 548, 75, 290, 337, 86, 201, 1], [1, 17, 18]]
        seeds = [11, 12, 13]
        generations = engine.generate(prompts, SamplingConfig(max_new_tokens=16, temperature=1.0), seeds)
        params = [SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_tokens=16, logprobs=0, seed=s) for s in seeds]
        outputs = engine.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    finally:
        engine.shutdown()
    for generation, out in zip(generations, outputs):
        completion = out.outputs[0]
        assert isinstance(completion.logprobs, list)  # the default layout: a dict per position
        assert generation.token_ids == list(completion.token_ids) and generation.token_ids
        expected = [step[token].logprob for token, step in zip(completion.token_ids, completion.logprobs)]
        assert generation.logprobs == pytest.approx(expected, abs=1e-6)
