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

A well-formed /step is served by the FastStep middleware, without FastAPI's
routing and validation (the hot path of a rollout); every other request, and
any /step body it does not accept as is, goes to the FastAPI routes.

A successful /reset or /step also carries `Server-Timing: app;dur=<ms>` (W3C
Server Timing): the time the env call itself took in the server, so a client
can split its round trip into the env's work and what HTTP adds (transport,
JSON, routing).

AgentGym answers a bad id with HTTP 200 and {"error": ...}; we are stricter,
and every error body is JSON {"error": "..."}:

    400  a body that cannot be read (not UTF-8)
    404  an unknown or closed id, an unknown route (405: a known route, wrong method)
    409  a call on a session that is not reset yet, or that is busy with another call
    413  a body over MAX_BODY_BYTES
    422  malformed JSON, missing / mistyped fields, an action over MAX_ACTION_CHARS or
         not encodable as UTF-8, bad env options, a data_idx the env rejects
    500  the env itself raised (a bug or a crashed engine); that session may be unusable

The server stays up through all of these, and other sessions are unaffected.
A session serves one call at a time: a call that finds it busy gets 409 at
once instead of queueing behind (possibly hung) work, so concurrent callers
never interleave inside one engine. Session ids start at a random offset, so
a restarted server never hands a stale client someone else's session.
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import threading
import time
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol

from fastapi import FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from envs.common.env import StepResult, TextEnv

MAX_ACTION_CHARS = 65536
MAX_BODY_BYTES = 1 << 20
CLOSE_WAIT_S = 10.0  # at shutdown, how long to wait for a session's in-flight call before closing it

logger = logging.getLogger(__name__)


class EnvError(Exception):
    """An error the client caused; answered with `status` and a JSON body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> JSONResponse:
        return JSONResponse(status_code=self.status, content={"error": self.message})


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

    @contextmanager
    def serving(self, env_id: int, need_reset: bool = True) -> Iterator[TextEnv]:
        """The env, held for one call; 409 when another call holds it or no task is loaded."""
        if not self.lock.acquire(blocking=False):
            raise EnvError(409, f"env {env_id} is busy with another call; calls on one session must not overlap")
        try:
            if need_reset and not self.was_reset:
                raise EnvError(409, f"env {env_id} has no task yet: POST /reset first")
            yield self.env
        finally:
            self.lock.release()


class SessionTable:
    """Thread-safe id -> env session map (ids are never reused)."""

    def __init__(self, factory: EnvFactory):
        self._factory = factory
        self._sessions: dict[int, _Session] = {}
        self._ids = itertools.count((1 << 32) + secrets.randbits(40))
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
            # A hung call must not keep the engine (a JVM, a browser) alive after shutdown.
            held = session.lock.acquire(timeout=CLOSE_WAIT_S)
            try:
                session.env.close()
            except Exception:
                logger.exception("closing an env session at shutdown failed")
            finally:
                if held:
                    session.lock.release()


@contextmanager
def _server_timing(response: Response | None) -> Iterator[None]:
    """Time the block (the env call only) into the reply's `Server-Timing: app;dur=<ms>` header."""
    start = time.perf_counter()
    yield
    if response is not None:
        response.headers["Server-Timing"] = _server_timing_value((time.perf_counter() - start) * 1e3)


def _server_timing_value(app_ms: float) -> str:
    return f"app;dur={app_ms:.3f}"


def _crash_response(exc: Exception) -> JSONResponse:
    """The 500 for an env that raised (its session may be unusable)."""
    return JSONResponse(status_code=500, content={"error": f"the env raised {type(exc).__name__}: {exc}"})


