"""GRPO configs on the real bandit env (envs/bandit) shared by the tests that need groups of
mixed and of equal rewards from the random-init model."""

from __future__ import annotations

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig

GROUP_SIZE = 4


def mixed_bandit_config(**training) -> GRPOConfig:
    """One-letter replies on the transformers engine, success when half the letters are vowels:
    the random-init model succeeds now and then, so some groups are mixed and others all
    failures (seen: about half). `training` adds `.training()` settings."""
    cfg = (
        GRPOConfig()
        .environment("agentgym/bandit", env_config={"env_options": {"success_threshold": 0.5}})
        .llm(inference_engine="hf", group_size=GROUP_SIZE, max_turns=1, max_new_tokens=1)
        .training(reward_type="success", lr=1e-3, micro_batch_size=16, **training)
        .debugging(seed=0)
    )
    cfg.log_trajectories = 0
    return cfg
