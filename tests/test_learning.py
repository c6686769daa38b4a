"""The whole update is right: on a one-step vowel bandit the expected reward rises.

A correctness check, not a benchmark. The bandit (envs/bandit) scores the
share of vowels in a one-token reply, so E[r] under the policy is exact:
sum_tok p(tok | prompt) * vowel_share(tok).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from envs.bandit.env import vowel_share
from rllib_agentgym.algorithms.grpo.grpo import GRPO, AgentPPOConfig, GRPOConfig
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner
from rllib_agentgym.envs.gym_env import text_space


def _config(estimator: str, **training):
    cls = AgentPPOConfig if estimator == "gae" else GRPOConfig
    cfg = (
        cls()
        .environment("agentgym/bandit")
        .llm(group_size=8, tasks_per_iteration=4, max_turns=1, max_new_tokens=1, inference_engine="hf")
        .training(lr=2e-2, vf_lr=1e-2, micro_batch_size=32, kl_coef=0.0, use_kl_loss=False,
                  advantage_estimator=estimator, **training)
        .debugging(seed=0)
    )
    cfg.observation_space = cfg.action_space = text_space()
    return cfg


@pytest.mark.parametrize(
    "estimator",
    # GRPO runs through the Algorithm below; RLOO and REINFORCE++ share all of its path but
    # the advantage function (unit-tested by hand), so they run with `-m slow`.
    [pytest.param("rloo", marks=pytest.mark.slow), pytest.param("reinforce_plus_plus", marks=pytest.mark.slow), "gae"],
)
def test_each_estimator_raises_expected_bandit_reward(estimator):
    cfg = _config(estimator)
    runner = LLMEnvRunner(config=cfg, worker_index=0)
    learners = cfg.build_learner_group()
    module = learners._learner.module["default_policy"]
    try:
        runner.sample(num_tasks=1)
        tok = runner._tokenizer
        share = torch.tensor([vowel_share(tok.decode([i], skip_special_tokens=True)) for i in range(len(tok))])
        prompt = runner._chat.prompt_ids(tok, runner.spec.instruction, "Task 3: reply with a short text made of vowels only.")

        def expected_reward() -> float:
            with torch.no_grad():
                p = module.llm(torch.tensor([prompt])).logits[0, -1].softmax(-1)
            return float((p * share).sum())

        before = expected_reward()
        for _ in range(5):
            result = runner.sample()
            batch = GRPO._build_batch(SimpleNamespace(config=cfg), result.trajectories)
            learners.update(batch=batch)
            runner.set_weights(learners.get_state(components="learner/rl_module")["learner"]["rl_module"]["default_policy"])
        after = expected_reward()
    finally:
        runner.stop()
        learners.shutdown()
    assert after > before + 0.1, (before, after)


def test_grpo_algorithm_raises_mean_reward(ray_local):
    """The same check through RLlib's Algorithm: sampling, update, weight sync, metrics."""
    cfg = _config("grpo")
    cfg.log_trajectories = 0
    algo = cfg.build_algo()
    try:
        returns = [algo.train()["env_runners"]["episode_return_mean"] for _ in range(6)]
    finally:
        algo.stop()
    assert np.mean(returns[-2:]) > returns[0] + 0.08, returns
