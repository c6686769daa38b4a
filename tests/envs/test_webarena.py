"""WebArena: actions, AX tree rendering, evaluators, task files, the env in Chromium, the HTTP server, the expert."""

from __future__ import annotations

import functools
import http.server
import json
import re
import socket
import threading
import time
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.testclient import TestClient

from envs.webarena import taskgen, tasks
from envs.webarena.actions import Action, ActionError, extract_action, parse_action
from envs.webarena.axtree import render
from envs.webarena.browser import BrowserSession
from envs.webarena.env import WebArenaEnv
from envs.webarena.evaluators import (
    Judge,
    JudgeError,
    JudgeMissing,
    Unsupported,
    must_include,
    program_html,
    string_match,
    url_match,
)
from envs.webarena.expert import ExpertAgent
from envs.webarena.server import create_app
from loopback import serve_in_thread
from rllib_agentgym.envs.client import HTTPEnvClient, InProcessEnvClient
from rllib_agentgym.envs.specs.webarena import SPEC, parse_fenced_action

MAX_STEPS = 15
TASK_SET = tasks.default_set()


def _first(site: str, eval_type: str, split: str = "train", skip: int = 0) -> int:
    ids = [
        i
        for i in TASK_SET.split_ids(split, with_judge=False)
        if TASK_SET.category(i) == site and TASK_SET.tasks[i]["eval"]["eval_types"] == [eval_type]
    ]
    return ids[skip]


def _element(observation: str, role: str, name: str) -> str:
    m = re.search(rf"\[(\d+)\] {role} '{re.escape(name)}'", observation)
    assert m, f"no {role} '{name}' in:\n{observation}"
    return m.group(1)


def _chromium_processes() -> list[psutil.Process]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "chrom" in proc.name().lower() or "headless" in proc.name().lower():
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


# -- pure parts -------------------------------------------------------------


def test_parse_actions():
    assert parse_action("click [12]") == Action("click", element="12")
    assert parse_action("type [7] [green tea] [0]") == Action("type", element="7", text="green tea", enter=False)
    assert parse_action("type [7] [a [bracketed] text]") == Action("type", element="7", text="a [bracketed] text")
    assert parse_action("press [ctrl+a]").text == "Control+a"
    assert parse_action("scroll [direction=down]").text == "down"
    assert parse_action("tab_focus [2]").index == 2
    assert parse_action("goto [http://x.org/a?b=1]").text == "http://x.org/a?b=1"
    assert parse_action("stop [$12.99]").text == "$12.99"
    assert parse_action("stop").text == ""
    assert parse_action("go_back").kind == "go_back"
    text = "The cart link is [14]. In summary, the next action I will perform is ```click [14]```"
    assert extract_action(text) == "click [14]" and parse_action(text).element == "14"
    for bad in ("click 12", "type [3]", "scroll [left]", "new_tab [1]", "fly [2]", "", "press []"):
        with pytest.raises(ActionError):
            parse_action(bad)


def test_spec_parses_last_fenced_block():
    text = "First ```click [1]``` then, in summary, the next action I will perform is ```type [5] [shoes] [1]```"
    assert parse_fenced_action(text) == "type [5] [shoes] [1]"
    assert parse_fenced_action("Action: click [1]") is None
    assert SPEC.load_env_class() is WebArenaEnv
    assert SPEC.action_for_server("no block here") == ("no block here", False)
    assert set(SPEC.split_ids("test")) <= set(range(tasks.num_tasks()))


