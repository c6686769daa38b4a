"""The GRPO learner's optimizer steps, driven through RLlib's LearnerGroup:

* several epochs / minibatches per batch: pi_old is the policy before the update, the
  ratio leaves 1 after the first step, the clip engages, and the learner's loss equals
  the clipped surrogate + KL computed here by hand;
* `grad_clip` bounds the norm of the gradient handed to the optimizer;
* `gradient_checkpointing` recomputes the layers and leaves loss and gradients unchanged;
* finite gradients step in one read (`all_finite`) exactly as RLlib's per-parameter path
  does, and a non-finite one still gets RLlib's policy (zeroed, or the step skipped).
"""

from __future__ import annotations

import math

import pytest
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from ray.rllib.core.learner.torch.torch_learner import TorchLearner

from rllib_agentgym.algorithms.grpo.torch import grpo_torch_learner
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner
from rllib_agentgym.core.rl_module import load_causal_lm
from rllib_agentgym.envs.gym_env import text_space
from learner_batches import grpo_batch

EPS = 0.02  # clip range [0.98, 1.02]: small, so one lr-1e-3 step leaves it on many tokens
KL_COEF = 0.1
GNORM = "gradients_default_optimizer_global_norm"  # RLlib's pre-clip global norm


class RecordingLearner(GRPOTorchLearner):
    """The production learner, keeping what each loss call and each optimizer step saw."""

    def build(self) -> None:
        super().build()
        self.loss_calls: list[dict] = []
        self.raw: list[dict] = []
        self.applied: list[dict] = []

    def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id=module_id, config=config, batch=batch, fwd_out=fwd_out)
        keep = ("input_ids", "attention_mask", "response_mask", "advantages", "old_logprobs", "ref_logprobs")
        self.loss_calls.append({
            "batch": {k: batch[k].detach().clone() for k in keep if k in batch},
            "logprobs": fwd_out["logprobs"].detach().clone(),
            "loss": float(loss.detach()),
            "stats": {k: float(v) for k, v in self._last_stats.items()},
        })
        return loss

    def postprocess_gradients(self, gradients_dict):
        self.raw.append({pid: g.detach().clone() for pid, g in gradients_dict.items()})  # before clipping
        return super().postprocess_gradients(gradients_dict)

    def apply_gradients(self, gradients_dict) -> None:
        # What the optimizer steps with: after `postprocess_gradients` (gradient clipping).
        self.applied.append({pid: g.detach().clone() for pid, g in gradients_dict.items()})
        super().apply_gradients(gradients_dict)


def _learner_group(embedded_model, learner_class=None, skip_nan_gradients=False, **training):
    config = (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model, gradient_checkpointing=training.pop("gradient_checkpointing", False))
        .training(**training)
        .framework(torch_skip_nan_gradients=skip_nan_gradients)
        .learners(num_learners=0, learner_class=learner_class or RecordingLearner)
    )
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    return config, config.build_learner_group(rl_module_spec=spec)


def _update(learner_group, config, *, num_epochs=1, minibatch_size=None):
    results = learner_group.update(batch=grpo_batch(config), minibatch_size=minibatch_size, num_epochs=num_epochs,
                                   shuffle_batch_per_epoch=False, timesteps={"num_env_steps_sampled_lifetime": 0})
    return {k: v.peek() for k, v in results[0]["default_policy"].items()}


def _hf_token_logprobs(llm, batch) -> torch.Tensor:
    """log pi(x_t | x_<t) by plain transformers: logits -> log_softmax -> the next token's entry."""
    with torch.no_grad():
        logits = llm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
    picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(picked[:, :1]), picked], dim=1)


def _hand_loss(call, eps_low, eps_high, kl_coef):
    """Token-mean clipped surrogate + kl_coef * token-mean k3 KL, written out, and the clip fraction."""
    b = call["batch"]
    mask = b["response_mask"].bool()
    adv, logp, old, ref = b["advantages"][mask], call["logprobs"][mask], b["old_logprobs"][mask], b["ref_logprobs"][mask]
    ratio = torch.exp(logp - old)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    surrogate = torch.maximum(unclipped, clipped).mean()
    d = ref - logp
    kl = (torch.exp(d) - d - 1).mean()
    # The clipped term is the larger one exactly where the ratio left the range on the side
    # that the advantage's sign pushes it to.
    was_clipped = ((adv > 0) & (ratio > 1 + eps_high)) | ((adv < 0) & (ratio < 1 - eps_low))
    return {
        "loss": float(surrogate + kl_coef * kl),
        "unclipped_loss": float(unclipped.mean() + kl_coef * kl),
        "clip_fraction": float(was_clipped.float().mean()),
        "max_abs_log_ratio": float((logp - old).abs().max()),
    }


