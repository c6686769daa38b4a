"""GRPO's TorchLearner: clipped surrogate + KL to a frozen reference.

Per `update()` call (one training batch):
  * with no gradient, the reference model's log-probs (for the KL term) and,
    when the batch is used for more than one optimizer step, the policy's
    log-probs before the update (pi_old of the importance ratio);
  * per minibatch (RLlib's `minibatch_size` / `num_epochs` iterator): the
    minibatch is cut into micro-batches of `micro_batch_size` trajectories
    whose gradients accumulate, normalized by the WHOLE minibatch's token and
    sequence counts so that the sum equals the full-minibatch loss; then
    gradient clipping and one optimizer step.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Dict

import numpy as np
import torch
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.learner.torch.torch_learner import TorchLearner
from ray.rllib.core.learner.training_data import TrainingData
from ray.rllib.policy.sample_batch import MultiAgentBatch

from rllib_agentgym.algorithms.losses import aggregate_loss, global_loss_counts, kl_penalty, policy_loss
from rllib_agentgym.core.rl_module import token_logprobs_and_entropy

POLICY_LOSS = "policy_loss"
KL = "kl"
ENTROPY = "entropy"


def _micro_slices(batch_size: int, micro: int) -> list[slice]:
    micro = max(1, int(micro or batch_size))
    return [slice(i, min(i + micro, batch_size)) for i in range(0, batch_size, micro)]


def _trim_to_longest(batch: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """Cut right padding shared by every row of a micro-batch (saves compute)."""
    width = int(batch["attention_mask"].sum(dim=1).max().item())
    return {k: (v[:, :width] if v.dim() == 2 else v) for k, v in batch.items()}


class GRPOTorchLearner(TorchLearner):
    def build(self) -> None:
        super().build()
        self._ref_model = None
        if self.config.use_kl_loss and self.config.kl_coef > 0:
            # A frozen copy of the starting policy (DESIGN: KL to the reference).
            self._ref_model = copy.deepcopy(self._llm()).eval()
            for p in self._ref_model.parameters():
                p.requires_grad_(False)

    def _llm(self):
        return self.module[DEFAULT_MODULE_ID].unwrapped().llm

    # ---- per-batch precomputation ----------------------------------------------

    @torch.no_grad()
    def _logprobs_of(self, model, arrays: Dict[str, np.ndarray]) -> np.ndarray:
        out = np.zeros(arrays["input_ids"].shape, dtype=np.float32)
        n = arrays["input_ids"].shape[0]
        for sl in _micro_slices(n, self.config.micro_batch_size):
            ids = torch.as_tensor(arrays["input_ids"][sl], device=self._device)
            mask = torch.as_tensor(arrays["attention_mask"][sl], device=self._device)
            width = int(mask.sum(dim=1).max().item())
            lp = token_logprobs_and_entropy(model, ids[:, :width], mask[:, :width], compute_entropy=False)["logprobs"]
            out[sl, :width] = lp.float().cpu().numpy()
        return out

    def update(self, batch: MultiAgentBatch | None = None, *, training_data: TrainingData | None = None, **kwargs):
        if training_data is None:
            training_data = TrainingData(batch=batch)
        training_data.solve_refs()
        if training_data.batch is not None:
            self._add_logprob_columns(training_data.batch, kwargs)
        return super().update(training_data=training_data, **kwargs)

    def _add_logprob_columns(self, batch: MultiAgentBatch, kwargs: Dict[str, Any]) -> None:
        if DEFAULT_MODULE_ID in batch.policy_batches:
            policy_batch = batch.policy_batches[DEFAULT_MODULE_ID]
            was_training = self._llm().training
            self._llm().eval()
            if self._ref_model is not None:
                policy_batch["ref_logprobs"] = self._logprobs_of(self._ref_model, policy_batch)
            if self._needs_old_logprobs(policy_batch.count, kwargs):
                policy_batch["old_logprobs"] = self._logprobs_of(self._llm(), policy_batch)
            self._llm().train(was_training)

    @staticmethod
    def _needs_old_logprobs(batch_size: int, kwargs: Dict[str, Any]) -> bool:
        minibatch = kwargs.get("minibatch_size") or batch_size
        return kwargs.get("num_epochs", 1) > 1 or minibatch < batch_size

    # ---- one optimizer step over a minibatch ------------------------------------

    def _uncompiled_update(self, batch: Dict, **kwargs):
        module_batch = batch[DEFAULT_MODULE_ID]
        counts = global_loss_counts(module_batch["response_mask"])
        n = module_batch["input_ids"].shape[0]
        slices = _micro_slices(n, self.config.micro_batch_size)
        for optim in self._optimizer_parameters:
            optim.zero_grad(set_to_none=True)
        module = self.module[DEFAULT_MODULE_ID]
        total_loss = 0.0
        stats_sums: Dict[str, float] = {}
        for k, sl in enumerate(slices):
            micro = _trim_to_longest({key: v[sl] for key, v in module_batch.items()})
            # Under DDP, all-reduce gradients only on the last micro-batch.
            sync = contextlib.nullcontext()
            if self.config.num_learners > 1 and k < len(slices) - 1 and hasattr(module, "no_sync"):
                sync = module.no_sync()
            with sync:
                fwd_out = module.forward_train(micro)
                self._loss_counts = counts
                loss = self.compute_loss_for_module(
                    module_id=DEFAULT_MODULE_ID, config=self.config, batch=micro, fwd_out=fwd_out
                )
                loss.backward()
            total_loss += float(loss.detach())
            weight = micro["input_ids"].shape[0] / n
            for name, value in self._last_stats.items():
                stats_sums[name] = stats_sums.get(name, 0.0) + weight * float(value)
        grads = {pid: p.grad for pid, p in self._params.items() if p.grad is not None}
        postprocessed = self.postprocess_gradients(grads)
        self.apply_gradients(postprocessed)
        for name, value in stats_sums.items():
            self.metrics.log_value((DEFAULT_MODULE_ID, name), value, window=1)
        loss_tensor = torch.tensor(total_loss)
        return {}, {DEFAULT_MODULE_ID: loss_tensor}, {}

    def compute_loss_for_module(self, *, module_id, config, batch: Dict[str, Any], fwd_out: Dict[str, Any]):
        """Clipped surrogate + kl_coef * KL(pi || pi_ref) - entropy_coeff * H, aggregated per
        `loss_agg_mode` with the whole minibatch's counts (so micro-batch losses add up)."""
        cfg = config
        counts = getattr(self, "_loss_counts", None) or global_loss_counts(batch["response_mask"])
        mask = batch["response_mask"]
        logprobs = fwd_out["logprobs"]
        old = batch["old_logprobs"] if "old_logprobs" in batch else logprobs.detach()
        loss, stats = policy_loss(
            logprobs,
            old,
            batch["advantages"],
            mask,
            clip_ratio_low=cfg.clip_ratio_low,
            clip_ratio_high=cfg.clip_ratio_high,
            loss_agg_mode=cfg.loss_agg_mode,
            **counts,
        )
        out = {POLICY_LOSS: loss.detach(), **{k: v for k, v in stats.items()}}
        if "ref_logprobs" in batch:
            kl = aggregate_loss(kl_penalty(logprobs, batch["ref_logprobs"], cfg.kl_estimator), mask, cfg.loss_agg_mode, **counts)
            loss = loss + cfg.kl_coef * kl
            out[KL] = kl.detach()
        if "entropy" in fwd_out:
            entropy = aggregate_loss(fwd_out["entropy"], mask, cfg.loss_agg_mode, **counts)
            out[ENTROPY] = entropy.detach()
            if cfg.entropy_coeff:  # the module keeps the entropy's graph when this is set
                loss = loss - cfg.entropy_coeff * entropy
        self._last_stats = out
        return loss
