"""How much of a full fine-tune a rank-r factorization of its weight change keeps.

A full fine-tune of SmolLM2-135M is 270 MB in bf16, far over what the repository
ships (20 MB an archive); a rank-r factorization of its change is not:

    W' = W_base + U_r diag(S_r) V_r^T,   where  W_tuned - W_base = U diag(S) V^T  (SVD)

for every matrix (the layers' projections at rank `--rank`, the tied embedding at
`--embedding-rank`); 1-D tensors (norms, biases) are kept whole. `--sign-delta` scores
the form that ships instead, one bit a weight (core/sign_delta.py):

    W' = W_base + diag(alpha) sign(W_tuned - W_base),   alpha_i = mean_j |W_tuned - W_base|_ij

For each pair of ranks this writes the held-out loss (mean negative log-likelihood of the response
tokens of expert conversations the models never trained on; and how far each is from
the full fine-tune there: KL and argmax agreement) of the base, the full
fine-tune and the factorized model, and with `--save DIR` the folder of the last
model scored (the sign delta's with `--sign-delta`), for `rllib evaluate`:

    rllib experts --env agentgym/textcraft --split test --num 125 --max-steps 15 --out test.jsonl
    python benchmarks/lowrank_delta.py --base smollm2-135m --tuned MODEL_DIR --conversations test.jsonl \\
        --ranks 16:0,32:0,32:32 --sign-delta --save svd32
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Mapping, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/lowrank_delta.py`
from benchmarks.common import emit, meta  # noqa: E402


def factorized_delta(base: Mapping[str, torch.Tensor], tuned: Mapping[str, torch.Tensor], rank: int,
                     embedding_rank: int) -> tuple[dict[str, torch.Tensor], int]:
    """(weights, number of factor entries): base + the rank-r SVD of each matrix's change.

    Rank 0 keeps a matrix at its base value. A tied output head follows the embedding;
    an untied one is factorized at the embedding's rank."""
    head, embedding = tuned.get("lm_head.weight"), tuned.get("model.embed_tokens.weight")
    tied = head is not None and embedding is not None and head.data_ptr() == embedding.data_ptr()
    out, entries = {}, 0
    for name, weight in tuned.items():
        if weight.ndim != 2 or (tied and name == "lm_head.weight"):
            out[name] = weight
            continue
        r = embedding_rank if name in ("model.embed_tokens.weight", "lm_head.weight") else rank
        if r == 0:
            out[name] = base[name]
            continue
        u, s, vh = torch.linalg.svd((weight - base[name]).float(), full_matrices=False)
        out[name] = base[name] + (u[:, :r] * s[:r]) @ vh[:r]
        entries += r * sum(weight.shape)
    if tied:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out, entries


def response_logprobs(model, data: Sequence[tuple[list[int], list[int]]]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per conversation: log pi(. | prefix) at the masked (response) positions, and the tokens there."""
    out = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for ids, mask in data:
            x = torch.tensor([ids])
            m = torch.tensor(mask[1:], dtype=torch.bool)
            out.append((model(x).logits.float()[0, :-1][m].log_softmax(-1), x[0, 1:][m]))
    return out


def heldout_loss(logprobs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Mean negative log-likelihood of the response tokens."""
    nll = torch.cat([-lp.gather(1, y[:, None])[:, 0] for lp, y in logprobs])
    return float(nll.mean())


def divergence(reference: list[tuple[torch.Tensor, torch.Tensor]], logprobs: list[tuple[torch.Tensor, torch.Tensor]]) -> dict:
    """How far a model is from the reference (the full fine-tune) on the response positions:
    mean KL(p_ref || p) in nats a token, and the share of positions where both argmaxes agree."""
    kl = torch.cat([(p.exp() * (p - q)).sum(-1) for (p, _), (q, _) in zip(reference, logprobs)])
    agree = torch.cat([p.argmax(-1) == q.argmax(-1) for (p, _), (q, _) in zip(reference, logprobs)])
    return {"kl_from_tuned": float(kl.mean()), "argmax_agreement": float(agree.float().mean())}


def main(argv: Sequence[str] | None = None) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rllib_agentgym.core.chat import ChatFormat
    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.data.conversations import load_jsonl, tokenize

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the model fine-tuned from (a model_path)")
    parser.add_argument("--tuned", required=True, help="the full fine-tune (a model folder)")
    parser.add_argument("--conversations", required=True, help="held-out expert conversations (JSONL)")
    parser.add_argument("--num", type=int, default=30, help="conversations scored")
    parser.add_argument("--ranks", default="32:32", help="comma-separated RANK:EMBEDDING_RANK pairs")
    parser.add_argument("--compare", nargs="*", default=[], help="other model_paths to score (e.g. an adapter build)")
    parser.add_argument("--sign-delta", action="store_true", help="also score the 1-bit sign delta (what ships)")
    parser.add_argument("--save", default=None, help="write the last scored model's folder here")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    def load(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    base_path = resolve_model_path(args.base)
    tokenizer = AutoTokenizer.from_pretrained(args.tuned)
    chat = ChatFormat.from_tokenizer(tokenizer)
    data = [tokenize(tokenizer, chat, c) for c in load_jsonl(args.conversations)[: args.num]]
    base, tuned = load(base_path), load(args.tuned)
    base_state, tuned_state = base.state_dict(), tuned.state_dict()
    reference = response_logprobs(tuned, data)

    def scores(model) -> dict:
        logprobs = response_logprobs(model, data)
        return {"loss": heldout_loss(logprobs), **divergence(reference, logprobs)}

    result = {"meta": meta(__file__, argv), "base": str(args.base), "tuned": str(args.tuned),
              "num_conversations": len(data), "loss": {"base": heldout_loss(response_logprobs(base, data)),
                                                       "tuned": heldout_loss(reference)},
              "compared": {other: scores(load(resolve_model_path(other))) for other in args.compare},
              "factorized": []}
    model = None
    for pair in filter(None, args.ranks.split(",")):
        rank, embedding_rank = (int(x) for x in pair.split(":"))
        weights, entries = factorized_delta(base_state, tuned_state, rank, embedding_rank)
        model = load(base_path)
        model.load_state_dict(weights)
        result["factorized"].append({"rank": rank, "embedding_rank": embedding_rank, "factor_entries": entries,
                                     "bf16_mb": round(2 * entries / 1e6, 1), **scores(model)})
        print(result["factorized"][-1], file=sys.stderr, flush=True)
    if args.sign_delta:
        from rllib_agentgym.core import sign_delta

        tied = tuned.config.tie_word_embeddings  # the head is the embedding: stored once, as on disk
        untied = {k: v for k, v in base_state.items() if not (tied and k == "lm_head.weight")}
        stored = sign_delta.compress(untied, {k: tuned_state[k] for k in untied})
        weights = sign_delta.decompress(untied, stored)
        if tied:
            weights["lm_head.weight"] = weights["model.embed_tokens.weight"]
        model = load(base_path)
        model.load_state_dict(weights)
        result["sign_delta"] = {"stored_mb": round(sum(t.numel() * t.element_size() for t in stored.values()) / 1e6, 1),
                                **scores(model)}
        print(result["sign_delta"], file=sys.stderr, flush=True)
    if args.save and model is not None:
        shutil.copytree(args.tuned, args.save, dirs_exist_ok=True)
        model.to(torch.bfloat16).save_pretrained(args.save)
    return emit(result, args.out)


if __name__ == "__main__":
    main()
