"""The BabyAI env server: AgentGym's routes plus GET /goal and GET /actions."""

from __future__ import annotations

from fastapi import FastAPI

from envs.babyai.env import BabyAIEnv
from envs.babyai.tasks import split_ids
from envs.common.server import create_app as create_env_app


def create_app() -> FastAPI:
    return create_env_app(
        "babyai",
        BabyAIEnv,
        split_ids=split_ids,
        extra_routes={
            "goal": lambda env: env.goal,
            "actions": lambda env: env.available_actions(),
        },
    )
