"""A full fine-tune stored as one bit a weight: the sign of its change, scaled per row.

    W' = W_base + diag(alpha) sign(W_tuned - W_base),   alpha_i = mean_j |W_tuned - W_base|_ij

alpha_i is the least-squares scale of row i's signs (argmin_a ||d_i - a s_i||^2 with s_i = sign(d_i)
is a = <d_i, s_i> / n = mean |d_i|). BitDelta (Liu et al., 2024) keeps one scale a matrix; a scale
a row costs 4 bytes a row and fits better. 1-D tensors (norms, biases) are stored whole.

A fine-tune of SmolLM2-135M (134.5M weights, 270 MB in bf16) becomes 18 MB this way (16 MB in
xz), with the held-out loss of the full fine-tune (docs/learning.md, section 2): what lets the
repository ship it.
"""

from __future__ import annotations

from typing import Mapping

import torch

SIGNS, SCALE = "signs", "scale"  # suffixes of a matrix's two stored tensors: "<name>:signs"


def pack_bits(bits: torch.Tensor) -> torch.Tensor:
    """Rows of booleans as uint8, 8 to a byte (bit k of byte j is column 8 j + k; the last byte zero-padded)."""
    rows, cols = bits.shape
    padded = torch.zeros(rows, -(-cols // 8) * 8, dtype=torch.uint8)
    padded[:, :cols] = bits.to(torch.uint8)
    weights = torch.tensor([1 << k for k in range(8)], dtype=torch.uint8)
    return (padded.view(rows, -1, 8) * weights).sum(dim=-1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, cols: int) -> torch.Tensor:
    """Inverse of `pack_bits`: the (rows, cols) booleans."""
    shifts = torch.arange(8, dtype=torch.uint8)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.reshape(packed.shape[0], -1)[:, :cols].bool()


def compress(base: Mapping[str, torch.Tensor], tuned: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The stored form of `tuned`: per matrix its packed signs and row scales, 1-D tensors whole.

    A zero change reads back as +alpha_i; in a row that did not change at all alpha_i is 0.
    """
    if set(base) != set(tuned):
        raise ValueError(f"base and tuned weights differ in names: {sorted(set(base) ^ set(tuned))[:5]}")
    out = {}
    for name, weight in tuned.items():
        if weight.shape != base[name].shape:
            raise ValueError(f"{name}: tuned shape {tuple(weight.shape)} != base {tuple(base[name].shape)}")
        if weight.ndim != 2:
            out[name] = weight.float().contiguous()
            continue
        delta = weight.float() - base[name].float()
        out[f"{name}:{SIGNS}"] = pack_bits(delta >= 0)
        out[f"{name}:{SCALE}"] = delta.abs().mean(dim=1)
    return out


def decompress(base: Mapping[str, torch.Tensor], stored: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """W' = W_base + diag(alpha) sign(delta) for each stored matrix; 1-D tensors as stored (float32)."""
    out = {}
    for name, weight in base.items():
        if weight.ndim != 2:
            out[name] = stored[name]
            continue
        signs = unpack_bits(stored[f"{name}:{SIGNS}"], weight.shape[1]).float() * 2 - 1
        out[name] = weight.float() + stored[f"{name}:{SCALE}"].unsqueeze(1) * signs
    return out
