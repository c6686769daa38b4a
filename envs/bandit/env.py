"""BanditEnv: reward = share of vowels among the letters of the reply (one step)."""

from __future__ import annotations

from envs.common.env import StepResult

VOWELS = set("aeiouAEIOU")
PROMPT = "Task {idx}: reply with a short text made of vowels only."


def vowel_share(text: str) -> float:
    """Fraction of the letters of `text` that are vowels (0 when it has no letters)."""
    letters = [c for c in text if c.isalpha()]
    return sum(c in VOWELS for c in letters) / len(letters) if letters else 0.0


class BanditEnv:
    def __init__(self, success_threshold: float = 0.6):
        self._threshold = float(success_threshold)
        self._obs = ""
        self._done = True

    def reset(self, data_idx: int) -> str:
        self._obs = PROMPT.format(idx=int(data_idx))
        self._done = False
        return self._obs

    def step(self, action: str) -> StepResult:
        if self._done:
            return StepResult("The episode is over.", 0.0, True, {"invalid_action": True, "success": False})
        reward = vowel_share(action)
        self._done = True
        self._obs = f"Your reply scored {reward:.2f}."
        return StepResult(self._obs, reward, True, {"success": reward >= self._threshold})

    def observation(self) -> str:
        return self._obs

    def close(self) -> None:
        self._done = True
