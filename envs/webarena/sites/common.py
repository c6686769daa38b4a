"""Pieces shared by the embedded web apps: per-session SQLite copies and HTML rendering.

Every embedded site keeps its state in SQLite. A seed database is built once
per process from the site's deterministic seed function; each env session
then works on its own copy, selected by the `wa_session` cookie that the env
puts into its browser context. So parallel sessions never see each other's
carts, votes or issues, and `reset` restores a session's copy from the seed.
A browser without the cookie (a person looking at the site) uses the
"default" copy.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse

SESSION_COOKIE = "wa_session"
DEFAULT_SESSION = "default"
_SESSION_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

TEMPLATES = Path(__file__).parent / "templates"


def session_of(request: Request) -> str:
    """The session id the request's cookie selects (malformed ids fall back to the default)."""
    sid = request.cookies.get(SESSION_COOKIE, DEFAULT_SESSION)
    return sid if _SESSION_RE.match(sid) else DEFAULT_SESSION


class SiteDatabase:
    """A seed SQLite file plus one copy per session, under `root/<name>/`."""

    def __init__(self, name: str, build: Callable[[sqlite3.Connection], None], root: Path):
        self.name = name
        self._dir = root / name
        self._dir.mkdir(parents=True, exist_ok=True)
        self._seed = self._dir / "seed.sqlite"
        self._lock = threading.Lock()
        conn = sqlite3.connect(self._seed)
        try:
            build(conn)
            conn.commit()
        finally:
            conn.close()

    def _path(self, sid: str) -> Path:
        if not _SESSION_RE.match(sid):
            raise ValueError(f"bad session id {sid!r}")
        return self._dir / f"s-{sid}.sqlite"

    def reset(self, sid: str) -> None:
        """Restore session `sid` to the seed state (creates it when new)."""
        with self._lock:
            shutil.copyfile(self._seed, self._path(sid))

    def drop(self, sid: str) -> None:
        with self._lock:
            self._path(sid).unlink(missing_ok=True)

    @contextmanager
    def connect(self, sid: str) -> Iterator[sqlite3.Connection]:
        """A connection to the session's copy; commits on success."""
        path = self._path(sid)
        if not path.exists():
            self.reset(sid)
        conn = sqlite3.connect(path)
        conn.row_factory = sqlite3.Row
        try:
            yield conn
            conn.commit()
        finally:
            conn.close()


class Renderer:
    """Jinja2 templates of one site (`templates/<site>/`, plus the shared `templates/base.html`)."""

    def __init__(self, site: str, globals_: dict[str, Any] | None = None):
        self._env = Environment(
            loader=FileSystemLoader([str(TEMPLATES / site), str(TEMPLATES)]),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self._env.globals.update(globals_ or {})

    def page(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self._env.get_template(template).render(**context), status_code=status_code)


def redirect(url: str) -> RedirectResponse:
    """Post/Redirect/Get: answer a form POST with a 303 to the page showing the result."""
    return RedirectResponse(url, status_code=303)


def rows(conn: sqlite3.Connection, sql: str, *args: Any) -> list[sqlite3.Row]:
    return conn.execute(sql, args).fetchall()


def one(conn: sqlite3.Connection, sql: str, *args: Any) -> sqlite3.Row | None:
    return conn.execute(sql, args).fetchone()
