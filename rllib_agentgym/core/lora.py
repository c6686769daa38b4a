"""LoRA adapters through `peft`, and merging adapter deltas into base weights.

Only the adapter trains and travels: the learner sends the A/B matrices, and
an inference engine that cannot take adapters on the fly (vLLM after start on
CPU, or any engine here) gets the merged weights of the adapted layers:

    W' = W + (alpha / r) * B @ A

An engine that runs several HF modules as one fused layer (vLLM: q/k/v_proj ->
qkv_proj, gate/up_proj -> gate_up_proj) reloads such a layer only whole, so
the merged tensors travel with the base tensors of the rest of each layer
they touch (`whole_fused_layers`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

import torch

_LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.default)?\.weight$")


def lora_config(cfg: Mapping[str, Any]):
    from peft import LoraConfig

    return LoraConfig(
        r=int(cfg.get("r", cfg.get("rank", 8))),
        lora_alpha=float(cfg.get("alpha", cfg.get("lora_alpha", 16))),
        lora_dropout=float(cfg.get("dropout", 0.0)),
        target_modules=list(cfg.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])),
        # Adapting only the top layers also stops the backward pass there (nothing below needs a grad).
        layers_to_transform=_layers(cfg.get("layers_to_transform")),
        bias="none",
        task_type="CAUSAL_LM",
    )


def _layers(layers) -> list[int] | None:
    if layers is None:
        return None
    if isinstance(layers, int) or not all(isinstance(i, int) and i >= 0 for i in layers):
        raise ValueError(f"lora.layers_to_transform must be a list of layer indices, got {layers!r}")
    return list(layers)


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


def whole_fused_layers(
    weights: Mapping[str, torch.Tensor],
    base: Mapping[str, torch.Tensor],
    fused_modules: Sequence[Sequence[str]],
) -> dict[str, torch.Tensor]:
    """`weights` plus the `base` tensors that complete every engine layer they touch.

    vLLM reloads a layer only from all of its tensors: the parts not sent are
    left uninitialized (its layerwise reload allocates the layer afresh), so
    a merged q_proj and v_proj alone garble the fused qkv_proj (k, biases).
    `fused_modules` holds the groups of HF module names one engine layer runs,
    e.g. (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj")). For every
    module with a tensor in `weights`, each tensor (weight, bias) of it and of
    its fused siblings is sent, from `base` where `weights` has none.
    """
    siblings = {leaf: tuple(group) for group in fused_modules for leaf in group}
    touched = set()
    for name in weights:
        parent, _, leaf = name.rpartition(".")[0].rpartition(".")
        touched.update(f"{parent}.{m}" if parent else m for m in siblings.get(leaf, (leaf,)))
    out = dict(weights)
    for name, tensor in base.items():
        if name not in out and name.rpartition(".")[0] in touched:
            out[name] = tensor
    return out
