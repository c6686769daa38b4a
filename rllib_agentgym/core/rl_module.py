"""LLMRLModule: an RLlib TorchRLModule around a Hugging Face causal LM.

`model_config` keys:
    model:                   local path, hub id, or "embedded" (the project's tiny Qwen2)
    dtype:                   "float32" | "bfloat16" | "float16" | "auto"
    gradient_checkpointing:  trade compute for activation memory
    compute_entropy:         also return per-token entropy in forward_train
    entropy_grad:            keep the entropy's graph (for an entropy bonus in the loss)

forward_train takes a batch with `input_ids` and `attention_mask` [B, T] and
returns per-token `logprobs` [B, T] (logprobs[:, t] = log pi(x_t | x_<t);
position 0 has no prediction and is 0) and, if asked, `entropy` [B, T]
(entropy of the distribution that produced x_t). Weights travel in Hugging
Face names, so an inference engine can load them as they are.
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_agentgym.algorithms.losses import entropy_from_logits, logprobs_from_logits
from rllib_agentgym.core.embedded import resolve_model_path


def load_causal_lm(model: str, dtype: str = "float32"):
    from transformers import AutoModelForCausalLM

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    return AutoModelForCausalLM.from_pretrained(resolve_model_path(model), dtype=torch_dtype)


def token_logprobs_and_entropy(
    llm, input_ids, attention_mask, compute_entropy: bool = True, entropy_grad: bool = False
) -> Dict[str, torch.Tensor]:
    """Per-token log-probs (and entropies) of `input_ids` under `llm`, shifted to the token's position."""
    logits = llm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1]
    logits = logits.float()
    logprobs = logprobs_from_logits(logits, input_ids[:, 1:])
    zero = logprobs.new_zeros(logprobs.shape[0], 1)
    out = {"logprobs": torch.cat([zero, logprobs], dim=1)}
    if compute_entropy:
        # A diagnostic unless an entropy bonus is trained (then it keeps its graph).
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            out["entropy"] = torch.cat([zero, entropy_from_logits(logits)], dim=1)
    return out


class LLMRLModule(TorchRLModule):
    def setup(self):
        cfg = dict(self.model_config or {})
        self.llm = load_causal_lm(cfg.get("model", "embedded"), cfg.get("dtype", "float32"))
        if cfg.get("gradient_checkpointing"):
            self.llm.gradient_checkpointing_enable()
            self.llm.config.use_cache = False
        self._compute_entropy = bool(cfg.get("compute_entropy", True))
        self._entropy_grad = bool(cfg.get("entropy_grad", False))

    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        with torch.no_grad():
            return token_logprobs_and_entropy(self.llm, batch["input_ids"], batch["attention_mask"], False)

    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        return token_logprobs_and_entropy(
            self.llm, batch["input_ids"], batch["attention_mask"], self._compute_entropy, self._entropy_grad
        )

    def get_state(self, components=None, *, not_components=None, inference_only: bool = False, **kwargs):
        return convert_to_numpy(self.llm.state_dict())

    def set_state(self, state) -> None:
        tensors = {k: torch.as_tensor(v) for k, v in state.items()}
        missing, unexpected = self.llm.load_state_dict(tensors, strict=False)
        if unexpected:
            raise ValueError(f"weights do not fit this model: unexpected keys {unexpected[:5]}")
