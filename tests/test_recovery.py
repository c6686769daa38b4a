"""Recovery conversations (data/recovery.py): the agent's slip as context, the expert's way out as target."""

from __future__ import annotations

import json

import pytest

from envs.textcraft import tasks
from envs.textcraft.env import TextCraftEnv
from envs.textcraft.expert import ExpertAgent
from rllib_agentgym.data import experts
from rllib_agentgym.data.recovery import recovery_conversation, recovery_conversations
from rllib_agentgym.envs.registry import get_spec
from rllib_agentgym.run_logs import write_jsonl

SPEC = get_spec("agentgym/textcraft")


def _depth2_task() -> int:
    return next(i for i in tasks.split_ids("train") if tasks.category(i) == "depth 2")


def _episode(data_idx: int, actions: list[str]) -> dict:
    """A `Trajectory.summary()`-shaped record of playing `actions` (the agent's episode)."""
    env = TextCraftEnv()
    observation = env.reset(data_idx)
    turns, success = [], False
    for action in actions:
        step = env.step(action)
        turns.append({"observation": observation, "response": f"Thought: my guess.\nAction: {action}",
                      "action": action})
        observation, success = step.observation, bool(step.info["success"])
        if step.done:
            break
    return {"env": "textcraft", "data_idx": data_idx, "success": success, "turns": turns}


def _expert_actions(data_idx: int) -> list[str]:
    env = TextCraftEnv()
    observation = env.reset(data_idx)
    expert, actions = ExpertAgent(env), []
    for _ in range(30):
        _, action = expert.act(observation)
        actions.append(action)
        step = env.step(action)
        observation = step.observation
        if step.done:
            return actions
    raise AssertionError("the expert did not finish")


def test_expert_built_midway_plans_from_what_the_env_holds():
    idx = _depth2_task()
    env = TextCraftEnv()
    env.reset(idx)
    first = _expert_actions(idx)[0]  # "get N item"
    _, n, item = first.split(" ", 2)
    env.step(f"get {int(n) + 3} {item}")  # more than needed
    expert = ExpertAgent(env)
    observation, actions = env.observation(), []
    for _ in range(30):
        _, action = expert.act(observation)
        actions.append(action)
        step = env.step(action)
        observation = step.observation
        assert not step.info["invalid_action"], (action, observation)
        if step.done:
            break
    assert step.info["success"]
    assert not any(a.startswith("get") and a.endswith(f" {item}") for a in actions), actions  # already held


def test_recovery_keeps_the_slip_as_context_and_trains_the_expert_way_out():
    idx = _depth2_task()
    expert_actions = _expert_actions(idx)
    first, second = expert_actions[0], expert_actions[1]
    _, n, item = first.split(" ", 2)
    slip = f"get {int(n) + 1} {item}" if not second.startswith("craft") else "craft 1 stick using 9 oak log"
    agent = _episode(idx, [first, slip, "inventory"])  # one expert action, a slip, then wandering
    row = recovery_conversation(SPEC, TextCraftEnv(), agent, max_steps=30)
    assert row is not None and row["success"] and row["agent_turns"] == 2
    messages = row["messages"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert [m.get("loss", True) for m in assistant[:2]] == [False, False]  # the agent's turns: context only
    assert assistant[1]["content"].endswith(f"Action: {slip}")
    assert all(m.get("loss", True) for m in assistant[2:]) and len(assistant) > 2  # the expert's turns
    assert "inventory" not in [m["content"].rsplit("Action: ", 1)[1] for m in assistant]  # cut after the slip
    # The conversation is a real episode: its actions replayed in a fresh env reach the goal.
    env = TextCraftEnv()
    observation = env.reset(idx)
    assert messages[1]["content"] == observation
    for i, message in enumerate(messages[2:], start=2):
        if message["role"] == "assistant":
            step = env.step(message["content"].rsplit("Action: ", 1)[1])
            if i + 1 < len(messages):
                assert messages[i + 1]["content"] == step.observation
    assert step.done and step.info["success"]


def test_successful_or_expert_like_episodes_give_no_recovery():
    idx = _depth2_task()
    actions = _expert_actions(idx)
    solved = _episode(idx, actions)
    assert solved["success"]
    cut_short = _episode(idx, actions[:-1])  # the expert's way, out of turns before the goal
    assert not cut_short["success"]
    assert recovery_conversation(SPEC, TextCraftEnv(), cut_short) is None
    wrong = _episode(idx, ["get 1 nothing at all"])
    rows = list(recovery_conversations("agentgym/textcraft", [solved, cut_short, wrong], max_steps=30))
    assert [r["data_idx"] for r in rows] == [idx]  # only the episode that slipped
    assert "get 1 nothing at all" in rows[0]["messages"][2]["content"]


def test_a_replay_that_does_not_match_the_episode_is_skipped():
    idx = _depth2_task()
    episode = _episode(idx, ["get 1 nothing at all"])
    episode["turns"][0]["observation"] = "another task"
    assert recovery_conversation(SPEC, TextCraftEnv(), episode) is None


def test_experts_command_writes_recovery_conversations_from_an_episodes_file(tmp_path):
    idx = _depth2_task()
    episodes = tmp_path / "agent.jsonl.gz"
    write_jsonl(episodes, [_episode(idx, ["get 1 nothing at all"]), _episode(idx, _expert_actions(idx))])
    out = tmp_path / "recovery.jsonl"
    experts.main(["--env", "agentgym/textcraft", "--from-episodes", str(episodes), "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["messages"][2]["loss"] is False and rows[0]["messages"][-1].get("loss", True)
    with pytest.raises(SystemExit, match="missing"):
        experts.main(["--env", "agentgym/textcraft", "--from-episodes", str(tmp_path / "missing.jsonl"),
                      "--out", str(out)])


def test_babyai_bot_takes_over_midway():
    spec = get_spec("agentgym/babyai")
    env = spec.load_env_class()(**spec.env_options)
    recovered = 0
    for idx in spec.task_ids("train")[:6]:  # GoTo-style levels: the bot finishes from any pose
        observation = env.reset(idx)
        turns = []
        for action in ("turn left", "turn left", "move forward"):
            turns.append({"observation": observation, "response": f"Thought: look around.\nAction: {action}",
                          "action": action})
            step = env.step(action)
            observation = step.observation
            if step.done:
                break
        row = recovery_conversation(spec, env, {"data_idx": idx, "success": False, "turns": turns}, max_steps=64)
        if row is not None:
            recovered += 1
            assert row["messages"][2]["loss"] is False and row["messages"][-1]["role"] == "assistant"
    assert recovered >= 4