def test_render_ax_tree():
    def node(nid, role, name="", children=(), parent=None, backend=None, **extra):
        return {
            "nodeId": nid,
            "role": {"value": role},
            "name": {"value": name},
            "childIds": list(children),
            "parentId": parent,
            "backendDOMNodeId": backend,
            **extra,
        }

    nodes = [
        node(
            "1",
            "RootWebArea",
            "Shop",
            ["2", "5"],
            backend=1,
            properties=[{"name": "focused", "value": {"value": True}}, {"name": "focusable", "value": {"value": True}}],
        ),
        node("2", "generic", "", ["3"], "1", 2),
        node("3", "link", "Home", ["4"], "2", 3),
        node("4", "StaticText", "Home", [], "3", 4),
        node("5", "textbox", "Search", ["6"], "1", 5, value={"value": "tea"}),
        node("6", "StaticText", "tea", [], "5", 6),
    ]
    snap = render(nodes)
    assert snap.lines == [
        "[1] RootWebArea 'Shop' focused: True",
        "\t[3] link 'Home'",
        "\t[5] textbox 'Search' value: 'tea'",
    ]
    assert snap.backend_ids("4") == [4, 3, 2, 1]
    assert snap.root_name == "Shop"


def test_string_and_url_evaluators():
    task = {"intent": "q", "eval": {"reference_answers": {"exact_match": "Pending"}}}
    assert string_match(task, "'pending'", None).score == 1.0
    assert string_match(task, "Pending order", None).score == 0.0
    task["eval"]["reference_answers"] = {"must_include": ["12.99"]}
    assert string_match(task, "It costs $12.99.", None).score == 1.0
    assert string_match(task, "It costs $13.99.", None).score == 0.0
    assert must_include("3", "3 reviews", tokenize=True) == 1.0
    assert must_include("3", "13 reviews", tokenize=True) == 0.0
    ref = {"eval": {"reference_url": "http://h:1/category/3?sort=price_asc |OR| http://h:1/cart"}}
    assert url_match(ref, "http://h:1/category/3?sort=price_asc&page=1").score == 1.0
    assert url_match(ref, "http://h:1/cart/").score == 1.0
    assert url_match(ref, "http://h:1/category/3?sort=name").score == 0.0
    fuzzy = {"intent": "q", "eval": {"reference_answers": {"fuzzy_match": ["a calm lake"]}}}
    with pytest.raises(JudgeMissing):
        string_match(fuzzy, "a lake", None)
    na = {"intent": "q", "eval": {"reference_answers": {"fuzzy_match": "N/A"}, "string_note": "not sold"}}
    assert string_match(na, "n/a", None).score == 1.0
    assert string_match(na, "$3", None).score == 0.0


@pytest.fixture(scope="module")
def judge_url():
    """A rule-based OpenAI-compatible grader on loopback: 'correct' when every reference word is in the answer."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        prompt = (await request.json())["messages"][-1]["content"]
        ref = re.search(r"Reference answer: (.*)", prompt).group(1).lower()
        answer = re.search(r"Student answer: (.*)", prompt).group(1).lower()
        verdict = "correct" if all(w in answer for w in re.findall(r"\w+", ref)) else "incorrect"
        return {"choices": [{"message": {"role": "assistant", "content": f"Verdict: {verdict}"}}]}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    server.should_exit = True
    thread.join(5)


def test_fuzzy_match_through_judge_endpoint(judge_url):
    judge = Judge(url=judge_url)
    task = {"intent": "Describe it", "eval": {"reference_answers": {"fuzzy_match": ["sturdy pick for gifting"]}}}
    assert string_match(task, "It is a sturdy pick for gifting.", judge).score == 1.0
    assert string_match(task, "It is cheap.", judge).score == 0.0
    with pytest.raises(JudgeError, match="failed"):
        string_match(task, "It is cheap.", Judge(url=judge_url + "/no/such/route"))


def test_task_files():
    assert len(TASK_SET) >= 150
    train, test = set(TASK_SET.splits["train"]), set(TASK_SET.splits["test"])
    assert train and test and not train & test and len(train | test) == len(TASK_SET)
    kinds = {(TASK_SET.category(i), t["eval"]["eval_types"][0]) for i, t in enumerate(TASK_SET.tasks)}
    for site in ("shopping", "reddit", "gitlab"):
        assert {(site, k) for k in ("string_match", "url_match", "program_html")} <= kinds
    needs_judge = [i for i in range(len(TASK_SET)) if tasks.needs_judge(TASK_SET.tasks[i])]
    assert needs_judge and set(needs_judge).isdisjoint(TASK_SET.split_ids("train", with_judge=False))
    assert TASK_SET.skipped_ids("train", with_judge=False) + TASK_SET.skipped_ids("test", with_judge=False)
    assert TASK_SET.skipped_ids("train", with_judge=True) == []
    with pytest.raises(KeyError):
        TASK_SET.split_ids("dev")
    # The shipped files are exactly what the generator writes from the seed data.
    for name, text in taskgen.generate().items():
        assert (tasks.EMBEDDED_TASKS / name).read_text() == text, (
            f"{name} is stale: run python -m envs.webarena.taskgen"
        )


def test_task_set_from_one_json_list(tmp_path, monkeypatch):
    raw = [dict(TASK_SET.tasks[3], task_id=7), dict(TASK_SET.tasks[0], task_id=5)]
    path = tmp_path / "test.raw.json"
    path.write_text(json.dumps(raw))
    own = tasks.TaskSet(path)
    assert [t["task_id"] for t in own.tasks] == [5, 7] and own.split_ids("test", with_judge=False) == [0, 1]
    monkeypatch.setenv("SHOPPING", "http://shop.example:7770/")
    urls = tasks.site_urls(embedded={"shopping": "http://127.0.0.1:1", "reddit": "http://127.0.0.1:2"})
    assert urls["__SHOPPING__"] == "http://shop.example:7770" and urls["__REDDIT__"] == "http://127.0.0.1:2"
    assert tasks.resolve({"u": ["__SHOPPING__/cart"]}, urls) == {"u": ["http://shop.example:7770/cart"]}
    with pytest.raises(ValueError, match="MAP"):
        tasks.resolve("__MAP__/x", urls)


def _config(task_id: int, **eval_: Any) -> dict[str, Any]:
    """A minimal WebArena config file's task."""
    return {"task_id": task_id, "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": f"task {task_id}",
            "require_reset": False, "eval": {"eval_types": ["url_match"], "reference_url": "__SHOPPING__", **eval_}}


