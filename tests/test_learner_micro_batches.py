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
    stats = {k: v.peek() for k, v in results[0]["default_policy"].items()}
    if "ref_logprobs" not in arrays:  # no KL term
        return loss, grads, None, stats
    return loss, grads, np.where(arrays["attention_mask"] == 1, arrays["ref_logprobs"], 0.0), stats


# seq-mean-token-sum-norm (Dr. GRPO) divides by a constant length, not by a micro-batch's trimmed width.
@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_sorted_micro_batches_leave_loss_and_gradients_unchanged(embedded_model, monkeypatch, loss_agg_mode):
    # lr = 0: the update leaves the weights as they were, so both runs start from the same point.
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model)
        .training(micro_batch_size=2, lr=0.0, kl_coef=0.1, entropy_coeff=0.01, loss_agg_mode=loss_agg_mode)
        .learners(num_learners=0)
    )
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    learner_group = config.build_learner_group(rl_module_spec=spec)
    try:
        sorted_loss, sorted_grads, sorted_ref, _ = _update(learner_group, config)
        monkeypatch.setattr(grpo_torch_learner, "micro_batches_by_length", _in_batch_order)
        order_loss, order_grads, order_ref, _ = _update(learner_group, config)
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


def _advantage_only_learner(embedded_model, **training):
    # lr = 0: an update leaves the weights as they were, so runs compare from the same point.
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model)
        .training(micro_batch_size=2, lr=0.0, use_kl_loss=False, entropy_coeff=0.0)
        .training(**training)
        .learners(num_learners=0)
    )
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    return config, config.build_learner_group(rl_module_spec=spec)


def _forwarded_rows(monkeypatch):
    """Rows of every learner forward from here on, training and no-grad ones alike."""
    seen = []
    real = grpo_torch_learner.token_logprobs_and_entropy

    def spy(llm, input_ids, *args, **kwargs):
        seen.append(int(input_ids.shape[0]))
        return real(llm, input_ids, *args, **kwargs)

    monkeypatch.setattr(grpo_torch_learner, "token_logprobs_and_entropy", spy)
    from rllib_agentgym.core import rl_module
    monkeypatch.setattr(rl_module, "token_logprobs_and_entropy", spy)
    return seen


