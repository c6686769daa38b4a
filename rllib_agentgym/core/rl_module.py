"""LLMRLModule: an RLlib TorchRLModule around a Hugging Face causal LM.

`model_config` keys:
    model:                   local path, hub id, "embedded" (the project's tiny Qwen2),
                             or an RLlib checkpoint dir (its policy is exported once)
    dtype:                   "float32" | "bfloat16" | "float16" | "auto"
    gradient_checkpointing:  trade compute for activation memory
    share_prefix:            run the tokens all rows of a batch start with once (`shared_prefix_length`):
                             True, False or "auto" (the default: on where the batch is on a CPU;
                             `prefix_sharing_on`)
    compute_entropy:         also return per-token entropy in forward_train
    entropy_grad:            keep the entropy's graph (for an entropy bonus in the loss)
    autocast:                "bfloat16" | "float16": forward_train under torch.autocast (fp32
                             weights and optimizer, low-precision matmuls: ~2x faster training
                             on CPUs with AVX512-BF16 / AMX; a CPU without them, where the
                             emulation is many times slower, trains in float32: core/precision.py);
                             None: full precision
    lora:                    {r, alpha, dropout, target_modules, layers_to_transform}: train a peft LoRA adapter only
    value_head:              add a scalar value head on the last hidden state (PPO)

forward_train takes `input_ids` and `attention_mask` [B, T] and returns
per-token `logprobs` [B, T] (logprobs[:, t] = log pi(x_t | x_<t); position 0
has no prediction and is 0), `entropy` [B, T] if asked, and `values` [B, T]
with a value head (values[:, t] = V(x_<t), the state token t is generated
from). Where the batch holds the loss masks (`response_mask`, and
`observation_mask` when SFT trains on observations), log-probs and entropies
are computed only at the positions they select and are 0 elsewhere: the LM
head and the log-softmax over the vocabulary then run on the trained tokens
alone (about 1 token in 7 of an agent conversation). Weights travel in
Hugging Face names; with LoRA only the adapter travels (the env runner merges
it into its base weights).
"""

from __future__ import annotations

from typing import Any, Dict

import torch
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch import TorchRLModule
from ray.rllib.utils.numpy import convert_to_numpy

from rllib_agentgym.algorithms.losses import entropy_from_logits, logprobs_from_logits
from rllib_agentgym.core import lora as lora_lib
from rllib_agentgym.core.embedded import resolve_model_path
from rllib_agentgym.core.precision import autocast

VALUE_HEAD_PREFIX = "value_head."


def load_causal_lm(model: str, dtype: str = "float32"):
    from transformers import AutoModelForCausalLM

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    return AutoModelForCausalLM.from_pretrained(resolve_model_path(model), dtype=torch_dtype)


