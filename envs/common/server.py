"""HTTP server factory speaking AgentGym's environment protocol.

Routes (AgentGym-compatible):

    POST /create        body optional: {"data_idx"?: int, ...env options} -> {"id": int, "observation"?: str}
    POST /reset         {"id": int, "data_idx": int} -> {"observation", "reward": 0, "done": false, "info"}
    POST /step          {"id": int, "action": str} -> {"observation", "reward", "done", "info"}
    GET  /observation   ?id=N -> str
    POST /close         {"id": int} -> true
    GET  /health        -> {"status": "ok", "env": name, "sessions": n}
    GET  /tasks         ?split=train|test -> {"ids": [...]} (when the family has splits)
    GET  /<extra>       ?id=N -> per-family extras (e.g. TextCraft's /commands and /goal)

AgentGym answers a bad id with HTTP 200 and {"error": ...}; we are stricter:
404 for an unknown or closed id, 422 for a malformed body, 409 for a call on a
session that is not reset yet. Every error body is JSON {"error": "..."}, and
the server stays up. Calls on one session are serialized by a per-session lock,
so concurrent callers never interleave inside one engine.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from envs.common.env import StepResult, TextEnv

MAX_ACTION_CHARS = 65536


class EnvError(Exception):
    """An error the client caused; answered with `status` and a JSON body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class ResetBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    data_idx: int = 0


class StepBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    action: str


class IdBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int


class EnvFactory(Protocol):
    def __call__(self, **options: Any) -> TextEnv: ...


@dataclass
class _Session:
    env: TextEnv
    lock: threading.Lock = field(default_factory=threading.Lock)
    was_reset: bool = False


class SessionTable:
    """Thread-safe id -> env session map (ids are never reused)."""

    def __init__(self, factory: EnvFactory):
        self._factory = factory
        self._sessions: dict[int, _Session] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def create(self, options: Mapping[str, Any]) -> tuple[int, _Session]:
        env = self._factory(**options)
        with self._lock:
            env_id = next(self._ids)
            session = _Session(env)
            self._sessions[env_id] = session
        return env_id, session

    def get(self, env_id: int) -> _Session:
        with self._lock:
            session = self._sessions.get(env_id)
        if session is None:
            raise EnvError(404, f"unknown or closed env id {env_id}")
        return session

    def pop(self, env_id: int) -> _Session:
        with self._lock:
            session = self._sessions.pop(env_id, None)
        if session is None:
            raise EnvError(404, f"unknown or closed env id {env_id}")
        return session

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def close_all(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            with session.lock:
                session.env.close()


def _result_json(result: StepResult) -> dict[str, Any]:
    return {
        "observation": result.observation,
        "reward": float(result.reward),
        "done": bool(result.done),
        "info": dict(result.info),
    }


def create_app(
    name: str,
    factory: EnvFactory,
    *,
    split_ids: Callable[[str], list[int]] | None = None,
    extra_routes: Mapping[str, Callable[[TextEnv], Any]] | None = None,
) -> FastAPI:
    """Build the FastAPI app serving env `name`.

    `factory(**options)` makes one env session (options come from the /create
    body). `split_ids(split)` lists task ids of a split for GET /tasks.
    `extra_routes` maps a GET route name to a function of the session's env.
    """
    app = FastAPI(title=f"rllib-agentgym {name} env server")
    sessions = SessionTable(factory)
    app.state.sessions = sessions

    @app.exception_handler(EnvError)
    async def _env_error(_: Request, exc: EnvError):
        return JSONResponse(status_code=exc.status, content={"error": exc.message})

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = first.get("msg", "invalid request")
        return JSONResponse(status_code=422, content={"error": f"malformed request: {where}: {msg}"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)})

    @app.on_event("shutdown")
    def _shutdown() -> None:
        sessions.close_all()

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "env": name, "sessions": len(sessions)}

    @app.post("/create")
    async def create(request: Request) -> dict[str, Any]:
        raw = await request.body()
        options: dict[str, Any] = {}
        if raw.strip():
            try:
                options = json.loads(raw)
            except (ValueError, UnicodeDecodeError) as exc:
                raise EnvError(422, f"malformed JSON body: {exc}") from None
            if not isinstance(options, dict):
                raise EnvError(422, "the /create body must be a JSON object")
        data_idx = options.pop("data_idx", None)
        try:
            # Engine start-up (a JVM, a browser) blocks: keep it off the event loop.
            env_id, session = await run_in_threadpool(sessions.create, options)
        except TypeError as exc:  # unknown env option
            raise EnvError(422, f"bad env options: {exc}") from None
        reply: dict[str, Any] = {"id": env_id}
        if data_idx is not None:
            reply["observation"] = await run_in_threadpool(_reset, session, int(data_idx))
        return reply

    def _reset(session: _Session, data_idx: int) -> str:
        with session.lock:
            try:
                obs = session.env.reset(data_idx)
            except (IndexError, ValueError, KeyError) as exc:
                raise EnvError(422, f"bad data_idx {data_idx}: {exc}") from None
            session.was_reset = True
            return obs

    @app.post("/reset")
    def reset(body: ResetBody) -> dict[str, Any]:
        obs = _reset(sessions.get(body.id), body.data_idx)
        return {"observation": obs, "reward": 0.0, "done": False, "info": {}}

    @app.post("/step")
    def step(body: StepBody) -> dict[str, Any]:
        if len(body.action) > MAX_ACTION_CHARS:
            raise EnvError(422, f"action longer than {MAX_ACTION_CHARS} characters")
        session = sessions.get(body.id)
        with session.lock:
            if not session.was_reset:
                raise EnvError(409, f"env {body.id} has no task yet: POST /reset first")
            return _result_json(session.env.step(body.action))

    @app.get("/observation")
    def observation(id: int) -> str:  # noqa: A002 - AgentGym's query name
        session = sessions.get(id)
        with session.lock:
            if not session.was_reset:
                raise EnvError(409, f"env {id} has no task yet: POST /reset first")
            return session.env.observation()

    @app.post("/close")
    def close(body: IdBody) -> bool:
        session = sessions.pop(body.id)
        with session.lock:
            session.env.close()
        return True

    if split_ids is not None:

        @app.get("/tasks")
        def tasks(split: str = "train") -> dict[str, Any]:
            try:
                return {"split": split, "ids": list(split_ids(split))}
            except KeyError:
                raise EnvError(404, f"unknown split {split!r}") from None

    for route, fn in (extra_routes or {}).items():
        _add_extra_route(app, sessions, route, fn)

    return app


def _add_extra_route(app: FastAPI, sessions: SessionTable, route: str, fn: Callable[[TextEnv], Any]) -> None:
    def handler(id: int) -> Any:  # noqa: A002
        session = sessions.get(id)
        with session.lock:
            if not session.was_reset:
                raise EnvError(409, f"env {id} has no task yet: POST /reset first")
            return fn(session.env)

    app.add_api_route(f"/{route}", handler, methods=["GET"], name=route)

