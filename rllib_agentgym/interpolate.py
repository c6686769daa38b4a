"""Weight-space interpolation of two fine-tunes of one model (`rllib interpolate`).

WiSE-FT (Wortsman et al., 2022, "Robust fine-tuning of zero-shot models") takes
the straight line between a starting model and its fine-tune,

    theta(alpha) = (1 - alpha) * theta_start + alpha * theta_end,

and finds points on it that keep the fine-tune's gain on its own data and lose
less off it. Here the start is a warm-start agent and the end an RL checkpoint
from it. If the noise in the update costs a greedy policy about as the square
of the step while the credit it carries gains linearly, a point short of the
end keeps more of the credit than of the noise (measured on TextCraft in
docs/learning.md, section 3).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# Files of a model folder besides its weights: config, tokenizer, chat template.
_SIDE_FILES = ("config.json", "generation_config.json", "chat_template.jinja", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt")


def interpolate_weights(start: dict, end: dict, alpha: float) -> dict:
    """theta = (1 - alpha) * theta_start + alpha * theta_end, tensor by tensor.

    Computed in float32 and stored in the wider of the two dtypes (a bfloat16 RL checkpoint
    from a float32 warm start gives float32: no rounding of the mix). alpha 0 gives the start, 1 the end;
    values outside [0, 1] extrapolate along the same line. Both must hold the same tensor
    names and shapes (one architecture, one vocabulary); anything else is a ValueError.
    """
    import torch

    missing, extra = sorted(set(end) - set(start)), sorted(set(start) - set(end))
    if missing or extra:
        raise ValueError(f"the models hold different tensors: only in the end {missing[:3]}, "
                         f"only in the start {extra[:3]}")
    out = {}
    for name, end_tensor in end.items():
        start_tensor = start[name]
        if start_tensor.shape != end_tensor.shape:
            raise ValueError(f"{name}: shape {tuple(start_tensor.shape)} in the start, "
                             f"{tuple(end_tensor.shape)} in the end")
        if not end_tensor.is_floating_point():
            if not bool((start_tensor == end_tensor).all()):
                raise ValueError(f"{name}: integer tensors differ; they cannot be interpolated")
            out[name] = end_tensor.clone()
            continue
        mixed = (1.0 - alpha) * start_tensor.float() + alpha * end_tensor.float()
        out[name] = mixed.to(torch.promote_types(start_tensor.dtype, end_tensor.dtype)).contiguous()
    return out


def interpolate_models(start: str, end: str, alpha: float, out_dir: str | os.PathLike) -> Path:
    """Write the model at `alpha` on the line from `start` to `end` as a model folder.

    `start` and `end` are anything `model_path` takes (a model folder, an agent name such as
    `embedded-agent-textcraft`, an RLlib checkpoint); the output keeps the end's config and
    tokenizer, so `rllib evaluate OUT` and `model_path: OUT` load it as they load the end.
    """
    from safetensors.torch import save_file

    from rllib_agentgym.core.embedded import load_model_weights, resolve_model_path
    from rllib_agentgym.export import replacing_folder

    start_dir, end_dir = Path(resolve_model_path(start)), Path(resolve_model_path(end))
    for label, folder in (("start", start_dir), ("end", end_dir)):
        if not any(folder.glob("*.safetensors")):
            raise FileNotFoundError(f"{label} {folder}: no *.safetensors weights (a local model folder, "
                                    f"agent name or checkpoint is needed)")
    weights = interpolate_weights(load_model_weights(start_dir), load_model_weights(end_dir), alpha)
    with replacing_folder(out_dir) as tmp:
        for name in _SIDE_FILES:
            if (end_dir / name).exists():
                shutil.copy2(end_dir / name, tmp / name)
        save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    return Path(out_dir)


def add_arguments(p) -> None:
    p.add_argument("start", help="the model at alpha 0: a model folder, agent name or checkpoint (e.g. the warm start)")
    p.add_argument("end", help="the model at alpha 1 (e.g. an RL checkpoint trained from the start)")
    p.add_argument("--alpha", type=float, required=True, help="the point on the line: 0 the start, 1 the end")
    p.add_argument("--to", required=True, dest="out", help="output model folder")


def run(args) -> int:
    print(interpolate_models(args.start, args.end, args.alpha, args.out))
    return 0