def test_task_set_from_webarena_config_files_folder(tmp_path):
    """WebArena's config_files/: test.raw.json and test.json (lists) beside 0.json ... N.json."""
    configs = [_config(i) for i in range(3)]
    for name in ("test.raw.json", "test.json"):
        (tmp_path / name).write_text(json.dumps(configs))
    for config in configs:
        (tmp_path / f"{config['task_id']}.json").write_text(json.dumps(config))
    own = tasks.TaskSet(tmp_path)
    assert [t["task_id"] for t in own.tasks] == [0, 1, 2] and own.split_ids("test") == [0, 1, 2]
    # Without per-task files, the list is the task set; two lists holding the same tasks clash.
    for config in configs:
        (tmp_path / f"{config['task_id']}.json").unlink()
    with pytest.raises(ValueError, match="duplicate task_id"):
        tasks.TaskSet(tmp_path)
    (tmp_path / "test.json").unlink()
    assert [t["task_id"] for t in tasks.TaskSet(tmp_path).tasks] == [0, 1, 2]


def test_func_helper_tasks_are_skipped_with_a_reason(tmp_path):
    func = _config(1, eval_types=["program_html"], program_html=[
        {"url": "func:reddit_get_post_url('__last_url__')", "locator": "document.querySelector('h1').innerText",
         "required_contents": {"must_include": ["x"]}}])
    fuzzy = _config(2, eval_types=["string_match"], reference_answers={"fuzzy_match": ["a calm lake"]})
    (tmp_path / "tasks.json").write_text(json.dumps([_config(0), func, fuzzy]))
    own = tasks.TaskSet(tmp_path)
    assert own.split_ids("train", with_judge=True) == [0, 2] and own.skipped_ids("train", with_judge=True) == [1]
    assert own.skip_reasons("train", with_judge=False) == {1: tasks.USES_FUNC, 2: tasks.NEEDS_JUDGE}
    assert tasks.skip_reason(_config(3, eval_types=["program_html"], program_html=[
        {"url": "last", "locator": "func:get_query_text(__page__, '.x')", "required_contents": ["x"]}]), True)
    with pytest.raises(Unsupported, match="func: helpers"):
        program_html(func, page=None)


