"""The multi-agent envs by name: make one, list its task splits and categories.

Names: "tictactoe", "connect_four", "coop_craft", and "pettingzoo": any
PettingZoo AEC or Parallel env, named by its options (`factory`, see
`envs.multiagent.pettingzoo_text.make_pettingzoo_env`). Env modules are
imported on first use, so naming one env does not load the others' engines.
"""

from __future__ import annotations

import importlib
from typing import Any

from envs.multiagent.base import MultiAgentTextEnv

# name -> ("module:Class" of the env, module with split_ids / category / num_tasks)
_ENVS: dict[str, tuple[str, str]] = {
    "tictactoe": ("envs.multiagent.tictactoe:TicTacToeEnv", "envs.multiagent.board_game"),
    "connect_four": ("envs.multiagent.connect_four:ConnectFourEnv", "envs.multiagent.board_game"),
    "coop_craft": ("envs.multiagent.coop_craft.env:CoopCraftEnv", "envs.multiagent.coop_craft.tasks"),
    "pettingzoo": ("envs.multiagent.pettingzoo_text:make_pettingzoo_env", "envs.multiagent.pettingzoo_text"),
}
MULTIAGENT_ENVS: tuple[str, ...] = tuple(_ENVS)


def _entry(name: str) -> tuple[str, str]:
    if name not in _ENVS:
        raise KeyError(f"unknown multi-agent env {name!r}; known: {', '.join(MULTIAGENT_ENVS)}")
    return _ENVS[name]


def env_class(name: str) -> type:
    module, _, cls = _entry(name)[0].partition(":")
    return getattr(importlib.import_module(module), cls)


def make_env(name: str, **options: Any) -> MultiAgentTextEnv:
    """A new session of env `name`; `options` are the env class's keyword options."""
    return env_class(name)(**options)


def _tasks(name: str):
    return importlib.import_module(_entry(name)[1])


def split_ids(name: str, split: str) -> list[int]:
    return list(_tasks(name).split_ids(split))


def category(name: str, data_idx: int) -> str:
    return str(_tasks(name).category(data_idx))


def num_tasks(name: str) -> int:
    return int(_tasks(name).num_tasks())
