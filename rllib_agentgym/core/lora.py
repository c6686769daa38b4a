"""LoRA adapters through `peft`, and merging adapter deltas into base weights.

Only the adapter trains and travels: the learner sends the A/B matrices, and
an inference engine that cannot take adapters on the fly (vLLM after start on
CPU, or any engine here) gets the merged weights of the adapted layers:

    W' = W + (alpha / r) * B @ A
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import torch

_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.default)?\.weight$")


def lora_config(cfg: Mapping[str, Any]):
    from peft import LoraConfig

    return LoraConfig(
        r=int(cfg.get("r", cfg.get("rank", 8))),
        lora_alpha=float(cfg.get("alpha", cfg.get("lora_alpha", 16))),
        lora_dropout=float(cfg.get("dropout", 0.0)),
        target_modules=list(cfg.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])),
        bias="none",
        task_type="CAUSAL_LM",
    )


def lora_scaling(cfg: Mapping[str, Any]) -> float:
    c = lora_config(cfg)
    return float(c.lora_alpha) / float(c.r)


def adapter_state(peft_model) -> dict[str, torch.Tensor]:
    """The adapter's tensors only (peft's names, without the adapter name)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft_model).items()}


def load_adapter_state(peft_model, state: Mapping[str, Any]) -> None:
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft_model, {k: torch.as_tensor(v) for k, v in state.items()})
    unexpected = getattr(result, "unexpected_keys", None) or []
    if unexpected:
        raise ValueError(f"adapter weights do not fit this model: unexpected keys {unexpected[:5]}")


def is_adapter_state(state: Mapping[str, Any]) -> bool:
    return bool(state) and all(".lora_" in k for k in state)


def merge_adapter_into(base: Mapping[str, torch.Tensor], adapter: Mapping[str, Any], scaling: float) -> dict[str, torch.Tensor]:
    """Merged HF-named weights W + scaling * B @ A for every adapted layer.

    `base` maps HF names ("model.layers.0.self_attn.q_proj.weight") to the
    frozen base weights; `adapter` holds peft's lora_A / lora_B tensors.
    """
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in adapter.items():
        match = _LORA_KEY.match(key)
        if match is None:
            raise ValueError(f"not a LoRA adapter key: {key!r}")
        pairs.setdefault(match["module"], {})[match["ab"]] = torch.as_tensor(value)
    merged = {}
    for module, ab in pairs.items():
        name = f"{module}.weight"
        if name not in base or set(ab) != {"A", "B"}:
            raise ValueError(f"adapter for {module!r} has no matching base weight or misses A/B")
        w = base[name]
        merged[name] = (w.float() + scaling * (ab["B"].float() @ ab["A"].float())).to(w.dtype)
    return merged