@pytest.mark.parametrize("num_epochs, minibatch_size", [(2, None), (1, 3)], ids=["two-epochs", "two-minibatches"])
def test_later_steps_use_pi_old_and_clip(embedded_model, num_epochs, minibatch_size):
    config, learner_group = _learner_group(
        embedded_model, lr=1e-3, clip_ratio_low=EPS, clip_ratio_high=EPS, kl_coef=KL_COEF, micro_batch_size=8,
        grad_clip=None,
    )
    try:
        metrics = _update(learner_group, config, num_epochs=num_epochs, minibatch_size=minibatch_size)
        calls = learner_group._learner.loss_calls
    finally:
        learner_group.shutdown()
    assert len(calls) == 2  # two optimizer steps, one micro-batch each
    first, second = calls

    # pi_old: the policy before the update, i.e. the model on disk, for every step.
    start = load_causal_lm(embedded_model).eval()
    for call in calls:
        b, mask = call["batch"], call["batch"]["response_mask"].bool()
        torch.testing.assert_close(b["old_logprobs"][mask], _hf_token_logprobs(start, b)[mask], rtol=1e-4, atol=1e-4)
    if num_epochs == 2:  # the same rows twice: pi_old does not move between epochs
        torch.testing.assert_close(second["batch"]["old_logprobs"], first["batch"]["old_logprobs"])

    # Step 1 starts at pi_old: ratio 1, nothing clipped.
    hand1 = _hand_loss(first, EPS, EPS, KL_COEF)
    assert hand1["max_abs_log_ratio"] < 1e-4
    assert first["stats"]["clip_fraction"] == 0.0
    assert first["loss"] == pytest.approx(hand1["loss"], rel=1e-4, abs=1e-6)

    # Step 2 runs after an optimizer step: the ratio moved, the clip engaged.
    hand2 = _hand_loss(second, EPS, EPS, KL_COEF)
    assert hand2["max_abs_log_ratio"] > 2 * EPS
    assert hand2["clip_fraction"] > 0
    assert second["stats"]["clip_fraction"] == pytest.approx(hand2["clip_fraction"], abs=1e-6)
    assert second["loss"] == pytest.approx(hand2["loss"], rel=1e-4, abs=1e-6)
    assert abs(hand2["loss"] - hand2["unclipped_loss"]) > 1e-4  # clipping changed the objective
    assert second["stats"]["ratio_max"] > 1 + EPS or second["stats"]["ratio_min"] < 1 - EPS
    # The reported clip fraction is the mean over the update's steps: the first clips nothing.
    assert metrics["clip_fraction"] == pytest.approx(hand2["clip_fraction"] / 2, abs=1e-6)


def _global_norm(grads: dict) -> float:
    return math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))


def _one_step(embedded_model, **training):
    """One update from the model on disk (lr 0: the weights stay where they were); returns the
    metrics, the loss calls and the gradients {name: tensor} before and after postprocessing."""
    config, learner_group = _learner_group(embedded_model, lr=0.0, kl_coef=KL_COEF, micro_batch_size=2, **training)
    try:
        metrics = _update(learner_group, config)
        learner = learner_group._learner
        names = {id(p): name for name, p in learner.module["default_policy"].unwrapped().llm.named_parameters()}
        (raw,), (applied,) = learner.raw, learner.applied
        by_name = lambda grads: {names[id(learner._params[pid])]: g for pid, g in grads.items()}  # noqa: E731
        return metrics, learner.loss_calls, by_name(raw), by_name(applied)
    finally:
        learner_group.shutdown()


