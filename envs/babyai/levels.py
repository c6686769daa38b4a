"""The 40 BabyAI levels AgentGym serves, and how to build one quietly.

AgentGym numbers its levels 1..40 and maps a task id to level
``data_idx % 40 + 1`` with seed ``data_idx // 40``. The list below keeps that
order. One id moved: minigrid 3.2 deprecates ``BabyAI-GoToObjS6-v0`` (making it
raises) in favour of ``BabyAI-GoToObjS6-v1``, which we use.

minigrid's rejection sampler `print`s a line ("Sampling rejected: ...") each
time it throws a generated level away, which would interleave with a server's
stdout (the CLI announces its port there). We route those notes to a logger
instead, by giving the sampler's module its own `print`; unlike redirecting
`sys.stdout`, this is safe when several sessions reset at once.
"""

from __future__ import annotations

import logging
from typing import Any

import gymnasium as gym
import minigrid  # noqa: F401  (registers the BabyAI-* ids with gymnasium)
from minigrid.envs.babyai.core import roomgrid_level

LEVELS: tuple[str, ...] = (
    "BabyAI-GoToRedBallGrey-v0",
    "BabyAI-GoToRedBall-v0",
    "BabyAI-GoToRedBallNoDists-v0",
    "BabyAI-GoToObjS6-v1",  # AgentGym: v0, deprecated in minigrid 3.2
    "BabyAI-GoToLocalS8N7-v0",
    "BabyAI-GoToObjMazeS7-v0",
    "BabyAI-GoToImpUnlock-v0",
    "BabyAI-GoToSeqS5R2-v0",
    "BabyAI-GoToRedBlueBall-v0",
    "BabyAI-GoToDoor-v0",
    "BabyAI-GoToObjDoor-v0",
    "BabyAI-Open-v0",
    "BabyAI-OpenRedDoor-v0",
    "BabyAI-OpenDoorLoc-v0",
    "BabyAI-OpenRedBlueDoorsDebug-v0",
    "BabyAI-OpenDoorsOrderN4Debug-v0",
    "BabyAI-Pickup-v0",
    "BabyAI-UnblockPickup-v0",
    "BabyAI-PickupLoc-v0",
    "BabyAI-PickupDistDebug-v0",
    "BabyAI-PickupAbove-v0",
    "BabyAI-PutNextLocalS6N4-v0",
    "BabyAI-PutNextS7N4Carrying-v0",
    "BabyAI-Unlock-v0",
    "BabyAI-UnlockLocalDist-v0",
    "BabyAI-KeyInBox-v0",
    "BabyAI-UnlockPickupDist-v0",
    "BabyAI-BlockedUnlockPickup-v0",
    "BabyAI-UnlockToUnlock-v0",
    "BabyAI-ActionObjDoor-v0",
    "BabyAI-FindObjS7-v0",
    "BabyAI-KeyCorridorS6R3-v0",
    "BabyAI-OneRoomS20-v0",
    "BabyAI-MoveTwoAcrossS8N9-v0",
    "BabyAI-SynthS5R2-v0",
    "BabyAI-SynthLoc-v0",
    "BabyAI-SynthSeq-v0",
    "BabyAI-MiniBossLevel-v0",
    "BabyAI-BossLevel-v0",
    "BabyAI-BossLevelNoUnlock-v0",
)

_log = logging.getLogger("envs.babyai.levels")


def _log_generation_note(*args: Any, **_: Any) -> None:
    _log.debug(" ".join(str(a) for a in args))


roomgrid_level.print = _log_generation_note  # type: ignore[attr-defined]


def level_of(data_idx: int) -> str:
    """AgentGym's level for a task id (level number ``data_idx % 40 + 1``)."""
    if data_idx < 0:
        raise ValueError(f"data_idx must be >= 0, got {data_idx}")
    return LEVELS[data_idx % len(LEVELS)]


def seed_of(data_idx: int) -> int:
    """AgentGym's level seed for a task id."""
    if data_idx < 0:
        raise ValueError(f"data_idx must be >= 0, got {data_idx}")
    return data_idx // len(LEVELS)


def make_level(level_id: str) -> gym.Env:
    """A fresh minigrid env for `level_id` (reset it before use)."""
    return gym.make(level_id, disable_env_checker=True)
