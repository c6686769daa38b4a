"""After a sync, vLLM's greedy tokens equal transformers' greedy tokens from the learner's weights:
at the engine level, and through the Algorithm's own sync after a real learner update."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from gymnasium.spaces import Text

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.core.precision import cpu_has_native
from rllib_agentgym.core.rl_module import LLMRLModule, load_causal_lm, state_to_numpy
from rllib_agentgym.env_runners.engines import HFEngine, SamplingConfig, VLLMEngine, in_dtype

from log_records import records_of

PROMPTS = [[1, 392, 262, 201, 41, 81], [1, 548, 75, 290, 337, 86, 201, 1]]
GREEDY = SamplingConfig(max_new_tokens=24, temperature=0.0)
VLLM_LOADER_LOGGER = "vllm.model_executor.models.utils"  # warns per tensor loaded into a narrower parameter
VLLM_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"  # warns per layer left unloaded


def _hf_greedy(llm, prompts) -> list[list[int]]:
    """Plain transformers `generate`, greedy, on a model object."""
    llm.eval()
    with torch.no_grad():
        return [llm.generate(torch.tensor([p]), max_new_tokens=GREEDY.max_new_tokens, do_sample=False)[0, len(p):].tolist()
                for p in prompts]


def _hf_engine_greedy(model: str, weights: dict) -> list[list[int]]:
    """Greedy tokens of transformers (the HF engine) on `model` with `weights` loaded."""
    hf = HFEngine(model, dtype="float32")
    hf.load_weights({k: torch.as_tensor(v) for k, v in weights.items()}.items())
    return [g.token_ids for g in hf.generate(PROMPTS, GREEDY)]


def _agree(engine_tokens, hf_tokens) -> bool:
    # vLLM stops at EOS; generate may pad past it: compare the engine's tokens as a prefix.
    return all(e and h[: len(e)] == e for e, h in zip(engine_tokens, hf_tokens))


def test_state_to_numpy_keeps_bfloat16_values_exactly():
    bf16 = torch.randn(3, 5).to(torch.bfloat16)
    fp32 = torch.randn(4)
    out = state_to_numpy({"w": bf16, "b": fp32})
    assert out["w"].dtype == np.float32 and out["b"].dtype == np.float32
    assert torch.equal(torch.as_tensor(out["w"]).to(torch.bfloat16), bf16)  # bf16 -> fp32 -> bf16 is exact
    assert np.array_equal(out["b"], fp32.numpy())


def test_in_dtype_rounds_floats_as_a_parameter_copy_does_and_keeps_integers():
    weights = {"w": torch.randn(64, 7), "b": torch.randn(7).to(torch.bfloat16), "index": torch.arange(5)}
    cast = dict(in_dtype(weights.items(), torch.bfloat16))
    param = torch.empty(64, 7, dtype=torch.bfloat16)
    param.copy_(weights["w"])  # what vLLM's default weight loader does with a float32 tensor
    assert cast["w"].dtype == torch.bfloat16 and torch.equal(cast["w"], param)
    assert cast["b"] is weights["b"]  # already the engine's dtype: not copied
    assert cast["index"] is weights["index"]


@pytest.mark.skipif(not cpu_has_native(torch.bfloat16), reason="a bf16 vLLM engine runs in float32 on this CPU")
def test_float32_learner_weights_load_into_a_bfloat16_engine_without_a_warning_per_tensor(embedded_model):
    """The learner's float32 master weights into a bf16 engine: cast before vLLM's loader, which
    would otherwise warn once per tensor it narrows, and the same tokens as bf16 tensors give."""
    torch.manual_seed(2)
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config={"model": embedded_model})
    with torch.no_grad():
        for p in module.llm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    weights = {k: torch.as_tensor(v) for k, v in module.get_state().items()}
    assert all(t.dtype == torch.float32 for t in weights.values())

    engine = VLLMEngine(embedded_model, dtype="bfloat16", max_model_len=512, seed=0)
    try:
        with records_of(VLLM_LOADER_LOGGER) as records:
            engine.load_weights(weights.items())
        from_float32 = [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]
        engine.load_weights({k: v.to(torch.bfloat16) for k, v in weights.items()}.items())
        from_bfloat16 = [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]
    finally:
        engine.shutdown()
    assert not [r for r in records if "Attempted to load weight" in r.getMessage()]
    assert from_float32 == from_bfloat16


def test_only_the_rotary_caches_reload_warning_is_dropped():
    """vLLM warns "<layer>: Failed to load weights" for a layer a sync left unloaded. A rotary
    embedding's cos/sin cache is never a weight, so its warning goes; any other layer's stays."""
    from rllib_agentgym.env_runners.engines import _drop_rotary_cache_reload_warning

    _drop_rotary_cache_reload_warning()
    _drop_rotary_cache_reload_warning()  # once per process, however many engines load
    logger = logging.getLogger(VLLM_RELOAD_LOGGER)
    with records_of(VLLM_RELOAD_LOGGER) as records:
        for layer in ("RotaryEmbedding", "Llama3RotaryEmbedding", "QKVParallelLinear"):
            logger.warning("%s: Failed to load weights", layer)
        logger.warning("%s: Delayed processing", "RotaryEmbedding")
    assert [r.getMessage() for r in records] == ["QKVParallelLinear: Failed to load weights",
                                                  "RotaryEmbedding: Delayed processing"]


def test_bfloat16_module_state_round_trips_into_another_bfloat16_module(embedded_model):
    """A learner that holds its model in bfloat16 (a GPU run's `dtype: bfloat16`) hands out numpy
    weights, which RLlib needs for the object store, and a bfloat16 receiver gets them bit for bit."""
    config = {"model": embedded_model, "dtype": "bfloat16"}
    sender = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config=config)
    receiver = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config=config)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in sender.llm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    state = sender.get_state()
    assert all(isinstance(v, np.ndarray) for v in state.values())
    receiver.set_state(state)
    for (name, sent), received in zip(sender.llm.state_dict().items(), receiver.llm.state_dict().values()):
        assert received.dtype == torch.bfloat16 and torch.equal(sent, received), name


def test_vllm_greedy_matches_hf_after_weight_sync(embedded_model):
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config={"model": embedded_model})
    # Move the learner's weights away from what the engine loaded from disk.
    torch.manual_seed(1)
    with torch.no_grad():
        for p in module.llm.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    weights = module.get_state()  # what the learner group hands the env runners

    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=512, seed=0)
    before = [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]
    engine.load_weights({k: torch.as_tensor(v) for k, v in weights.items()}.items())
    after = [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]
    engine.shutdown()

    expected = _hf_engine_greedy(embedded_model, weights)
    # The reference: plain transformers generate on the module's own model.
    direct = _hf_greedy(module.llm, PROMPTS[:1])

    assert after == expected
    assert after[0] == direct[0][: len(after[0])]
    assert before != after  # the sync really changed the engine's weights


def test_successive_syncs_each_replace_the_engines_weights(embedded_model):
    """Training syncs every iteration into the same running engine: each load must take
    effect, not only the first (vLLM's CPU backend repacks weights at start-up)."""
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8), model_config={"model": embedded_model})
    start = {k: torch.as_tensor(v) for k, v in module.get_state().items()}

    def moved(seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        return {k: v + torch.randn(v.shape, generator=g) * 0.05 for k, v in start.items()}

    first, second = moved(1), moved(2)
    engine = VLLMEngine(embedded_model, dtype="float32", max_model_len=512, seed=0)
    tokens = []
    with records_of(VLLM_RELOAD_LOGGER) as records:
        for weights in (first, second, first):
            engine.load_weights(weights.items())
            tokens.append([g.token_ids for g in engine.generate(PROMPTS, GREEDY)])
    engine.shutdown()

    # A full sync loads every layer: no reload warning, not even the rotary cache's.
    assert [r.getMessage() for r in records] == []

    assert tokens[0] == _hf_engine_greedy(embedded_model, first)
    assert tokens[1] == _hf_engine_greedy(embedded_model, second)
    assert tokens[1] != tokens[0]  # the second load was not ignored
    assert tokens[2] == tokens[0]  # and loading the first again restores it exactly


def test_algorithm_sync_after_update_reaches_the_runners_vllm(ray_local, embedded_model, tmp_path, monkeypatch):
    """The production path: GRPO.training_step() samples with the runner's vLLM, the LearnerGroup
    updates, and `env_runner_group.sync_weights` -> LLMEnvRunner.set_state loads the new weights."""
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model, model_dtype="float32", inference_engine="vllm", max_model_len=1024,
             group_size=2, tasks_per_iteration=1, max_turns=1, max_new_tokens=8,
             log_trajectories=0)
        # An entropy bonus gives a gradient even when every reward of the group is equal.
        .training(lr=5e-3, entropy_coeff=0.01)
        .debugging(seed=0)
    )
    import ray.tune.trainable.trainable as trainable

    monkeypatch.setattr(trainable, "DEFAULT_STORAGE_PATH", str(tmp_path))  # its logdir: not ~/ray_results
    algo = config.build_algo()
    try:
        runner = algo.env_runner_group.local_env_runner
        runner._ensure_engine()
        before = [g.token_ids for g in runner._engine.generate(PROMPTS, GREEDY)]
        result = algo.train()
        after = [g.token_ids for g in runner._engine.generate(PROMPTS, GREEDY)]
        learner_llm = algo.learner_group._learner.module["default_policy"].unwrapped().llm
        expected = _hf_greedy(learner_llm, PROMPTS)
    finally:
        algo.stop()
    assert result["env_runners"]["num_episodes"] == 2  # the update trained on the runner's own rollouts
    # The learner really moved away from the weights on disk, and the engine followed.
    disk = load_causal_lm(embedded_model).state_dict()
    assert any(not torch.equal(t, disk[name]) for name, t in learner_llm.state_dict().items())
    assert before != after
    assert _agree(after, expected), (after, expected)