def predicting_positions(token_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, positions) of the logits that predict a selected token: token t is predicted at t - 1.

    `token_mask` [B, T] selects tokens row by row; returns two [N] index tensors into [B, T - 1].
    """
    return token_mask[:, 1:].bool().nonzero(as_tuple=True)


# Below this many shared tokens a second model call costs more than the rows' repeats save.
MIN_SHARED_PREFIX = 16


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_mask: torch.Tensor) -> int:
    """P: how many leading tokens every row of the batch shares, up to the first one any row trains on.

        P = min(longest common prefix of the rows' real tokens, first t with token_mask[:, t] in some row)

    Logits at P - 1 predict token P, so tokens [0, P - 1) are what one forward can serve for all rows.
    """
    if input_ids.shape[0] < 2:
        return 0
    same = (input_ids == input_ids[:1]).all(dim=0) & attention_mask.bool().all(dim=0)
    common = int(same.int().cumprod(dim=0).sum())
    trained = token_mask.bool().any(dim=0).nonzero()
    return min(common, int(trained[0]) if trained.numel() else common)


def cached_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, token_mask: torch.Tensor) -> int:
    """How many leading tokens to run once for the whole batch: P - 1 (`shared_prefix_length`),
    or 0 where that is under MIN_SHARED_PREFIX."""
    cached = shared_prefix_length(input_ids, attention_mask, token_mask) - 1
    return cached if cached >= MIN_SHARED_PREFIX else 0


SHARE_PREFIX_SETTINGS = (True, False, "auto")


def prefix_sharing_on(setting: bool | str, device: torch.device) -> bool:
    """Whether to run the shared prompt prefix once: `setting` True / False, or "auto" = on a CPU only.

    On a CPU the step's cost is its FLOPs, and running the prefix once took a third off a
    TextCraft step. On an H200 the split forward (the prefix at batch 1, its KV cache repeated,
    the rows over it) made a step 1.75x (Qwen2.5-0.5B shape) and 1.83x (1.5B) as long as the
    same step with every row's prompt in full (benchmarks/README.md, "The learner's shared
    prompt prefix" and "GPU: one H200, the learner"; why was not profiled).
    """
    if setting not in SHARE_PREFIX_SETTINGS:
        raise ValueError(f"share_prefix must be one of {SHARE_PREFIX_SETTINGS}, got {setting!r}")
    return device.type == "cpu" if setting == "auto" else bool(setting)


def _checkpointing(llm) -> bool:
    # Checkpointed layers in training drop a KV cache (transformers' GradientCheckpointingLayer).
    return bool(getattr(llm, "is_gradient_checkpointing", False)) and llm.training


# Config keys of causal LMs whose head does more than a linear map (a soft-cap, a scale).
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def _plain_lm_head(llm) -> bool:
    """Whether logits = lm_head(decoder's last hidden state), so the head can run on chosen positions."""
    config = llm.config.get_text_config() if hasattr(llm.config, "get_text_config") else llm.config
    return not any(getattr(config, key, None) not in (None, 1, 1.0) for key in _LOGIT_TRANSFORMS)


def decoder_hidden_states(llm, input_ids, attention_mask, cached: int = 0) -> torch.Tensor:
    """The decoder's last hidden states (before the LM head) over tokens [cached, T): [B, T - cached, H].

    With `cached` > 0 tokens [0, cached), which all rows share, run once: their KV cache (in the
    autograd graph, so the prefix's LoRA weights still get their gradient through every row's
    attention) is repeated over the batch before the rows' own tokens run.
    """
    decoder = llm.get_decoder()
    if not cached:
        return decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
    from transformers import DynamicCache

    cache = DynamicCache()
    decoder(input_ids=input_ids[:1, :cached], past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(input_ids.shape[0])
    return decoder(
        input_ids=input_ids[:, cached:], attention_mask=attention_mask, past_key_values=cache, use_cache=True
    ).last_hidden_state


def token_logprobs_and_entropy(
    llm, input_ids, attention_mask, compute_entropy: bool = True, entropy_grad: bool = False, value_head=None,
    token_mask: torch.Tensor | None = None, temperature: float = 1.0, share_prefix: bool | str = "auto",
) -> Dict[str, torch.Tensor]:
    """Per-token log-probs (and entropies, values) of `input_ids` under `llm` at `temperature`:

        log pi_T(y_t | y_<t) = log softmax(z_t / T)[y_t]

    the distribution the engine sampled from (vLLM divides the logits by T the
    same way), so the policy gradient and the importance ratio are those of the
    policy that acted.

    With `token_mask` [B, T], log-probs and entropies are computed only for the
    tokens it selects and are 0 elsewhere: the LM head and the vocabulary
    softmax run on each row's selected positions alone, gathered from the
    decoder's hidden states. With `share_prefix` too (True, or "auto" on a CPU:
    `prefix_sharing_on`), the tokens every row
    starts with and no row trains on (the env's instruction, or the whole
    prompt of rows from one GRPO group) run through the model once for the
    batch rather than once a row (`cached_prefix_length`); the log-probs and
    gradients are the same.
    """
    if token_mask is not None:
        token_mask = token_mask.bool()  # a selection: a weighted loss mask must not scale the log-probs
        if not token_mask[:, 1:].any():
            token_mask = None  # nothing selected: every position, so a loss over no tokens still backpropagates
    batch, length = input_ids.shape
    cached = 0
    if _plain_lm_head(llm):
        # The value head needs every position's state, so it keeps the full forward.
        if (value_head is None and token_mask is not None and not _checkpointing(llm)
                and prefix_sharing_on(share_prefix, input_ids.device)):
            cached = cached_prefix_length(input_ids, attention_mask, token_mask)
        states = head_inputs = decoder_hidden_states(llm, input_ids, attention_mask, cached)
        lm_head = llm.get_output_embeddings()
    else:  # a soft-capped or scaled head: the LM's own forward, with logits at every position
        out_llm = llm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                      output_hidden_states=value_head is not None)
        head_inputs, lm_head = out_llm.logits, torch.nn.Identity()
        states = out_llm.hidden_states[-1] if value_head is not None else None
    if token_mask is None:
        logits, labels = lm_head(head_inputs[:, :-1]).float(), input_ids[:, 1:]
    else:
        rows, positions = predicting_positions(token_mask)
        logits, labels = lm_head(head_inputs[rows, positions - cached]).float(), input_ids[rows, positions + 1]
    if temperature != 1.0:
        logits = logits / temperature

    def aligned(values: torch.Tensor) -> torch.Tensor:
        # [B, T - 1] -> [B, T]: each value sits at the token it is about (position 0 has none).
        return torch.cat([values.new_zeros(batch, 1), values], dim=1)

    def per_token(values: torch.Tensor) -> torch.Tensor:
        # The selected tokens' [N] values, or every position's, -> [B, T] (0 where not selected).
        if token_mask is not None:
            values = values.new_zeros(batch, length - 1).index_put((rows, positions), values)
        return aligned(values)

    out = {"logprobs": per_token(logprobs_from_logits(logits, labels))}
    if compute_entropy:
        # A diagnostic unless an entropy bonus is trained (then it keeps its graph).
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            out["entropy"] = per_token(entropy_from_logits(logits))
    if value_head is not None:
        out["values"] = aligned(value_head(states[:, :-1].to(value_head.weight.dtype)).squeeze(-1).float())
    return out


def _trained_tokens(batch: Dict[str, Any]) -> torch.Tensor | None:
    """The union of the batch's loss masks (None without a `response_mask`: every position)."""
    if "response_mask" not in batch:
        return None
    mask = torch.as_tensor(batch["response_mask"]).bool()
    if "observation_mask" in batch:
        mask = mask | torch.as_tensor(batch["observation_mask"]).bool()
    return mask


def state_to_numpy(state: Dict[str, torch.Tensor]) -> Dict[str, Any]:
    """Tensors -> numpy arrays, the form RLlib hands weights around in (Ray object store, checkpoints).

    numpy has no bfloat16: those tensors go as float32, which holds every bfloat16
    value exactly (bf16 -> fp32 -> bf16 is the identity), so an engine or model that
    runs in bfloat16 gets back the learner's exact weights, at twice the bytes. They
    are widened on the host, after the copy: a GPU learner then moves the bf16 bytes
    and never holds a float32 copy of its whole model in device memory.
    """
    return convert_to_numpy(
        {k: v.detach().cpu().float() if v.dtype == torch.bfloat16 else v for k, v in state.items()}
    )


class LLMRLModule(TorchRLModule, ValueFunctionAPI):
    def setup(self):
        cfg = dict(self.model_config or {})
        llm = load_causal_lm(cfg.get("model", "embedded"), cfg.get("dtype", "float32"))
        if cfg.get("gradient_checkpointing"):
            llm.gradient_checkpointing_enable()
            llm.config.use_cache = False
        self._lora_cfg = cfg.get("lora") or None
        if self._lora_cfg:
            from peft import get_peft_model

            llm = get_peft_model(llm, lora_lib.lora_config(self._lora_cfg))
        self.llm = llm
        self.value_head = None
        if cfg.get("value_head"):
            hidden = llm.config.get_text_config().hidden_size if hasattr(llm.config, "get_text_config") else llm.config.hidden_size
            self.value_head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.value_head.weight)
            torch.nn.init.zeros_(self.value_head.bias)
        self.share_prefix = cfg.get("share_prefix", "auto")
        prefix_sharing_on(self.share_prefix, torch.device("cpu"))  # a bad setting fails here, not in training
        self._compute_entropy = bool(cfg.get("compute_entropy", True))
        self._entropy_grad = bool(cfg.get("entropy_grad", False))
        self._autocast = getattr(torch, cfg["autocast"]) if cfg.get("autocast") else None
        # The sampling temperature: log-probs are those of the distribution the tokens came from.
        self.temperature = float(cfg.get("temperature", 1.0))
        if not self.temperature > 0:
            raise ValueError(f"the policy's temperature must be > 0, got {self.temperature!r}")

    @property
    def uses_lora(self) -> bool:
        return bool(self._lora_cfg)

    def _forward(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        with torch.no_grad():
            return token_logprobs_and_entropy(self.llm, batch["input_ids"], batch["attention_mask"], False,
                                              temperature=self.temperature)

    def _forward_train(self, batch: Dict[str, Any], **kwargs) -> Dict[str, Any]:
        with autocast(batch["input_ids"].device.type, self._autocast):
            return token_logprobs_and_entropy(
                self.llm,
                batch["input_ids"],
                batch["attention_mask"],
                self._compute_entropy,
                self._entropy_grad,
                self.value_head,
                token_mask=_trained_tokens(batch),
                temperature=self.temperature,
                share_prefix=self.share_prefix,
            )

    def compute_values(self, batch: Dict[str, Any], embeddings=None) -> torch.Tensor:
        if self.value_head is None:
            raise ValueError("this LLMRLModule has no value head (model_config value_head: true)")
        return token_logprobs_and_entropy(
            self.llm, batch["input_ids"], batch["attention_mask"], False, False, self.value_head
        )["values"]

    def reference_logprobs_context(self):
        """With LoRA, the frozen reference is the base model: the adapter switched off."""
        return self.llm.disable_adapter()

    def hf_model(self):
        """The plain transformers model (LoRA merged into a copy) for export."""
        if not self.uses_lora:
            return self.llm
        import copy

        return copy.deepcopy(self.llm).merge_and_unload()

    # ---- state: HF names; LoRA: adapter only; value head under its prefix --------

    def get_state(self, components=None, *, not_components=None, inference_only: bool = False, **kwargs):
        if self.uses_lora:
            state = lora_lib.adapter_state(self.llm)
        else:
            state = dict(self.llm.state_dict())
        if self.value_head is not None and not inference_only:
            state.update({VALUE_HEAD_PREFIX + k: v for k, v in self.value_head.state_dict().items()})
        return state_to_numpy(state)

    def set_state(self, state) -> None:
        state = dict(state)
        head = {k[len(VALUE_HEAD_PREFIX) :]: torch.as_tensor(state.pop(k)) for k in list(state) if k.startswith(VALUE_HEAD_PREFIX)}
        if head and self.value_head is not None:
            self.value_head.load_state_dict(head)
        if self.uses_lora:
            lora_lib.load_adapter_state(self.llm, state)
            return
        tensors = {k: torch.as_tensor(v) for k, v in state.items()}
        missing, unexpected = self.llm.load_state_dict(tensors, strict=False)
        if unexpected:
            raise ValueError(f"weights do not fit this model: unexpected keys {unexpected[:5]}")
