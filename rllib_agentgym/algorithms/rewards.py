"""The scalar each trajectory is trained on (its outcome reward).

`reward_type` in the GRPO config picks it:

- "return": R = sum_t r_t, the env's own rewards (AgentGym's score).
- "success": R = 1[success], 1 when the env reports the task solved, else 0.

Why "success" exists: some envs shape the success reward by length. BabyAI pays
R = 1 - 0.9 * steps / max_steps, so in a group where every sample succeeds the
returns still differ by a step or two. Group normalization (and Adam, which
rescales any small gradient to a full step) turns those differences into a
full-strength signal for "fewer primitive steps", which is not what the task
asks. With R = 1[success] only groups with mixed outcomes teach anything.
(Measured on the BabyAI warm start it did not change the greedy-success curve:
docs/learning.md, section 3.)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rllib_agentgym.core.trajectory import Trajectory

REWARD_TYPES = ("return", "success")


def outcome_rewards(trajectories: Sequence[Trajectory], reward_type: str = "return") -> np.ndarray:
    """[B] float32 outcome rewards: the summed env reward, or 1[success] (see module doc)."""
    if reward_type == "return":
        return np.array([t.reward for t in trajectories], dtype=np.float32)
    if reward_type == "success":
        return np.array([float(t.success) for t in trajectories], dtype=np.float32)
    raise ValueError(f"reward_type {reward_type!r} unknown; valid: {list(REWARD_TYPES)}")
