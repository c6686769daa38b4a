"""After a sync, vLLM's greedy tokens equal transformers' greedy tokens from the learner's weights."""

from __future__ import annotations

import torch
from gymnasium.spaces import Text

from rllib_agentgym.core.rl_module import LLMRLModule
from rllib_agentgym.env_runners.engines import HFEngine, SamplingConfig, VLLMEngine


def test_vllm_greedy_matches_hf_after_weight_sync(embedded_model):
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config={"model": embedded_model})
    # Move the learner's weights away from what the engine loaded from disk.
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.llm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    weights = module.get_state()  # what the learner group hands the env runners

    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=512, seed=0)
    prompts = [[1, 392, 262, 201, 41, 81], [1, 548, 75, 290, 337, 86, 201, 1]]
    greedy = SamplingConfig(max_new_tokens=24, temperature=0.0)
    before = [g.token_ids for g in engine.generate(prompts, greedy)]
    engine.load_weights({k: torch.as_tensor(v) for k, v in weights.items()}.items())
    after = [g.token_ids for g in engine.generate(prompts, greedy)]
    engine.shutdown()

    hf = HFEngine(embedded_model, dtype="float32")
    hf.load_weights({k: torch.as_tensor(v) for k, v in weights.items()}.items())
    expected = [g.token_ids for g in hf.generate(prompts, greedy)]
    # The reference: plain transformers generate on the module's own model.
    with torch.no_grad():
        direct = module.llm.generate(torch.tensor([prompts[0]]), max_new_tokens=24, do_sample=False)[0, 6:].tolist()

    assert after == expected
    assert after[0] == direct[: len(after[0])]
    assert before != after  # the sync really changed the engine's weights
