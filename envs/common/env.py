"""The contract every environment family implements, server side.

An env session is one engine instance (a minigrid level, a JVM, a browser
context) that plays one task at a time:

    env.reset(data_idx) -> observation text
    env.step(action)    -> StepResult(observation, reward, done, info)
    env.observation()   -> the current observation text
    env.close()         -> frees the engine (idempotent)

`action` is the bare action the client extracted from the model's text (for
TextCraft "get 1 oak log"). An action the env cannot parse or execute is not
an error: the env answers with an observation that says so, costs a step,
and sets info["invalid_action"] = True.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class TextEnv(Protocol):
    def reset(self, data_idx: int) -> str: ...

    def step(self, action: str) -> StepResult: ...

    def observation(self) -> str: ...

    def close(self) -> None: ...
