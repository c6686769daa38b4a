"""Clients for env sessions: over AgentGym's HTTP protocol, or in-process.

Both expose one session: `reset(data_idx) -> observation`,
`step(action) -> StepResult`, `close()`. The HTTP client accepts both error
conventions: ours (4xx with {"error"}) and AgentGym's (200 with {"error"}).
Transient faults (connection refused or reset, timeouts, 5xx) are retried
with exponential backoff; a session the server no longer knows is recreated
on the next reset, and a step that cannot be completed raises `EnvFailure`
so the caller drops that trajectory instead of scoring it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

import httpx

from envs.common.env import StepResult


class EnvFailure(RuntimeError):
    """The env session is lost or the server keeps failing; drop the trajectory."""


@dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5


class InProcessEnvClient:
    """Calls the same env class the server wraps, in this process."""

    def __init__(self, env_class: type, options: Mapping[str, Any] | None = None):
        self._env = env_class(**dict(options or {}))

    def reset(self, data_idx: int) -> str:
        return self._env.reset(int(data_idx))

    def step(self, action: str) -> StepResult:
        return self._env.step(action)

    def close(self) -> None:
        self._env.close()


class HTTPEnvClient:
    """One env session on a server speaking AgentGym's routes."""

    def __init__(self, base_url: str, options: Mapping[str, Any] | None = None, retry: RetryPolicy = RetryPolicy()):
        self._base = base_url.rstrip("/")
        self._options = dict(options or {})
        self._retry = retry
        self._http = httpx.Client(base_url=self._base, timeout=retry.timeout_s)
        self._id: int | None = None

    @property
    def base_url(self) -> str:
        return self._base

    def _call(self, method: str, route: str, **kwargs) -> Any:
        delay = self._retry.backoff_s
        for attempt in range(self._retry.retries + 1):
            try:
                response = self._http.request(method, route, **kwargs)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 500:
                    return _payload(response, route)
                error = f"HTTP {response.status_code}: {response.text[:200]}"
            if attempt < self._retry.retries:
                time.sleep(delay)
                delay *= 2
        raise EnvFailure(f"{method} {self._base}{route} failed after {self._retry.retries + 1} tries: {error}")

    def _create(self) -> int:
        reply = self._call("POST", "/create", json=self._options)
        return int(reply["id"])

    def reset(self, data_idx: int) -> str:
        for _ in range(2):
            if self._id is None:
                self._id = self._create()
            try:
                reply = self._call("POST", "/reset", json={"id": self._id, "data_idx": int(data_idx)})
            except SessionLost:
                self._id = None  # the server restarted or dropped us: make a new session
                continue
            return reply["observation"]
        raise EnvFailure(f"could not reset a session on {self._base}")

    def step(self, action: str) -> StepResult:
        if self._id is None:
            raise EnvFailure("step before reset")
        try:
            reply = self._call("POST", "/step", json={"id": self._id, "action": action})
        except SessionLost as exc:
            self._id = None
            raise EnvFailure(f"session lost mid-episode: {exc}") from None
        return StepResult(
            observation=reply["observation"],
            reward=float(reply.get("reward", 0.0) or 0.0),
            done=bool(reply.get("done", False)),
            info=dict(reply.get("info") or {}),
        )

    def close(self) -> None:
        if self._id is not None:
            try:
                self._call("POST", "/close", json={"id": self._id})
            except (EnvFailure, SessionLost):
                pass  # the server is gone; nothing left to free
            self._id = None
        self._http.close()


class SessionLost(EnvFailure):
    """The server answered that the session id is unknown (404 or AgentGym's error body)."""


def _payload(response: httpx.Response, route: str) -> Any:
    try:
        body = response.json()
    except ValueError:
        raise EnvFailure(f"{route}: server answered non-JSON: {response.text[:200]!r}") from None
    error = body.get("error") if isinstance(body, dict) else None
    if response.status_code == 404 or (error and "id" in str(error).lower() and route != "/create"):
        raise SessionLost(f"{route}: {error or response.text[:200]}")
    if response.status_code >= 400 or error:
        raise EnvFailure(f"{route}: HTTP {response.status_code}: {error or response.text[:200]}")
    return body


class LocalEnvServer:
    """Starts `python -m <module> --port 0` and reads the URL it announces."""

    def __init__(self, module: str, startup_timeout_s: float = 120.0):
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        self.module = module
        self._proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            start_new_session=True,
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

    def alive(self) -> bool:
        return self._proc.poll() is None

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
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"env server at {url} never became healthy")
