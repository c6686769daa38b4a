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

`invalid_action_penalty` c subtracts c per turn the env refused (its
invalid-action answer, `info["invalid_action"]`, or an unparseable reply):

    R' = R - c * #{t : turn t invalid}

An outcome reward alone credits a whole trajectory: a sample that wastes turns
on actions the env cannot take and still succeeds scores like a clean one, and
in a hard group it can beat the group's mean. The penalty ranks such samples
below their clean siblings.

`progress_reward` b adds b times the most progress p the episode reached, for
envs that report it (info["progress"] in [0, 1], 1 on success; TextCraft):

    R' = R + b * max_t p_t - c * #{t : turn t invalid}

A sparse outcome gives a group whose samples all fail no signal at all; with
progress, the sample that fetched the goal's ingredients ranks above the one
that fetched an item the task never names. Per turn (`turn_rewards`) the same
bonus arrives as b times each turn's rise of the running maximum of p.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rllib_agentgym.core.trajectory import Trajectory

REWARD_TYPES = ("return", "success")


def outcome_rewards(trajectories: Sequence[Trajectory], reward_type: str = "return",
                    invalid_action_penalty: float = 0.0, progress_reward: float = 0.0) -> np.ndarray:
    """[B] float32 outcome rewards: the summed env reward or 1[success], plus `progress_reward`
    times the episode's most progress, minus `invalid_action_penalty` per invalid turn (module doc)."""
    if reward_type == "return":
        rewards = np.array([t.reward for t in trajectories], dtype=np.float32)
    elif reward_type == "success":
        rewards = np.array([float(t.success) for t in trajectories], dtype=np.float32)
    else:
        raise ValueError(f"reward_type {reward_type!r} unknown; valid: {list(REWARD_TYPES)}")
    if invalid_action_penalty:
        invalid = np.array([sum(turn.invalid_action for turn in t.turns) for t in trajectories], dtype=np.float32)
        rewards = rewards - np.float32(invalid_action_penalty) * invalid
    if progress_reward:
        reached = np.array([t.progress or 0.0 for t in trajectories], dtype=np.float32)
        rewards = rewards + np.float32(progress_reward) * reached
    return rewards


def turn_rewards(trajectory: Trajectory, reward_type: str = "return",
                 invalid_action_penalty: float = 0.0, progress_reward: float = 0.0) -> np.ndarray:
    """[num_turns] float64 rewards r_k of one trajectory's turns, with sum_k r_k equal to
    its `outcome_rewards` entry: the env's reward of turn k ("return") or 1[success] on
    the last turn ("success"), minus `invalid_action_penalty` on each invalid turn, plus
    `progress_reward` times turn k's rise of the running maximum of the reported progress."""
    n = len(trajectory.turns)
    if reward_type == "return":
        rewards = np.array([turn.reward for turn in trajectory.turns], dtype=np.float64)
    elif reward_type == "success":
        rewards = np.zeros(n, dtype=np.float64)
        if n:
            rewards[-1] = float(trajectory.success)
    else:
        raise ValueError(f"reward_type {reward_type!r} unknown; valid: {list(REWARD_TYPES)}")
    if invalid_action_penalty:
        rewards -= invalid_action_penalty * np.array([turn.invalid_action for turn in trajectory.turns], dtype=np.float64)
    if progress_reward and n:
        reached = np.maximum.accumulate([turn.progress or 0.0 for turn in trajectory.turns])
        rewards += progress_reward * np.diff(reached, prepend=0.0)
    return rewards


def invalid_turn_flags(trajectories: Sequence[Trajectory]) -> np.ndarray:
    """[B, K] float32, K the most turns of a trajectory: 1 where turn k of trajectory i
    was refused by the env (or unparseable), 0 elsewhere and past its last turn."""
    width = max((len(t.turns) for t in trajectories), default=0)
    flags = np.zeros((len(trajectories), width), dtype=np.float32)
    for i, trajectory in enumerate(trajectories):
        flags[i, : len(trajectory.turns)] = [turn.invalid_action for turn in trajectory.turns]
    return flags


def repeated_refusal_flags(trajectories: Sequence[Trajectory]) -> np.ndarray:
    """[B, K] float32: 1 where turn k of trajectory i repeats the action the env refused at
    turn k - 1 and is refused again, 0 elsewhere and past its last turn.

    A refused action leaves the env as it was, so sending it again cannot help: unlike a
    first refusal (whose words can be right in another state), a repeat is wrong wherever
    it stands, and the refusal it repeats is in the context the model acted from.
    """
    width = max((len(t.turns) for t in trajectories), default=0)
    flags = np.zeros((len(trajectories), width), dtype=np.float32)
    for i, trajectory in enumerate(trajectories):
        for k in range(1, len(trajectory.turns)):
            before, turn = trajectory.turns[k - 1], trajectory.turns[k]
            flags[i, k] = before.invalid_action and turn.invalid_action and turn.action == before.action
    return flags


def refusal_rates(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Shares of all turns that the env refused (`invalid_action_rate`) and that resend the
    action refused the turn before (`repeated_refusal_rate`): what training and evaluation log."""
    turns = max(sum(len(t.turns) for t in trajectories), 1)
    return {"invalid_action_rate": float(invalid_turn_flags(trajectories).sum()) / turns,
            "repeated_refusal_rate": float(repeated_refusal_flags(trajectories).sum()) / turns}


def progress_stats(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """`progress_mean`, the mean of each episode's most progress, where the env reports progress
    (empty otherwise: an env without it would read as no progress)."""
    reached = [t.progress for t in trajectories if t.progress is not None]
    return {"progress_mean": float(np.mean(reached))} if reached else {}
