"""A causal LM of a published model's shape with random weights, for throughput benchmarks.

    python benchmarks/shaped_model.py /tmp/qwen2.5-1.5b-shape --shape qwen2.5-1.5b
    python benchmarks/learner.py --model /tmp/qwen2.5-1.5b-shape --dtype bfloat16 --micro-batch-size 2

A forward, backward or optimizer step costs the same whatever the weights
hold, so the learner and precision benchmarks can time a real model size on a
machine that cannot download its weights (the GPU machines lent to this
project reach no network). The tokenizer comes from `--tokenizer` (default:
the SmolLM2 tokenizer of the project's converted pretrained base); its ids
are a subset of the shape's vocabulary, which keeps the published size, so
the embedding and LM head cost what the real model's do. Nothing a random
model generates means anything: use it for speed and memory, never for
success rates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/shaped_model.py`

# Qwen2 shapes (hidden, MLP, layers, heads, KV heads, vocabulary), from the models' published configs.
SHAPES: dict[str, dict[str, int]] = {
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-3b": dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                       num_key_value_heads=2, vocab_size=151936),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=49152),  # tests
}


def build(out: str | Path, shape: str, tokenizer: str = "smollm2-135m", seed: int = 0) -> int:
    """Write a random-weight Qwen2ForCausalLM of `shape` (bf16) and `tokenizer` to `out`; its parameter count."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from rllib_agentgym.core.embedded import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(tokenizer))
    if len(tok) > SHAPES[shape]["vocab_size"]:
        raise ValueError(f"tokenizer {tokenizer!r} has {len(tok)} ids, more than shape {shape!r}'s vocabulary")
    eos = tok.eos_token_id
    config = Qwen2Config(**SHAPES[shape], tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6,
                         max_position_embeddings=32768, bos_token_id=tok.bos_token_id, eos_token_id=eos,
                         pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos, dtype="bfloat16")
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # initializes billions of weights fast
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="model folder to write")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    parser.add_argument("--tokenizer", default="smollm2-135m",
                        help="a model folder or a name the project resolves (smollm2-135m, embedded)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    count = build(args.out, args.shape, args.tokenizer, args.seed)
    print(f"{args.shape}: {count / 1e9:.3f}B parameters, random weights, in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
