"""GRPO with a LoRA adapter through RLlib's Algorithm, on the bandit with vLLM: only the
adapter trains and travels to the env runner, the KL reference is the base model (adapter
off), and the merged `rllib export` folder gives the same greedy tokens in vLLM and transformers."""

from __future__ import annotations

import numpy as np
import torch

from rllib_agentgym.algorithms.grpo.grpo import GRPOConfig
from rllib_agentgym.cli import main
from rllib_agentgym.core.rl_module import load_causal_lm, token_logprobs_and_entropy
from rllib_agentgym.env_runners.engines import HFEngine, SamplingConfig, VLLMEngine
from rllib_agentgym.env_runners.llm_env_runner import LLMEnvRunner

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "up_proj"]}
PROMPTS = [[1, 392, 262, 201, 41, 81], [1, 548, 75, 290, 337, 86, 201, 1]]
GREEDY = SamplingConfig(max_new_tokens=16, temperature=0.0)


def _tokens(engine) -> list[list[int]]:
    return [g.token_ids for g in engine.generate(PROMPTS, GREEDY)]


def test_grpo_with_lora_trains_and_syncs_the_adapter_only_and_exports_for_vllm(
        ray_local, embedded_model, tmp_path, monkeypatch):
    received: list[set[str]] = []  # the tensor names each set_weights call of a runner got
    set_weights = LLMEnvRunner.set_weights

    def recording_set_weights(self, weights):
        received.append(set(weights))
        return set_weights(self, weights)

    monkeypatch.setattr(LLMEnvRunner, "set_weights", recording_set_weights)
    cfg = (
        GRPOConfig()
        .environment("agentgym/bandit")
        .llm(inference_engine="vllm", model_dtype="float32", max_model_len=512, group_size=4,
             tasks_per_iteration=2, max_turns=1, max_new_tokens=2)
        .training(lora=LORA, lr=1e-2, micro_batch_size=8, kl_coef=0.01, use_kl_loss=True)
        .debugging(seed=0)
    )
    cfg.log_trajectories = 0
    algo = cfg.build_algo()
    module = algo.learner_group._learner.module["default_policy"].unwrapped()
    learner = algo.learner_group._learner
    try:
        base_before = {n: p.detach().clone() for n, p in module.llm.named_parameters() if ".lora_" not in n}
        adapter_before = {n: p.detach().clone() for n, p in module.llm.named_parameters() if ".lora_" in n}
        algo.train()
        params = dict(module.llm.named_parameters())
        # Only the adapter learned; the base weights are frozen.
        assert all(torch.equal(params[n], p) for n, p in base_before.items())
        assert any(not torch.equal(params[n], p) for n, p in adapter_before.items())
        assert all(p.requires_grad == (".lora_" in n) for n, p in params.items())
        # The runner got the adapter alone, and its vLLM now runs the merged model.
        assert received and all(names and all(".lora_" in n for n in names) for names in received)
        engine_tokens = _tokens(algo.env_runner_group.local_env_runner._engine)

        # The KL reference is the base model: the learner's ref log-probs are the base's.
        assert not learner._ref_models  # no frozen copy of the LLM is kept with LoRA
        rollouts = algo._sample()
        batch = algo._build_batch([t for r in rollouts for t in r.trajectories]).policy_batches["default_policy"]
        learner._prepare_batch(batch, {}, "default_policy")
        ids, attention = torch.as_tensor(batch["input_ids"]), torch.as_tensor(batch["attention_mask"])
        mask = np.asarray(batch["response_mask"]) > 0
        with torch.no_grad():
            base = token_logprobs_and_entropy(load_causal_lm(embedded_model).eval(), ids, attention, False)["logprobs"]
            policy = token_logprobs_and_entropy(module.llm.eval(), ids, attention, False)["logprobs"]
        np.testing.assert_allclose(np.asarray(batch["ref_logprobs"])[mask], base.numpy()[mask], atol=1e-5)
        assert np.abs(policy.numpy()[mask] - base.numpy()[mask]).max() > 1e-3  # the adapter does change them
        checkpoint = algo.save(str(tmp_path / "ckpt")).checkpoint.path
    finally:
        algo.stop()

    out = tmp_path / "merged"
    assert main(["export", checkpoint, "--to", str(out)]) == 0
    hf = HFEngine(str(out), dtype="float32")
    vllm = VLLMEngine(str(out), dtype="float32", max_model_len=512, seed=0)
    try:
        exported = _tokens(vllm)
    finally:
        vllm.shutdown()
    assert exported == _tokens(hf)
    assert exported == engine_tokens  # the runner's engine ran the same merged model
    with torch.no_grad():  # and the export is the learner's adapted policy
        ref = module.llm.eval()(torch.tensor([PROMPTS[0]])).logits
        torch.testing.assert_close(hf._model(torch.tensor([PROMPTS[0]])).logits, ref, atol=1e-4, rtol=1e-4)
