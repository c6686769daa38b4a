"""The token-level trajectory of one multi-turn episode, and batching them.

A trajectory is one flat token sequence: prompt, then per turn the sampled
response ids and the observation ids that follow. `loss_mask` is 1 exactly on
the sampled ids; `sample_logprobs` holds the engine's log-prob for each of
them (0 elsewhere), kept for diagnostics (engine/learner mismatch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np


@dataclass
class Turn:
    observation: str  # what the agent saw before acting
    response: str  # the model's text
    action: str  # what was sent to the env
    reward: float = 0.0
    valid_format: bool = True
    invalid_action: bool = False  # the env refused the action (info["invalid_action"]) or it was unparseable
    progress: float | None = None  # info["progress"] after the action, where the env reports it (TextCraft)


@dataclass
class Trajectory:
    env: str
    data_idx: int
    group_id: int
    category: str = ""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sample_logprobs: list[float] = field(default_factory=list)
    prompt_len: int = 0
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    done: bool = False  # the env ended the episode (vs. the horizon or a length cap)
    truncated: bool = False  # hit the model's context or a response hit max_new_tokens at the end
    final_observation: str = ""
    replayed_turns: list[Turn] = field(default_factory=list)  # a start state's prefix: context, not trained
    greedy: bool = False  # played at temperature 0 (GRPOConfig.greedy_group_members), not sampled

    def append(self, ids: Sequence[int], generated: bool, logprobs: Sequence[float] | None = None) -> None:
        self.token_ids.extend(ids)
        self.loss_mask.extend([1 if generated else 0] * len(ids))
        if generated and logprobs is not None:
            self.sample_logprobs.extend(float(x) for x in logprobs)
        else:
            self.sample_logprobs.extend([0.0] * len(ids))

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def progress(self) -> float | None:
        """The most progress towards the goal any turn reached (None if the env reports none)."""
        reported = [t.progress for t in self.turns if t.progress is not None]
        return max(reported) if reported else None

    @property
    def num_generated_tokens(self) -> int:
        return int(sum(self.loss_mask))

    def summary(self) -> dict[str, Any]:
        """JSON-friendly record for logs and the trajectory viewer (no token ids)."""
        return {
            "env": self.env,
            "data_idx": self.data_idx,
            "group_id": self.group_id,
            "category": self.category,
            "reward": self.reward,
            "success": self.success,
            "progress": self.progress,
            "num_turns": self.num_turns,
            "done": self.done,
            "truncated": self.truncated,
            "num_tokens": len(self.token_ids),
            "num_generated_tokens": self.num_generated_tokens,
            "turns": [asdict(t) for t in self.turns],
            "final_observation": self.final_observation,
            **({"replayed_turns": [asdict(t) for t in self.replayed_turns]} if self.replayed_turns else {}),
            **({"greedy": True} if self.greedy else {}),
        }


def pad_batch(trajectories: Sequence[Trajectory], pad_id: int, max_len: int | None = None) -> dict[str, np.ndarray]:
    """Right-pad trajectories into [B, T] arrays (T = longest, capped at max_len).

    input_ids, attention_mask, response_mask (the loss mask), sample_logprobs,
    plus [B] arrays group_ids, truncated. The outcome rewards are the algorithm's
    choice (`algorithms/rewards.py`), not the batch layout's.
    """
    longest = max(len(t.token_ids) for t in trajectories)
    width = min(longest, max_len) if max_len else longest
    b = len(trajectories)
    input_ids = np.full((b, width), pad_id, dtype=np.int64)
    attention_mask = np.zeros((b, width), dtype=np.int64)
    response_mask = np.zeros((b, width), dtype=np.float32)
    sample_logprobs = np.zeros((b, width), dtype=np.float32)
    for i, t in enumerate(trajectories):
        n = min(len(t.token_ids), width)
        input_ids[i, :n] = t.token_ids[:n]
        attention_mask[i, :n] = 1
        response_mask[i, :n] = t.loss_mask[:n]
        sample_logprobs[i, :n] = t.sample_logprobs[:n]
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "response_mask": response_mask,
        "sample_logprobs": sample_logprobs,
        "group_ids": np.array([t.group_id for t in trajectories], dtype=np.int64),
        "truncated": np.array([t.truncated for t in trajectories], dtype=bool),
    }
