"""The WebArena env server: AgentGym routes plus /evaluate, /task and /skipped.

GET /evaluate?id=N   grade the session's current state now and end its episode (the client's turn
                     horizon); -> {"reward", "success", "skipped", "score", "eval_details", "answer"}
GET /task?id=N       the session's current task config, site URLs resolved (for scripted agents)
GET /skipped?split=  task ids of the split left out (they need the LLM judge and none is set, or use func:
                     helpers), with the reason for each; -> {"split", "ids", "count", "reasons"}
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from envs.common.server import EnvError
from envs.common.server import create_app as create_env_app
from envs.webarena import tasks
from envs.webarena.env import WebArenaEnv


def create_app() -> FastAPI:
    app = create_env_app(
        "webarena",
        WebArenaEnv,
        split_ids=tasks.split_ids,
        extra_routes={"evaluate": lambda env: env.evaluate(), "task": lambda env: env.task},
    )

    @app.get("/skipped")
    def skipped(split: str = "train") -> dict[str, Any]:
        try:
            reasons = tasks.skip_reasons(split)
        except KeyError:
            raise EnvError(404, f"unknown split {split!r}") from None
        reasons_json = {str(i): why for i, why in reasons.items()}
        return {"split": split, "ids": list(reasons), "count": len(reasons), "reasons": reasons_json}

    return app