def test_judge_url_env_option_counts_as_a_configured_judge(monkeypatch):
    monkeypatch.delenv("WEBARENA_JUDGE_URL", raising=False)
    fuzzy = {i for i in range(len(TASK_SET)) if tasks.needs_judge(TASK_SET.tasks[i])} & set(TASK_SET.splits["train"])
    plain = SPEC.task_ids("train")
    with_judge = SPEC.task_ids("train", env_options={"judge_url": "http://127.0.0.1:9", "max_steps": 3})
    assert fuzzy and fuzzy.isdisjoint(plain) and fuzzy <= set(with_judge)
    assert set(with_judge) - set(plain) == fuzzy
    assert SPEC.task_ids("train", env_options={"judge_url": None}) == plain


def test_expert_states_only_answers_it_reads_on_the_page():
    env = SimpleNamespace(task={
        "intent": "What is the price?", "start_url": "http://shop",
        "eval": {"eval_types": ["string_match"], "reference_answers": {"must_include": ["21.75", "Tea"]}}})

    assert ExpertAgent(env).act("[5] StaticText 'Organic Green TEA' [6] StaticText '$21.75'")[1] == "stop [21.75 Tea]"
    thought, action = ExpertAgent(env).act("[5] StaticText 'Organic Green Tea' [6] StaticText '$19.99'")
    assert action == "stop []" and "not on this page" in thought


# -- in Chromium ------------------------------------------------------------


@pytest.fixture
def local_page(tmp_path):
    """A small page served on loopback: its URL."""
    (tmp_path / "page.html").write_text(
        "<html><body><h1 id='title'>Order #7</h1><p id='status'>  'Shipped' </p>"
        "<ul id='items'><li>Green tea x2</li><li>Kettle x1</li></ul></body></html>"
    )
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    server.shutdown()
    server.server_close()


def test_program_html_reads_a_page_in_chromium(local_page):
    def check(*targets: dict[str, Any]):
        return program_html({"eval": {"program_html": list(targets)}}, browser)

    status = "document.querySelector('#status').innerText"
    items = "document.querySelector('#items').innerText"
    browser = BrowserSession()
    try:
        browser.start([])
        browser.goto(local_page)
        # exact_match after WebArena's cleaning (strip, quotes, case), on the agent's tab and on a scratch tab.
        assert check({"url": "last", "locator": status, "required_contents": {"exact_match": "shipped"}}).score == 1.0
        assert check({"url": local_page, "locator": status, "required_contents": {"exact_match": "Ship"}}).score == 0.0
        # must_include: every entry must be there; " |OR| " separates alternatives within an entry.
        either = {"must_include": ["Kettle x1", "Green tea x3 |OR| Green tea x2"]}
        assert check({"url": local_page, "locator": items, "required_contents": either}).score == 1.0
        neither = {"must_include": ["Kettle x1", "Green tea x3 |OR| Black tea x2"]}
        assert check({"url": "last", "locator": items, "required_contents": neither}).score == 0.0
        # An empty locator reads the page's HTML; WebArena's older list format is a must_include.
        assert check({"url": "last", "locator": "", "required_contents": ["<h1 id=\"title\">Order #7</h1>"]}).score == 1.0
        # A locator that throws (no such element) reads as "" and says so.
        missing = check({"url": "last", "locator": "document.querySelector('#nope').innerText",
                         "required_contents": {"must_include": ["Shipped"]}})
        assert missing.score == 0.0 and "locator failed" in missing.details[0]
        assert browser.page.url == local_page  # scratch tabs are gone again
    finally:
        browser.close()


