"""Bad input to an env server (TextCraft's): explicit cases, concurrency, and a fuzz run.

Every bad request gets a clear 4xx JSON error {"error": ...}; the server stays
up and other sessions are unaffected. The fuzz test draws requests from the
server's own OpenAPI document (its routes, parameters and body schemas) and
mixes in what the schema does not allow: wrong types, huge and negative ids,
arbitrary JSON, raw bytes that are not UTF-8, unknown routes and methods.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopback import serve_in_thread

from envs.common.env import StepResult
from envs.common.server import MAX_ACTION_CHARS, MAX_BODY_BYTES
from envs.common.server import create_app as create_server_app
from envs.textcraft.server import create_app

FUZZ_SESSIONS = 3
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def server():
    """A TextCraft app with fuzz-target sessions and one control session no request names."""
    app = create_app()
    with TestClient(app, raise_server_exceptions=False) as client:
        control = client.post("/create", json={"data_idx": 3}).json()
        ids = [client.post("/create", json={"data_idx": i}).json()["id"] for i in range(FUZZ_SESSIONS)]
        yield app, client, control, ids


def assert_clear_error(response: httpx.Response, status: int | tuple[int, ...]) -> None:
    statuses = (status,) if isinstance(status, int) else status
    assert response.status_code in statuses, (response.status_code, response.text[:300])
    body = response.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body


def assert_control_session_unaffected(client: TestClient, control: dict) -> None:
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/observation", params={"id": control["id"]}).json() == control["observation"]


# ---- explicit bad input ------------------------------------------------------------------

def test_each_kind_of_bad_input_gets_a_clear_4xx_json_error(server):
    app, client, control, ids = server
    live = ids[0]
    client.post("/reset", json={"id": live, "data_idx": 0})
    closed = client.post("/create").json()["id"]
    assert client.post("/close", json={"id": closed}).json() is True
    cases = [
        (400, "POST", "/step", {"content": b'{"id": %d, "action": "\xff\xfe"}' % live, "headers": JSON}),
        (422, "POST", "/step", {"content": b"\xff\xfe\x00 not json", "headers": JSON}),
        (422, "POST", "/step", {"content": b'{"id": 1, "action": "get', "headers": JSON}),
        (422, "POST", "/step", {"content": b'{"id": %d, "action": "\\ud800"}' % live, "headers": JSON}),
        (422, "POST", "/step", {"json": {"id": live}}),
        (422, "POST", "/step", {"json": {"id": "seven", "action": "inventory"}}),
        (422, "POST", "/step", {"json": [live, "inventory"]}),
        (422, "POST", "/step", {"json": {"id": live, "action": "x" * (MAX_ACTION_CHARS + 1)}}),
        (413, "POST", "/step", {"json": {"id": live, "action": "x" * (MAX_BODY_BYTES + 1)}}),
        (413, "POST", "/step", {"content": iter([b"x" * (MAX_BODY_BYTES // 2)] * 3), "headers": JSON}),
        (404, "POST", "/step", {"json": {"id": closed, "action": "inventory"}}),
        (404, "POST", "/step", {"json": {"id": 10**30, "action": "inventory"}}),
        (404, "POST", "/reset", {"json": {"id": -1, "data_idx": 0}}),
        (404, "POST", "/close", {"json": {"id": closed}}),
        (404, "GET", "/observation", {"params": {"id": closed}}),
        (422, "GET", "/observation", {"params": {"id": "abc"}}),
        (422, "POST", "/create", {"content": b"{not json", "headers": JSON}),
        (422, "POST", "/create", {"content": b"\xff\xfe", "headers": JSON}),
        (422, "POST", "/create", {"json": ["a", "list"]}),
        (422, "POST", "/create", {"json": {"data_idx": "three"}}),
        (422, "POST", "/create", {"json": {"max_distractors": "many"}}),
        (422, "POST", "/create", {"json": {"no_such_option": 1}}),
        (404, "GET", "/tasks", {"params": {"split": "nope"}}),
        (404, "GET", "/no/such/route", {}),
        (405, "DELETE", "/step", {}),
    ]
    for status, method, path, kwargs in cases:
        assert_clear_error(client.request(method, path, **kwargs), status)
    assert len(app.state.sessions) == 1 + FUZZ_SESSIONS  # no half-made session left behind
    assert client.post("/step", json={"id": live, "action": "inventory"}).status_code == 200
    assert_control_session_unaffected(client, control)


def test_a_session_serves_one_call_at_a_time(server):
    app, client, control, ids = server
    target = ids[1]
    client.post("/reset", json={"id": target, "data_idx": 0})
    # While one call holds the session, another gets 409 at once (it does not queue behind it).
    session = app.state.sessions.get(target)
    with session.lock:
        for method, path, kwargs in [
            ("POST", "/step", {"json": {"id": target, "action": "inventory"}}),
            ("POST", "/reset", {"json": {"id": target, "data_idx": 1}}),
            ("GET", "/observation", {"params": {"id": target}}),
            ("GET", "/commands", {"params": {"id": target}}),
        ]:
            response = client.request(method, path, **kwargs)
            assert_clear_error(response, 409)
            assert "busy" in response.json()["error"]
    assert client.post("/step", json={"id": target, "action": "inventory"}).status_code == 200
    assert_control_session_unaffected(client, control)


class SlowCountingEnv:
    """A test env whose steps take a while and that records overlapping calls."""

    def __init__(self):
        self.active = self.most_active = self.steps = 0
        self._gauge = threading.Lock()

    def reset(self, data_idx: int) -> str:
        return "ready"

    def step(self, action: str) -> StepResult:
        with self._gauge:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
        time.sleep(0.02)
        with self._gauge:
            self.active -= 1
            self.steps += 1
        return StepResult(f"step {self.steps}")

    def observation(self) -> str:
        return f"step {self.steps}"

    def close(self) -> None:
        pass


def test_concurrent_calls_on_one_session_never_interleave():
    """Real concurrency over HTTP (uvicorn's worker threads) on the server factory: every
    call is served or refused with 409 at once, never a 500, and calls never overlap in the env."""
    envs: list[SlowCountingEnv] = []

    def factory(**options) -> SlowCountingEnv:
        envs.append(SlowCountingEnv(**options))
        return envs[-1]

    app = create_server_app("slow", factory)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, timeout=10) as http:
        target = http.post("/create", json={"data_idx": 0}).json()["id"]
        other = http.post("/create", json={"data_idx": 0}).json()["id"]

        def step(_) -> int:
            with httpx.Client(base_url=url, timeout=10) as own:
                return own.post("/step", json={"id": target, "action": "go"}).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(step, range(64)))
        assert set(statuses) == {200, 409}  # both happened: calls did collide
        assert envs[0].most_active == 1 and envs[0].steps == statuses.count(200)
        assert http.post("/step", json={"id": other, "action": "go"}).json()["observation"] == "step 1"


def test_shutdown_closes_every_open_session():
    app = create_app()
    with TestClient(app) as client:
        for i in range(3):
            client.post("/create", json={"data_idx": i})
        assert len(app.state.sessions) == 3
    assert len(app.state.sessions) == 0  # the lifespan handler closed them


# ---- fuzzing from the OpenAPI document ------------------------------------------------------

def _resolve(schema: dict, components: dict) -> dict:
    if "$ref" in schema:
        return components[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _operations(app) -> list[tuple[str, str, dict]]:
    doc = app.openapi()
    components = doc.get("components", {}).get("schemas", {})
    ops = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            ops.append((method.upper(), path, {
                "params": [p["name"] for p in op.get("parameters", []) if p["in"] == "query"],
                "body": _resolve(body, components) if body else None,
            }))
    return ops


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


def _value_for(name: str, spec: dict | None, ids: list[int]) -> st.SearchStrategy:
    """Schema-typed values, their edges, and values of the wrong type."""
    kind = (spec or {}).get("type")
    if name == "id":
        typed = st.sampled_from(ids) | st.integers() | st.integers(min_value=2**63)
    elif kind == "integer":
        typed = st.integers(min_value=-5, max_value=700) | st.integers()
    elif kind == "string":
        typed = st.text() | st.sampled_from(["inventory", "get 1 oak log", "craft 4 oak planks using 1 oak log", ""])
    else:
        typed = json_values
    return typed | json_values


@st.composite
def requests(draw, ops, ids):
    """(method, path, httpx kwargs) for one request."""
    choice = draw(st.integers(0, len(ops)))
    if choice == len(ops):  # a route or method the server does not have
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]))
        path = "/" + draw(st.text(st.characters(min_codepoint=48, max_codepoint=122), max_size=12))
        return method, path, {}
    method, path, op = ops[choice]
    kwargs: dict = {}
    if op["params"]:
        kwargs["params"] = {
            name: draw(_value_for(name, {"type": "integer"}, ids) | st.text())
            for name in op["params"]
            if draw(st.integers(0, 3))  # now and then a required parameter is missing
        }
    if method == "POST":
        schema = op["body"] or {"properties": {"data_idx": {"type": "integer"}}}
        form = draw(st.sampled_from(["schema", "json", "bytes"]))
        if form == "schema":
            props = schema.get("properties", {})
            body = {k: draw(_value_for(k, v, ids)) for k, v in props.items() if draw(st.integers(0, 4))}
            kwargs.update(content=json.dumps(body).encode(), headers=JSON)
        elif form == "json":
            kwargs.update(content=json.dumps(draw(json_values)).encode(), headers=JSON)
        else:
            kwargs.update(content=draw(st.binary(max_size=64)), headers=JSON)
    return method, path, kwargs


def test_fuzzed_requests_never_break_the_server(server):
    app, client, control, ids = server
    ops = _operations(app)
    assert {(m, p) for m, p, _ in ops} >= {("POST", "/create"), ("POST", "/reset"), ("POST", "/step"),
                                           ("GET", "/observation"), ("POST", "/close")}
    for i in ids:  # the fuzz sessions start with a task
        client.post("/reset", json={"id": i, "data_idx": 0})

    @settings(max_examples=300, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(requests(ops, ids))
    def one_request(request):
        method, path, kwargs = request
        response = client.request(method, path, **kwargs)
        assert response.status_code < 500, (method, path, kwargs, response.text[:300])
        body = response.json()  # always JSON
        if response.status_code >= 400:
            assert isinstance(body, dict) and isinstance(body.get("error"), str), body

    one_request()
    assert_control_session_unaffected(client, control)
