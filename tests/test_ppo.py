"""AgentPPO: the value head's own learning rate, per-token values through RLlib's
ValueFunctionAPI, and `run: AgentPPO` YAMLs through `rllib train file` (Tune)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from ray.rllib.core.learner.learner import DEFAULT_OPTIMIZER
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI

from rllib_agentgym.algorithms.grpo.grpo import GRPO, AgentPPOConfig
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import VALUE_OPTIMIZER
from rllib_agentgym.cli import main
from rllib_agentgym.envs.gym_env import text_space
from test_scale import _synthetic_trajectories
from run_files import trial_results

ROOT = Path(__file__).resolve().parents[1]
LR, VF_LR = 1e-5, 3e-3


def _flat(params) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in params]).clone()


def test_value_head_steps_at_vf_lr_and_the_llm_at_lr():
    """Adam's first step moves a parameter by its learning rate (times g / |g|): the value head
    moves by vf_lr, the LLM by lr. Then compute_values gives a value per token."""
    cfg = AgentPPOConfig().environment("agentgym/textcraft").training(lr=LR, vf_lr=VF_LR, micro_batch_size=4)
    cfg.observation_space = cfg.action_space = text_space()
    learners = cfg.build_learner_group()
    module = learners._learner.module["default_policy"].unwrapped()
    batch = GRPO._build_batch(SimpleNamespace(config=cfg), _synthetic_trajectories())
    try:
        head0, llm0 = _flat(module.value_head.parameters()), _flat(module.llm.parameters())
        learners.update(batch=batch)
        learner = learners._learner
        optimizer_lrs = {name: learner.get_optimizer("default_policy", name).param_groups[0]["lr"]
                         for name in (DEFAULT_OPTIMIZER, VALUE_OPTIMIZER)}
        head_step = (_flat(module.value_head.parameters()) - head0).abs().max().item()
        llm_step = (_flat(module.llm.parameters()) - llm0).abs().max().item()

        policy_batch = batch.policy_batches["default_policy"]
        ids = torch.as_tensor(policy_batch["input_ids"])
        attention = torch.as_tensor(policy_batch["attention_mask"])
        with torch.no_grad():
            values = module.compute_values({"input_ids": ids, "attention_mask": attention})
            trained = module.forward_train({"input_ids": ids, "attention_mask": attention})["values"]
    finally:
        learners.shutdown()
    assert optimizer_lrs == pytest.approx({DEFAULT_OPTIMIZER: LR, VALUE_OPTIMIZER: VF_LR})
    assert head_step == pytest.approx(VF_LR, rel=1e-2)
    assert llm_step == pytest.approx(LR, rel=1e-2)

    assert isinstance(module, ValueFunctionAPI)
    assert values.shape == ids.shape  # values[:, t] = V(x_<t), the state token t is generated from
    assert torch.equal(values[:, 0], torch.zeros(len(ids)))  # no state before the first token
    assert values[:, 1:].abs().sum() > 0  # the trained head is no longer the zero init
    torch.testing.assert_close(values, trained)


def _trial_results(storage: Path, experiment: str) -> list[dict]:
    (trial,) = list((storage / experiment).glob("AgentPPO_*"))
    return trial_results(trial)


def test_agent_ppo_yaml_trains_through_the_cli(ray_local, tmp_path):
    spec = {"bandit-ppo": {
        "run": "AgentPPO",
        "env": "agentgym/bandit",
        "stop": {"training_iteration": 1},
        "config": {"seed": 0, "inference_engine": "hf", "group_size": 2, "tasks_per_iteration": 4, "max_turns": 1,
                   "max_new_tokens": 2, "lr": 1.0e-4, "vf_lr": 1.0e-3, "micro_batch_size": 8, "log_trajectories": 0},
    }}
    path = tmp_path / "bandit_ppo.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0"]) == 0
    (result,) = _trial_results(tmp_path / "results", "bandit-ppo")
    learner = result["learners"]["default_policy"]
    assert result["env_runners"]["num_episodes"] == 8
    assert learner["vf_loss"] > 0 and learner["value_learning_rate"] == pytest.approx(1e-3)
    assert learner["default_optimizer_learning_rate"] == pytest.approx(1e-4)


@pytest.mark.slow
def test_textcraft_ppo_tuned_example_runs_an_iteration(ray_local, tmp_path):
    """The shipped example as it is (vLLM, a launched TextCraft server), for 2 iterations:
    the critic alone first (critic_warmup: 1), then the policy too."""
    path = ROOT / "tuned_examples" / "textcraft_ppo_cpu.yaml"
    assert main(["train", "file", str(path), "--storage-path", str(tmp_path / "results"), "-v", "0",
                 "--stop", json.dumps({"training_iteration": 2})]) == 0
    results = _trial_results(tmp_path / "results", "textcraft-ppo-cpu")
    assert [r["training_iteration"] for r in results] == [1, 2]
    for r in results:
        assert r["env_runners"]["num_episodes"] == 16
        assert r["learners"]["default_policy"]["vf_loss"] > 0
    # Warm-up: only the value optimizer steps; afterwards the policy's does too.
    assert results[0]["learners"]["default_policy"]["gradients_default_optimizer_global_norm"] == 0
    assert results[1]["learners"]["default_policy"]["gradients_default_optimizer_global_norm"] > 0
