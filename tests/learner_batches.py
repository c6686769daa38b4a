"""A small, deterministic GRPO train batch for learner tests: real `Trajectory` objects of
mixed lengths turned into the learner's batch by `GRPO._build_batch`."""

from __future__ import annotations

import types

import numpy as np

from rllib_agentgym.algorithms.grpo.grpo import GRPO
from rllib_agentgym.core.trajectory import Trajectory

LENGTHS = [40, 90, 55, 120, 30, 75]  # six trajectories, two groups of three


def grpo_batch(config, lengths=LENGTHS, instruction: int = 0):
    """Half prompt, half generated tokens each (logprob -1 under pi_old); rewards 0, 1, 2 in
    each group of three, so GRPO's advantages are -1.22, 0, 1.22. With `instruction`, every
    trajectory starts with the same that many tokens (an env's instruction) before its own."""
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 1900, size=instruction).tolist()
    trajectories = []
    for i, n in enumerate(lengths):
        t = Trajectory(env="textcraft", data_idx=i // 3, group_id=i // 3)
        t.append(shared, generated=False)
        t.append(rng.integers(3, 1900, size=n // 2).tolist(), generated=False)
        t.append(rng.integers(3, 1900, size=n - n // 2).tolist(), generated=True, logprobs=[-1.0] * (n - n // 2))
        t.reward = float(i % 3)
        trajectories.append(t)
    return GRPO._build_batch(types.SimpleNamespace(config=config), trajectories)
