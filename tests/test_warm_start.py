"""`init_from` / `load_checkpoint`: the RLlib users' way to warm-start GRPO from an AgentSFT
checkpoint, resolved to `model_path: <checkpoint>` (one export, used by the learner, the KL
reference and the env runner's engine alike)."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.algorithms.sft.sft import AgentSFTConfig
from rllib_agentgym.experiments import prepare_experiments
from rllib_agentgym.export import export_checkpoint


@pytest.fixture(scope="module")
def sft_checkpoint(ray_local, tmp_path_factory) -> str:
    """One AgentSFT step on TextCraft expert conversations (lr 1e-3: far from the base)."""
    cfg = (AgentSFTConfig().environment("agentgym/textcraft")
           .training(sft_expert={"num": 4}, sft_batch_size=4, lr=1e-3, micro_batch_size=4).debugging(seed=0))
    algo = cfg.build_algo()
    try:
        algo.train()
        return algo.save(str(tmp_path_factory.mktemp("sft") / "ckpt")).checkpoint.path
    finally:
        algo.stop()


def test_init_from_starts_learner_reference_and_engine_from_the_checkpoint(sft_checkpoint, tmp_path, embedded_model):
    sft = export_checkpoint(sft_checkpoint, tmp_path / "sft")
    from transformers import AutoModelForCausalLM

    expected = AutoModelForCausalLM.from_pretrained(sft).state_dict()
    base = AutoModelForCausalLM.from_pretrained(embedded_model).state_dict()
    assert any(not torch.equal(expected[k], base[k]) for k in expected)  # the SFT step moved the weights

    # As a YAML's config section reaches the Algorithm (Tune: update_from_dict).
    config = {"env": "agentgym/textcraft", "init_from": sft_checkpoint, "inference_engine": "hf", "group_size": 1,
              "tasks_per_iteration": 1, "max_turns": 1, "max_new_tokens": 4, "kl_coef": 0.001}
    prepare_experiments({"warm": {"run": "GRPO", "config": config}})  # a known key to the CLI's checks
    algo = GRPOConfig().update_from_dict(config).build_algo()
    try:
        assert algo.config.model_path == sft_checkpoint
        learner = algo.learner_group._learner
        policy = learner.module["default_policy"].unwrapped().llm.state_dict()
        reference = learner._ref_models["default_policy"].state_dict()
        runner = algo.env_runner_group.local_env_runner
        runner._ensure_engine()
        engine = runner._engine._model.state_dict()
    finally:
        algo.stop()
    for name, tensor in expected.items():
        assert torch.equal(policy[name], tensor) and torch.equal(reference[name], tensor), name
        assert torch.equal(engine[name], tensor), name


def test_load_checkpoint_is_the_same_alias_and_bad_settings_fail_clearly(sft_checkpoint, tmp_path):
    cfg = GRPOConfig().update_from_dict({"load_checkpoint": sft_checkpoint})
    cfg.validate()
    assert cfg.model_path == sft_checkpoint
    # Both aliases may name the same checkpoint, and model_path may repeat it.
    GRPOConfig().update_from_dict({"init_from": sft_checkpoint, "load_checkpoint": sft_checkpoint,
                                   "model_path": sft_checkpoint}).validate()
    with pytest.raises(ValueError, match="is not a checkpoint of a run"):
        GRPOConfig().update_from_dict({"init_from": str(tmp_path)}).validate()
    with pytest.raises(ValueError, match="both name the starting model"):
        GRPOConfig().update_from_dict({"init_from": sft_checkpoint, "model_path": "embedded-agent"}).validate()
    with pytest.raises(ValueError, match="name different checkpoints"):
        GRPOConfig().update_from_dict({"init_from": sft_checkpoint, "load_checkpoint": str(tmp_path)}).validate()


def test_a_multi_agent_policy_warm_starts_from_its_own_checkpoint(sft_checkpoint, tmp_path, monkeypatch):
    """`algorithm_config_overrides_per_module: {x: {init_from: CKPT}}`: policy x starts from the
    checkpoint, the others from the run-wide model; a policy's own model_path replaces a run-wide
    init_from; a bad per-policy checkpoint fails at validate(); relative paths in a YAML's
    per-policy overrides are made absolute, as top-level ones are."""
    from rllib_agentgym.algorithms.grpo.multi_agent import MultiAgentGRPOConfig
    from rllib_agentgym.experiments import absolute_local_paths

    def config(**settings) -> MultiAgentGRPOConfig:
        cfg = MultiAgentGRPOConfig().update_from_dict({"env": "agentgym/tictactoe", "policies": ["x", "o"], **settings})
        cfg.validate()
        return cfg

    cfg = config(algorithm_config_overrides_per_module={"x": {"init_from": sft_checkpoint}})
    assert cfg.get_config_for_module("x").model_path == sft_checkpoint
    assert cfg.get_config_for_module("o").model_path == "embedded"
    assert cfg.get_multi_rl_module_spec().rl_module_specs["x"].model_config["model"] == sft_checkpoint

    cfg = config(init_from=sft_checkpoint, algorithm_config_overrides_per_module={"o": {"model_path": "embedded"}})
    assert cfg.get_config_for_module("x").model_path == sft_checkpoint
    assert cfg.get_config_for_module("o").model_path == "embedded"

    with pytest.raises(ValueError, match="is not a checkpoint of a run"):
        config(algorithm_config_overrides_per_module={"x": {"init_from": str(tmp_path)}})

    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    paths = absolute_local_paths({"algorithm_config_overrides_per_module": {"x": {"init_from": "ckpt", "lr": 1e-5}}})
    assert paths["algorithm_config_overrides_per_module"]["x"] == {"init_from": str(tmp_path / "ckpt"), "lr": 1e-5}
