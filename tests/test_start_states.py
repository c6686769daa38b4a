"""Start states: episodes of the agent cut after a refusal, replayed as the start of training episodes."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from envs.textcraft.env import TextCraftEnv
from envs.textcraft.expert import parse_task
from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.cli import main as cli_main
from rllib_agentgym.data.start_states import load_start_states, start_states_from_episodes
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner, start_state_fraction
from rllib_agentgym.envs.registry import get_spec
from rllib_agentgym.evaluation import evaluation_env_config


def _batch_goal_task(env: TextCraftEnv) -> tuple[int, str, str]:
    """A depth-1 train task whose goal's command makes more than one item:
    (task id, the wrong-count craft of the goal, the ingredient fetch before it)."""
    spec = get_spec("agentgym/textcraft")
    for data_idx in spec.task_ids("train", ["depth 1"]):
        commands, goal = parse_task(env.reset(data_idx))
        command = commands[goal]
        if command.count > 1 and len(command.ingredients) == 1:
            item, n = command.ingredients[0]
            return data_idx, f"craft 1 {goal} using {n} {item}", f"get {n} {item}"
    raise AssertionError("no depth-1 train task with a batch recipe of one ingredient")


def _played_episode(env: TextCraftEnv, data_idx: int, actions: list[str]) -> dict:
    """A `Trajectory.summary()`-shaped record of `actions` played on the real env."""
    observation, turns, done = env.reset(data_idx), [], False
    for action in actions:
        step = env.step(action)
        turns.append({"observation": observation, "response": f"Thought: go.\nAction: {action}", "action": action,
                      "invalid_action": bool(step.info.get("invalid_action", False))})
        observation, done = step.observation, step.done
    return {"data_idx": data_idx, "category": "depth 1", "turns": turns, "final_observation": observation,
            "done": done}


def test_episodes_are_cut_after_their_first_matching_refusal(tmp_path):
    env = TextCraftEnv()
    data_idx, wrong_craft, fetch = _batch_goal_task(env)
    refused = _played_episode(env, data_idx, [fetch, "get 1 unobtainium", wrong_craft, wrong_craft, "inventory"])
    assert "wrong quantities" in refused["turns"][3]["observation"]
    never = _played_episode(env, data_idx, [fetch, "inventory"])
    ended_there = _played_episode(env, data_idx, [fetch, wrong_craft])
    ended_there["done"] = True  # as if the env had closed the episode on that refusal

    states = start_states_from_episodes([refused, never, ended_there], after="wrong quantities")
    # The unknown item's refusal does not match; the first wrong-quantities craft ends the prefix.
    assert len(states) == 1 and states[0].data_idx == data_idx
    assert [action for _, action in states[0].prefix] == [fetch, "get 1 unobtainium", wrong_craft]

    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text("".join(json.dumps(e) + "\n" for e in (refused, never)))
    assert cli_main(["start-states", str(episodes), "--after", "wrong quantities",
                     "--out", str(tmp_path / "starts.jsonl")]) == 0
    assert load_start_states(tmp_path / "starts.jsonl") == states


@pytest.mark.parametrize("content, message", [
    ("", "holds no start state"),
    ("{not json\n", "line 1: not JSON"),
    ('{"data_idx": "3", "prefix": [{"response": "r", "action": "a"}]}\n', "integer 'data_idx'"),
    ('{"data_idx": 3, "prefix": []}\n', "non-empty list"),
    ('{"data_idx": 3, "prefix": [{"response": "r"}]}\n', "string 'response' and 'action'"),
])
def test_a_malformed_start_states_file_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "starts.jsonl"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_start_states(path)
    with pytest.raises(ValueError, match="no file"):
        load_start_states(tmp_path / "missing.jsonl")


def _runner(env_config: dict, evaluates: bool = False) -> LLMEnvRunner:
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config=env_config)
        .llm(inference_engine="hf", max_model_len=1024, group_size=2, max_turns=1, max_new_tokens=16)
        .debugging(seed=0)
    )
    if evaluates:
        config = config.copy(copy_frozen=False)
        config.in_evaluation = True
    return LLMEnvRunner(config=config, worker_index=0)


def _wrong_quantity_start(tmp_path) -> tuple[int, str, str, dict, str]:
    """A start-states file of one depth-1 episode cut after its wrong-count craft:
    (task id, the wrong craft, the fetch before it, the episode, the file)."""
    env = TextCraftEnv()
    data_idx, wrong_craft, fetch = _batch_goal_task(env)
    episode = _played_episode(env, data_idx, [fetch, wrong_craft])
    starts = tmp_path / "starts.jsonl"
    starts.write_text(json.dumps(start_states_from_episodes([episode], "wrong quantities")[0].record()) + "\n")
    return data_idx, wrong_craft, fetch, episode, str(starts)


def test_runner_plays_on_from_the_replayed_state_and_trains_only_its_own_turns(tmp_path, embedded_model):
    data_idx, wrong_craft, fetch, episode, starts = _wrong_quantity_start(tmp_path)

    runner = _runner({"start_states": starts, "categories": ["depth 1"]})
    try:
        result = runner.sample(num_tasks=2)
        tok = runner._tokenizer
    finally:
        runner.stop()
    assert len(result.trajectories) == 4 and result.num_dropped == 0
    chat = ChatFormat.from_tokenizer(AutoTokenizer.from_pretrained(embedded_model))
    for t in result.trajectories:
        assert t.data_idx == data_idx
        assert [turn.action for turn in t.replayed_turns] == [fetch, wrong_craft]
        assert t.replayed_turns[1].invalid_action
        # The agent's first turn sees the env's answer to the replayed wrong craft.
        assert "wrong quantities" in t.turns[0].observation and t.num_turns == 1
        # The token sequence is the chat of the whole conversation; only the agent's own response trains.
        messages = [{"role": "system", "content": get_spec("agentgym/textcraft").instruction},
                    {"role": "user", "content": episode["turns"][0]["observation"]}]
        for turn, answer in ((episode["turns"][0], episode["turns"][1]["observation"]),
                             (episode["turns"][1], t.turns[0].observation)):
            messages += [{"role": "assistant", "content": turn["response"]}, {"role": "user", "content": answer}]
        context = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        first_trained = t.loss_mask.index(1)
        assert tok.decode(t.token_ids[:first_trained]) == context
        assert sum(t.loss_mask) == t.num_generated_tokens == len(t.token_ids) - first_trained
        assert t.summary()["replayed_turns"][1]["action"] == wrong_craft
    assert chat.response_ids(tok, "Action: look") == tok("Action: look", add_special_tokens=False)["input_ids"]

    # Evaluation plays its tasks from their start, as it does with a pinned `task_ids`.
    evaluator = _runner({"start_states": starts, "categories": ["depth 1"]}, evaluates=True)
    try:
        fresh = evaluator.sample(task_ids=[data_idx], group_size=1)
    finally:
        evaluator.stop()
    assert not fresh.trajectories[0].replayed_turns
    assert "Crafting commands:" in fresh.trajectories[0].turns[0].observation


def test_a_start_state_fraction_mixes_replayed_starts_with_fresh_tasks(tmp_path, embedded_model):
    data_idx, _, _, _, starts = _wrong_quantity_start(tmp_path)
    runner = _runner({"start_states": starts, "start_state_fraction": 0.5, "categories": ["depth 1"]})
    try:
        result = runner.sample(num_tasks=4)
    finally:
        runner.stop()
    assert len(result.trajectories) == 8 and result.num_dropped == 0
    replayed = [t for t in result.trajectories if t.replayed_turns]
    fresh = [t for t in result.trajectories if not t.replayed_turns]
    # Two of the four groups replay the start state; the other two play depth-1 tasks from their start.
    assert len(replayed) == 4 and len({t.group_id for t in replayed}) == 2
    assert all(t.data_idx == data_idx and "wrong quantities" in t.turns[0].observation for t in replayed)
    assert len(fresh) == 4 and len({t.group_id for t in fresh}) == 2
    depth1 = set(get_spec("agentgym/textcraft").task_ids("train", ["depth 1"]))
    assert all(t.data_idx in depth1 and "Crafting commands:" in t.turns[0].observation for t in fresh)


@pytest.mark.parametrize("env_config, message", [
    ({"start_state_fraction": 0.5}, "needs start_states"),
    ({"start_states": "starts.jsonl", "start_state_fraction": 0.0}, r"in \(0, 1\]"),
    ({"start_states": "starts.jsonl", "start_state_fraction": 1.5}, r"in \(0, 1\]"),
    ({"start_states": "starts.jsonl", "start_state_fraction": "half"}, r"in \(0, 1\]"),
])
def test_a_bad_start_state_fraction_is_a_clear_error(env_config, message):
    with pytest.raises(ValueError, match=message):
        start_state_fraction(env_config)


def test_start_states_outside_the_runners_tasks_are_refused(tmp_path):
    spec = get_spec("agentgym/textcraft")
    depth2 = spec.task_ids("train", ["depth 2"])[0]
    starts = tmp_path / "starts.jsonl"
    starts.write_text(json.dumps({"data_idx": depth2, "prefix": [{"response": "r", "action": "inventory"}]}) + "\n")
    with pytest.raises(ValueError, match="not in this runner's tasks"):
        _runner({"start_states": str(starts), "categories": ["depth 1"]})


def test_start_states_do_not_follow_a_checkpoint_into_its_evaluation():
    trained = {"start_states": "starts.jsonl", "start_state_fraction": 0.5, "task_ids": [1, 2],
               "categories": ["depth 1"], "split": "train"}
    assert evaluation_env_config(trained, None, "test") == {"categories": ["depth 1"], "split": "test"}
