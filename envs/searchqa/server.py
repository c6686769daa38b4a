"""HTTP server for the Deep Search env (AgentGym routes; /step takes the raw model text)."""

from __future__ import annotations

from fastapi import FastAPI

from envs.common.server import create_app as create_env_app
from envs.searchqa import tasks
from envs.searchqa.env import SearchQAEnv


def create_app() -> FastAPI:
    return create_env_app("searchqa", SearchQAEnv, split_ids=tasks.split_ids)
