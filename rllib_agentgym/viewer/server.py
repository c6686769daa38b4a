"""`rllib view RUN_DIR`: a local web page over a run's trajectories and curves.

A stdlib ThreadingHTTPServer (nothing to install, starts in milliseconds,
binds port 0 for tests) serving the single-page app in `static/` and a small
read-only JSON API:

    GET /api/trials
    GET /api/iterations?trial=
    GET /api/trajectories?trial=&iteration=&task=&category=&min_reward=&max_reward=&success=&limit=&offset=
    GET /api/trajectory?trial=&iteration=&index=          (one trajectory with its turns)
    GET /api/metrics?trial=                               (the training curves)

`trial` may be left out when the run has one trial. Errors are JSON
{"error": ...} with 400 (bad parameter) or 404 (unknown trial / trajectory).
"""

from __future__ import annotations

import json
import math
import mimetypes
import os
import threading
import webbrowser
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from rllib_agentgym.viewer.data import RunReader, TrajectoryFilter, UnknownTrial

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_PORT = 6007  # next to TensorBoard's 6006


def _sanitize(value: Any) -> Any:
    """NaN/inf are not JSON; the page gets null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _sanitize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sanitize(v) for v in value]
    return value


def _int_param(params: dict[str, str], name: str, default: int | None = None) -> int | None:
    value = params.get(name, "")
    if value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the terminal shows the URL, not a line per request."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path.startswith("/api/"):
            self._api(url.path[len("/api/"):], {k: v[-1] for k, v in parse_qs(url.query).items()})
        else:
            self._static(url.path)

    def _api(self, route: str, params: dict[str, str]) -> None:
        reader = self.server.reader
        trial = params.get("trial") or None
        handlers: dict[str, Callable[[], Any]] = {
            "trials": reader.trials,
            "iterations": lambda: reader.iterations(trial),
            "trajectories": lambda: reader.trajectories(
                trial,
                _int_param(params, "iteration"),
                TrajectoryFilter(task=params.get("task"), category=params.get("category"),
                                 min_reward=params.get("min_reward"), max_reward=params.get("max_reward"),
                                 success=params.get("success")),
                limit=max(1, _int_param(params, "limit", 500)),
                offset=max(0, _int_param(params, "offset", 0)),
            ),
            "trajectory": lambda: reader.trajectory(
                trial, _require(_int_param(params, "iteration"), "iteration"), _require(_int_param(params, "index"), "index")
            ),
            "metrics": lambda: reader.metrics(trial),
        }
        if route not in handlers:
            self._json({"error": f"unknown route /api/{route}"}, HTTPStatus.NOT_FOUND)
            return
        try:
            body = handlers[route]()
        except (UnknownTrial, IndexError) as e:
            self._json({"error": str(e.args[0] if e.args else e)}, HTTPStatus.NOT_FOUND)
            return
        except ValueError as e:
            self._json({"error": str(e)}, HTTPStatus.BAD_REQUEST)
            return
        self._json(body)

    def _json(self, body: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        data = json.dumps(_sanitize(body), ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def _static(self, path: str) -> None:
        name = "index.html" if path in ("", "/") else path.lstrip("/")
        target = (STATIC_DIR / name).resolve()
        if STATIC_DIR.resolve() not in target.parents or not target.is_file():
            self._json({"error": f"not found: {path}"}, HTTPStatus.NOT_FOUND)
            return
        data = target.read_bytes()
        content_type = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if content_type.startswith("text/") or content_type.endswith("javascript"):
            content_type += "; charset=utf-8"
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _require(value: int | None, name: str) -> int:
    if value is None:
        raise ValueError(f"{name} is required")
    return value


class ViewerServer(ThreadingHTTPServer):
    """The HTTP server, running in a daemon thread; `stop()` shuts it down."""

    daemon_threads = True

    def __init__(self, reader: RunReader, host: str, port: int):
        super().__init__((host, port), _Handler)
        self.reader = reader
        self.thread = threading.Thread(target=self.serve_forever, name="rllib-viewer", daemon=True)

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join(timeout=5)


def serve(run_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 0,
          open_browser: bool = False) -> tuple[ViewerServer, str]:
    """Start the viewer on `run_dir` in a background thread; returns (server, url).

    port 0 picks a free port. Raises FileNotFoundError if `run_dir` is not a
    directory; a run with no results yet is fine (the page shows what exists
    when it is refreshed).
    """
    server = ViewerServer(RunReader(run_dir), host, port)
    server.thread.start()
    bound_host, bound_port = server.server_address[:2]
    shown_host = "127.0.0.1" if bound_host in ("0.0.0.0", "") else ("[::1]" if bound_host == "::" else bound_host)
    url = f"http://{shown_host}:{bound_port}/"
    if open_browser:
        webbrowser.open(url)
    return server, url


def view_main(run_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
              open_browser: bool = False) -> None:
    """Entry point for `rllib view`: serve until Ctrl-C."""
    server, url = serve(run_dir, host=host, port=port, open_browser=open_browser)
    print(f"Trajectory viewer for {Path(run_dir).resolve()} at {url}  (Ctrl-C to stop)", flush=True)
    try:
        while server.thread.is_alive():
            server.thread.join(timeout=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
