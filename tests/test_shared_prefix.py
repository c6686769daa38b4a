"""The shared prompt prefix runs once per micro-batch: the same log-probs, entropies and gradients."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.core.rl_module import (
    MIN_SHARED_PREFIX,
    SHARE_PREFIX_SETTINGS,
    LLMRLModule,
    load_causal_lm,
    prefix_sharing_on,
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


def _record_cached_lengths(monkeypatch) -> list[int]:
    """Spy on the decoder's forward: the list gets each call's `cached` (0: the full forward)."""
    from rllib_agentgym.core import rl_module

    cached = []
    forward = rl_module.decoder_hidden_states
    monkeypatch.setattr(rl_module, "decoder_hidden_states",
                        lambda llm, ids, mask, k=0: cached.append(k) or forward(llm, ids, mask, k))
    return cached


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
    cached = _record_cached_lengths(monkeypatch)
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
    assert cached == [0]
    shared, shared_grads = run(True)
    assert cached == [0, PREFIX - 1]  # the instruction but its last token ran once, for all three rows
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
    calls = _record_cached_lengths(monkeypatch)
    llm = load_causal_lm(embedded_model).train()
    ids, attention, tokens = _batch()
    short = tokens.clone()
    short[0, MIN_SHARED_PREFIX - 1] = 1
    token_logprobs_and_entropy(llm, ids, attention, False, token_mask=short)
    llm.gradient_checkpointing_enable()
    token_logprobs_and_entropy(llm, ids, attention, False, token_mask=tokens)
    assert calls == [0, 0]


def test_grpo_update_is_the_same_with_and_without_the_shared_prefix(embedded_model, monkeypatch):
    """Through the learner: the loss, every gradient and the reference log-probs (the no-grad pass)
    agree with `share_prompt_prefix` on and off, on a batch whose trajectories share an instruction."""
    import numpy as np

    from learner_batches import grpo_batch
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.envs.gym_env import text_space

    calls = _record_cached_lengths(monkeypatch)

    def update(share: bool | str):
        config = (
            GRPOConfig()
            .environment("agentgym/textcraft")
            .llm(model_path=embedded_model)
            .training(micro_batch_size=2, lr=0.0, kl_coef=0.1, entropy_coeff=0.01, share_prompt_prefix=share)
            .learners(num_learners=0)
        )
        spec = config.get_default_rl_module_spec()
        spec.observation_space, spec.action_space = text_space(), text_space()
        learner_group = config.build_learner_group(rl_module_spec=spec)
        try:
            batch = grpo_batch(config, instruction=PREFIX)
            results = learner_group.update(batch=batch, minibatch_size=None, num_epochs=1,
                                           shuffle_batch_per_epoch=False,
                                           timesteps={"num_env_steps_sampled_lifetime": 0})
            llm = learner_group._learner.module["default_policy"].unwrapped().llm
            grads = {n: p.grad.detach().clone() for n, p in llm.named_parameters() if p.grad is not None}
            arrays = batch.policy_batches["default_policy"]
            ref = np.where(arrays["response_mask"] > 0, arrays["ref_logprobs"], 0.0)
            return float(results[0]["default_policy"]["total_loss"].peek()), grads, ref
        finally:
            learner_group.shutdown()

    shared_loss, shared_grads, shared_ref = update(True)
    # Three micro-batches of two rows, each run once with grad and once without (pi_ref).
    assert calls == [PREFIX - 1] * 6
    full_loss, full_grads, full_ref = update(False)
    assert calls[6:] == [0] * 6
    assert shared_loss == pytest.approx(full_loss, rel=1e-4, abs=1e-6)
    assert shared_grads.keys() == full_grads.keys() and full_grads
    for name, grad in full_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-3, atol=1e-6, msg=name)
    np.testing.assert_allclose(shared_ref, full_ref, rtol=1e-4, atol=1e-5)
    assert np.abs(full_ref).sum() > 0
    # The default, "auto", shares on this CPU learner: the same forwards as `True`.
    assert GRPOConfig().share_prompt_prefix == "auto"
    auto_loss, _, _ = update("auto")
    assert calls[12:] == [PREFIX - 1] * 6 and auto_loss == shared_loss


def test_auto_prefix_sharing_is_on_for_a_cpu_and_off_for_an_accelerator():
    """`share_prompt_prefix: auto` shares where the learner's tensors are on a CPU only (on an H200 the
    split forward made a step 1.75-1.83x as long: benchmarks/README.md); True / False force it."""
    assert prefix_sharing_on("auto", torch.device("cpu"))
    assert not prefix_sharing_on("auto", torch.device("cuda"))
    assert not prefix_sharing_on("auto", torch.device("meta"))
    for device in ("cpu", "cuda"):
        assert prefix_sharing_on(True, torch.device(device)) and not prefix_sharing_on(False, torch.device(device))
    assert SHARE_PREFIX_SETTINGS == (True, False, "auto")
    with pytest.raises(ValueError, match="share_prefix must be one of"):
        prefix_sharing_on("yes", torch.device("cpu"))


def test_a_bad_share_prompt_prefix_fails_at_validate_and_in_the_module(embedded_model):
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.envs.gym_env import text_space

    config = GRPOConfig().environment("agentgym/textcraft").llm(model_path=embedded_model).training(
        share_prompt_prefix="sometimes")
    with pytest.raises(ValueError, match="share_prompt_prefix must be one of"):
        config.validate()
    with pytest.raises(ValueError, match="share_prefix must be one of"):
        LLMRLModule(observation_space=text_space(), action_space=text_space(),
                    model_config={"model": embedded_model, "share_prefix": "sometimes"})


def test_shared_prefix_under_bf16_autocast_is_as_close_to_float32_as_the_full_forward(embedded_model):
    """Under bf16 autocast (the learner's mode on a CPU with bf16 units) the shared prefix's KV
    cache is bf16 like every other activation: its gradient is no further from float32's than the
    full forward's (both about 0.9% on this batch)."""
    llm = load_causal_lm(embedded_model)
    llm.train()
    ids, attention, tokens = _batch()

    def gradient(share: bool, bf16: bool) -> torch.Tensor:
        llm.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = token_logprobs_and_entropy(llm, ids, attention, False, token_mask=tokens, share_prefix=share)
        (-(out["logprobs"] * tokens).sum() / tokens.sum()).backward()
        return torch.cat([p.grad.flatten() for p in llm.parameters() if p.grad is not None])

    exact = gradient(False, bf16=False)
    full_error, shared_error = ((gradient(share, bf16=True) - exact).norm() / exact.norm() for share in (False, True))
    assert 0 < full_error < 0.05
    assert shared_error < 1.5 * full_error, (shared_error, full_error)
