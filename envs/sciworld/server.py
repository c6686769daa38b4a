"""HTTP server for SciWorld (AgentGym routes plus /gold_actions, /action_hint, /goals)."""

from __future__ import annotations

from fastapi import FastAPI

from envs.common.server import EnvError
from envs.common.server import create_app as create_env_app
from envs.sciworld import tasks
from envs.sciworld.env import GoldPathUnavailable, SciWorldEnv


def _gold_actions(env: SciWorldEnv) -> dict[str, list[str]]:
    try:
        return {"actions": env.gold_actions()}
    except GoldPathUnavailable as exc:
        raise EnvError(409, str(exc)) from None


def create_app() -> FastAPI:
    """One JVM per session: POST /create is cheap, the JVM starts at its first /reset."""
    return create_env_app(
        "sciworld",
        SciWorldEnv,
        split_ids=tasks.split_ids,
        extra_routes={
            "gold_actions": _gold_actions,
            "action_hint": SciWorldEnv.action_hint,
            "goals": lambda env: {"goals": env.goal_progress()},
        },
    )
