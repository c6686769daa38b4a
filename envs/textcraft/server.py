"""The TextCraft HTTP server: AgentGym's routes plus its /commands and /goal."""

from __future__ import annotations

from fastapi import FastAPI

from envs.common.server import create_app as create_env_app
from envs.textcraft.env import TextCraftEnv
from envs.textcraft.recipes import load_recipe_book
from envs.textcraft.tasks import split_ids


def _goal_id(env: TextCraftEnv) -> str:
    """The goal as AgentGym's /goal gives it: a Minecraft id, ``minecraft:oak_planks``."""
    return "minecraft:" + env.goal.replace(" ", "_")


def create_app() -> FastAPI:
    load_recipe_book()  # build the recipe book at start-up, not on the first /reset
    return create_env_app(
        "textcraft",
        TextCraftEnv,
        split_ids=split_ids,
        extra_routes={"commands": lambda env: env.commands, "goal": _goal_id},
    )
