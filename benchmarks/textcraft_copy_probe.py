"""Probe: can the agent-size model learn TextCraft's one copy skill from scratch in a CPU budget?

TextCraft's test goals are never train goals, so an agent must find the listed
command that makes the goal and copy it. This probe isolates that skill: a
fresh model of the agent recipe's size (`AgentRecipe().model`, embedded
tokenizer) is trained, for `--seconds` of wall time, to answer a task's first
observation (crafting commands + goal) with the goal's command line, nothing
else; then it answers greedily on every test task (exact match). No system
prompt and a one-line answer: a lower bound on what the agent recipe needs.

Options mirror what docs/learning.md section 2 compares: `--renamed` (share of
examples with items renamed, envs/textcraft/augment.py; `--names compositional`
renames onto made-up names), `--curriculum` (each
example's number of distractor commands drawn from 0..10 instead of always
10), `--lr` and `--warmup` steps, `--model` (another model size), and
`--induction-steps` of induction pretraining first (not counted in `--seconds`).

    python benchmarks/textcraft_copy_probe.py --seconds 540 --renamed 0.5 --curriculum --lr 5e-4 --warmup 30
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/textcraft_copy_probe.py`

from benchmarks.common import emit, meta  # noqa: E402
from envs.textcraft.augment import NAME_KINDS  # noqa: E402

DISTRACTOR_CHOICES = (0, 1, 2, 3, 5, 10)


def lookup_example(data_idx: int, distractors: int, rng: random.Random | None, tokenizer,
                   names: str = "items") -> tuple[str, str]:
    """(chat prompt, answer) of one task: its first observation -> the goal's command line."""
    from envs.textcraft import tasks
    from envs.textcraft.augment import rename_items

    task = tasks.build_task(data_idx, distractors)
    conversation = {"messages": [{"role": "user", "content": task.observation()},
                                 {"role": "assistant", "content": task.tree[0].command()}]}
    if rng is not None:
        conversation = rename_items(conversation, rng, names=names)
    prompt = tokenizer.apply_chat_template(conversation["messages"][:1], tokenize=False, add_generation_prompt=True)
    return prompt, conversation["messages"][1]["content"]


def make_batch(rows: list[tuple[str, str]], tokenizer):
    """Token ids, labels (-100 outside the answer) and attention mask, right-padded."""
    import torch

    encoded = [(tokenizer(p)["input_ids"], tokenizer(a + tokenizer.eos_token)["input_ids"]) for p, a in rows]
    width = max(len(p) + len(a) for p, a in encoded)
    ids = torch.full((len(rows), width), tokenizer.pad_token_id)
    labels = torch.full((len(rows), width), -100)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for k, (p, a) in enumerate(encoded):
        n = len(p) + len(a)
        ids[k, :n] = torch.tensor(p + a)
        labels[k, len(p):n] = torch.tensor(a)
        mask[k, :n] = 1
    return ids, labels, mask


def exact_match(model, tokenizer, ids: list[int]) -> float:
    import torch

    model.eval()
    hits = 0
    with torch.no_grad():
        for i in ids:
            prompt, answer = lookup_example(i, 10, None, tokenizer)
            x = tokenizer(prompt, return_tensors="pt")
            out = model.generate(**x, max_new_tokens=48, do_sample=False)
            hits += tokenizer.decode(out[0, x["input_ids"].shape[1]:], skip_special_tokens=True).strip() == answer
    model.train()
    return hits / len(ids)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=540)
    parser.add_argument("--renamed", type=float, default=0.5, help="share of training examples with renamed items")
    parser.add_argument("--names", choices=NAME_KINDS, default="items",
                        help="renamed items get other real item names, or made-up ones from their words")
    parser.add_argument("--curriculum", action="store_true", help="draw each example's distractor count from 0..10")
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--warmup", type=int, default=30, help="linear lr warm-up steps")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--induction-steps", type=int, default=0,
                        help="first train this many steps on random sequences written twice "
                             "(rllib_agentgym/algorithms/sft/induction.py)")
    parser.add_argument("--model", default="{}",
                        help="JSON overrides of the agent recipe's model size (EmbeddedModelConfig fields), "
                             "e.g. '{\"num_hidden_layers\": 4, \"hidden_size\": 256, \"intermediate_size\": 688, "
                             "\"num_attention_heads\": 4}'")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results/textcraft_copy_probe.json")
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    from envs.textcraft import tasks
    from rllib_agentgym.agent_model import AgentRecipe
    from rllib_agentgym.algorithms.sft.induction import InductionConfig, train_induction, warmup_factor
    from rllib_agentgym.core.embedded import embedded_model_path
    from rllib_agentgym.core.precision import autocast

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    base = embedded_model_path(dataclasses.replace(AgentRecipe().model, **json.loads(args.model)))
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = Qwen2ForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    parameters = sum(p.numel() for p in model.parameters())
    train_ids, test_ids = tasks.split_ids("train"), tasks.split_ids("test")

    induction = (train_induction(model, tokenizer, InductionConfig(steps=args.induction_steps, seed=args.seed))
                 if args.induction_steps else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_factor(s, args.warmup))
    started, steps, curve = time.perf_counter(), 0, []
    while time.perf_counter() - started < args.seconds:
        rows = [lookup_example(rng.choice(train_ids), rng.choice(DISTRACTOR_CHOICES) if args.curriculum else 10,
                               rng if rng.random() < args.renamed else None, tokenizer, args.names)
                for _ in range(args.batch_size)]
        ids, labels, mask = make_batch(rows, tokenizer)
        with autocast("cpu", torch.bfloat16):  # as AgentSFT: bf16 where the CPU has bf16 units
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        steps += 1
        if steps % 50 == 0:
            curve.append({"step": steps, "seconds": round(time.perf_counter() - started), "loss": round(loss.item(), 4)})
            print(curve[-1], flush=True)
    return emit({"meta": meta(__file__, argv), **vars(args), "parameters": parameters, "steps": steps, "curve": curve,
                 "induction": induction,
                 "test_exact_match": exact_match(model, tokenizer, test_ids),
                 "train_exact_match_first_60": exact_match(model, tokenizer, train_ids[:60])}, args.out)


if __name__ == "__main__":
    main()
