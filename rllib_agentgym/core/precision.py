"""Mixed precision only where the hardware computes it.

A CPU without native bfloat16 math (no AVX512-BF16 or AMX: e.g. an AVX2-only
EPYC) emulates it, and slowly: measured on one (2026-11-25), a forward +
backward of the 4M embedded agent on 8 x 1024 tokens took 1.7 + 2.5 s in
float32 and 5.6 + 65 s under bfloat16 autocast. There the learner trains in
float32 instead; on GPUs and on CPUs with bf16 units autocast is kept.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import torch

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def cpu_has_native(dtype: torch.dtype) -> bool:
    """Whether this CPU computes `dtype` matmuls natively (oneDNN's own check)."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


@functools.lru_cache(maxsize=None)
def _warn_once(dtype: torch.dtype) -> None:
    logger.warning("this CPU has no native %s math (no AVX512-BF16 / AMX): training in float32 instead "
                   "of %s autocast, which would be many times slower here", dtype, dtype)


def autocast_dtype(device_type: str, dtype: torch.dtype | None) -> torch.dtype | None:
    """The autocast dtype to use on `device_type`: `dtype`, or None (plain float32) on a CPU
    that would only emulate it."""
    if dtype is None or device_type != "cpu" or cpu_has_native(dtype):
        return dtype
    _warn_once(dtype)
    return None


def autocast(device_type: str, dtype: torch.dtype | None):
    """`torch.autocast(device_type, dtype)` where `autocast_dtype` keeps it, else a no-op context."""
    dtype = autocast_dtype(device_type, dtype)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)