def test_grad_clip_bounds_the_applied_gradient_norm(embedded_model):
    clip = 1e-3
    metrics, _, raw, applied = _one_step(embedded_model, grad_clip=clip, grad_clip_by="global_norm")
    raw_norm = _global_norm(raw)
    assert raw_norm > 100 * clip  # the clip has work to do
    assert metrics[GNORM] == pytest.approx(raw_norm, rel=1e-4)  # RLlib logs the norm before clipping
    assert _global_norm(applied) == pytest.approx(clip, rel=1e-4)  # the optimizer steps with the clipped one
    # Same direction, scaled by clip / norm.
    assert applied.keys() == raw.keys()
    for name, g in raw.items():
        torch.testing.assert_close(applied[name], g * (clip / raw_norm), rtol=1e-3, atol=1e-12, msg=name)


def test_gradient_checkpointing_recomputes_with_the_same_loss_and_gradients(embedded_model, monkeypatch):
    layer_calls = {"count": 0}
    original = RecordingLearner.build

    def build_and_count(self):
        original(self)
        layer = self.module["default_policy"].unwrapped().llm.model.layers[0]
        forward = layer.forward

        def counted(*args, **kwargs):  # (a forward hook does not see the recomputation)
            layer_calls["count"] += 1
            return forward(*args, **kwargs)

        layer.forward = counted

    monkeypatch.setattr(RecordingLearner, "build", build_and_count)
    _, plain_calls, plain, _ = _one_step(embedded_model, entropy_coeff=0.01, gradient_checkpointing=False)
    plain_layer_calls, layer_calls["count"] = layer_calls["count"], 0
    _, ckpt_calls, ckpt, _ = _one_step(embedded_model, entropy_coeff=0.01, gradient_checkpointing=True)

    # Checkpointing really ran: each layer's forward runs again in the backward pass.
    assert plain_layer_calls == len(plain_calls) == 3  # three micro-batches of two
    assert layer_calls["count"] == 2 * plain_layer_calls
    assert [c["loss"] for c in ckpt_calls] == pytest.approx([c["loss"] for c in plain_calls], rel=1e-5, abs=1e-7)
    assert ckpt.keys() == plain.keys() and len(plain) == len(list(load_causal_lm(embedded_model).parameters()))
    for name, g in plain.items():
        torch.testing.assert_close(ckpt[name], g, rtol=1e-4, atol=1e-6, msg=name)


class NanGradientLearner(GRPOTorchLearner):
    """Puts a NaN into the first entry of one gradient (`nan_pid`, None: none) before the step."""

    nan_pid = None

    def postprocess_gradients(self, gradients_dict):
        grads = super().postprocess_gradients(gradients_dict)
        if self.nan_pid is not None:
            grads[self.nan_pid].view(-1)[0] = float("nan")
        return grads


def _step_weights(embedded_model, monkeypatch, *, nan: bool = False, rllib_path: bool = False,
                  skip_nan: bool = False) -> tuple[dict, dict, int]:
    """Weights before and after one lr-1e-3 update, and how often RLlib's own `apply_gradients` ran."""
    rllib_calls = []
    original = TorchLearner.apply_gradients
    monkeypatch.setattr(TorchLearner, "apply_gradients", lambda self, g: rllib_calls.append(1) or original(self, g))
    if rllib_path:  # what RLlib does alone: its per-parameter checks
        monkeypatch.setattr(grpo_torch_learner, "all_finite", lambda tensors: False)
    config, learner_group = _learner_group(embedded_model, NanGradientLearner, skip_nan_gradients=skip_nan, lr=1e-3,
                                           kl_coef=KL_COEF, micro_batch_size=2)
    try:
        learner = learner_group._learner
        llm = learner.module["default_policy"].unwrapped().llm
        if nan:
            learner.nan_pid = next(iter(learner._params))
        before = {n: p.detach().clone() for n, p in llm.named_parameters()}
        _update(learner_group, config)
        return before, {n: p.detach().clone() for n, p in llm.named_parameters()}, len(rllib_calls)
    finally:
        learner_group.shutdown()


def test_finite_gradients_step_in_one_read_as_rllib_steps(embedded_model, monkeypatch):
    before, fast, rllib_calls = _step_weights(embedded_model, monkeypatch)
    assert rllib_calls == 0  # no per-parameter checks
    _, slow, rllib_calls = _step_weights(embedded_model, monkeypatch, rllib_path=True)
    assert rllib_calls == 1
    assert any(not torch.equal(before[n], fast[n]) for n in before)  # it stepped
    for name in fast:
        assert torch.equal(fast[name], slow[name]), name


