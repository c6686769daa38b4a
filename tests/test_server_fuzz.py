"""Bad input to the env servers (TextCraft's, BabyAI's, Deep Search's) and to Deep
Search's retriever service: explicit cases, concurrency, and fuzz runs.

Every bad request gets a clear 4xx JSON error {"error": ...}; the server stays
up and other sessions are unaffected. The fuzz tests draw requests from each
server's own OpenAPI document (its routes, the family's extra routes,
parameters and body schemas) and mix in what the schema does not allow: wrong
types, huge and negative ids, arbitrary JSON, raw bytes that are not UTF-8,
unknown routes and methods. Runs are derandomized and bounded in size.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loopback import serve_in_thread

from envs.common.env import StepResult
from envs.common.server import MAX_ACTION_CHARS, MAX_BODY_BYTES
from envs.babyai.server import create_app as babyai_app
from envs.common.server import create_app as create_server_app
from envs.searchqa.server import create_app as searchqa_app
from envs.textcraft.server import create_app as textcraft_app

FUZZ_SESSIONS = 3
JSON = {"content-type": "application/json"}


@dataclass(frozen=True)
class Family:
    """What the tests need to know of one env server app."""

    create_app: Callable
    actions: tuple[str, ...]  # well-formed actions, mixed into the fuzzed ones
    extra_routes: tuple[str, ...]  # the family's GET /<extra>?id=N routes
    options: dict = field(default_factory=dict)  # /create options the fuzzer fills: name -> JSON-schema type
    bad_create_bodies: tuple[dict, ...] = ()  # /create bodies the family rejects (422): options, tasks
    fuzz_examples: int = 150


FAMILIES = {
    "textcraft": Family(
        textcraft_app,
        ("inventory", "get 1 oak log", "craft 4 oak planks using 1 oak log", ""),
        ("commands", "goal"),
        options={"max_distractors": "integer"},
        bad_create_bodies=({"max_distractors": "many"}, {"max_distractors": -1}, {"max_distractors": float("inf")}),
        fuzz_examples=300,
    ),
    "babyai": Family(
        babyai_app,
        ("turn left", "move forward", "go to blue key 1", "pickup blue key 1", "check available actions", ""),
        ("goal", "actions"),
        bad_create_bodies=({"data_idx": -1},),  # any id >= 0 is a task (level, seed); TextCraft's wrap around
    ),
    "searchqa": Family(
        searchqa_app,
        ("<search>capital</search>", "<think>hm</think><answer>1714</answer>", "<answer></answer>", ""),
        (),
        # Not world_seed or bm25_backend: each new value builds (and caches) a world index or compiles numba.
        options={"topk": "integer", "end_on_wrong_answer": "boolean", "retrieval": "string"},
        bad_create_bodies=({"topk": "many"}, {"topk": 0}, {"topk": 10**30}, {"retrieval": "nope"},
                     {"qa_dir": "/no/such/dir"}, {"corpus": "/no/such/corpus.jsonl"}, {"data_idx": 5000}),
    ),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def server(request):
    """One family's app with fuzz-target sessions and one control session no request names."""
    family = FAMILIES[request.param]
    app = family.create_app()
    with TestClient(app, raise_server_exceptions=False) as client:
        control = client.post("/create", json={"data_idx": 3}).json()
        ids = [client.post("/create", json={"data_idx": i}).json()["id"] for i in range(FUZZ_SESSIONS)]
        yield app, client, control, ids, family


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
    app, client, control, ids, family = server
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
        (422, "POST", "/create", {"json": {"no_such_option": 1}}),
        (404, "GET", "/tasks", {"params": {"split": "nope"}}),
        (404, "GET", "/no/such/route", {}),
        (405, "DELETE", "/step", {}),
    ]
    cases += [(422, "POST", "/create", {"content": json.dumps(options).encode(), "headers": JSON})
              for options in family.bad_create_bodies]  # json.dumps: Infinity is JSON that Python reads
    for route in family.extra_routes:
        cases += [
            (404, "GET", f"/{route}", {"params": {"id": closed}}),
            (422, "GET", f"/{route}", {"params": {"id": "abc"}}),
            (422, "GET", f"/{route}", {}),
            (405, "POST", f"/{route}", {"json": {"id": live}}),
        ]
    for status, method, path, kwargs in cases:
        assert_clear_error(client.request(method, path, **kwargs), status)
    assert len(app.state.sessions) == 1 + FUZZ_SESSIONS  # no half-made session left behind
    # A huge action within the limit is just an action the env answers.
    huge = client.post("/step", json={"id": live, "action": family.actions[0] + " " + "x" * (MAX_ACTION_CHARS - 100)})
    assert huge.status_code == 200 and isinstance(huge.json()["observation"], str)
    for action in family.actions:
        assert client.post("/step", json={"id": live, "action": action}).status_code == 200
    for route in family.extra_routes:
        assert client.get(f"/{route}", params={"id": live}).status_code == 200
    assert_control_session_unaffected(client, control)