def _check_action(action: str) -> None:
    """422 for an action over MAX_ACTION_CHARS or not encodable as UTF-8."""
    if len(action) > MAX_ACTION_CHARS:
        raise EnvError(422, f"action longer than {MAX_ACTION_CHARS} characters")
    try:
        action.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate from a "\udXXX" escape
        raise EnvError(422, f"the action is not valid Unicode text: {exc}") from None


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
    sessions = SessionTable(factory)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        sessions.close_all()  # frees every engine still open when the server stops

    app = FastAPI(title=f"rllib-agentgym {name} env server", lifespan=lifespan)
    app.state.sessions = sessions
    app.add_middleware(FastStep, sessions=sessions)
    app.add_middleware(BodyLimit)  # added last: outermost, so it bounds what FastStep reads too

    @app.exception_handler(EnvError)
    async def _env_error(_: Request, exc: EnvError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        msg = first.get("msg", "invalid request")
        return JSONResponse(status_code=422, content={"error": f"malformed request: {where}: {msg}"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        message = str(exc.detail)
        if isinstance(exc.__cause__, UnicodeDecodeError):
            message = f"the request body is not valid UTF-8: {exc.__cause__}"
        return JSONResponse(status_code=exc.status_code, content={"error": message})

    @app.exception_handler(Exception)
    async def _env_crashed(_: Request, exc: Exception):
        # Starlette re-raises after answering, so the server's log keeps the traceback.
        return _crash_response(exc)

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
        if data_idx is not None and (isinstance(data_idx, bool) or not isinstance(data_idx, int)):
            raise EnvError(422, f"data_idx must be an integer, not {data_idx!r}")
        try:
            # Engine start-up (a JVM, a browser) blocks: keep it off the event loop.
            env_id, session = await run_in_threadpool(sessions.create, options)
        except (TypeError, ValueError, OverflowError) as exc:  # unknown or mistyped env option (int(inf))
            raise EnvError(422, f"bad env options: {exc}") from None
        reply: dict[str, Any] = {"id": env_id}
        if data_idx is not None:
            try:
                reply["observation"] = await run_in_threadpool(_reset, session, env_id, data_idx)
            except EnvError:
                await run_in_threadpool(_close, env_id)  # no half-made session left behind
                raise
        return reply

    def _reset(session: _Session, env_id: int, data_idx: int, response: Response | None = None) -> str:
        with session.serving(env_id, need_reset=False) as env:
            try:
                with _server_timing(response):
                    obs = env.reset(data_idx)
            except (IndexError, ValueError, KeyError, OverflowError) as exc:
                raise EnvError(422, f"bad data_idx {data_idx}: {exc}") from None
            session.was_reset = True
            return obs

    @app.post("/reset")
    def reset(body: ResetBody, response: Response) -> dict[str, Any]:
        obs = _reset(sessions.get(body.id), body.id, body.data_idx, response)
        return {"observation": obs, "reward": 0.0, "done": False, "info": {}}

    @app.post("/step")
    def step(body: StepBody, response: Response) -> dict[str, Any]:
        # Well-formed steps are served by FastStep; this route answers the rest (its errors).
        _check_action(body.action)
        reply, app_ms = _step_session(sessions.get(body.id), body.id, body.action)
        response.headers["Server-Timing"] = _server_timing_value(app_ms)
        return reply

    @app.get("/observation")
    def observation(id: int) -> str:  # noqa: A002 - AgentGym's query name
        with sessions.get(id).serving(id) as env:
            return env.observation()

    def _close(env_id: int) -> None:
        session = sessions.pop(env_id)
        with session.lock:  # waits for a call in flight: the engine is freed once, when idle
            session.env.close()

    @app.post("/close")
    def close(body: IdBody) -> bool:
        _close(body.id)
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
        with sessions.get(id).serving(id) as env:
            return fn(env)

    app.add_api_route(f"/{route}", handler, methods=["GET"], name=route)


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_bytes`, declared or streamed, before it is all read."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            response = JSONResponse(status_code=413, content={"error": f"request body over {self.max_bytes} bytes"})
            return await response(scope, receive, send)
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:  # a chunked body that never declared its size
                    raise HTTPException(413, f"request body over {self.max_bytes} bytes")
            return message

        await self.app(scope, limited_receive, send)


def _json_bytes(content: Any) -> bytes:
    """JSON as FastAPI's JSONResponse renders it (compact, UTF-8), numpy scalars and the like included."""
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        from fastapi.encoders import jsonable_encoder

        text = json.dumps(jsonable_encoder(content), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode("utf-8")


class FastStep:
    """ASGI middleware: a well-formed POST /step, served without FastAPI's routing and validation.

    /step is the hot path of a rollout, and on loopback FastAPI's per-request work
    (routing, pydantic, the response model) was most of what HTTP added per step
    (TextCraft: 0.53 ms round trip against 0.31 ms for a bare ASGI app, 2026-11-25).
    A body with a declared length that parses to {"id": int, "action": str} with a
    valid action is stepped here, in the same thread pool and with the same
    session rules (404, 409, 500) as the route; anything else is replayed, body
    and all, to the FastAPI route, which answers it as before.
    """

    def __init__(self, app, sessions: SessionTable):
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope, receive, send):
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/step"
                and any(name == b"content-length" for name, _ in scope["headers"])):
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        request = _step_request(body)
        if request is None:
            return await self.app(scope, _replay(body, receive), send)
        env_id, action = request
        try:
            session = self.sessions.get(env_id)
            reply, app_ms = await run_in_threadpool(_step_session, session, env_id, action)
            response = Response(_json_bytes(reply), media_type="application/json",
                                headers={"Server-Timing": _server_timing_value(app_ms)})
        except EnvError as exc:
            response = exc.response()
        except Exception as exc:  # the env raised (or its reply is not JSON): as the route's 500, traceback logged
            logger.exception("env step failed")
            response = _crash_response(exc)
        await response(scope, receive, send)


def _step_request(body: bytes) -> tuple[int, str] | None:
    """(id, action) of a well-formed /step body; None for anything the route must judge."""
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict):
        return None
    env_id, action = payload.get("id"), payload.get("action")
    if type(env_id) is not int or not isinstance(action, str):  # bool is an int: the route judges it
        return None
    try:
        _check_action(action)
    except EnvError:
        return None
    return env_id, action


def _step_session(session: _Session, env_id: int, action: str) -> tuple[dict[str, Any], float]:
    """One env.step on a session (its rules: 409 when busy or not reset): the reply and its ms."""
    with session.serving(env_id) as env:
        start = time.perf_counter()
        result = env.step(action)
        app_ms = (time.perf_counter() - start) * 1e3
    return _result_json(result), app_ms


def _replay(body: bytes, receive):
    """An ASGI `receive` that hands over an already-read body, then the connection's own messages."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
