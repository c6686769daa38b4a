"""The shared prompt prefix runs once per micro-batch: the same log-probs, entropies and gradients."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.core.rl_module import (
    MIN_SHARED_PREFIX,
    load_causal_lm,
    shared_prefix_length,
    token_logprobs_and_entropy,
)

PREFIX = 40  # tokens every row starts with: an instruction


def _batch():
    """Three rows that share PREFIX tokens; rows 0 and 1 also share their whole prompt and first
    response (a GRPO group whose samples began alike), row 2 is right-padded."""
    torch.manual_seed(0)
    shared = torch.randint(3, 1900, (PREFIX,))
    rows = [torch.cat([shared, torch.randint(3, 1900, (30,))]) for _ in range(3)]
    rows[1][: PREFIX + 20] = rows[0][: PREFIX + 20]
    ids = torch.stack(rows)
    attention = torch.ones_like(ids)
    attention[2, 60:] = 0
    tokens = torch.zeros_like(ids)
    tokens[0, PREFIX + 10 : PREFIX + 16] = 1  # the first response starts at PREFIX + 10 in rows 0 and 1
    tokens[1, PREFIX + 10 : PREFIX + 14] = 1
    tokens[1, PREFIX + 22 : PREFIX + 26] = 1
    tokens[2, PREFIX + 5 : PREFIX + 12] = 1
    return ids, attention, tokens


def test_shared_prefix_length_stops_at_the_first_difference_padding_or_trained_token():
    ids, attention, tokens = _batch()
    assert shared_prefix_length(ids, attention, tokens) == PREFIX  # rows differ after the instruction
    # Rows 0 and 1 agree for PREFIX + 20 tokens, but row 0 trains from PREFIX + 10 on.
    assert shared_prefix_length(ids[:2], attention[:2], tokens[:2]) == PREFIX + 10
    untrained = torch.zeros_like(tokens[:2])
    assert shared_prefix_length(ids[:2], attention[:2], untrained) == PREFIX + 20
    # Padding is never shared, even where the pad ids agree.
    padded = ids.clone()
    padded[:, 5:] = 0
    mask = attention.clone()
    mask[1, 3:] = 0
    assert shared_prefix_length(padded, mask, torch.zeros_like(tokens)) == 3
    assert shared_prefix_length(ids[:1], attention[:1], tokens[:1]) == 0  # one row: nothing to share


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prefix_forward_matches_the_full_forward(embedded_model, lora, monkeypatch):
    from rllib_agentgym.core import rl_module

    cached = []
    shared_forward = rl_module._forward_after_shared_prefix
    monkeypatch.setattr(rl_module, "_forward_after_shared_prefix",
                        lambda llm, ids, mask, k, positions: cached.append(k) or shared_forward(llm, ids, mask, k, positions))
    llm = load_causal_lm(embedded_model)
    if lora:
        from peft import get_peft_model

        from rllib_agentgym.core.lora import lora_config

        llm = get_peft_model(llm, lora_config({"r": 4, "alpha": 8}))
        # peft starts B at 0: give the adapter a value so the prefix's share of its gradient shows.
        for name, p in llm.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
    llm.train()
    ids, attention, tokens = _batch()

    def run(share: bool):
        llm.zero_grad()
        out = token_logprobs_and_entropy(llm, ids, attention, True, True, token_mask=tokens, share_prefix=share)
        loss = -(out["logprobs"] * tokens).sum() / tokens.sum() - 0.1 * (out["entropy"] * tokens).sum()
        loss.backward()
        return out, {n: p.grad.clone() for n, p in llm.named_parameters() if p.grad is not None}

    full, full_grads = run(False)
    assert cached == []
    shared, shared_grads = run(True)
    assert cached == [PREFIX - 1]  # the instruction but its last token ran once, for all three rows
    for key in ("logprobs", "entropy"):
        torch.testing.assert_close(shared[key], full[key], rtol=1e-4, atol=1e-5)
    assert shared_grads.keys() == full_grads.keys() and full_grads
    for name, grad in full_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-3, atol=1e-6, msg=name)
    # The prefix's weights learn through every row: the embedding rows of its tokens get a gradient.
    embed = next(g for n, g in shared_grads.items() if "embed_tokens" in n) if not lora else None
    if embed is not None:
        assert embed[ids[0, :PREFIX]].abs().sum() > 0
    with torch.no_grad():
        no_grad = token_logprobs_and_entropy(llm, ids, attention, False, token_mask=tokens)
    torch.testing.assert_close(no_grad["logprobs"], full["logprobs"].detach(), rtol=1e-4, atol=1e-5)


def test_short_or_checkpointed_prefixes_take_the_full_forward(embedded_model, monkeypatch):
    """Below MIN_SHARED_PREFIX, or with gradient checkpointing (its layers drop a KV cache), one full forward."""
    from rllib_agentgym.core import rl_module

    calls = []
    monkeypatch.setattr(rl_module, "_forward_after_shared_prefix", lambda *a, **k: calls.append(a))
    llm = load_causal_lm(embedded_model).train()
    ids, attention, tokens = _batch()
    short = tokens.clone()
    short[0, MIN_SHARED_PREFIX - 1] = 1
    token_logprobs_and_entropy(llm, ids, attention, False, token_mask=short)
    llm.gradient_checkpointing_enable()
    token_logprobs_and_entropy(llm, ids, attention, False, token_mask=tokens)
    assert calls == []
