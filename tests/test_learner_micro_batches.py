"""Length-sorted micro-batches: less padding, the same loss, gradients and reference log-probs."""

from __future__ import annotations


import numpy as np
import pytest
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.algorithms.grpo.torch import grpo_torch_learner
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import micro_batches_by_length
from rllib_agentgym.envs.gym_env import text_space
from learner_batches import LENGTHS, grpo_batch



def test_micro_batches_group_rows_by_length():
    groups = micro_batches_by_length(LENGTHS, 2)
    assert [list(g) for g in groups] == [[3, 1], [5, 2], [0, 4]]
    assert sorted(int(i) for g in groups for i in g) == list(range(len(LENGTHS)))
    assert [list(g) for g in micro_batches_by_length(LENGTHS, 0)] == [[3, 1, 5, 2, 0, 4]]


def _in_batch_order(lengths, micro):
    micro = max(1, int(micro or len(lengths)))
    return [np.arange(i, min(i + micro, len(lengths))) for i in range(0, len(lengths), micro)]


def _update(learner_group, config):
    batch = grpo_batch(config)
    results = learner_group.update(batch=batch, minibatch_size=None, num_epochs=1, shuffle_batch_per_epoch=False,
                                   timesteps={"num_env_steps_sampled_lifetime": 0})
    learner = learner_group._learner
    llm = learner.module["default_policy"].unwrapped().llm
    grads = {name: p.grad.detach().clone() for name, p in llm.named_parameters() if p.grad is not None}
    loss = float(results[0]["default_policy"]["total_loss"].peek())
    arrays = batch.policy_batches["default_policy"]
    # Log-probs at padding positions depend on the micro-batch's width and are never used.
    return loss, grads, np.where(arrays["attention_mask"] == 1, arrays["ref_logprobs"], 0.0)


def test_sorted_micro_batches_leave_loss_and_gradients_unchanged(embedded_model, monkeypatch):
    # lr = 0: the update leaves the weights as they were, so both runs start from the same point.
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model)
        .training(micro_batch_size=2, lr=0.0, kl_coef=0.1, entropy_coeff=0.01)
        .learners(num_learners=0)
    )
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    learner_group = config.build_learner_group(rl_module_spec=spec)
    try:
        sorted_loss, sorted_grads, sorted_ref = _update(learner_group, config)
        monkeypatch.setattr(grpo_torch_learner, "micro_batches_by_length", _in_batch_order)
        order_loss, order_grads, order_ref = _update(learner_group, config)
    finally:
        learner_group.shutdown()
    assert sorted_loss == pytest.approx(order_loss, rel=1e-5, abs=1e-7)
    assert sorted_grads.keys() == order_grads.keys() and sorted_grads
    for name, grad in sorted_grads.items():
        torch.testing.assert_close(grad, order_grads[name], rtol=1e-4, atol=1e-6, msg=name)
    np.testing.assert_allclose(sorted_ref, order_ref, rtol=1e-5, atol=1e-6)
    assert np.abs(sorted_ref).sum() > 0


def test_logprobs_at_masked_positions_only_match_the_full_forward(embedded_model):
    """The LM head on each row's trained tokens only: the same log-probs, entropies and gradients there, 0 elsewhere."""
    from rllib_agentgym.core.rl_module import load_causal_lm, predicting_positions, token_logprobs_and_entropy

    llm = load_causal_lm(embedded_model)
    torch.manual_seed(0)
    ids = torch.randint(3, 1900, (2, 24))
    attention = torch.ones_like(ids)
    attention[1, 20:] = 0  # a padded row
    tokens = torch.zeros_like(ids)
    tokens[0, 10:16] = 1
    tokens[1, 5:9] = 1
    rows, positions = predicting_positions(tokens)  # token t is predicted at t - 1, row by row
    assert rows.tolist() == [0] * 6 + [1] * 4
    assert positions.tolist() == [9, 10, 11, 12, 13, 14, 4, 5, 6, 7]

    def run(token_mask):
        llm.zero_grad()
        out = token_logprobs_and_entropy(llm, ids, attention, True, True, token_mask=token_mask)
        loss = -(out["logprobs"] * tokens).sum() / tokens.sum() - 0.1 * (out["entropy"] * tokens).sum()
        loss.backward()
        return out, {n: p.grad.clone() for n, p in llm.named_parameters() if p.grad is not None}

    full, full_grads = run(None)
    kept, kept_grads = run(tokens)
    selected = tokens.bool()
    for key in ("logprobs", "entropy"):
        torch.testing.assert_close(kept[key][selected], full[key][selected], rtol=1e-5, atol=1e-5)
        assert not kept[key][~selected].any()  # elsewhere 0, whichever rows share the forward
    assert kept_grads.keys() == full_grads.keys()
    for name, grad in full_grads.items():
        torch.testing.assert_close(kept_grads[name], grad, rtol=1e-4, atol=1e-6)
    # A weighted float mask selects the same tokens and does not scale their log-probs.
    weighted = token_logprobs_and_entropy(llm, ids, attention, False, token_mask=0.5 * tokens.float())
    torch.testing.assert_close(weighted["logprobs"], kept["logprobs"].detach())
    # Nothing selected: every position, so a loss over no tokens still has a graph.
    none = token_logprobs_and_entropy(llm, ids, attention, False, token_mask=torch.zeros_like(ids))
    torch.testing.assert_close(none["logprobs"], full["logprobs"].detach())


