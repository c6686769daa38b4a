"""Env servers time their env calls into `Server-Timing: app;dur=<ms>` on /reset and /step, and
the HTTP client reads it back, so round trip minus it is what HTTP alone adds (the env-server
benchmark's transport overhead)."""

from __future__ import annotations

import time

import httpx
import pytest

from envs.textcraft.expert import ExpertAgent
from envs.textcraft.env import TextCraftEnv
from rllib_agentgym.envs.client import HTTPEnvClient, LocalEnvServer, server_timing_ms


@pytest.fixture(scope="module")
def textcraft_url():
    server = LocalEnvServer("envs.textcraft")
    try:
        yield server.url
    finally:
        server.stop()


def _timed(http: httpx.Client, route: str, body: dict) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    response = http.post(route, json=body)
    return response, (time.perf_counter() - start) * 1e3


def test_reset_and_step_replies_carry_the_env_call_time_within_the_round_trip(textcraft_url):
    with httpx.Client(base_url=textcraft_url, timeout=30) as http:
        env_id = http.post("/create", json={}).json()["id"]
        reset, reset_ms = _timed(http, "/reset", {"id": env_id, "data_idx": 3})
        assert reset.status_code == 200
        app_ms = server_timing_ms(reset.headers.get("server-timing"))
        assert app_ms is not None and 0 <= app_ms <= reset_ms

        # The expert's real actions on the same task, each step's header checked against its round trip.
        env = TextCraftEnv()
        observation = env.reset(3)
        expert = ExpertAgent(env)
        for _ in range(4):
            _, action = expert.act(observation)
            observation = env.step(action).observation
            step, step_ms = _timed(http, "/step", {"id": env_id, "action": action})
            assert step.status_code == 200 and step.json()["observation"] == observation
            header = step.headers["server-timing"]
            assert header.startswith("app;dur=")
            app_ms = server_timing_ms(header)
            assert app_ms is not None and 0 <= app_ms <= step_ms

        # An error reply times nothing: no env call ran.
        lost, _ = _timed(http, "/step", {"id": env_id + 12345, "action": "inventory"})
        assert lost.status_code == 404 and "server-timing" not in lost.headers
        assert http.post("/close", json={"id": env_id}).json() is True


def test_http_client_exposes_the_servers_time_of_its_last_call(textcraft_url):
    client = HTTPEnvClient(textcraft_url)
    try:
        assert client.last_server_ms is None
        client.reset(7)
        assert client.last_server_ms is not None and client.last_server_ms >= 0
        start = time.perf_counter()
        result = client.step("inventory")
        round_trip_ms = (time.perf_counter() - start) * 1e3
        assert result.observation.startswith("Inventory")
        assert client.last_server_ms is not None and 0 <= client.last_server_ms <= round_trip_ms
    finally:
        client.close()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("app;dur=1.25", 1.25),
        ("db;dur=0.5, app;desc=\"env\";dur=\"7\"", 7.0),
        ("app;DUR=0", 0.0),
        (None, None),
        ("", None),
        ("db;dur=3", None),
        ("app", None),
        ("app;dur=fast", None),
        ("app;dur=-1", None),
        ("app;dur=inf", None),
    ],
)
def test_server_timing_header_parsing(header, expected):
    assert server_timing_ms(header) == expected


def test_env_server_connections_send_without_nagle_delay():
    """The env servers' listening socket hands TCP_NODELAY to every accepted connection, so a
    reply's body does not wait behind its headers for the client's delayed ACK (40 ms on Linux)."""
    import socket

    from envs.common.cli import listening_socket

    server = listening_socket("127.0.0.1", 0)  # already listening: a connection now is queued, not refused
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        assert server.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        for sock in (accepted, client, server):
            sock.close()
