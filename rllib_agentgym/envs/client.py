"""Clients for env sessions: over AgentGym's HTTP protocol, or in-process.

Both expose one session: `reset(data_idx) -> observation`,
`step(action) -> StepResult`, `evaluate() -> grade or None` (the env's final
reward for the episode as it stands, for families graded at the runner's
horizon; None when the env has no such grading), `close()`, and raise only
`EnvFailure` when a session cannot go on (the runner then drops that
trajectory and counts it; it is never scored).

The HTTP client accepts both error conventions: ours (4xx with {"error"}) and
AgentGym's (200 with {"error"}). It survives servers that die, hang or answer
5xx / garbage:

* every request has a timeout (`RetryPolicy.timeout_s`), so a hung server
  costs at most that much per try;
* a failed call is retried `RetryPolicy.retries` times with exponential
  backoff; before each retry the session moves to the next server of its
  `EndpointPool` that answers (failover), or stays where it is when it is the
  only one;
* a session that is lost (server restarted, died, or answered garbage) is
  recreated, reset to the same task and brought back to where it was by
  replaying the episode's actions; the replayed observations must equal the
  recorded ones, otherwise the episode is declared lost (`EnvFailure`). A
  step is never re-sent to a session that may already have executed it.

`HTTPEnvClient.last_server_ms` is the env call's own time in the server for
the last exchange, read from its `Server-Timing: app;dur=<ms>` header (our
servers send it on /reset and /step; None without it): round trip minus it
is what HTTP added.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import math
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence, TypeVar

import httpx

from envs.common.env import StepResult

logger = logging.getLogger(__name__)
T = TypeVar("T")
CLOSE_TIMEOUT_S = 2.0  # freeing a session is best effort: a hung server must not stall shutdown


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """The one TLS context every client of this process shares.

    httpx builds a fresh one (reading the whole CA bundle, ~40 ms of CPU) for
    each `Client` or `httpx.get` unless handed one; a runner opens a session per
    episode slot, so its first sample over HTTP spent seconds there (64 new
    sessions: 2.6 s, against 0.2 s for its whole bookkeeping after).
    """
    return httpx.create_ssl_context()


class EnvFailure(RuntimeError):
    """The env session is lost or the server keeps failing; drop the trajectory."""


class SessionLost(EnvFailure):
    """The server does not know (or cannot serve) this session id any more: make a new one."""


class ServerFault(EnvFailure):
    """The server is unreachable, timed out, or answered 5xx / garbage.

    `answered`: the server sent an HTTP response (it is up, so the session
    can still be closed there); False for transport failures and timeouts.
    """

    def __init__(self, message: str, answered: bool = False):
        super().__init__(message)
        self.answered = answered


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a session tries before its trajectory is dropped.

    timeout_s:     per HTTP request (connect, read, write).
    retries:       further tries of a failed reset / step (each may recreate the session).
    backoff_s:     first wait before a retry on the same server, doubled each time ...
    backoff_max_s: ... up to this.
    """

    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0

    def backoffs(self) -> Iterator[float]:
        delay = self.backoff_s
        while True:
            yield delay
            delay = min(delay * 2, self.backoff_max_s)


class EndpointPool:
    """The env server URLs one runner uses, and which of them look alive.

    New sessions go round-robin over servers not known to be down. A session
    whose server failed asks `failover()` for the next server that answers
    GET /health (any HTTP answer below 500 counts: AgentGym's servers have no
    /health route). A server found down is skipped for `down_for_s` seconds.
    """

    def __init__(self, urls: Sequence[str], probe_timeout_s: float = 2.0, down_for_s: float = 10.0):
        if not urls:
            raise ValueError("EndpointPool needs at least one server URL")
        self.urls = [u.rstrip("/") for u in urls]
        self._probe_timeout_s = probe_timeout_s
        self._down_for_s = down_for_s
        self._down_until: dict[str, float] = {}
        self._cycle = itertools.cycle(range(len(self.urls)))
        self._lock = threading.Lock()

    def _is_down(self, url: str) -> bool:
        return self._down_until.get(url, 0.0) > time.monotonic()

    def assign(self) -> str:
        """A server for a new session: the next one in turn that is not known to be down."""
        with self._lock:
            for _ in range(len(self.urls)):
                url = self.urls[next(self._cycle)]
                if not self._is_down(url):
                    return url
            return self.urls[next(self._cycle)]

    def mark_down(self, url: str) -> None:
        with self._lock:
            self._down_until[url] = time.monotonic() + self._down_for_s

    def probe(self, url: str) -> bool:
        try:
            alive = httpx.get(url + "/health", timeout=self._probe_timeout_s, verify=tls_context()).status_code < 500
        except httpx.HTTPError:
            alive = False
        with self._lock:
            if alive:
                self._down_until.pop(url, None)
            else:
                self._down_until[url] = time.monotonic() + self._down_for_s
        return alive

    def failover(self, failed: str) -> str:
        """The next server after `failed` that answers, else `failed` itself (to retry after a backoff)."""
        self.mark_down(failed)
        if len(self.urls) == 1:
            return failed
        start = self.urls.index(failed) if failed in self.urls else -1
        for k in range(1, len(self.urls)):
            url = self.urls[(start + k) % len(self.urls)]
            if not self._is_down(url) and self.probe(url):
                return url
        return failed


