"""The embedded web apps, served on loopback by the env server process itself.

WebArena's real sites are docker images; these three small apps stand in for
them so the environment runs offline: a shop (WebArena's SHOPPING), a forum
(REDDIT) and a code host with an issue tracker (GITLAB). `embedded_sites()`
starts all three once per process, each on its own free loopback port, in one
background thread running uvicorn, and returns their URLs keyed by WebArena's
site names.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from envs.common.cli import listening_socket
from envs.webarena.sites import codehost, forum, shop
from envs.webarena.sites.common import SESSION_COOKIE, SiteDatabase

__all__ = ["EmbeddedSites", "embedded_sites", "SESSION_COOKIE"]

# WebArena site key -> the app factory standing in for it.
_FACTORIES = {"shopping": shop.create_app, "reddit": forum.create_app, "gitlab": codehost.create_app}


class EmbeddedSites:
    """The three apps, their per-session databases and their loopback URLs."""

    def __init__(self, host: str = "127.0.0.1"):
        self._root = Path(tempfile.mkdtemp(prefix="webarena-sites-"))
        self.databases: dict[str, SiteDatabase] = {}
        apps: dict[str, FastAPI] = {}
        for site, factory in _FACTORIES.items():
            apps[site], self.databases[site] = factory(self._root)
        self.urls: dict[str, str] = {}
        self._servers: list[tuple[uvicorn.Server, socket.socket]] = []
        for site, app in apps.items():
            sock = listening_socket(host, 0)
            self.urls[site] = f"http://{host}:{sock.getsockname()[1]}"
            config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_keep_alive=30)
            self._servers.append((uvicorn.Server(config), sock))
        self._thread = threading.Thread(target=self._serve, name="webarena-sites", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not all(server.started for server, _ in self._servers):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the embedded WebArena sites did not start")
            time.sleep(0.01)

    def _serve(self) -> None:
        async def main() -> None:
            await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in self._servers))

        asyncio.run(main())

    def reset(self, session: str) -> None:
        """Restore every site's data of `session` to the seed."""
        for db in self.databases.values():
            db.reset(session)

    def drop(self, session: str) -> None:
        for db in self.databases.values():
            db.drop(session)

    def remove_files(self) -> None:
        """Delete the databases (at process exit; the server thread is a daemon and dies with the process)."""
        for server, _ in self._servers:
            server.should_exit = True
        shutil.rmtree(self._root, ignore_errors=True)


_lock = threading.Lock()
_sites: EmbeddedSites | None = None


def embedded_sites() -> EmbeddedSites:
    """The process-wide embedded sites, started on first use."""
    global _sites
    with _lock:
        if _sites is None:
            _sites = EmbeddedSites()
            atexit.register(_sites.remove_files)
        return _sites
