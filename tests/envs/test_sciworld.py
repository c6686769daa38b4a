"""SciWorld: task list and splits, the real ScienceWorld engine in-process and over HTTP, JVM hygiene.

Each env owns a JVM (~1 s to start), so the tests share JVMs where they can;
the one-task-per-category expert sweep is marked slow.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient

from envs.sciworld import tasks
from envs.sciworld.env import CHECK_VALID_ACTIONS, EPISODE_OVER, SciWorldEnv
from envs.sciworld.expert import ExpertAgent, list_on_arrival_path, task_text
from envs.sciworld.server import create_app
from loopback import serve_module

# Short gold paths from three categories; use-thermometer pays partial credit on the way.
EXPERT_SAMPLE = ("4-2", "7-2", "2-1")


def _first_id(task_id: str, split: str = "test") -> int:
    return next(t.data_idx for t in tasks.all_tasks() if t.task_id == task_id and t.split == split)


def _java_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.name().startswith("java")}


def _wait_gone(pids: set[int], timeout_s: float = 10.0) -> set[int]:
    """The pids among `pids` still running after up to `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE}
        time.sleep(0.05)
    return alive


def _engine_independent(observations: list[str]) -> list[list[str]]:
    """Observations as engine-independent text: readings blanked, lines sorted.

    Two ScienceWorld engines agree on what a room holds but not on everything
    else: heat transfer depends on what the JVM loaded before (the same task
    replayed in one JVM reads 56 then 52 degrees), and so does the order in
    which a container lists its objects (three wood cups came back in another
    order in CI). So readings are blanked, and each observation's lines, and
    the comma-separated items within a line, are sorted; every item must still
    match exactly.
    """
    masked = [re.sub(r"temperature of -?\d+ degrees", "temperature of N degrees", o) for o in observations]
    return [sorted(", ".join(sorted(line.split(", "))) for line in o.split("\n")) for o in masked]


def _play_expert(env: SciWorldEnv, data_idx: int) -> tuple[list[str], list[str], list[float], dict]:
    """Reset, replay the gold path; (actions, observations, rewards, last info)."""
    observations = [env.reset(data_idx)]
    agent = ExpertAgent(env)
    rewards, info = [], {}
    for _ in agent.actions:
        _, action = agent.act(observations[-1])
        result = env.step(action)
        assert not result.info["invalid_action"], (action, result.observation)
        observations.append(result.observation)
        rewards.append(result.reward)
        info = result.info
        if result.done:
            break
    return agent.actions, observations, rewards, info


@pytest.fixture(scope="module")
def env():
    session = SciWorldEnv()
    yield session
    session.close()


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as test_client:
        yield test_client


# -- task list, splits, categories (no JVM) ------------------------------------------


def test_task_list_follows_agentgym_order_without_excluded_groups():
    flat = tasks.all_tasks()
    assert (
        len(flat)
        == tasks.num_tasks()
        == sum(e["max_variations"] for e in tasks.engine_table() if e["task_id"] not in tasks.EXCLUDED_TASK_IDS)
    )
    assert [t.data_idx for t in flat] == list(range(len(flat)))
    assert not {t.task_id for t in flat} & tasks.EXCLUDED_TASK_IDS
    engine_order = [e["task_id"] for e in tasks.engine_table() if e["task_id"] not in tasks.EXCLUDED_TASK_IDS]
    assert list(dict.fromkeys(t.task_id for t in flat)) == engine_order  # tasks in engine order, each once
    assert (flat[0].task_id, flat[0].task_name, flat[0].variation) == ("1-1", "boil", 0)
    assert (flat[30].task_id, flat[30].variation) == ("1-2", 0)  # boil has 30 variations
    with pytest.raises(IndexError):
        tasks.task(-1)
    with pytest.raises(IndexError):
        tasks.task(len(flat))


def test_splits_are_the_engines_and_disjoint():
    ids = {split: set(tasks.split_ids(split)) for split in tasks.SPLITS}
    assert not ids["train"] & ids["dev"] and not ids["train"] & ids["test"] and not ids["dev"] & ids["test"]
    assert set().union(*ids.values()) == set(range(tasks.num_tasks()))
    for entry in tasks.engine_table():
        if entry["task_id"] in tasks.EXCLUDED_TASK_IDS:
            continue
        for split in tasks.SPLITS:
            mine = sorted(t.variation for t in tasks.all_tasks() if t.task_id == entry["task_id"] and t.data_idx in ids[split])
            assert mine == sorted(entry[split]), (entry["task_id"], split)
    with pytest.raises(KeyError):
        tasks.split_ids("validation")


def test_categories_cover_the_paper_columns():
    assert tasks.category(0) == "Boil"
    assert tasks.category(_first_id("3-3")) == "Test-Cond"
    assert tasks.category(_first_id("2-2")) == "Measure"
    assert tasks.category(_first_id("6-2")) == "Chem-Mix"
    assert {tasks.category(i) for i in range(tasks.num_tasks())} == set(tasks.CATEGORIES.values())


@pytest.mark.slow
def test_stored_table_is_what_the_engine_says(tmp_path):
    tasks.write_table(tmp_path / "tasks.json")
    assert (tmp_path / "tasks.json").read_text() == tasks.TABLE_PATH.read_text()


def test_listing_tasks_starts_no_jvm():
    before = _java_children()
    tasks.split_ids("train")
    tasks.category(100)
    assert _java_children() == before


# -- in-process env -------------------------------------------------------------------


def test_reset_shows_task_and_look_around_and_reuses_the_jvm(env):
    obs = env.reset(0)
    assert obs.startswith("Task Description:\nYour task is to boil water.")
    assert "This room is called the" in obs
    pid = env.jvm_pid
    assert pid in _java_children()
    env.reset(_first_id("4-1"))
    assert env.jvm_pid == pid  # a new task is loaded into the same JVM
    assert env.task.task_id == "4-1"


def test_invalid_action_is_explained_and_costs_a_step(env):
    env.reset(0)
    bad = env.step("fly to the moon")
    assert bad.info["invalid_action"] is True and bad.reward == 0.0 and not bad.done
    assert bad.observation.startswith('Invalid action: "fly to the moon" matches no known action.')
    assert "open OBJ" in bad.observation and "picture" in bad.observation  # templates and objects in view
    good = env.step("open door to kitchen")
    assert good.info["invalid_action"] is False and good.observation == "The door is now open."


def test_check_valid_actions_lists_templates_without_the_engine_moving(env):
    env.reset(0)
    hint = env.step("check valid actions")
    assert not hint.info["invalid_action"] and hint.reward == 0.0
    assert "focus on OBJ" in hint.observation and "kitchen" in hint.observation
    assert env.observation() == hint.observation


def test_failed_task_ends_the_episode_with_clipped_reward(env):
    env.reset(0)  # boil: focusing on anything but the substance fails the task
    result = env.step("focus on picture")
    assert result.done and result.reward == 0.0
    assert result.info["score"] == -100 and result.info["task_failed"] and not result.info["success"]
    after = env.step("look around")
    assert after.observation == EPISODE_OVER and after.done and after.reward == 0.0


def test_gold_path_only_before_the_first_step(env):
    env.reset(_first_id("7-2"))
    env.step("look around")
    with pytest.raises(RuntimeError, match="right after reset"):
        env.gold_actions()


class _SimulatorWithoutEnumeration:
    """The engine's live simulator (py4j), counting the calls made to it, with its full
    valid-action enumeration (~0.3 s a call, what makes `scienceworld`'s own step slow)
    made to fail the test."""

    ENUMERATION = "getValidActionObjectCombinations"  # ...JSON and the other variants too

    def __init__(self, simulator):
        self._simulator = simulator
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str):
        if name.startswith(self.ENUMERATION):
            def refuse(*_args, **_kwargs):
                raise AssertionError(f"the full valid-action enumeration ({name}) was called")

            return refuse
        self.calls[name] += 1
        return getattr(self._simulator, name)


def test_steps_never_enumerate_every_valid_action(env, monkeypatch):
    env.reset(_first_id("4-2"))
    engine = env._engine
    simulator = _SimulatorWithoutEnumeration(engine._sim)
    monkeypatch.setattr(engine, "_sim", simulator)
    monkeypatch.setattr(engine._sw, "server", simulator)  # the `scienceworld` wrapper's own route to it
    for name in ("get_valid_action_object_combinations", "get_valid_action_object_combinations_with_templates"):
        monkeypatch.setattr(engine._sw, name, getattr(simulator, simulator.ENUMERATION))

    for action in ("open door to hallway", "go to hallway", "look around"):
        result = env.step(action)
        assert not result.info["invalid_action"] and result.observation != EPISODE_OVER, action
    assert "This room is called the hallway." in result.observation
    ordinary = dict(simulator.calls)
    assert ordinary.get("step") == 3 and not {"getPossibleActions", "getPossibleObjects"} & set(ordinary)

    # The observations that list actions use the two cheap queries: templates and objects in view.
    for action in (CHECK_VALID_ACTIONS, "fly to the moon"):
        simulator.calls.clear()
        result = env.step(action)
        assert "focus on OBJ" in result.observation and "Objects you can refer to here: " in result.observation
        assert simulator.calls["getPossibleActions"] == simulator.calls["getPossibleObjects"] == 1, action
    assert result.info["invalid_action"]

    # The trap is live: `scienceworld`'s own step enumerates, and is refused.
    with pytest.raises(AssertionError, match="full valid-action enumeration"):
        engine._sw.step("look around")


# -- expert: in-process and over HTTP ----------------------------------------------------


def test_expert_task_thoughts_restate_the_task(env):
    # (The gold path itself may differ between two loads in one JVM; the thought style does not touch it.)
    env.reset(_first_id("4-2", split="train"))
    restating = ExpertAgent(env, thoughts="task")
    thought, action = restating.act(env.observation())
    assert action == restating.actions[0]
    assert thought == "My task: " + task_text(env.observation())
    assert thought.startswith("My task: find a(n) non-living thing.") and "box in the" in thought
    with pytest.raises(ValueError, match="thoughts must be one of"):
        ExpertAgent(env, thoughts="verbose")
    with pytest.raises(ValueError, match="states no task"):
        task_text("This room is called the kitchen.")


def test_list_on_arrival_shows_the_names_the_next_action_uses(env):
    check = CHECK_VALID_ACTIONS
    assert list_on_arrival_path(["go to a", check, "go to b", "focus on c", "go to d"]) == [
        "go to a", check, "go to b", check, "focus on c", "go to d"]
    # Lifespan's gold path focuses on an animal outside, by a name no observation on it shows.
    env.reset(_first_id("7-1"))
    plain = ExpertAgent(env).actions
    focused = next(a for a in plain if a.startswith("focus on ")).removeprefix("focus on ")
    listing = ExpertAgent(env, list_on_arrival=True)
    assert listing.actions == list_on_arrival_path(plain) != plain
    observation, result = env.observation(), None
    seen = [observation]
    for _ in listing.actions:
        _, action = listing.act(observation)
        if action.startswith("focus on "):
            assert focused not in "".join(seen[:-1])  # neither the task nor the move names it...
            assert focused in observation.split("Objects you can refer to here: ")[1].split(", ")  # ...the list does
        result = env.step(action)
        observation = result.observation
        seen.append(observation)
        if result.done:
            break
    assert result.info["success"]


def test_expert_succeeds_in_process_and_over_http_with_the_same_observations(client):
    sample = [_first_id(task_id) for task_id in EXPERT_SAMPLE]
    local = SciWorldEnv()
    try:
        played = [_play_expert(local, i) for i in sample]
    finally:
        local.close()

    env_id = client.post("/create").json()["id"]
    for data_idx, (actions, observations, rewards, info) in zip(sample, played):
        assert info["success"] and info["score"] == 100
        assert sum(rewards) == pytest.approx(1.0) and min(rewards) >= 0.0

        # The same actions give the same observations over HTTP.
        first = client.post("/reset", json={"id": env_id, "data_idx": data_idx}).json()["observation"]
        remote, total, body = [first], 0.0, {}
        for action in actions[: len(observations) - 1]:
            body = client.post("/step", json={"id": env_id, "action": action}).json()
            remote.append(body["observation"])
            total += body["reward"]
        assert _engine_independent(remote) == _engine_independent(observations)
        assert body["done"] and body["info"]["success"] and total == pytest.approx(1.0)

        # The server's own gold path solves the task too. It need not equal the local one:
        # where any of several objects will do (find-non-living-thing), the engine draws one.
        client.post("/reset", json={"id": env_id, "data_idx": data_idx})
        gold = client.get("/gold_actions", params={"id": env_id}).json()["actions"]
        assert gold and all(isinstance(a, str) for a in gold)
        for action in gold:
            body = client.post("/step", json={"id": env_id, "action": action}).json()
            assert not body["info"]["invalid_action"], (action, body["observation"])
            if body["done"]:
                break
        assert body["info"]["success"]
    assert any(0.0 < r < 1.0 for r in played[-1][2])  # use-thermometer pays partial credit
    assert client.post("/close", json={"id": env_id}).json() is True


def test_expert_through_the_framework_clients_sees_the_same_observations():
    """The sessions an env runner makes (SessionFactory): in-process, and HTTP to a launched server."""
    from rllib_agentgym.envs.client import HTTPEnvClient, InProcessEnvClient
    from rllib_agentgym.envs.registry import SessionFactory
    from rllib_agentgym.envs.specs.sciworld import SPEC

    data_idx = _first_id("4-2")  # Find: a 7-step gold path
    before = _java_children()
    launched = SessionFactory(SPEC, {"launch_server": True})
    server = launched._server
    clients = [SessionFactory(SPEC, {}).make(), launched.make()]
    assert [type(c) for c in clients] == [InProcessEnvClient, HTTPEnvClient]
    reference = SciWorldEnv()  # the expert asks its env for the gold path; the clients follow
    try:
        observations = {"reference": [reference.reset(data_idx)]}
        for client in clients:
            observations[type(client).__name__] = [client.reset(data_idx)]
        agent = ExpertAgent(reference)
        for _ in agent.actions:
            _, action = agent.act(observations["reference"][-1])
            expected = reference.step(action)
            observations["reference"].append(expected.observation)
            for client in clients:
                got = client.step(action)
                observations[type(client).__name__].append(got.observation)
                assert (got.reward, got.done, got.info["success"]) == (
                    expected.reward, expected.done, expected.info["success"]), (type(client).__name__, action)
            if expected.done:
                break
        assert expected.info["success"]
        started = _java_children() - before
        assert len(started) == 3  # one JVM each: the reference, the in-process client, the server's session
    finally:
        reference.close()
        for client in clients:
            client.close()
        launched.close()
    reference_view = _engine_independent(observations.pop("reference"))
    for name, seen in observations.items():
        assert _engine_independent(seen) == reference_view, name
    assert not server.alive()
    assert not _wait_gone(started)


def test_expert_conversations_are_successful_react_rows():
    """`rllib experts --env agentgym/sciworld` data: the gold path played as ReAct turns."""
    from rllib_agentgym.data.experts import expert_conversations
    from rllib_agentgym.envs.spec import parse_react_action
    from rllib_agentgym.envs.specs.sciworld import SPEC

    before = _java_children()
    rows = list(expert_conversations("agentgym/sciworld", "train", num=2, categories=["Find"]))
    assert _java_children() <= before  # the generator closed its env's JVM
    assert len(rows) == 2 and len({row["data_idx"] for row in rows}) == 2
    train = set(tasks.split_ids("train"))
    for row in rows:
        assert row["data_idx"] in train and row["category"] == "Find" and row["env"] == "sciworld"
        assert row["success"] is True and row["reward"] == pytest.approx(1.0)
        system, first, *turns = row["messages"]
        assert system == {"role": "system", "content": SPEC.instruction}
        assert first["role"] == "user" and first["content"].startswith("Task Description:\nYour task is to find")
        assert [m["role"] for m in turns] == ["assistant", "user"] * (len(turns) // 2) + ["assistant"]
        answers = [m["content"] for m in turns if m["role"] == "assistant"]
        actions = [parse_react_action(text) for text in answers]
        for number, (text, action) in enumerate(zip(answers, actions), 1):
            # The default thoughts walk the whole gold path: "Step i of N of the known solution: <action>."
            assert text == f"Thought: Step {number} of {len(answers)} of the known solution: {action}.\nAction: {action}"
        assert sum(a.startswith("focus on ") for a in actions) == 1  # a Find task: one focus, on the found thing
        assert all("No known action" not in m["content"] for m in turns if m["role"] == "user")


@pytest.mark.slow
def test_expert_solves_one_test_task_per_engine_task():
    env = SciWorldEnv()
    try:
        for task_id in tasks.CATEGORIES:
            _, _, rewards, info = _play_expert(env, _first_id(task_id))
            assert info["success"] and sum(rewards) == pytest.approx(1.0), task_id
    finally:
        env.close()


# -- HTTP errors and extras -----------------------------------------------------------


def test_unknown_or_closed_ids_answer_404_json(client):
    for method, route, kwargs in (
        ("post", "/step", {"json": {"id": 9999, "action": "look around"}}),
        ("post", "/reset", {"json": {"id": 9999, "data_idx": 0}}),
        ("post", "/close", {"json": {"id": 9999}}),
        ("get", "/observation", {"params": {"id": 9999}}),
        ("get", "/gold_actions", {"params": {"id": 9999}}),
    ):
        reply = getattr(client, method)(route, **kwargs)
        assert reply.status_code == 404 and "error" in reply.json(), route
    env_id = client.post("/create").json()["id"]
    assert client.post("/step", json={"id": env_id, "action": "look around"}).status_code == 409  # not reset
    bad = client.post("/reset", json={"id": env_id, "data_idx": tasks.num_tasks()})
    assert bad.status_code == 422 and "data_idx" in bad.json()["error"]
    assert client.post("/create", json={"no_such_option": 1}).status_code == 422
    assert client.post("/close", json={"id": env_id}).json() is True
    assert client.post("/close", json={"id": env_id}).status_code == 404


def test_http_extras_and_tasks(client):
    assert client.get("/tasks", params={"split": "dev"}).json()["ids"] == tasks.split_ids("dev")
    assert client.get("/tasks", params={"split": "nope"}).status_code == 404
    env_id = client.post("/create", json={"data_idx": _first_id("7-2")}).json()["id"]
    hint = client.get("/action_hint", params={"id": env_id}).json()
    assert "look around" in hint["possible_actions"] and hint["possible_objects"]
    assert "Sequential Subgoals" in client.get("/goals", params={"id": env_id}).json()["goals"]
    client.post("/step", json={"id": env_id, "action": "look around"})
    late = client.get("/gold_actions", params={"id": env_id})
    assert late.status_code == 409 and "right after reset" in late.json()["error"]
    client.post("/close", json={"id": env_id})


# -- JVM hygiene -------------------------------------------------------------------------


def test_closing_envs_leaves_no_jvm_behind(client):
    before = _java_children()
    envs = [SciWorldEnv() for _ in range(2)]
    for i, session in enumerate(envs):
        session.reset(i)
    env_id = client.post("/create", json={"data_idx": 0}).json()["id"]
    started = _java_children() - before
    assert {e.jvm_pid for e in envs} <= started and len(started) == 3  # one JVM per env, the HTTP one included
    for session in envs:
        session.close()
        session.close()  # idempotent
    client.post("/close", json={"id": env_id})
    assert not _wait_gone(started)
    assert _java_children() <= before
    assert all(e.jvm_pid is None for e in envs)


def test_closed_sessions_give_back_the_server_processs_file_descriptors():
    """Each session holds sockets and pipes to its JVM; closing it frees them (and the JVM)."""
    from rllib_agentgym.envs.client import LocalEnvServer

    server = LocalEnvServer("envs.sciworld")
    proc = psutil.Process(server.pid)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:

            def open_sessions(n: int) -> list[int]:
                ids = [http.post("/create", json={"data_idx": i}).json()["id"] for i in range(n)]
                for env_id in ids:
                    assert http.post("/step", json={"id": env_id, "action": "look around"}).status_code == 200
                return ids

            for env_id in open_sessions(1):  # warm-up: imports, the thread pool, the kept-alive connection
                http.post("/close", json={"id": env_id})
            baseline = proc.num_fds()
            ids = open_sessions(2)
            jvms = {p.pid for p in proc.children(recursive=True) if p.name().startswith("java")}
            assert len(jvms) == 2 and proc.num_fds() > baseline  # the count sees what sessions hold
            for env_id in ids:
                assert http.post("/close", json={"id": env_id}).json() is True
            assert http.get("/health").json()["sessions"] == 0
        assert not _wait_gone(jvms)
        assert proc.num_fds() <= baseline + 1  # one fd of slack: the client's socket may close late
    finally:
        server.stop()


def test_module_serves_on_a_free_port_and_stops_its_jvms():
    with serve_module("envs.sciworld", wait_s=60) as (url, proc):
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.get("/health").json()["env"] == "sciworld"
            created = http.post("/create", json={"data_idx": 0}).json()
            assert created["observation"].startswith("Task Description:")
        jvms = {p.pid for p in psutil.Process(proc.pid).children(recursive=True) if p.name().startswith("java")}
        assert len(jvms) == 1
    # the server's shutdown on SIGTERM closes every open session
    assert not _wait_gone(jvms)


# -- client spec -------------------------------------------------------------------------


def test_spec_instruction_and_action_parsing():
    from rllib_agentgym.envs.specs.sciworld import SPEC

    assert SPEC.load_env_class() is SciWorldEnv
    for needle in ("focus on OBJ", "go to LOC", "pour OBJ into OBJ", "check valid actions", "Thought:", "Action:"):
        assert needle in SPEC.instruction
    assert SPEC.action_for_server("Thought: the door is shut.\nAction: open door to kitchen") == ("open door to kitchen", True)
    assert SPEC.split_ids("test") == tasks.split_ids("test") and SPEC.category(0) == "Boil"
