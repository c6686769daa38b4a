"""LLMEnvRunner: token-in/token-out multi-turn trajectories on TextCraft."""

from __future__ import annotations

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
