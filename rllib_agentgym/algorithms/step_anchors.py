"""GiGPO's step groups: each turn's return, and which turns of a group acted from the same state.

The episode-level advantage (GRPO) compares whole trajectories of one task. In
a multi-turn env the samples of a group revisit states: all of them start from
the task's first observation, and in BabyAI two paths often reach the same
view of the room. The turns that acted from one such *anchor state* form a
step group, and comparing their returns credits the action taken there
(`advantages.gigpo_advantages`). The state is the env's text:

- "observation": the observation the turn acted on (GiGPO's choice; right for
  envs whose observation describes the state, such as BabyAI's view of the
  room and SciWorld's `look around`);
- "history": the observation and every earlier (observation, action) pair of
  the episode. In a deterministic env the same history from the same task is
  the same state, so this never merges different states, at the price of fewer
  merges (TextCraft's `Got 4 oak log` says nothing of the inventory).

Anchors never cross groups: only samples of one task share states.
"""

from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
import torch

from rllib_agentgym.algorithms.advantages import reinforce_pp_returns
from rllib_agentgym.algorithms.rewards import turn_rewards
from rllib_agentgym.core.trajectory import Trajectory

ANCHOR_KINDS = ("observation", "history")


def anchor_key(trajectory: Trajectory, k: int, kind: str = "observation") -> Hashable:
    """The state turn k of `trajectory` acted from, as `kind` defines it (module doc)."""
    if kind == "observation":
        return trajectory.turns[k].observation
    if kind == "history":
        earlier = tuple((turn.observation, turn.action) for turn in trajectory.turns[:k])
        return earlier, trajectory.turns[k].observation
    raise ValueError(f"step anchor {kind!r} unknown; valid: {list(ANCHOR_KINDS)}")


def step_arrays(trajectories: Sequence[Trajectory], reward_type: str = "return", invalid_action_penalty: float = 0.0,
                gamma: float = 1.0, anchor: str = "observation",
                progress_reward: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(step_returns, anchor_ids)``, both [B, K] with K the most turns of a trajectory:
    the return from turn k on, G_k = r_k + gamma * G_{k+1} over `turn_rewards`
    (`advantages.reinforce_pp_returns` with the turns as timesteps), and an id per
    distinct (group, anchor state), -1 where trajectory i has no turn k."""
    width = max((len(t.turns) for t in trajectories), default=0)
    rewards = np.zeros((len(trajectories), width), dtype=np.float64)
    anchor_ids = np.full((len(trajectories), width), -1, dtype=np.int64)
    ids: dict[tuple[int, Hashable], int] = {}
    for i, trajectory in enumerate(trajectories):
        rewards[i, : len(trajectory.turns)] = turn_rewards(trajectory, reward_type, invalid_action_penalty, progress_reward)
        for k in range(len(trajectory.turns)):
            anchor_ids[i, k] = ids.setdefault((trajectory.group_id, anchor_key(trajectory, k, anchor)), len(ids))
    returns = reinforce_pp_returns(torch.from_numpy(rewards), torch.from_numpy(anchor_ids >= 0), gamma)
    return returns.numpy().astype(np.float32), anchor_ids


def shared_turn_fraction(anchor_ids: np.ndarray) -> float:
    """The share of turns whose anchor state another turn of the group also acted from:
    the turns that get a step advantage at all (GiGPO's diagnostic; nan with no turns)."""
    present = anchor_ids[anchor_ids >= 0]
    if present.size == 0:
        return float("nan")
    _, inverse, counts = np.unique(present, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse] > 1))
