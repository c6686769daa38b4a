"""LoRA weight sync: the env runner's merged adapter reaches vLLM whole (fused layers included)
and gives transformers' greedy tokens on the merged model."""

from __future__ import annotations

import logging

import torch
from gymnasium.spaces import Text

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.core.lora import whole_fused_layers
from rllib_agentgym.core.rl_module import LLMRLModule
from rllib_agentgym.env_runners.engines import _VLLM_RELOAD_LOGGERS, HFEngine, SamplingConfig
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

from log_records import records_of


# q_proj and v_proj are two of the three parts of vLLM's fused qkv_proj, up_proj one of gate_up_proj.
LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}


def test_whole_fused_layers_completes_each_touched_layer_from_the_base():
    names = [f"model.layers.0.self_attn.{m}.{p}" for m in ("q_proj", "k_proj", "v_proj") for p in ("weight", "bias")]
    names += ["model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
              "model.layers.0.mlp.up_proj.weight", "model.layers.1.self_attn.k_proj.weight"]
    base = {n: torch.zeros(1) for n in names}
    merged = {"model.layers.0.self_attn.q_proj.weight": torch.ones(1)}
    groups = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
    out = whole_fused_layers(merged, base, groups)
    # The whole qkv_proj of layer 0 (weights and biases), nothing of other layers; the merged tensor wins.
    assert set(out) == set(names[:6]) and float(out["model.layers.0.self_attn.q_proj.weight"]) == 1.0
    assert set(whole_fused_layers({"model.layers.0.mlp.up_proj.weight": torch.ones(1)}, base, groups)) == {
        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"}
    # Without fused groups (transformers), a module is completed by its own tensors only.
    assert set(whole_fused_layers(merged, base, ())) == {"model.layers.0.self_attn.q_proj.weight",
                                                         "model.layers.0.self_attn.q_proj.bias"}


def test_lora_sync_into_vllm_gives_transformers_tokens_of_the_merged_weights(embedded_model):
    """The env runner merges a LoRA adapter of q_proj, v_proj and up_proj into vLLM, whose
    fused qkv_proj / gate_up_proj reload only whole: before the engine starts (pending
    weights) and into the running engine, greedy tokens are transformers' on the merged model."""
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8),
                         model_config={"model": embedded_model, "lora": LORA})
    torch.manual_seed(1)

    def move_adapter() -> None:  # lora_B starts at 0 (a no-op adapter): give it weight
        with torch.no_grad():
            for name, p in module.llm.named_parameters():
                if ".lora_" in name:
                    p.add_(torch.randn_like(p) * 0.3)

    prompts = [[1, 392, 262, 201, 41, 81], [1, 548, 75, 290, 337, 86, 201, 1]]
    greedy = SamplingConfig(max_new_tokens=24, temperature=0.0)
    hf = HFEngine(embedded_model, dtype="float32")

    def merged_tokens() -> list:
        hf.load_weights(module.hf_model().state_dict().items())
        return [g.token_ids for g in hf.generate(prompts, greedy)]

    cfg = (GRPOConfig().environment("agentgym/textcraft")
           .llm(inference_engine="vllm", model_dtype="float32", max_model_len=512).training(lora=LORA))
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    try:
        move_adapter()
        runner.set_weights(module.get_state(inference_only=True))  # no engine yet: kept until it starts
        runner._ensure_engine()
        assert ("q_proj", "k_proj", "v_proj") in runner._engine.fused_modules
        pending = [g.token_ids for g in runner._engine.generate(prompts, greedy)]
        expected_pending = merged_tokens()
        move_adapter()
        # o_proj, down_proj, norms and embeddings are not sent: vLLM keeps them, and its
        # per-layer "Failed to load weights" warnings stay quiet for this deliberate subset.
        loggers = [logging.getLogger(name) for name in _VLLM_RELOAD_LOGGERS]
        levels = [lg.level for lg in loggers]
        with records_of(*_VLLM_RELOAD_LOGGERS) as records:
            runner.set_weights(module.get_state(inference_only=True))
        assert records == [] and [lg.level for lg in loggers] == levels
        live = [g.token_ids for g in runner._engine.generate(prompts, greedy)]
        expected_live = merged_tokens()
    finally:
        runner.stop()
    assert pending == expected_pending
    assert live == expected_live
    assert expected_live != expected_pending  # the second sync really changed the model


def test_lora_on_the_top_layers_only_adapts_them_and_refuses_a_bad_layer_list(embedded_model):
    """`layers_to_transform` puts the adapter on the listed layers only, so the backward pass
    stops above the layers below them (none of their activations needs a gradient)."""
    import pytest

    top = {**LORA, "layers_to_transform": [1]}
    module = LLMRLModule(observation_space=Text(8), action_space=Text(8),
                         model_config={"model": embedded_model, "lora": top})
    adapted = {n.split(".layers.")[1].split(".")[0] for n, p in module.llm.named_parameters() if p.requires_grad}
    assert adapted == {"1"}
    seen = []
    hooks = [layer.register_forward_hook(lambda m, i, o: seen.append(o[0].requires_grad if isinstance(o, tuple) else o.requires_grad))
             for layer in module.llm.base_model.model.model.layers]
    module.llm(torch.tensor([[1, 392, 262, 201]]))
    for h in hooks:
        h.remove()
    assert seen[0] is False and seen[-1] is True  # layer 0 runs without autograd's bookkeeping
    with pytest.raises(ValueError, match="layers_to_transform"):
        LLMRLModule(observation_space=Text(8), action_space=Text(8),
                    model_config={"model": embedded_model, "lora": {**LORA, "layers_to_transform": 1}})
