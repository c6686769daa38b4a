"""Checks and clipping over all of a step's gradients at once.

RLlib's torch helpers loop over the parameters: a norm, a `nan_to_num` and a
multiply per gradient for clipping, and an `isfinite(grad).all()` read back
per gradient before the step. On a GPU each is a kernel launch or a stall of
the host, hundreds per step, and a learner whose device waits on its host
(a 0.5B model on an H100 is busy ~25% of a step) pays for every one. These
functions do the same arithmetic with torch's multi-tensor (foreach) kernels.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional

import torch
from ray.rllib.utils.torch_utils import clip_gradients as rllib_clip_gradients

# RLlib's replacement for an infinite norm (`nan_to_num(neginf=-10e8, posinf=10e8)`).
INF_NORM = 1e9


def _present(tensors: Iterable[Optional[torch.Tensor]]) -> list[torch.Tensor]:
    return [t.detach() for t in tensors if t is not None]


def all_finite(tensors: Iterable[Optional[torch.Tensor]]) -> bool:
    """Whether every entry of every tensor is finite, with one device->host read.

    max_i |x_i| over all tensors (the inf-norm) is finite iff every entry is:
    an inf entry makes it inf and a NaN propagates through the max.
    """
    tensors = _present(tensors)
    if not tensors:
        return True
    return bool(torch.isfinite(torch.nn.utils.get_total_norm(tensors, norm_type=float("inf"))))


def global_norm(gradients: Iterable[Optional[torch.Tensor]]) -> torch.Tensor:
    """RLlib's `compute_global_norm`: ||g|| = sqrt(sum_i ||g_i||^2), in one multi-tensor norm.

    Each ||g_i|| and the total have inf -> +-1e9 and NaN -> 0, as RLlib's do,
    so a non-finite gradient does not turn the clip coefficient into NaN.
    """
    grads = _present(gradients)
    if not grads:
        return torch.tensor(0.0)
    # torch._foreach_norm is the multi-tensor kernel torch.nn.utils.clip_grad_norm_ uses.
    norms = torch.stack([n.float() for n in torch._foreach_norm(grads, 2.0)])
    norms = norms.nan_to_num(neginf=-INF_NORM, posinf=INF_NORM)
    return torch.linalg.vector_norm(norms, 2.0).nan_to_num(neginf=-INF_NORM, posinf=INF_NORM)


def clip_gradients(gradients_dict: Dict[str, Optional[torch.Tensor]], *, grad_clip: Optional[float] = None,
                   grad_clip_by: str = "value") -> Optional[torch.Tensor]:
    """RLlib's `clip_gradients` (same signature and results); by global norm in place:

        g_i <- g_i * min(1, c / max(||g|| + 1e-6, c))

    with one multi-tensor multiply (no `if`: no device->host read). Returns ||g||
    before clipping. Clipping by value or per-tensor norm is RLlib's own.
    """
    if grad_clip is None or grad_clip_by != "global_norm":
        return rllib_clip_gradients(gradients_dict, grad_clip=grad_clip, grad_clip_by=grad_clip_by)
    grads = _present(gradients_dict.values())
    total = global_norm(grads)
    if grads:
        coeff = torch.clamp(grad_clip / torch.clamp(total + 1e-6, min=grad_clip), max=1.0)
        torch._foreach_mul_(grads, coeff.to(grads[0].device))
    return total