def test_browser_actions_hover_press_history_and_tabs():
    env = WebArenaEnv(max_obs_tokens=400)
    try:
        home = env.reset(_first("shopping", "url_match"))
        home_url = re.search(r"URL: (\S+)", home).group(1)
        # hover: the pointer is over the link (what a CSS :hover menu would react to).
        link = _element(home, "link", "My Orders")
        assert not env.step(f"hover [{link}]").info["invalid_action"]
        hovered = "Array.from(document.querySelectorAll(':hover')).pop().textContent"
        assert env._browser.evaluate(None, hovered) == "My Orders"
        # press: Enter submits the search typed without Enter; Tab moves the focus on.
        typed = env.step(f"type [{_element(home, 'textbox', 'Search')}] [tea] [0]").observation
        assert "textbox 'Search' value: 'tea' focused: True" in typed and f"URL: {home_url}\n" in typed
        results = env.step("press [Enter]").observation
        search_url = f"{home_url.rstrip('/')}/search?q=tea"
        assert f"URL: {search_url}\n" in results and "link 'Organic Green Tea 100 Bags'" in results
        focused = [line for line in env.step("press [Tab]").observation.splitlines() if "focused: True" in line]
        assert any("link 'Home' focused: True" in line for line in focused)
        # go_back / go_forward through the history.
        assert f"URL: {home_url}\n" in env.step("go_back").observation
        assert f"URL: {search_url}\n" in env.step("go_forward").observation
        # new_tab + goto, then tab_focus between the two tabs.
        env.step("new_tab")
        cart = env.step(f"goto [{home_url.rstrip('/')}/cart]").observation
        assert "Tab 1 (current)" in cart and "You have no items in your shopping cart." in cart
        first = env.step("tab_focus [0]").observation
        assert first.startswith("OBSERVATION:\nTab 0 (current): Search results") and f"URL: {search_url}\n" in first
        assert "Tab 1: " in first and "Cart" in first.splitlines()[2]
        assert f"URL: {home_url.rstrip('/')}/cart\n" in env.step("tab_focus [1]").observation
    finally:
        env.close()


def _play(env, agent_env=None) -> dict[str, Any]:
    """Run the expert on the env's current task; returns the final info."""
    agent = ExpertAgent(agent_env or env)
    obs = env.observation()
    for _ in range(MAX_STEPS):
        _, action = agent.act(obs)
        result = env.step(action)
        assert not result.info["invalid_action"], (action, result.observation)
        if result.done:
            return result.info
        obs = result.observation
    raise AssertionError("the expert did not stop")


def test_env_in_process_invalid_actions_and_evaluators(judge_url):
    env = WebArenaEnv(judge_url=judge_url)
    try:
        idx = _first("shopping", "program_html")
        obs = env.reset(idx)
        assert obs.startswith("OBSERVATION:\nTab 0 (current):") and f"OBJECTIVE: {env.task['intent']}" in obs
        for bad, why in (
            ("click [999999]", "no element with id [999999]"),
            ("jump [3]", "unknown action 'jump'"),
            ("goto [file:///etc/passwd]", "http(s) URLs only"),
            ("tab_focus [4]", "there is no tab 4"),
            (f"type [{_element(obs, 'link', 'Home')}] [x]", "not a text field"),
        ):
            result = env.step(bad)
            assert result.info["invalid_action"] and not result.done and why in result.observation, bad
            assert result.observation.startswith("INVALID ACTION:")
        # program_html: doing nothing fails, the expert's changes pass.
        result = env.step("stop []")
        assert result.done and result.reward == 0.0 and result.info["success"] is False
        assert env.step("click [1]").done
        env.reset(idx)
        info = _play(env)
        assert info["success"] and info["score"] == 1.0
        # fuzzy_match through the judge endpoint, and tabs.
        fuzzy = next(i for i, t in enumerate(TASK_SET.tasks) if tasks.needs_judge(t))
        env.reset(fuzzy)
        assert "Tab 1 (current)" in env.step("new_tab").observation
        assert "Tab 0 (current)" in env.step("close_tab").observation
        assert env.step("stop [I do not know]").reward == 0.0
        env.reset(fuzzy)
        assert _play(env)["success"]
    finally:
        env.close()


def test_fuzzy_task_is_skipped_without_judge(monkeypatch):
    monkeypatch.delenv("WEBARENA_JUDGE_URL", raising=False)
    env = WebArenaEnv(max_obs_tokens=60)
    try:
        fuzzy = next(i for i, t in enumerate(TASK_SET.tasks) if tasks.needs_judge(t))
        obs = env.reset(fuzzy)
        assert "more lines cut to fit 60 tokens" in obs
        result = env.step("stop [anything]")
        assert result.done and result.reward == 0.0 and result.info["skipped"] is True
        assert not result.info["success"]
    finally:
        env.close()


