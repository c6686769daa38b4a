"""LLMEnvRunner: token-in/token-out multi-turn trajectories on TextCraft; WebArena's grade at the horizon."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.core.chat import ChatFormat
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner


def _runner(engine: str, env_config: dict, **llm) -> LLMEnvRunner:
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft", env_config=env_config)
        .llm(inference_engine=engine, max_model_len=1024, **llm)
        .debugging(seed=0)
    )
    return LLMEnvRunner(config=config, worker_index=0)


def test_chat_format_appends_exactly_the_template_text(embedded_model):
    tok = AutoTokenizer.from_pretrained(embedded_model)
    chat = ChatFormat.from_tokenizer(tok)
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "Action: inventory"},
        {"role": "user", "content": "second"},
    ]
    ids = chat.prompt_ids(tok, "S", "first")
    ids += tok("Action: inventory", add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids += chat.observation_ids(tok, "second", response_closed=True)
    assert tok.decode(ids) == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_runner_groups_masks_and_horizon(engine):
    runner = _runner(engine, {}, group_size=3, max_turns=2, max_new_tokens=16)
    try:
        result = runner.sample(num_tasks=2)
    finally:
        tok = runner._tokenizer
        runner.stop()
    trajs = result.trajectories
    assert len(trajs) == 6 and result.num_dropped == 0
    groups = {}
    for t in trajs:
        groups.setdefault(t.group_id, set()).add(t.data_idx)
    assert len(groups) == 2 and all(len(v) == 1 for v in groups.values())
    for t in trajs:
        assert 1 <= t.num_turns <= 2
        assert len(t.token_ids) == len(t.loss_mask) == len(t.sample_logprobs)
        assert t.loss_mask[: t.prompt_len] == [0] * t.prompt_len
        # Generated spans are exactly the responses, in order; nothing else is trainable.
        spans, cur = [], []
        for tid, m in zip(t.token_ids, t.loss_mask):
            if m:
                cur.append(tid)
            elif cur:
                spans.append(cur)
                cur = []
        if cur:
            spans.append(cur)
        assert len(spans) == t.num_turns
        for span, turn in zip(spans, t.turns):
            assert tok.decode(span, skip_special_tokens=True) == turn.response
        # Observations reach the model as user turns between the responses.
        if t.num_turns == 2:
            assert t.turns[0].observation in tok.decode(t.token_ids[: t.prompt_len])
            assert t.turns[1].observation in tok.decode(t.token_ids)
        lp = [x for x, m in zip(t.sample_logprobs, t.loss_mask) if m]
        assert all(x <= 0.0 for x in lp)
    assert result.num_generated_tokens == sum(t.num_generated_tokens for t in trajs)


@pytest.mark.parametrize("engine", ["hf", "vllm"])
def test_greedy_group_member_plays_the_greedy_episode(engine):
    # One member of each group at temperature 0 (what GRPO's draws pass for `greedy_group_members`):
    # it plays what a greedy evaluation of that task plays, while the others sample.
    runner = _runner(engine, {}, group_size=4, temperature=1.0, max_turns=2, max_new_tokens=16,
                     model_dtype="float32")
    try:
        trained = runner.sample(task_ids=[3, 7], greedy_members=1).trajectories
        evaluated = runner.sample(task_ids=[3, 7], group_size=1, explore=False).trajectories
        # Without `greedy_members` (an evaluation's sampled draw) every member samples.
        sampled = runner.sample(task_ids=[3], group_size=2).trajectories
    finally:
        runner.stop()
    assert len(trained) == 8 and [t.greedy for t in trained] == [True, False, False, False] * 2
    assert all(t.greedy for t in evaluated) and not any(t.greedy for t in sampled)
    for task, greedy_episode in zip([3, 7], evaluated):
        members = [t for t in trained if t.data_idx == task]
        assert members[0].token_ids == greedy_episode.token_ids
        assert members[0].summary()["greedy"] is True and "greedy" not in members[1].summary()
        # The sampled members draw at temperature 1: not all of them repeat the greedy episode.
        assert any(m.token_ids != greedy_episode.token_ids for m in members[1:])


def test_greedy_group_members_leave_a_sampled_member_and_need_learner_logprobs():
    config = GRPOConfig().environment("agentgym/textcraft").llm(group_size=2, greedy_group_members=2)
    with pytest.raises(ValueError, match="greedy_group_members must be in"):
        config.validate()
    config = GRPOConfig().environment("agentgym/textcraft").llm(group_size=4, greedy_group_members=1,
                                                                 temperature=1.0)
    config.training(old_logprobs="engine")
    with pytest.raises(ValueError, match="needs old_logprobs 'learner'"):
        config.validate()


def test_runner_over_http_server_matches_inprocess_observations():
    http = _runner("hf", {"launch_server": True}, group_size=1, max_turns=1, max_new_tokens=8)
    local = _runner("hf", {}, group_size=1, max_turns=1, max_new_tokens=8)
    try:
        a = http.sample(task_ids=[3, 40])
        b = local.sample(task_ids=[3, 40])
        server = http._factory._server
        assert server is not None and server.alive()
    finally:
        http.stop()
        local.stop()
    assert [t.turns[0].observation for t in a.trajectories] == [t.turns[0].observation for t in b.trajectories]
    assert not server.alive()  # the runner's stop() ends the server it started


def _cart_task(task_id: int, intent: str, required: str) -> dict:
    """A WebArena config whose program_html reads the session's shopping cart."""
    locator = "document.querySelector('#cart').innerText"
    return {"task_id": task_id, "sites": ["shopping"], "start_url": "__SHOPPING__", "intent": intent,
            "require_reset": True, "eval": {"eval_types": ["program_html"], "program_html": [
                {"url": "__SHOPPING__/cart", "locator": locator, "required_contents": {"must_include": [required]}}]}}


def test_runner_grades_webarena_episodes_the_horizon_cuts(tmp_path):
    """WebArena's spec says graded_at_horizon: an episode that never sends `stop` is graded by the
    evaluators when the runner's horizon ends it. The cart starts empty, so "empty my cart" is
    met without any action (the untrained model's turn is an invalid action) and earns 1;
    "add an item" is not met and earns 0. Other families keep the runner's plain horizon."""
    (tmp_path / "tasks.json").write_text(json.dumps([
        _cart_task(0, "Remove every item from my shopping cart.", "You have no items in your shopping cart."),
        _cart_task(1, "Add a Bamboo Toothbrush 4-Pack to my shopping cart.", "Bamboo Toothbrush 4-Pack"),
    ]))
    config = (
        GRPOConfig()
        .environment("agentgym/webarena", env_config={"env_options": {"tasks": str(tmp_path), "max_obs_tokens": 64}})
        .llm(inference_engine="hf", max_model_len=4096, group_size=2, max_turns=1, max_new_tokens=8)
        .debugging(seed=0)
    )
    runner = LLMEnvRunner(config=config, worker_index=0)
    try:
        result = runner.sample(task_ids=[0, 1], explore=False)
    finally:
        runner.stop()
    assert result.num_dropped == result.num_skipped == 0 and len(result.trajectories) == 4
    for t in result.trajectories:
        assert t.num_turns == 1 and not t.done  # the horizon, not `stop`, ended it
        assert not t.turns[0].action.startswith("stop")
        expected = 1.0 if t.data_idx == 0 else 0.0
        assert (t.reward, t.success, t.turns[-1].reward) == (expected, expected == 1.0, expected)
