"""TextCraft: recipe book, tasks, env actions, HTTP server and expert."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
from fastapi.testclient import TestClient

from envs.textcraft import tasks
from envs.textcraft.env import TextCraftEnv
from envs.textcraft.expert import ExpertAgent
from envs.textcraft.progress import progress, requirements
from envs.textcraft.recipes import load_recipe_book
from envs.textcraft.server import create_app
from loopback import serve_module

MAX_EXPERT_STEPS = 60


def _ids_per_depth(per_depth: int) -> list[int]:
    """The first `per_depth` test ids of every depth."""
    picked: dict[str, list[int]] = {}
    for i in tasks.split_ids("test"):
        picked.setdefault(tasks.category(i), []).append(i)
    return [i for ids in picked.values() for i in ids[:per_depth]]


def _run_expert(env) -> tuple[bool, list[str], list[float], list[float]]:
    """Play one reset task with the expert; (success, observations, rewards, progress)."""
    agent = ExpertAgent(env)
    obs, observations, rewards, reached = env.observation(), [], [], []
    for _ in range(MAX_EXPERT_STEPS):
        _, action = agent.act(obs)
        result = env.step(action)
        obs = result.observation
        observations.append(obs)
        rewards.append(result.reward)
        reached.append(result.info["progress"])
        assert not result.info["invalid_action"], (action, obs)
        if result.done:
            return bool(result.info["success"]), observations, rewards, reached
    return False, observations, rewards, reached


class _HttpEnv:
    """Just enough of the env contract over HTTP for the expert and `_run_expert`."""

    class _Result:
        def __init__(self, body: dict):
            self.observation, self.reward, self.done, self.info = body["observation"], body["reward"], body["done"], body["info"]

    def __init__(self, client: TestClient, data_idx: int):
        self.client = client
        created = client.post("/create", json={"data_idx": data_idx}).json()
        self.id = created["id"]
        self.first_observation = created["observation"]

    def observation(self) -> str:
        return self.client.get("/observation", params={"id": self.id}).json()

    def step(self, action: str) -> _HttpEnv._Result:
        reply = self.client.post("/step", json={"id": self.id, "action": action})
        assert reply.status_code == 200, reply.text
        return self._Result(reply.json())


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app()) as test_client:
        yield test_client


# -- recipe book and tasks ---------------------------------------------------


def test_goals_are_sorted_by_depth_with_clear_depths():
    book = load_recipe_book()
    keys = [(book.depth[g], g) for g in book.goals]
    assert keys == sorted(keys) and keys[0][0] == 1
    assert set(book.goals) == {i for i in book.recipes if i not in book.base}
    assert {tasks.category(i) for i in range(tasks.num_tasks())} == {"depth 1", "depth 2", "depth 3", "depth 4"}
    # Uncraftable items and the raw materials of storage cycles are base items.
    assert {"oak log", "string", "iron ingot", "gold ingot", "diamond", "wheat"} <= book.base
    assert {"iron block", "iron nugget", "oak planks", "stick"}.isdisjoint(book.base)
    assert book.depth["oak planks"] == 1 and book.depth["crafting table"] == 2 and book.depth["iron pickaxe"] == 2
    assert tasks.goal(tasks.num_tasks() + 7) == tasks.goal(7)  # data_idx % N, like AgentGym


def test_splits_are_disjoint_and_cover_every_task_and_depth():
    train, test = tasks.split_ids("train"), tasks.split_ids("test")
    assert set(train).isdisjoint(test)
    assert sorted(train + test) == list(range(tasks.num_tasks()))
    assert {tasks.category(i) for i in test} == {tasks.category(i) for i in train}
    with pytest.raises(KeyError):
        tasks.split_ids("dev")


def test_observation_is_deterministic_and_agentgym_shaped():
    for i in _ids_per_depth(2):
        task = tasks.build_task(i)
        obs = TextCraftEnv().reset(i)
        assert obs == TextCraftEnv().reset(i) == task.observation()
        head, goal_line = obs.split("\n\n")
        assert head.startswith("Crafting commands:\n") and goal_line == f"Goal: craft {task.goal}."
        lines = head.splitlines()[1:]
        assert len(lines) == len(set(lines)) <= len(task.tree) + 10
        assert {r.command() for r in task.tree} <= set(lines)
        assert all(line.startswith("craft ") and " using " in line for line in lines)
    assert "craft 4 oak planks using 1 oak log" in {r.command() for r in load_recipe_book().recipes["oak planks"]}


# -- env actions ---------------------------------------------------------------


def test_get_craft_inventory_and_goal_reward():
    env = TextCraftEnv()
    env.reset(tasks.goal_index("crafting table"))
    assert env.step("inventory").observation == "Inventory: You are not carrying anything."
    assert env.step("get 2 oak log").observation == "Got 2 oak log"
    assert env.step("craft 8 oak planks using 2 oak log").observation == "Crafted 8 oak planks"
    inventory = env.step("inventory")
    assert inventory.observation == "Inventory: [oak planks] (8)" and not inventory.info["invalid_action"]
    done = env.step("craft 1 crafting table using 4 oak planks")
    assert (done.observation, done.reward, done.done, done.info["success"]) == ("Crafted 1 crafting table", 1.0, True, True)
    assert env.inventory == {"oak planks": 4, "crafting table": 1}
    after = env.step("inventory")
    assert after.done and after.reward == 0.0 and "already crafted" in after.observation


@pytest.mark.parametrize(
    "action, message",
    [
        ("dance", "Invalid action: 'dance'. Valid actions: get N item, craft N item using"),
        ("get 1 oak planks", "Could not find oak planks. It cannot be fetched; craft it instead."),
        ("get 1 unobtainium", "Could not find unobtainium. There is no such base item."),
        ("get 0 oak log", "Could not get 0 oak log"),
        ("craft 4 oak planks using oak log", "Could not execute craft 4 oak planks using oak log: wrong ingredient format"),
        ("craft 1 unobtainium using 1 oak log", "Could not execute craft 1 unobtainium using 1 oak log: unobtainium is not an item"),
        ("craft 4 oak planks using 1 stone", "Could not execute craft 4 oak planks using 1 stone: no recipe makes oak planks"),
        ("craft 3 oak planks using 1 oak log", "Could not execute craft 3 oak planks using 1 oak log: wrong quantities"),
        ("craft 4 oak planks using 2 oak log", "Could not execute craft 4 oak planks using 2 oak log: wrong quantities"),
        ("craft 4 oak planks using 1 oak log", "Could not find enough items to craft 4 oak planks: you need 1 more oak log."),
        ("get 1234567890123 oak log", "Invalid action"),
    ],
)
def test_invalid_and_impossible_actions_answer_clearly(action, message):
    env = TextCraftEnv()
    env.reset(0)
    result = env.step(action)
    assert result.observation.startswith(message), result.observation
    assert (result.reward, result.done, result.info) == (0.0, False, {"success": False, "invalid_action": True, "progress": 0.0})
    assert env.observation() == result.observation


def test_progress_is_the_share_of_the_plans_requirements_met_and_never_falls():
    env = TextCraftEnv()
    observation = env.reset(tasks.goal_index("crafting table"))
    # This task lists the dark oak route; its plan gets 1 stripped log, crafts 4 planks, then the table.
    assert requirements(observation) == {"stripped dark oak log": 1, "dark oak planks": 4, "crafting table": 1}
    steps = [("get 1 oak log", 0.0), ("get 1 stripped dark oak log", 1 / 3), ("dance", 1 / 3),
             ("craft 4 dark oak planks using 1 stripped dark oak log", 2 / 3)]
    for action, expected in steps:
        assert env.step(action).info["progress"] == pytest.approx(expected), action
    # Crafting spends the planks; what was obtained still counts, and the goal is all of it.
    done = env.step("craft 1 crafting table using 4 dark oak planks")
    assert done.info == {"success": True, "invalid_action": False, "progress": 1.0}
    assert env.reset(tasks.goal_index("crafting table")) == observation
    assert env.step("inventory").info["progress"] == 0.0  # a new episode starts from nothing


def test_progress_counts_the_total_obtained_and_the_goal_by_any_recipe():
    env = TextCraftEnv()
    env.reset(tasks.goal_index("crafting table"))
    assert env.step("get 1 stripped dark oak log").info["progress"] == pytest.approx(1 / 3)
    assert env.step("craft 4 dark oak planks using 1 stripped dark oak log").info["progress"] == pytest.approx(2 / 3)
    # The table from oak planks, a recipe the listed commands do not name, still reaches the goal.
    env.step("get 1 oak log")
    env.step("craft 4 oak planks using 1 oak log")
    assert env.step("craft 1 crafting table using 4 oak planks").info["progress"] == 1.0
    assert progress({"a": 2, "b": 1}, {"a": 1, "b": 5}) == 0.5  # a needs 2 in all
    assert progress({}, {"a": 1}) == 0.0


def test_actions_are_lenient_about_case_underscores_and_a_final_period():
    env = TextCraftEnv()
    env.reset(0)
    assert env.step("  Get 1 minecraft:Oak_Log. ").observation == "Got 1 oak log"
    assert env.step("craft oak planks using 1 oak log").observation.startswith("Could not execute")  # count 1 of 4
    assert env.step("craft 4 oak planks using 1 oak log").observation == "Crafted 4 oak planks"


def test_step_before_reset_is_a_programming_error_in_process():
    with pytest.raises(RuntimeError):
        TextCraftEnv().step("inventory")


# -- expert ----------------------------------------------------------------------


def test_expert_solves_every_task_in_process():
    env = TextCraftEnv()
    solved: Counter[str] = Counter()
    for i in range(tasks.num_tasks()):
        env.reset(i)
        success, _, rewards, reached = _run_expert(env)
        assert success and rewards[-1] == 1.0 and sum(rewards) == 1.0, i
        # An action obtains one item, so it meets at most one requirement: progress climbs
        # through every k/n, n the requirements, to 1 with the goal (a first `get` of an item
        # the plan gets twice meets none yet).
        n = len(requirements(env.task.observation()))
        assert reached == sorted(reached), i
        assert sorted(set(reached) | {0.0}) == pytest.approx([k / n for k in range(n + 1)]), i
        solved[tasks.category(i)] += 1
    assert sum(solved.values()) == tasks.num_tasks()


def _play_expert(env, **options) -> list[tuple[str, str]]:
    agent = ExpertAgent(env, **options)
    steps, obs, done = [], env.observation(), False
    while not done:
        thought, action = agent.act(obs)
        steps.append((thought, action))
        result = env.step(action)
        obs, done = result.observation, result.done
    assert result.info["success"]
    return steps


def test_expert_steps_thoughts_explain_each_step():
    env = TextCraftEnv()
    env.reset(tasks.goal_index("crafting table"))
    thoughts = [thought for thought, _ in _play_expert(env)]  # "steps" is the default style
    assert any("which I can craft from" in t for t in thoughts)
    assert any("I get it" in t for t in thoughts)


def test_expert_plan_thoughts_spell_the_recipe_tree_then_continue_the_plan():
    env = TextCraftEnv()
    env.reset(tasks.goal_index("crafting table"))
    steps = _play_expert(env, thoughts="plan")
    actions = [action for _, action in steps]
    first = steps[0][0]
    # The first thought quotes the listed command of each item on the way down, then every action in order.
    assert first.startswith("The goal is crafting table. crafting table: craft 1 crafting table using ")
    listed = env.commands.splitlines()
    for line in first.split(". Plan: ")[0].split(". ")[1:]:
        item, _, how = line.partition(": ")
        assert how == "base" or (how in listed and f" {item} using " in how), line
    assert first.endswith("Plan: " + "; ".join(actions) + ".")
    # Each later thought names the previous action, then the one it takes.
    for (thought, action), before in zip(steps[1:], actions):
        assert thought == f"Next in my plan after {before}; {action}"
    # The actions are the same in both styles.
    env.reset(tasks.goal_index("crafting table"))
    assert [action for _, action in _play_expert(env, thoughts="steps")] == actions


def test_expert_rejects_an_unknown_thought_style():
    env = TextCraftEnv()
    env.reset(0)
    with pytest.raises(ValueError, match="thoughts must be one of"):
        ExpertAgent(env, thoughts="verbose")


# -- HTTP server -----------------------------------------------------------------


def test_expert_over_http_sees_the_same_observations_as_in_process(client):
    for i in _ids_per_depth(3):
        remote = _HttpEnv(client, i)
        local = TextCraftEnv()
        assert remote.first_observation == local.reset(i) == remote.observation()
        remote_run, local_run = _run_expert(remote), _run_expert(local)
        assert remote_run == local_run and remote_run[0], i
        client.post("/close", json={"id": remote.id})


def test_commands_and_goal_routes(client):
    idx = tasks.goal_index("crafting table")
    env_id = client.post("/create").json()["id"]
    assert client.get("/commands", params={"id": env_id}).status_code == 409
    client.post("/reset", json={"id": env_id, "data_idx": idx})
    commands = client.get("/commands", params={"id": env_id}).json()
    assert commands == tasks.build_task(idx).observation().split("\n\n")[0].removeprefix("Crafting commands:\n")
    assert client.get("/goal", params={"id": env_id}).json() == "minecraft:crafting_table"
    assert client.get("/tasks", params={"split": "test"}).json()["ids"] == tasks.split_ids("test")


def test_server_errors_are_json(client):
    missing = client.post("/step", json={"id": 10_000, "action": "inventory"})
    assert missing.status_code == 404 and "error" in missing.json()
    assert client.get("/goal", params={"id": 10_000}).status_code == 404
    env_id = client.post("/create").json()["id"]
    early = client.post("/step", json={"id": env_id, "action": "inventory"})
    assert early.status_code == 409 and "error" in early.json()
    client.post("/reset", json={"id": env_id, "data_idx": 0})
    bad = client.post("/step", json={"id": env_id, "action": "fly to the moon"})
    assert bad.status_code == 200 and bad.json()["info"]["invalid_action"] is True
    assert client.post("/close", json={"id": env_id}).json() is True
    assert client.post("/step", json={"id": env_id, "action": "inventory"}).status_code == 404


def test_module_serves_on_a_free_port():
    with serve_module("envs.textcraft") as (url, _), httpx.Client(base_url=url, timeout=30) as http:
        assert http.get("/health").json()["env"] == "textcraft"
        created = http.post("/create", json={"data_idx": 5}).json()
        assert created["observation"] == TextCraftEnv().reset(5)
        assert http.post("/step", json={"id": created["id"], "action": "inventory"}).json()["observation"].startswith("Inventory")


# -- client spec ------------------------------------------------------------------


def test_spec_parses_the_experts_react_answer():
    from rllib_agentgym.envs.specs.textcraft import SPEC

    env = TextCraftEnv()
    env.reset(3)
    thought, action = ExpertAgent(env).act(env.observation())
    assert SPEC.action_for_server(f"Thought: {thought}\nAction: {action}") == (action, True)
    assert SPEC.action_for_server("I will get some logs") == ("I will get some logs", False)
    for needle in ("get [count] [item]", "craft [count] [item] using", "inventory", "Thought:", "Action:"):
        assert needle in SPEC.instruction
    assert SPEC.split_ids("test") == tasks.split_ids("test") and SPEC.category(0) == "depth 1"
