"""BabyAI task ids, splits and per-category groups.

A task id is AgentGym's `data_idx`: level ``data_idx % 40 + 1`` (1-based in
`levels.LEVELS`) with seed ``data_idx // 40``. Any non-negative id is a valid
task; the finite task set we publish is 40 levels x 50 seeds = 2000 ids.
Splits hold seeds apart, so every level appears in both: seeds 0-44 (ids
0-1799) are "train", seeds 45-49 (ids 1800-1999) are "test". AgentGym's own
90 test ids live in its AgentEval data set, not in its code, so we cannot
reproduce that exact list offline.

Categories are the level families of the AgentGym-RL paper's BabyAI table
(Table 4), whose columns are GoTo, Pickup, ActionObjDoor ("AOD"), FindObjS7
("Find"), OneRoomS20 ("Room") and SynthLoc ("SLoc"). The paper shows only
those six; the other levels get their BabyAI family name:

    GoTo           1-11  GoToRedBallGrey ... GoToObjDoor (every GoTo* level)
    Open           12-16 Open, OpenRedDoor, OpenDoorLoc, OpenRedBlueDoorsDebug, OpenDoorsOrderN4Debug
    Pickup         17-21 Pickup, UnblockPickup, PickupLoc, PickupDistDebug, PickupAbove
    PutNext        22-23 PutNextLocalS6N4, PutNextS7N4Carrying
    Unlock         24-29 Unlock, UnlockLocalDist, KeyInBox, UnlockPickupDist, BlockedUnlockPickup, UnlockToUnlock
    ActionObjDoor  30    ActionObjDoor
    FindObjS7      31    FindObjS7
    KeyCorridor    32    KeyCorridorS6R3
    OneRoomS20     33    OneRoomS20
    MoveTwoAcross  34    MoveTwoAcrossS8N9
    Synth          35    SynthS5R2
    SynthLoc       36    SynthLoc
    SynthSeq       37    SynthSeq
    BossLevel      38-40 MiniBossLevel, BossLevel, BossLevelNoUnlock
"""

from __future__ import annotations

from envs.babyai.levels import LEVELS, level_of

NUM_SEEDS = 50
TEST_SEEDS = 5

_GROUPS: tuple[tuple[str, int, int], ...] = (  # (category, first level, last level), 1-based
    ("GoTo", 1, 11),
    ("Open", 12, 16),
    ("Pickup", 17, 21),
    ("PutNext", 22, 23),
    ("Unlock", 24, 29),
    ("ActionObjDoor", 30, 30),
    ("FindObjS7", 31, 31),
    ("KeyCorridor", 32, 32),
    ("OneRoomS20", 33, 33),
    ("MoveTwoAcross", 34, 34),
    ("Synth", 35, 35),
    ("SynthLoc", 36, 36),
    ("SynthSeq", 37, 37),
    ("BossLevel", 38, 40),
)

#: level id -> category
LEVEL_CATEGORY: dict[str, str] = {
    LEVELS[number - 1]: name for name, first, last in _GROUPS for number in range(first, last + 1)
}


def num_tasks() -> int:
    return len(LEVELS) * NUM_SEEDS


def split_ids(split: str) -> list[int]:
    """Task ids of a split: "train" (seeds 0-44) or "test" (seeds 45-49)."""
    boundary = len(LEVELS) * (NUM_SEEDS - TEST_SEEDS)
    if split == "train":
        return list(range(boundary))
    if split == "test":
        return list(range(boundary, num_tasks()))
    raise KeyError(f"unknown split {split!r}; BabyAI has 'train' and 'test'")


def category(data_idx: int) -> str:
    """The paper-table group of the task's level."""
    return LEVEL_CATEGORY[level_of(data_idx)]