def test_rows_with_signal_are_those_with_a_nonzero_advantage_on_a_trained_token():
    advantages = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.2, 1.2], [0.5, 0.0, 0.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    # Row 2's advantage sits on a prompt token only: nothing of it is trained.
    assert grpo_torch_learner.rows_with_signal(advantages, mask).tolist() == [False, True, False, False]


def test_rows_without_advantage_are_left_out_with_the_same_loss_and_gradients(embedded_model, monkeypatch):
    """grpo_batch's groups have advantages -1.22, 0, 1.22: one row in three adds nothing to the
    clipped surrogate, and leaving it out changes neither the loss nor the gradients."""
    runs = {}
    for skip in (True, False):
        config, learner_group = _advantage_only_learner(embedded_model, skip_zero_advantage_rows=skip)
        seen = _forwarded_rows(monkeypatch)
        try:
            loss, grads, _, stats = _update(learner_group, config)
        finally:
            learner_group.shutdown()
        runs[skip] = loss, grads, sum(seen), stats
    (skip_loss, skip_grads, skip_rows, skip_stats), (all_loss, all_grads, all_rows, _) = runs[True], runs[False]
    assert (skip_rows, all_rows) == (4, 6)  # one forward over each kept row
    assert skip_stats["trained_rows_fraction"] == pytest.approx(4 / 6)
    assert skip_loss == pytest.approx(all_loss, rel=1e-5, abs=1e-7) and skip_loss != 0
    assert skip_grads.keys() == all_grads.keys() and skip_grads
    for name, grad in all_grads.items():
        torch.testing.assert_close(skip_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_rows_are_kept_when_a_kl_or_entropy_term_reads_them(embedded_model, monkeypatch):
    for training, forwarded in (({"use_kl_loss": True, "kl_coef": 0.1}, 12), ({"entropy_coeff": 0.01}, 6)):
        config, learner_group = _advantage_only_learner(embedded_model, **training)
        seen = _forwarded_rows(monkeypatch)
        try:
            _update(learner_group, config)
        finally:
            learner_group.shutdown()
        # Every row trains; with the KL term the reference's no-grad pass scores all 6 first.
        assert sum(seen) == forwarded, training


def test_pi_old_is_scored_on_the_rows_that_train_only(embedded_model, monkeypatch):
    """Two minibatches of 3: pi_old comes from a no-grad forward before the update, over the 4
    rows with advantage; the 2 without it are neither scored nor trained."""
    config, learner_group = _advantage_only_learner(embedded_model)
    seen = _forwarded_rows(monkeypatch)
    batch = grpo_batch(config)
    try:
        learner_group.update(batch=batch, minibatch_size=3, num_epochs=1, shuffle_batch_per_epoch=False,
                             timesteps={"num_env_steps_sampled_lifetime": 0})
    finally:
        learner_group.shutdown()
    arrays = batch.policy_batches["default_policy"]
    signal = np.asarray(arrays["advantages"]).any(axis=1)
    assert signal.sum() == 4
    assert sum(seen) == 4 + 4  # the no-grad pass, then the two minibatches' training passes
    old = np.asarray(arrays["old_logprobs"]) * np.asarray(arrays["response_mask"])
    assert np.abs(old[signal]).sum(axis=1).all() and not old[~signal].any()


def test_a_minibatch_without_advantage_steps_on_zero_gradients_without_a_forward(embedded_model, monkeypatch):
    config, learner_group = _advantage_only_learner(embedded_model)
    seen = _forwarded_rows(monkeypatch)
    batch = grpo_batch(config)
    policy_batch = batch.policy_batches["default_policy"]
    policy_batch["advantages"] = np.zeros_like(policy_batch["advantages"])  # every group's rewards equal
    try:
        results = learner_group.update(batch=batch, minibatch_size=None, num_epochs=1, shuffle_batch_per_epoch=False,
                                       timesteps={"num_env_steps_sampled_lifetime": 0})
        llm = learner_group._learner.module["default_policy"].unwrapped().llm
        trainable = [p for p in llm.parameters() if p.requires_grad]
        assert trainable and all(p.grad is not None and not p.grad.any() for p in trainable)
    finally:
        learner_group.shutdown()
    assert seen == []
    assert float(results[0]["default_policy"]["total_loss"].peek()) == 0.0
    assert results[0]["default_policy"]["trained_rows_fraction"].peek() == 0.0


def test_trained_rows_fraction_is_the_mean_over_the_updates_minibatches(embedded_model):
    """Minibatches of 3 rows, one group each: the first group's rewards made equal (no row
    trains), the second's as they are (2 of 3): 1/3 over the update; the next update, both
    groups as they are, counts its own minibatches only (2/3)."""
    config, learner_group = _advantage_only_learner(embedded_model)
    try:
        for equal_first_group, expected in ((True, 1 / 3), (False, 2 / 3)):
            batch = grpo_batch(config)
            if equal_first_group:
                batch.policy_batches["default_policy"]["advantages"][:3] = 0.0
            results = learner_group.update(batch=batch, minibatch_size=3, num_epochs=1, shuffle_batch_per_epoch=False,
                                           timesteps={"num_env_steps_sampled_lifetime": 0})
            assert results[0]["default_policy"]["trained_rows_fraction"].peek() == pytest.approx(expected)
    finally:
        learner_group.shutdown()


def test_loss_stats_are_the_mean_over_the_updates_minibatches(embedded_model):
    """Minibatches of 3 rows, one group each, the second a copy of the first (lr 0: both give the
    same loss L). Reported: L. With the copy's rewards made equal (a minibatch without
    advantage, loss 0) the update reports L / 2, not the last minibatch's 0."""
    config, learner_group = _advantage_only_learner(embedded_model)
    reported = {}
    try:
        for equal_second_group in (False, True):
            batch = grpo_batch(config)
            arrays = batch.policy_batches["default_policy"]
            for key in arrays.keys():
                arrays[key][3:6] = arrays[key][0:3]
            if equal_second_group:
                arrays["advantages"][3:6] = 0.0
            results = learner_group.update(batch=batch, minibatch_size=3, num_epochs=1, shuffle_batch_per_epoch=False,
                                           timesteps={"num_env_steps_sampled_lifetime": 0})
            reported[equal_second_group] = {k: float(results[0]["default_policy"][k].peek())
                                            for k in ("policy_loss", "entropy")}
    finally:
        learner_group.shutdown()
    assert reported[False]["policy_loss"] != 0.0
    assert reported[True]["policy_loss"] == pytest.approx(reported[False]["policy_loss"] / 2, rel=1e-4)
    # The other stats describe the rows that trained: the one minibatch with advantage.
    assert reported[True]["entropy"] == pytest.approx(reported[False]["entropy"], rel=1e-4)
