"""SFT learner: token-mean negative log-likelihood on the assistant tokens.

    L = - sum_{i,t} m_{i,t} log pi(x_{i,t} | x_{i,<t}) / sum_{i,t} m_{i,t}

It reuses GRPO's learner for everything but the loss (micro-batching with
gradient accumulation, DDP-exact normalization, optimizers, LoRA).
"""

from __future__ import annotations

from typing import Any, Dict

from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import GRPOTorchLearner
from rllib_agentgym.algorithms.losses import aggregate_loss, global_loss_counts

SFT_LOSS = "sft_loss"


class SFTTorchLearner(GRPOTorchLearner):
    def _wants_reference(self) -> bool:
        return False

    def _prepare_batch(self, policy_batch, kwargs: Dict[str, Any], module_id=None) -> None:
        pass  # no reference, no old log-probs, no advantages

    def compute_loss_for_module(self, *, module_id, config, batch: Dict[str, Any], fwd_out: Dict[str, Any]):
        counts = getattr(self, "_loss_counts", None) or global_loss_counts(batch["response_mask"])
        mask = batch["response_mask"]
        nll = aggregate_loss(-fwd_out["logprobs"], mask, "token-mean", **counts)
        self._last_stats = {SFT_LOSS: nll.detach()}
        if "entropy" in fwd_out:
            self._last_stats["entropy"] = aggregate_loss(fwd_out["entropy"], mask, "token-mean", **counts).detach()
        return nll