def test_logprobs_are_those_of_the_sampling_temperature(embedded_model):
    """log pi_T(y) = log softmax(z / T)[y], entropy likewise: the distribution vLLM sampled from at T."""
    from rllib_agentgym.core.rl_module import load_causal_lm, token_logprobs_and_entropy

    llm = load_causal_lm(embedded_model).eval()
    torch.manual_seed(1)
    ids = torch.randint(3, 1900, (2, 16))
    attention = torch.ones_like(ids)
    with torch.no_grad():
        logits = llm(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
        out = token_logprobs_and_entropy(llm, ids, attention, True, temperature=0.7)
        plain = token_logprobs_and_entropy(llm, ids, attention, True)
    scaled = torch.log_softmax(logits / 0.7, dim=-1)
    expected = scaled.gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(out["logprobs"][:, 1:], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out["entropy"][:, 1:], -(scaled.exp() * scaled).sum(-1), rtol=1e-4, atol=1e-5)
    # A sharper distribution: lower entropy than at T = 1.
    assert (out["entropy"][:, 1:] < plain["entropy"][:, 1:]).all()


def test_grpo_module_scores_at_the_sampling_temperature_and_sft_at_one():
    from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
    from rllib_agentgym.algorithms.sft.sft import AgentSFTConfig

    assert GRPOConfig().llm(temperature=0.7).get_default_rl_module_spec().model_config["temperature"] == 0.7
    assert GRPOConfig().get_default_rl_module_spec().model_config["temperature"] == 1.0
    # AgentSFT's loss is the expert's tokens under the model itself, whatever the rollout setting.
    sft = AgentSFTConfig().llm(temperature=0.5)
    assert sft.get_default_rl_module_spec().model_config["temperature"] == 1.0


def test_a_head_that_transforms_its_logits_runs_the_whole_lm(embedded_model, monkeypatch):
    """A soft-capped or scaled LM head (Gemma 2's `final_logit_softcapping`, ...) is not the plain
    linear map the decoder-then-head path applies: such an LM runs its own forward, and the selected
    tokens' log-probs are read from its logits."""
    from rllib_agentgym.core import rl_module

    llm = rl_module.load_causal_lm(embedded_model)
    torch.manual_seed(0)
    ids = torch.randint(3, 1900, (2, 24))
    attention = torch.ones_like(ids)
    tokens = torch.zeros_like(ids)
    tokens[0, 10:16] = 1
    tokens[1, 5:9] = 1
    plain = rl_module.token_logprobs_and_entropy(llm, ids, attention, True, token_mask=tokens)
    calls = []
    monkeypatch.setattr(rl_module, "decoder_hidden_states", lambda *a, **k: calls.append(a))
    llm.config.final_logit_softcapping = 30.0  # Qwen2's forward ignores it: the logits stay comparable
    whole = rl_module.token_logprobs_and_entropy(llm, ids, attention, True, token_mask=tokens)
    assert calls == []
    for key in ("logprobs", "entropy"):
        torch.testing.assert_close(whole[key], plain[key], rtol=1e-5, atol=1e-5)
        assert not whole[key][~tokens.bool()].any()
