"""What an SFT / GRPO training step costs on this machine: the LM head on every position or on the
trained tokens only, and padded micro-batches or one row each.

    python benchmarks/sft_step_cost.py --batches 6 --out benchmarks/results/sft_step_cost.json

It tokenizes expert conversations as AgentSFT does (the agent recipe's model
and data families), and times forward + backward of the token-mean response
loss over batches of `--batch-size` conversations, split into micro-batches by
the learner's own grouping (`micro_batches`), in
four settings of `token_logprobs_and_entropy`:

- `micro2_all`: 2 rows per micro-batch (padded), log-probs at every position
  (the module before it took the loss mask),
- `micro2_trained`: the same with `token_mask` = the response tokens,
- `micro1_all` / `micro1_trained`: one row per micro-batch (no padding).

Every setting sees the same batches; it reports seconds per batch (median of
`--repeats`) and each setting's ratio to `micro2_all`, measured in the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import emit, median, meta  # noqa: E402

SETTINGS = {"micro2_all": (2, False), "micro2_trained": (2, True), "micro1_all": (1, False),
            "micro1_trained": (1, True)}


def padded_batch(examples, pad_id: int):
    """input_ids, attention_mask, response_mask [B, T] of tokenized conversations, right-padded."""
    import torch

    width = max(len(ids) for ids, _, _ in examples)
    ids = torch.full((len(examples), width), pad_id)
    attention = torch.zeros((len(examples), width), dtype=torch.long)
    response = torch.zeros((len(examples), width))
    for i, (row, mask, _) in enumerate(examples):
        ids[i, :len(row)] = torch.tensor(row)
        attention[i, :len(row)] = 1
        response[i, :len(mask)] = torch.tensor(mask, dtype=torch.float32)
    return {"input_ids": ids, "attention_mask": attention, "response_mask": response}


def step_seconds(llm, batch, micro: int, trained_only: bool) -> float:
    """Wall seconds of one forward + backward of the token-mean response loss over `batch`."""
    import torch

    from rllib_agentgym.algorithms.grpo.torch.grpo_torch_learner import micro_batches
    from rllib_agentgym.core.precision import autocast
    from rllib_agentgym.core.rl_module import token_logprobs_and_entropy

    tokens = batch["response_mask"].sum()
    started = time.perf_counter()
    for part in micro_batches(batch, micro):
        with autocast("cpu", torch.bfloat16):  # as the learner: bf16 where the CPU has bf16 units
            out = token_logprobs_and_entropy(llm, part["input_ids"], part["attention_mask"], False,
                                             token_mask=part["response_mask"] if trained_only else None)
        (-(out["logprobs"] * part["response_mask"]).sum() / tokens).backward()
    llm.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=24, help="expert episodes per family")
    parser.add_argument("--batch-size", type=int, default=8, help="conversations per step (the agent recipe's)")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import random

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rllib_agentgym.agent_model import AgentRecipe
    from rllib_agentgym.core.chat import ChatFormat
    from rllib_agentgym.core.embedded import embedded_model_path
    from rllib_agentgym.data.conversations import normalize, tokenize_with_observations
    from rllib_agentgym.data.experts import expert_conversations

    recipe = AgentRecipe()
    path = embedded_model_path(recipe.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    chat = ChatFormat.from_tokenizer(tokenizer)
    llm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    examples = [tuple(column[:recipe.max_model_len] for column in tokenize_with_observations(tokenizer, chat, normalize(c)))
                for data in recipe.data
                for c in expert_conversations(data.env, "train", args.conversations, data.max_turns)]
    random.Random(0).shuffle(examples)
    batches = [padded_batch(examples[i:i + args.batch_size], tokenizer.pad_token_id or 0)
               for i in range(0, args.batches * args.batch_size, args.batch_size)]
    step_seconds(llm, batches[0], 2, False)  # warm-up
    seconds = {}
    for name, (micro, trained_only) in SETTINGS.items():
        runs = [sum(step_seconds(llm, b, micro, trained_only) for b in batches) / len(batches)
                for _ in range(args.repeats)]
        seconds[name] = round(median(runs), 4)
    base = seconds["micro2_all"]
    return emit({"benchmark": "sft_step_cost", "conversations": len(examples), "batch_size": args.batch_size,
                 "batches": len(batches), "seconds_per_batch": seconds,
                 "ratio_to_micro2_all": {k: round(v / base, 3) for k, v in seconds.items()},
                 "meta": meta(__file__, argv)}, args.out)


if __name__ == "__main__":
    main()