@pytest.mark.parametrize("skip_nan", [False, True], ids=["zeroed", "skipped"])
def test_a_nan_gradient_gets_rllibs_nan_policy(embedded_model, monkeypatch, skip_nan):
    before, after, rllib_calls = _step_weights(embedded_model, monkeypatch, nan=True, skip_nan=skip_nan)
    assert all(torch.isfinite(w).all() for w in after.values())
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    if skip_nan:  # the documented skip (RLlib's own path would step with the NaN)
        assert rllib_calls == 0 and not changed
    else:  # RLlib's default: its path turns the NaN entry into 0 and steps
        assert rllib_calls == 1 and changed


@pytest.mark.parametrize("source", ["learner", "engine"])
def test_old_logprobs_from_the_engine_skip_the_pi_old_forward(embedded_model, monkeypatch, source):
    forwards = []
    original = GRPOTorchLearner._forward_no_grad
    monkeypatch.setattr(GRPOTorchLearner, "_forward_no_grad",
                        lambda self, *a, **k: forwards.append(1) or original(self, *a, **k))
    config, learner_group = _learner_group(embedded_model, lr=1e-3, use_kl_loss=False, micro_batch_size=2,
                                           old_logprobs=source)
    try:
        _update(learner_group, config, num_epochs=2)  # two optimizer steps: pi_old is needed
        calls = learner_group._learner.loss_calls
    finally:
        learner_group.shutdown()
    assert len(forwards) == (0 if source == "engine" else 1)
    for call in calls:
        mask = call["batch"]["response_mask"].bool()
        old = call["batch"]["old_logprobs"][mask]
        if source == "engine":  # the batch's sampling log-probs (-1 for every generated token)
            assert torch.equal(old, torch.full_like(old, -1.0))
        else:  # the policy's own before the update: the first epoch's ratio is exactly 1
            assert (old < -1.5).all()  # a 49k-vocabulary model's log-probs of random tokens


def test_old_logprobs_from_the_engine_need_the_sampling_distribution():
    GRPOConfig().environment("agentgym/textcraft").training(old_logprobs="engine").validate()
    with pytest.raises(ValueError, match="temperature 1 and top_p 1"):
        GRPOConfig().environment("agentgym/textcraft").training(old_logprobs="engine").llm(temperature=0.7).validate()
    with pytest.raises(ValueError, match="temperature 1 and top_p 1"):
        GRPOConfig().environment("agentgym/textcraft").training(old_logprobs="engine").llm(top_p=0.9).validate()
    with pytest.raises(ValueError, match="old_logprobs 'rollout' unknown"):
        GRPOConfig().environment("agentgym/textcraft").training(old_logprobs="rollout").validate()


def test_sgd_steps_each_weight_by_lr_times_its_clipped_gradient(embedded_model):
    lr = 0.5
    config, learner_group = _learner_group(embedded_model, lr=lr, use_kl_loss=False, grad_clip=1.0,
                                           policy_optimizer="sgd")
    try:
        learner = learner_group._learner
        optimizer = learner.get_optimizer()
        assert isinstance(optimizer, torch.optim.SGD)
        params = learner._params
        before = {pid: p.detach().clone() for pid, p in params.items()}
        stats = _update(learner_group, config)
        (applied,) = learner.applied
    finally:
        learner_group.shutdown()
    assert stats[GNORM] > 0
    moved = 0
    for pid, grad in applied.items():
        # w' = w - lr * g: a weight with a small gradient takes a small step (Adam's would be ~lr).
        torch.testing.assert_close(params[pid].detach(), before[pid] - lr * grad, rtol=0, atol=1e-6)
        moved += int(grad.abs().max() > 0)
    assert moved > 0


def test_policy_optimizer_settings_are_checked():
    base = GRPOConfig().environment("agentgym/textcraft")
    base.training(policy_optimizer="sgd", sgd_momentum=0.9).validate()
    with pytest.raises(ValueError, match="policy_optimizer 'lion' unknown"):
        GRPOConfig().environment("agentgym/textcraft").training(policy_optimizer="lion").validate()
    with pytest.raises(ValueError, match=r"sgd_momentum must be in \[0, 1\)"):
        GRPOConfig().environment("agentgym/textcraft").training(policy_optimizer="sgd", sgd_momentum=1.0).validate()
    with pytest.raises(ValueError, match="sgd_momentum is SGD's"):
        GRPOConfig().environment("agentgym/textcraft").training(sgd_momentum=0.9).validate()
