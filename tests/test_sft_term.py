"""GRPO's `sft_coef` term (PPO-ptx): each optimizer step's gradient is the RL minibatch's plus
sft_coef times that of the expert conversations' token-mean NLL at temperature 1, here checked
against the NLL written out with plain transformers; a restored learner goes on with the expert
batches where the checkpointed one left off; and its settings fail clearly."""

from __future__ import annotations

import pytest
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner
from rllib_agentgym.algorithms.sft.examples import ExampleStream, load_conversations, pad_examples, tokenize_examples
from rllib_agentgym.algorithms.sft.sft import AgentSFTConfig
from rllib_agentgym.core.rl_module import load_causal_lm
from rllib_agentgym.envs.gym_env import text_space
from learner_batches import grpo_batch

EXPERT = {"num": 3, "split": "train"}  # TextCraft's planner plays three train goals


class GradientRecordingLearner(GRPOTorchLearner):
    def build(self) -> None:
        super().build()
        self.raw: list[dict] = []

    def postprocess_gradients(self, gradients_dict):
        self.raw.append({pid: g.detach().clone() for pid, g in gradients_dict.items()})
        return super().postprocess_gradients(gradients_dict)


def _config(embedded_model, **training) -> GRPOConfig:
    return (
        GRPOConfig()
        .environment("agentgym/textcraft")
        .llm(model_path=embedded_model, temperature=0.7, max_model_len=512)
        .training(lr=0.0, micro_batch_size=2, use_kl_loss=False, **training)
        .learners(num_learners=0, learner_class=GradientRecordingLearner)
        .debugging(seed=3)
    )


def _one_update(config):
    """Gradients {parameter name: tensor} of one update from the model on disk (lr 0), and its metrics."""
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()
    learner_group = config.build_learner_group(rl_module_spec=spec)
    try:
        results = learner_group.update(batch=grpo_batch(config), timesteps={"num_env_steps_sampled_lifetime": 0})
        learner = learner_group._learner
        names = {id(p): name for name, p in learner.module["default_policy"].unwrapped().llm.named_parameters()}
        (raw,) = learner.raw
        grads = {names[id(learner._params[pid])]: g for pid, g in raw.items()}
        return grads, {k: v.peek() for k, v in results[0]["default_policy"].items()}
    finally:
        learner_group.shutdown()


def _hand_expert_nll_gradients(config, embedded_model):
    """The first expert batch the learner draws, its NLL at temperature 1 by plain transformers
    (log_softmax of the logits, the next token's entry, mean over response tokens), and the
    gradients of that NLL."""
    examples, pad_id = tokenize_examples(config.model_path, load_conversations(config), config.max_model_len)
    arrays = pad_examples(ExampleStream(examples, seed=config.seed).next(config.sft_batch_size), pad_id)
    ids, attention = torch.as_tensor(arrays["input_ids"]), torch.as_tensor(arrays["attention_mask"])
    mask = torch.as_tensor(arrays["response_mask"])[:, 1:].bool()
    llm = load_causal_lm(embedded_model)
    logits = llm(input_ids=ids, attention_mask=attention).logits.float()
    picked = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    nll = -picked[mask].mean()
    nll.backward()
    return float(nll.detach()), {name: p.grad for name, p in llm.named_parameters() if p.grad is not None}


def test_the_step_adds_sft_coef_times_the_expert_nll_gradient(ray_local, embedded_model):
    coef = 0.5
    rl_only, _ = _one_update(_config(embedded_model))
    config = _config(embedded_model, sft_coef=coef, sft_expert=EXPERT, sft_batch_size=3)
    mixed, metrics = _one_update(config)
    nll, hand = _hand_expert_nll_gradients(config, embedded_model)

    assert metrics["sft_loss"] == pytest.approx(nll, rel=1e-4)
    assert set(hand) <= set(mixed)
    difference = {name: mixed[name] - rl_only.get(name, torch.zeros_like(mixed[name])) for name in hand}
    flat = lambda grads: torch.cat([grads[name].flatten().double() for name in sorted(hand)])  # noqa: E731
    torch.testing.assert_close(flat(difference), coef * flat(hand), rtol=1e-3, atol=1e-6)
    assert flat(hand).norm() > 0  # the term moved the step


def test_sft_term_settings_fail_clearly(embedded_model):
    with pytest.raises(ValueError, match="needs expert data"):
        _config(embedded_model, sft_coef=0.1).validate()
    with pytest.raises(ValueError, match="sft_coef must be >= 0"):
        _config(embedded_model, sft_coef=-1.0, sft_expert=EXPERT).validate()
    with pytest.raises(ValueError, match="sft_batch_size"):
        _config(embedded_model, sft_coef=0.1, sft_expert=EXPERT, sft_batch_size=0).validate()
    with pytest.raises(ValueError, match="one learner"):
        _config(embedded_model, sft_coef=0.1, sft_expert=EXPERT).learners(num_learners=2).validate()
    with pytest.raises(ValueError, match="AgentSFT's loss"):
        AgentSFTConfig().environment("agentgym/textcraft").training(sft_expert=EXPERT, sft_coef=0.1).validate()
    # The data options are YAML keys too (a tuned example's `config:` block).
    cfg = GRPOConfig().update_from_dict({"env": "agentgym/textcraft", "sft_coef": 0.2, "sft_expert": EXPERT})
    assert (cfg.sft_coef, cfg.sft_expert, cfg.sft_batch_size) == (0.2, EXPERT, 8)


def test_a_restored_learner_draws_the_expert_batches_the_run_would_have(ray_local, embedded_model, tmp_path):
    """Checkpoint after one update, restore into a new learner group: its next expert batch (seen
    through its NLL at lr 0) is the one the original draws next, not a fresh stream's first."""
    config = _config(embedded_model, sft_coef=1.0, sft_expert=EXPERT, sft_batch_size=2)
    spec = config.get_default_rl_module_spec()
    spec.observation_space, spec.action_space = text_space(), text_space()

    def next_nll(group) -> float:
        results = group.update(batch=grpo_batch(config), timesteps={"num_env_steps_sampled_lifetime": 0})
        return results[0]["default_policy"]["sft_loss"].peek()

    original, restored, fresh = (config.build_learner_group(rl_module_spec=spec) for _ in range(3))
    try:
        first = next_nll(original)
        original.save_to_path(tmp_path / "learner_group")
        restored.restore_from_path(tmp_path / "learner_group")
        expected = next_nll(original)
        assert next_nll(restored) == pytest.approx(expected, rel=1e-6)
        assert next_nll(fresh) == pytest.approx(first, rel=1e-6)  # a fresh stream starts over
        assert expected != pytest.approx(first, rel=1e-3)
    finally:
        for group in (original, restored, fresh):
            group.shutdown()