def test_a_session_serves_one_call_at_a_time(server):
    app, client, control, ids, family = server
    target = ids[1]
    client.post("/reset", json={"id": target, "data_idx": 0})
    # While one call holds the session, another gets 409 at once (it does not queue behind it).
    session = app.state.sessions.get(target)
    with session.lock:
        for method, path, kwargs in [
            ("POST", "/step", {"json": {"id": target, "action": family.actions[0]}}),
            ("POST", "/reset", {"json": {"id": target, "data_idx": 1}}),
            ("GET", "/observation", {"params": {"id": target}}),
            *[("GET", f"/{route}", {"params": {"id": target}}) for route in family.extra_routes],
        ]:
            response = client.request(method, path, **kwargs)
            assert_clear_error(response, 409)
            assert "busy" in response.json()["error"]
    assert client.post("/step", json={"id": target, "action": family.actions[0]}).status_code == 200
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


class EchoEnv:
    """Answers each action with itself (a numpy reward); "boom" raises (a crashed engine)."""

    def reset(self, data_idx: int) -> str:
        return "ready"

    def step(self, action: str) -> StepResult:
        import numpy as np

        if action == "boom":
            raise RuntimeError("the engine fell over")
        return StepResult(f"you said {action}", np.float32(0.5), False, {"length": len(action)})

    def observation(self) -> str:
        return "ready"

    def close(self) -> None:
        pass


def test_fast_step_path_answers_as_the_route_does(monkeypatch):
    """A /step body with a declared length goes through FastStep (no FastAPI routing); a chunked
    one (no Content-Length) through the FastAPI route. Both answer every body alike: status, JSON
    and, on success, a Server-Timing header; the odd bodies FastStep hands on get the route's errors."""
    import envs.common.server as server

    # FastStep hands its env steps to the module's thread pool call; the route's run in FastAPI's.
    fast_steps = []
    threadpool = server.run_in_threadpool

    async def spy(fn, *args):
        if fn is server._step_session:
            fast_steps.append(args[1:])
        return await threadpool(fn, *args)

    monkeypatch.setattr(server, "run_in_threadpool", spy)
    with TestClient(create_server_app("echo", lambda: EchoEnv()), raise_server_exceptions=False) as client:
        env_id = client.post("/create", json={"data_idx": 0}).json()["id"]
        fresh = client.post("/create", json={}).json()["id"]  # never reset: 409
        bodies = [
            {"id": env_id, "action": "look"},
            {"id": env_id, "action": "ünïcödé ✓"},
            {"id": env_id, "action": ""},
            {"id": env_id, "action": "boom"},  # 500
            {"id": env_id + 10**6, "action": "look"},  # 404
            {"id": fresh, "action": "look"},  # 409
            {"id": str(env_id), "action": "look"},  # the route's lax int: 200
            {"id": True, "action": "look"},
            {"id": env_id, "action": "x" * (MAX_ACTION_CHARS + 1)},  # 422
            {"id": env_id, "action": "\ud800"},  # a lone surrogate: 422
            {"id": env_id},
            [env_id, "look"],
        ]
        raw_bodies = [json.dumps(b).encode() for b in bodies] + [b"{not json", b'{"id": 1, "action": "\xff"}', b"\xff\xfe"]
        for raw in raw_bodies:
            fast = client.post("/step", content=raw, headers=JSON)
            route = client.post("/step", content=iter([raw]), headers=JSON)  # chunked: no Content-Length
            assert "content-length" not in route.request.headers and "content-length" in fast.request.headers
            assert (fast.status_code, fast.json()) == (route.status_code, route.json()), raw[:80]
            assert ("server-timing" in fast.headers) == ("server-timing" in route.headers) == (fast.status_code == 200)
        # FastStep served the well-formed bodies with a declared length (the unknown id: 404 before a step).
        assert fast_steps == [(bodies[i]["id"], bodies[i]["action"]) for i in (0, 1, 2, 3, 5)]
        ok = client.post("/step", json={"id": env_id, "action": "look"})
        assert ok.json() == {"observation": "you said look", "reward": 0.5, "done": False, "info": {"length": 4}}
        assert client.get("/health").json()["sessions"] == 2  # the server is up, both sessions kept


