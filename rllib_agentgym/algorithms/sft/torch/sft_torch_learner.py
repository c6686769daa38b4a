"""SFT learner: token-mean negative log-likelihood on the assistant tokens, plus an optional
language-modelling term on the observation tokens (mask o, weight lambda = observation_loss_weight):

    L = - sum_{i,t} m_{i,t} log pi(x_{i,t} | x_{i,<t}) / sum_{i,t} m_{i,t}
        - lambda * sum_{i,t} o_{i,t} log pi(x_{i,t} | x_{i,<t}) / sum_{i,t} o_{i,t}

Each term is a mean over its own tokens, so lambda does not rescale the response loss.

It reuses GRPO's learner for everything but the loss (micro-batching with
gradient accumulation, DDP-exact normalization, optimizers, LoRA).
"""

from __future__ import annotations

from typing import Any, Dict

from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import SFT_LOSS, GRPOTorchLearner
from rllib_agentgym.algorithms.losses import aggregate_loss, global_loss_counts

OBSERVATION_LOSS = "sft_observation_loss"


class SFTTorchLearner(GRPOTorchLearner):
    def _wants_reference(self) -> bool:
        return False

    def _skips_zero_advantage_rows(self, module_id) -> bool:
        return False  # every expert row trains: the loss is the NLL, not an advantage-weighted surrogate

    def _prepare_batch(self, policy_batch, kwargs: Dict[str, Any], module_id=None) -> None:
        pass  # no reference, no old log-probs, no advantages

    def _accumulate_gradients(self, module_id, module_batch):
        # The observation term's normalizer is the whole minibatch's, like the response term's.
        if "observation_mask" in module_batch:
            self._observation_counts = self._global_counts(module_batch["observation_mask"])
        return super()._accumulate_gradients(module_id, module_batch)

    def compute_loss_for_module(self, *, module_id, config, batch: Dict[str, Any], fwd_out: Dict[str, Any]):
        counts = getattr(self, "_loss_counts", None) or global_loss_counts(batch["response_mask"])
        mask = batch["response_mask"]
        nll = aggregate_loss(-fwd_out["logprobs"], mask, "token-mean", **counts)
        self._last_stats = {SFT_LOSS: nll.detach()}
        if "entropy" in fwd_out:
            self._last_stats["entropy"] = aggregate_loss(fwd_out["entropy"], mask, "token-mean", **counts).detach()
        weight = config.observation_loss_weight
        if weight and "observation_mask" in batch:
            counts = getattr(self, "_observation_counts", None) or global_loss_counts(batch["observation_mask"])
            observation_nll = aggregate_loss(-fwd_out["logprobs"], batch["observation_mask"], "token-mean", **counts)
            self._last_stats[OBSERVATION_LOSS] = observation_nll.detach()
            return nll + weight * observation_nll
        return nll
