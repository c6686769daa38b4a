"""Mixed precision only where the hardware computes it (rllib_agentgym.core.precision)."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.core import precision


@pytest.mark.parametrize("native", [True, False])
def test_cpu_autocast_follows_the_cpus_bf16_support(monkeypatch, native):
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: native)
    assert precision.autocast_dtype("cpu", torch.bfloat16) == (torch.bfloat16 if native else None)
    with precision.autocast("cpu", torch.bfloat16):
        y = torch.ones(2, 3) @ torch.ones(3, 2)
        assert torch.is_autocast_enabled("cpu") is native
    assert y.dtype == (torch.bfloat16 if native else torch.float32)


def test_other_devices_and_no_autocast_are_left_alone(monkeypatch):
    assert precision.cpu_has_native(torch.float32) is True
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: False)
    assert precision.autocast_dtype("cuda", torch.bfloat16) == torch.bfloat16
    assert precision.autocast_dtype("cpu", None) is None


@pytest.mark.parametrize("avx512_bf16, amx, native", [(True, False, True), (False, True, True), (False, False, False)])
def test_bf16_needs_bf16_units_not_only_onednn(monkeypatch, avx512_bf16, amx, native):
    """oneDNN says bf16 is supported on any AVX512 CPU; only AVX512-BF16 or AMX compute it fast."""
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx, raising=False)
    precision.cpu_has_native.cache_clear()
    try:
        assert precision.cpu_has_native(torch.bfloat16) is native
    finally:
        precision.cpu_has_native.cache_clear()


def test_engine_runs_float32_where_the_cpu_only_emulates_bf16(monkeypatch):
    """VLLMEngine / HFEngine (and `rllib evaluate --dtype`) take `cpu_engine_dtype` on a CPU."""
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: False)
    assert precision.cpu_engine_dtype("bfloat16") == "float32"
    assert precision.cpu_engine_dtype("float16") == "float32"
    assert precision.cpu_engine_dtype("float32") == "float32" and precision.cpu_engine_dtype("auto") == "auto"
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: True)
    assert precision.cpu_engine_dtype("bfloat16") == "bfloat16"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: False)
    assert precision.engine_dtype("bfloat16") == "bfloat16"  # a GPU runs what is asked


def test_learner_forward_trains_in_float32_on_a_cpu_without_bf16(monkeypatch, embedded_model):
    """model_dtype bfloat16 (the CPU examples' setting): the RLModule's training forward autocasts
    only where the CPU has bf16 units; without them its log-probs are the float32 ones."""
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.envs.gym_env import text_space

    cfg = GRPOConfig().llm(model_path=embedded_model, model_dtype="bfloat16")
    cfg.observation_space = cfg.action_space = text_space()
    module = cfg.get_rl_module_spec().build()
    ids = torch.randint(3, 500, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: True)
    mixed = module.forward_train(batch)["logprobs"]
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: False)
    plain = module.forward_train(batch)["logprobs"]
    with torch.no_grad():
        reference = module._forward(batch)["logprobs"]  # no autocast: float32
    torch.testing.assert_close(plain, reference)
    assert not torch.equal(mixed.float(), reference)  # bf16 rounding shows where autocast is on


def test_each_float32_fallback_warns_once_and_names_what_falls_back(monkeypatch, caplog):
    monkeypatch.setattr(precision, "cpu_has_native", lambda dtype: False)
    precision._warn_float32_fallback.cache_clear()
    with caplog.at_level("WARNING", logger=precision.__name__):
        for _ in range(2):
            assert precision.autocast_dtype("cpu", torch.bfloat16) is None
            assert precision.cpu_engine_dtype("bfloat16") == "float32"
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "bfloat16" in messages[0] and "the learner trains in float32" in messages[0]
    assert "the inference engine runs in float32" in messages[1]