class InProcessEnvClient:
    """Calls the same env class the server wraps, in this process.

    An exception inside the env (an engine crash) becomes `EnvFailure`; the
    env is then rebuilt at the next reset, as a server would recreate it.
    """

    def __init__(self, env_class: type, options: Mapping[str, Any] | None = None):
        self._env_class = env_class
        self._options = dict(options or {})
        self._env = env_class(**self._options)

    def _guard(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except Exception as exc:
            self._discard()
            raise EnvFailure(f"in-process {self._env_class.__name__}.{what} failed: {exc!r}") from exc

    def _discard(self) -> None:
        if self._env is not None:
            try:
                self._env.close()
            except Exception:  # a broken engine may not close cleanly; it is dropped either way
                pass
            self._env = None

    def reset(self, data_idx: int) -> str:
        def _reset() -> str:
            if self._env is None:
                self._env = self._env_class(**self._options)
            return self._env.reset(int(data_idx))

        return self._guard("reset", _reset)

    def step(self, action: str) -> StepResult:
        if self._env is None:
            raise EnvFailure("step before reset (or after the env failed)")
        return self._guard("step", lambda: self._env.step(action))

    def evaluate(self) -> dict[str, Any] | None:
        """The env's `evaluate()` grade (see module doc), or None when its class has none."""
        if self._env is None:
            raise EnvFailure("evaluate before reset (or after the env failed)")
        if not callable(getattr(self._env, "evaluate", None)):
            return None
        return _grade(self._guard("evaluate", self._env.evaluate), f"{self._env_class.__name__}.evaluate")

    def close(self) -> None:
        self._discard()


class HTTPEnvClient:
    """One env session on a server speaking AgentGym's routes (see module doc)."""

    def __init__(
        self,
        servers: EndpointPool | str,
        options: Mapping[str, Any] | None = None,
        retry: RetryPolicy = RetryPolicy(),
    ):
        self._pool = servers if isinstance(servers, EndpointPool) else EndpointPool([servers])
        self._url = self._pool.assign()
        self._options = dict(options or {})
        self._retry = retry
        self._http = httpx.Client(timeout=retry.timeout_s, verify=tls_context())
        self._id: int | None = None
        self.last_server_ms: float | None = None  # see module doc
        # The episode so far, to rebuild a lost session: task, first observation, (action, observation).
        self._data_idx: int | None = None
        self._first_observation: str | None = None
        self._trace: list[tuple[str, str]] = []

    @property
    def base_url(self) -> str:
        return self._url

    # ---- one HTTP exchange ------------------------------------------------------

    def _send(self, method: str, route: str, *, timeout: float | None = None, **kwargs) -> httpx.Response:
        url = self._url + route
        self.last_server_ms = None
        try:
            response = self._http.request(method, url, timeout=timeout or self._retry.timeout_s, **kwargs)
        except httpx.HTTPError as exc:
            raise ServerFault(f"{method} {url}: {type(exc).__name__}: {exc}") from None
        self.last_server_ms = server_timing_ms(response.headers.get("server-timing"))
        return response

    def _request(self, method: str, route: str, *, timeout: float | None = None, **kwargs) -> Any:
        return _payload(self._send(method, route, timeout=timeout, **kwargs), f"{method} {self._url}{route}")

    # ---- session life -----------------------------------------------------------

    def _with_recovery(self, what: str, operation: Callable[[], T]) -> T:
        """Run `operation`, recovering from lost sessions and failing servers (see module doc)."""
        backoffs = self._retry.backoffs()
        error: EnvFailure | None = None
        for attempt in range(self._retry.retries + 1):
            if attempt:
                logger.info("env session retry %d/%d of %s: %s", attempt, self._retry.retries, what, error)
            try:
                return operation()
            except SessionLost as exc:
                error = exc
                self._id = None  # the server forgot us (it restarted?): a new session on the same server
            except ServerFault as exc:
                error = exc
                self._abandon(exc.answered)
                failed = self._url
                self._url = self._pool.failover(failed)
                if self._url == failed and attempt < self._retry.retries:
                    time.sleep(next(backoffs))
        raise EnvFailure(f"{what} failed after {self._retry.retries + 1} tries (servers {self._pool.urls}): {error}")

    def _abandon(self, server_answered: bool) -> None:
        """Forget the current session; free it on the server if that one still answers."""
        if self._id is not None and server_answered:
            self._close_quietly()
        self._id = None

    def _close_quietly(self) -> None:
        try:
            self._request("POST", "/close", json={"id": self._id}, timeout=min(self._retry.timeout_s, CLOSE_TIMEOUT_S))
        except EnvFailure:
            pass  # gone, busy or broken: nothing more to free from here

    def _create(self) -> None:
        reply = self._request("POST", "/create", json=self._options)
        if not isinstance(reply, dict) or not isinstance(reply.get("id"), int) or isinstance(reply["id"], bool):
            raise ServerFault(f"POST {self._url}/create: reply has no integer id: {str(reply)[:200]!r}", answered=True)
        self._id = reply["id"]

    def _reset_once(self) -> str:
        if self._id is None:
            self._create()
        reply = self._request("POST", "/reset", json={"id": self._id, "data_idx": self._data_idx})
        return _observation(reply, f"{self._url}/reset")

    def _rebuild(self) -> None:
        """A new session on the current server, brought to where the lost one was."""
        if self._reset_once() != self._first_observation:
            self._diverged(0)
        for turn, (action, expected) in enumerate(self._trace, 1):
            if self._step_once(action).observation != expected:
                self._diverged(turn)
        logger.info("rebuilt a lost env session on %s (replayed %d steps)", self._url, len(self._trace))

    def _diverged(self, turn: int) -> None:
        self._close_quietly()
        self._id = None
        raise EnvFailure(
            f"lost the session of task {self._data_idx} after {len(self._trace)} steps, and replaying them "
            f"gave a different observation at step {turn} (is the env deterministic?)"
        )

    def _step_once(self, action: str) -> StepResult:
        reply = self._request("POST", "/step", json={"id": self._id, "action": action})
        return _step_result(reply, f"{self._url}/step")

    def reset(self, data_idx: int) -> str:
        self._data_idx, self._first_observation, self._trace = int(data_idx), None, []
        observation = self._with_recovery(f"reset({data_idx})", self._reset_once)
        self._first_observation = observation
        return observation

    def step(self, action: str) -> StepResult:
        if self._first_observation is None:
            raise EnvFailure("step before reset")

        def _step() -> StepResult:
            if self._id is None:
                self._rebuild()
            return self._step_once(action)

        result = self._with_recovery(f"step {len(self._trace) + 1} of task {self._data_idx}", _step)
        self._trace.append((action, result.observation))
        return result

    def evaluate(self) -> dict[str, Any] | None:
        """GET /evaluate?id=N: the server grades the episode as it stands and ends it (module doc).
        None when the server has no such route (AgentGym's servers, other families)."""
        if self._first_observation is None:
            raise EnvFailure("evaluate before reset")

        def _evaluate() -> dict[str, Any] | None:
            if self._id is None:
                self._rebuild()
            response = self._send("GET", "/evaluate", params={"id": self._id})
            if _route_missing(response):
                return None
            return _grade(_payload(response, f"GET {self._url}/evaluate"), f"{self._url}/evaluate")

        return self._with_recovery(f"evaluate task {self._data_idx}", _evaluate)

    def close(self) -> None:
        """Free the session (best effort, bounded in time: a dead server must not block shutdown)."""
        if self._id is not None:
            self._close_quietly()
        self._id = None
        self._first_observation, self._trace = None, []
        self._http.close()


def server_timing_ms(header: str | None, metric: str = "app") -> float | None:
    """`dur` (ms) of `metric` in a Server-Timing header value ("app;dur=1.5, db;dur=0.2"); None when absent or malformed."""
    for entry in (header or "").split(","):
        name, *params = (part.strip() for part in entry.split(";"))
        if name != metric:
            continue
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "dur":
                try:
                    ms = float(value.strip().strip('"'))
                except ValueError:
                    return None
                return ms if math.isfinite(ms) and ms >= 0 else None
    return None


def _payload(response: httpx.Response, where: str) -> Any:
    """The JSON body of a reply, or the failure it signals (module doc: error conventions)."""
    if response.status_code >= 500:
        raise ServerFault(f"{where}: HTTP {response.status_code}: {response.text[:200]!r}", answered=True)
    try:
        body = response.json()
    except ValueError:  # includes undecodable bytes
        raise ServerFault(f"{where}: non-JSON reply (HTTP {response.status_code}): {response.content[:200]!r}", answered=True) from None
    error = body.get("error") if isinstance(body, dict) else None
    if response.status_code in (404, 409) or (error and "id" in str(error).lower() and not where.endswith("/create")):
        # Unknown / closed id, or a session still busy with a call we gave up on.
        raise SessionLost(f"{where}: {error or response.text[:200]}")
    if response.status_code >= 400 or error:
        raise EnvFailure(f"{where}: HTTP {response.status_code}: {error or response.text[:200]}")
    return body


def _route_missing(response: httpx.Response) -> bool:
    """A 404 / 405 for the route itself (not for the session id): the server has no such route.
    FastAPI answers {"detail": "Not Found"}, our servers {"error": "Not Found"}."""
    if response.status_code not in (404, 405):
        return False
    try:
        body = response.json()
    except ValueError:
        return True
    message = (body.get("error") or body.get("detail")) if isinstance(body, dict) else None
    return message in (None, "Not Found", "Method Not Allowed")


def _grade(reply: Any, where: str) -> dict[str, Any]:
    """An env's final grade {"reward": float, "success": bool, ...} checked like a step reply."""
    try:
        reward = float(reply.get("reward", 0.0) or 0.0)
    except (AttributeError, TypeError, ValueError):
        raise ServerFault(f"{where}: malformed grade: {str(reply)[:200]!r}", answered=True) from None
    if not math.isfinite(reward):
        raise ServerFault(f"{where}: reward is not a finite number: {reply.get('reward')!r}", answered=True)
    return {**reply, "reward": reward, "success": bool(reply.get("success", False))}


def _observation(reply: Any, where: str) -> str:
    if not isinstance(reply, dict) or not isinstance(reply.get("observation"), str):
        raise ServerFault(f"{where}: reply has no observation text: {str(reply)[:200]!r}", answered=True)
    return reply["observation"]


def _step_result(reply: Any, where: str) -> StepResult:
    observation = _observation(reply, where)
    try:
        reward = float(reply.get("reward", 0.0) or 0.0)
        info = dict(reply.get("info") or {})
    except (TypeError, ValueError):
        raise ServerFault(f"{where}: malformed step reply: {str(reply)[:200]!r}", answered=True) from None
    if not math.isfinite(reward):
        raise ServerFault(f"{where}: reward is not a finite number: {reply.get('reward')!r}", answered=True)
    return StepResult(observation=observation, reward=reward, done=bool(reply.get("done", False)), info=info)


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux), so a
    killed env runner never leaves its env server behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: `stop()` remains the way to end the server


class LocalEnvServer:
    """Starts `python -m <module> --port <port>` (0: a free one) and reads the URL it announces.

    The server gets SIGTERM when the thread that started it dies (Linux), so an
    env runner killed with SIGKILL does not leak its server.
    """

    def __init__(self, module: str, startup_timeout_s: float = 120.0, port: int = 0):
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.module = module
        self._proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(int(port))],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self.url = self._wait_for_url(startup_timeout_s)
        # Keep draining stdout so the server never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _wait_for_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        assert self._proc.stdout is not None
        while time.monotonic() < deadline:
            line = self._proc.stdout.readline()
            if not line:
                if self._proc.poll() is not None:
                    raise RuntimeError(f"env server {self.module} exited with code {self._proc.returncode}")
                continue
            if line.startswith("LISTENING "):
                url = line.split(" ", 1)[1].strip()
                _wait_healthy(url, deadline)
                return url
        self.stop()
        raise RuntimeError(f"env server {self.module} did not start within {timeout_s:.0f} s")

    def _drain(self) -> None:
        for _ in iter(self._proc.stdout.readline, ""):
            pass

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would (for fault-injection tests)."""
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _wait_healthy(url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2.0, verify=tls_context()).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"env server at {url} never became healthy")
