"""`python -m envs.<family> --port N`: serve one env family over HTTP."""

from __future__ import annotations

import argparse
from typing import Callable, Sequence

from fastapi import FastAPI


def listening_socket(host: str, port: int, backlog: int = 2048):
    """A bound, listening TCP socket for uvicorn whose accepted connections send without delay.

    Accepted sockets inherit TCP_NODELAY (asyncio sets it itself only on sockets made with
    proto=IPPROTO_TCP): without it, Nagle holds a reply's body behind its headers until
    the client's delayed ACK, 40 ms per request on Linux. It listens at once (uvicorn's
    default backlog), so a client that connects as soon as the port is announced waits in
    the backlog until the server's loop accepts, instead of being refused.
    """
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    return sock


def serve(app_factory: Callable[[], FastAPI], name: str, argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m envs.{name}", description=f"Serve the {name} env (AgentGym protocol).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed on start)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)

    import uvicorn

    # Bind ourselves so that --port 0 works and the chosen port is announced
    # on stdout before serving (the client's launcher reads this line).
    sock = listening_socket(args.host, args.port)
    port = sock.getsockname()[1]
    print(f"LISTENING http://{args.host}:{port}", flush=True)
    config = uvicorn.Config(app_factory(), log_level=args.log_level, timeout_keep_alive=60)
    uvicorn.Server(config).run(sockets=[sock])
