"""Servers on loopback for tests: an ASGI app served by uvicorn in a thread, an env
server module launched as a process, and a socket that accepts connections but never
answers (a hung server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import httpx
import uvicorn

from envs.common.cli import listening_socket

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@contextmanager
def serve_module(module: str, *args: str, wait_s: float = 30.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """`python -m MODULE --port 0 ARGS`: yields (its announced URL, the process) once /health answers;
    terminates it on exit (its own shutdown closes what it started)."""
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("LISTENING http://127.0.0.1:"), line
        url = line.split()[1]
        deadline = time.monotonic() + wait_s
        while True:  # uvicorn may need a moment after the announcement
            try:
                httpx.get(f"{url}/health", timeout=wait_s).raise_for_status()
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def serve_in_thread(app) -> Iterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port, in this process; yields its URL."""
    sock = listening_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def hanging_server() -> Iterator[str]:
    """Accepts connections and reads requests, but never answers: a wedged env server."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        listener.close()
