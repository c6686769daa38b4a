"""Mixed precision only where the hardware computes it.

A CPU without native bfloat16 math (no AVX512-BF16 or AMX: e.g. an AVX2-only
EPYC, or an AVX512 Xeon without those units) emulates it, and slowly: measured
on the EPYC (2026-11-25), a forward + backward of the 4M embedded agent on 8 x 1024 tokens took 1.7 + 2.5 s in
float32 and 5.6 + 65 s under bfloat16 autocast. There the learner trains in
float32 instead, and the inference engine runs in float32 (`cpu_engine_dtype`);
on GPUs and on CPUs with bf16 units the dtype asked for is kept.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import torch

logger = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def cpu_has_native(dtype: torch.dtype) -> bool:
    """Whether this CPU computes `dtype` matmuls natively.

    For bfloat16 that takes AVX512-BF16 or AMX. oneDNN's own check is not enough: it also
    says yes on AVX512 CPUs without them (measured on one such Xeon, 2026-11-26: a 1024^3
    matmul ran at 50 GFLOP/s in bfloat16 against 230 in float32)."""
    if dtype == torch.bfloat16:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and cpu_has_bf16_units()
    if dtype == torch.float16:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    return True


def cpu_has_bf16_units() -> bool:
    """AVX512-BF16 or AMX tiles, by torch's CPU feature probes (True where this torch lacks them)."""
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if None in probes:
        return True
    return any(bool(probe()) for probe in probes)


@functools.lru_cache(maxsize=None)
def _warn_float32_fallback(dtype: str, part: str) -> None:
    """One warning per (dtype, part) and process: `part` is what runs in float32 instead."""
    logger.warning("this CPU has no native %s math (no AVX512-BF16 / AMX): %s in float32 instead, "
                   "as %s would only be emulated here, many times slower", dtype, part, dtype)


def autocast_dtype(device_type: str, dtype: torch.dtype | None) -> torch.dtype | None:
    """The autocast dtype to use on `device_type`: `dtype`, or None (plain float32) on a CPU
    that would only emulate it."""
    if dtype is None or device_type != "cpu" or cpu_has_native(dtype):
        return dtype
    _warn_float32_fallback(str(dtype).removeprefix("torch."), "the learner trains")
    return None


def autocast(device_type: str, dtype: torch.dtype | None):
    """`torch.autocast(device_type, dtype)` where `autocast_dtype` keeps it, else a no-op context."""
    dtype = autocast_dtype(device_type, dtype)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=dtype)


_LOW_PRECISION = {"bfloat16": torch.bfloat16, "float16": torch.float16}


def cpu_engine_dtype(dtype: str) -> str:
    """The inference engine's dtype on a CPU: `dtype`, or "float32" for a bfloat16 / float16
    this CPU would only emulate. Measured on an AVX512 Xeon without AVX512-BF16 (2026-11-26,
    `benchmarks/precision.py --generation`, SmolLM2-135M): vLLM generated 54.2 tokens/s in
    float32 against 22.0 in bfloat16."""
    low = _LOW_PRECISION.get(dtype)
    if low is None or cpu_has_native(low):
        return dtype
    _warn_float32_fallback(dtype, "the inference engine runs")
    return "float32"


def engine_dtype(dtype: str) -> str:
    """The dtype an inference engine asked for `dtype` runs in here (`cpu_engine_dtype` without a GPU)."""
    return dtype if torch.cuda.is_available() else cpu_engine_dtype(dtype)