@pytest.mark.parametrize("name", list(FAMILIES))
def test_shutdown_closes_every_open_session(name):
    app = FAMILIES[name].create_app()
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


def _value_for(name: str, spec: dict | None, ids: list[int], actions: tuple[str, ...] = ()) -> st.SearchStrategy:
    """Schema-typed values, their edges, and values of the wrong type."""
    kind = (spec or {}).get("type")
    if name == "id":
        typed = st.sampled_from(ids) | st.integers() | st.integers(min_value=2**63)
    elif kind == "integer":
        typed = st.integers(min_value=-5, max_value=700) | st.integers()
    elif kind == "string":
        typed = st.text() | st.sampled_from([*actions, ""])
    elif kind == "boolean":
        typed = st.booleans()
    elif kind == "array":
        typed = st.lists(st.text(max_size=30) | st.sampled_from([*actions, ""]), max_size=5)
    else:
        typed = json_values
    return typed | json_values


@st.composite
def requests(draw, ops, ids, actions=(), create_options=None):
    """(method, path, httpx kwargs) for one request. `create_options` (name -> JSON-schema
    type) are the env options a POST /create body may carry (that route has no body schema)."""
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
        options = {"data_idx": "integer", **(create_options or {})}
        schema = op["body"] or {"properties": {name: {"type": kind} for name, kind in options.items()}}
        form = draw(st.sampled_from(["schema", "json", "bytes"]))
        if form == "schema":
            props = schema.get("properties", {})
            body = {k: draw(_value_for(k, v, ids, actions)) for k, v in props.items() if draw(st.integers(0, 4))}
            kwargs.update(content=json.dumps(body).encode(), headers=JSON)
        elif form == "json":
            kwargs.update(content=json.dumps(draw(json_values)).encode(), headers=JSON)
        else:
            kwargs.update(content=draw(st.binary(max_size=64)), headers=JSON)
    return method, path, kwargs


def fuzz(client: TestClient, strategy: st.SearchStrategy, max_examples: int) -> None:
    """Send `max_examples` drawn requests (the same ones every run): none may get a 5xx or a
    non-JSON reply, and every error is {"error": "<text>"}."""

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategy)
    def one_request(request):
        method, path, kwargs = request
        response = client.request(method, path, **kwargs)
        assert response.status_code < 500, (method, path, kwargs, response.text[:300])
        body = response.json()  # always JSON
        if response.status_code >= 400:
            assert isinstance(body, dict) and isinstance(body.get("error"), str), body

    one_request()