def test_viewport_only_observation_follows_scrolling():
    env = WebArenaEnv(viewport_only=True)
    try:
        first = env.reset(_first("reddit", "url_match")).split("URL:")[0]  # the front page: longer than a screen
        down = env.step("scroll [down]").observation.split("URL:")[0]
        up = env.step("scroll [up]").observation.split("URL:")[0]
        assert down != first and up == first
        assert "textbox 'Search query'" in first and "textbox 'Search query'" not in down
    finally:
        env.close()


def test_concurrent_sessions_in_threads():
    """Two sessions act at the same time from two threads (as the server's thread pool does)."""
    jobs = [_first("gitlab", "program_html"), _first("reddit", "program_html")]
    envs = [WebArenaEnv() for _ in jobs]
    results: dict[int, dict[str, Any]] = {}

    def run(n: int) -> None:
        envs[n].reset(jobs[n])
        results[n] = _play(envs[n])

    try:
        threads = [threading.Thread(target=run, args=(n,)) for n in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert [results[n]["success"] for n in range(len(jobs))] == [True, True]
    finally:
        for env in envs:
            env.close()


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as c:
        yield c


class _HttpEnv:
    """The env contract over HTTP, plus `.task` (GET /task) for the expert."""

    class _Result:
        def __init__(self, body: dict[str, Any]):
            self.observation, self.reward, self.done, self.info = (
                body["observation"],
                body["reward"],
                body["done"],
                body["info"],
            )

    def __init__(self, client: TestClient, **options: Any):
        self.client = client
        self.id = client.post("/create", json=options).json()["id"]
        self._obs = ""

    def reset(self, data_idx: int) -> str:
        reply = self.client.post("/reset", json={"id": self.id, "data_idx": data_idx})
        assert reply.status_code == 200, reply.text
        self._obs = reply.json()["observation"]
        self.task = self.client.get("/task", params={"id": self.id}).json()
        return self._obs

    def observation(self) -> str:
        return self._obs

    def step(self, action: str) -> _Result:
        reply = self.client.post("/step", json={"id": self.id, "action": action})
        assert reply.status_code == 200, reply.text
        result = self._Result(reply.json())
        self._obs = result.observation
        return result

    def close(self) -> None:
        assert self.client.post("/close", json={"id": self.id}).json() is True


def test_expert_solves_each_task_type_on_each_site_over_http(client):
    env = _HttpEnv(client)
    try:
        for site in ("shopping", "reddit", "gitlab"):
            for eval_type in ("string_match", "url_match", "program_html"):
                idx = _first(site, eval_type, split="test")
                env.reset(idx)
                info = _play(env)
                assert info["success"], (site, eval_type, TASK_SET.tasks[idx]["intent"], info)
    finally:
        env.close()


def test_http_errors_evaluate_and_skipped_routes(client):
    assert client.post("/step", json={"id": 424242, "action": "go_back"}).status_code == 404
    assert client.get("/tasks", params={"split": "test"}).json()["ids"] == tasks.split_ids("test")
    assert client.get("/skipped", params={"split": "nope"}).status_code == 404
    env = _HttpEnv(client, max_steps=2)
    try:
        assert client.post("/reset", json={"id": env.id, "data_idx": 10**6}).status_code == 422
        env.reset(_first("gitlab", "string_match"))
        verdict = client.get("/evaluate", params={"id": env.id}).json()
        assert verdict["reward"] == 0.0 and verdict["success"] is False and verdict["answer"] == ""
        env.reset(_first("reddit", "url_match"))
        assert not env.step("scroll [down]").done
        last = env.step("scroll [up]")  # max_steps reached: graded at the horizon
        assert last.done and last.info["success"] is False
    finally:
        env.close()


def test_skipped_route_lists_the_fuzzy_task_an_episode_skipped(client, monkeypatch):
    monkeypatch.delenv("WEBARENA_JUDGE_URL", raising=False)
    fuzzy = next(i for i in TASK_SET.splits["train"] if tasks.needs_judge(TASK_SET.tasks[i]))
    env = _HttpEnv(client)
    try:
        env.reset(fuzzy)
        info = env.step("stop [a calm lake]").info
        assert info["skipped"] is True and not info["success"] and "needs an LLM judge" in info["eval_details"][0]
    finally:
        env.close()
    listed = client.get("/skipped", params={"split": "train"}).json()
    assert fuzzy in listed["ids"] and listed["ids"] == TASK_SET.skipped_ids("train", with_judge=False)
    assert listed["count"] == len(listed["ids"]) and listed["reasons"][str(fuzzy)] == tasks.NEEDS_JUDGE
    assert fuzzy not in client.get("/tasks", params={"split": "train"}).json()["ids"]


def _solve_without_stop(session, data_idx: int) -> None:
    """Play the expert's plan for the task, all but its final `stop`."""
    obs = session.reset(data_idx)
    agent = ExpertAgent(SimpleNamespace(task=tasks.resolve(TASK_SET.task(data_idx), _embedded_urls())))
    while True:
        _, action = agent.act(obs)
        if action.startswith("stop"):
            return
        result = session.step(action)
        assert not result.done and not result.info["invalid_action"], (action, result.observation)
        obs = result.observation


def _embedded_urls() -> dict[str, str]:
    from envs.webarena.sites import embedded_sites

    return tasks.site_urls(None, embedded_sites().urls)


def test_state_change_without_stop_is_graded_at_the_clients_horizon():
    """Both clients' evaluate(): the cart task solved without `stop` earns 1; a server without /evaluate gives None."""
    from envs.textcraft.server import create_app as textcraft_app

    cart = _first("shopping", "program_html")  # "Add N units of X to my shopping cart."
    inproc = InProcessEnvClient(WebArenaEnv)
    try:
        inproc.reset(cart)
        assert inproc.evaluate()["reward"] == 0.0  # nothing done yet
        _solve_without_stop(inproc, cart)
        grade = inproc.evaluate()
        assert grade["reward"] == 1.0 and grade["success"] is True and grade["answer"] == ""
    finally:
        inproc.close()
    with serve_in_thread(create_app()) as url:
        remote = HTTPEnvClient(url)
        try:
            _solve_without_stop(remote, cart)
            assert remote.evaluate()["reward"] == 1.0
            assert remote.evaluate()["success"] is True  # idempotent: the episode is over, its grade stays
        finally:
            remote.close()
    with serve_in_thread(textcraft_app()) as url:
        other = HTTPEnvClient(url)
        try:
            other.reset(0)
            assert other.evaluate() is None
        finally:
            other.close()


def test_parallel_sessions_are_isolated_and_chromium_exits_on_close(client):
    cart = _first("shopping", "program_html")  # "Add N units of X to my shopping cart."
    a, b = _HttpEnv(client), _HttpEnv(client)
    try:
        a.reset(cart)
        b.reset(cart)
        assert _play(a)["success"]
        assert "My Cart (0)" in b.observation()
        cart_link = _element(b.observation(), "link", "My Cart (0)")
        b_cart = b.step(f"click [{cart_link}]").observation
        assert "You have no items in your shopping cart." in b_cart
        assert b.step("stop []").reward == 0.0
        assert _chromium_processes()
        a.reset(cart)  # reset restores the session's data
        assert "My Cart (0)" in a.observation()
    finally:
        a.close()
        b.close()
    deadline = time.monotonic() + 10
    while _chromium_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _chromium_processes() == []


@pytest.mark.slow
def test_expert_solves_every_task():
    env = WebArenaEnv(judge_url=None)
    failed = []
    try:
        for idx in TASK_SET.split_ids("train", with_judge=False) + TASK_SET.split_ids("test", with_judge=False):
            env.reset(idx)
            if not _play(env)["success"]:
                failed.append(idx)
    finally:
        env.close()
    assert failed == []