def test_fuzzed_requests_never_break_the_server(server):
    app, client, control, ids, family = server
    ops = _operations(app)
    routes = {(m, p) for m, p, _ in ops}
    assert routes >= {("POST", "/create"), ("POST", "/reset"), ("POST", "/step"), ("GET", "/observation"),
                      ("POST", "/close"), ("GET", "/tasks"), *(("GET", f"/{r}") for r in family.extra_routes)}
    for i in ids:  # the fuzz sessions start with a task
        client.post("/reset", json={"id": i, "data_idx": 0})
    fuzz(client, requests(ops, ids, family.actions, family.options), family.fuzz_examples)
    assert_control_session_unaffected(client, control)


# ---- Deep Search's retriever service -------------------------------------------------------

@pytest.fixture(scope="module")
def retriever():
    """The retriever service over the generated world (BM25), as `python -m envs.searchqa.retriever` serves it."""
    from envs.searchqa.retrieval import build_retriever
    from envs.searchqa.retriever import create_retriever_app

    app = create_retriever_app(build_retriever(None, bm25_backend="numpy"))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield app, client


def _retriever_up(client: TestClient) -> None:
    assert client.get("/health").json()["status"] == "ok"
    hits = client.post("/retrieve", json={"queries": ["capital"], "topk": 2}).json()["results"]
    assert len(hits) == 1 and len(hits[0]) == 2 and all(isinstance(h["text"], str) for h in hits[0])


def test_retriever_answers_bad_input_with_clear_4xx_json_errors(retriever):
    from envs.searchqa.retriever import MAX_QUERIES, MAX_QUERY_CHARS, MAX_TOPK

    _, client = retriever
    cases = [
        (422, "POST", "/retrieve", {"content": b"\xff\xfe", "headers": JSON}),
        (400, "POST", "/retrieve", {"content": b'{"queries": ["\xff"]}', "headers": JSON}),
        (422, "POST", "/retrieve", {"content": b'{"queries": ["capi', "headers": JSON}),
        (422, "POST", "/retrieve", {"json": {"queries": "capital"}}),
        (422, "POST", "/retrieve", {"json": {"queries": [1, 2]}}),
        (422, "POST", "/retrieve", {"json": {"topk": 2}}),
        (422, "POST", "/retrieve", {"json": {"queries": ["a"], "topk": 0}}),
        (422, "POST", "/retrieve", {"json": {"queries": ["a"], "topk": MAX_TOPK + 1}}),
        (422, "POST", "/retrieve", {"json": {"queries": ["a"], "topk": 10**30}}),
        (422, "POST", "/retrieve", {"json": {"queries": ["a"] * (MAX_QUERIES + 1)}}),
        (422, "POST", "/retrieve", {"json": {"queries": ["a", "b" * (MAX_QUERY_CHARS + 1)]}}),
        (413, "POST", "/retrieve", {"content": b"[" * 64, "headers": {**JSON, "content-length": str(64 << 20)}}),
        (404, "GET", "/no/such/route", {}),
        (405, "GET", "/retrieve", {}),
        (405, "DELETE", "/health", {}),
    ]
    for status, method, path, kwargs in cases:
        assert_clear_error(client.request(method, path, **kwargs), status)
    # Odd but well-formed queries are searched, not refused: empty, as long as allowed, a lone surrogate.
    for body in [{"queries": [""]}, {"queries": ["capital " * (MAX_QUERY_CHARS // 8)]}, b'{"queries": ["\\ud800"]}']:
        sent = {"content": body, "headers": JSON} if isinstance(body, bytes) else {"json": body}
        reply = client.post("/retrieve", **sent)
        assert reply.status_code == 200 and len(reply.json()["results"]) == 1
    _retriever_up(client)


def test_fuzzed_requests_never_break_the_retriever(retriever):
    app, client = retriever
    ops = _operations(app)
    assert {(m, p) for m, p, _ in ops} >= {("POST", "/retrieve"), ("GET", "/health")}
    fuzz(client, requests(ops, [], ("capital", "founded", "<search>capital</search>")), 150)
    _retriever_up(client)
