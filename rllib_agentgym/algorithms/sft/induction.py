"""Induction pretraining: teach a fresh model to copy before it learns a task from few tokens.

An agent reads its goal and the names in its observation and writes them back
("My goal is to pick up the purple key", `craft 1 acacia button using 1 acacia
planks`). A transformer copies with induction heads: find the earlier
occurrence of the current token, emit the token that followed it. A model
trained from scratch on a few million tokens of expert play does not form
them (docs/learning.md, section 2) and falls back on the most frequent goal of
its data. Random token sequences written twice give the copy skill all the
gradient: the second copy is predictable from the first and from nothing
else. The half length varies from batch to batch (`draw_length`): with a fixed
one the model learns "attend L - 1 positions back" instead, which copies
nothing in the agent's data (measured with benchmarks/textcraft_copy_probe.py
and docs/learning.md, section 2).

This is a plain torch loop on a Hugging Face causal LM folder: a data-free
pretraining stage before AgentSFT, not RL; its output folder is AgentSFT's
base model.
"""

from __future__ import annotations

import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class InductionConfig:
    steps: int = 300
    batch_size: int = 32
    length: int = 48  # tokens of each half: drawn per batch from [min_length, length] ...
    min_length: int = 8  # ... so that no fixed offset solves the task (only matching content does)
    lr: float = 5e-4
    warmup_steps: int = 30
    seed: int = 0


def first_plain_id(tokenizer) -> int:
    """The lowest token id above every special token: random text never holds a chat-format marker."""
    return max(tokenizer.all_special_ids) + 1


def induction_batch(batch_size: int, length: int, vocab_size: int, first_id: int, generator):
    """Token ids and labels of `batch_size` random sequences x_1..x_L written twice.

    ids = [x_1..x_L, x_1..x_L] with x_i ~ Uniform{first_id, ..., vocab_size - 1};
    labels = -100 on the first half (no loss) and ids on the second, so the loss
    is  -1/L * sum_{i=2..L} log p(x_i | x_1..x_L, x_1..x_{i-1})  (the causal shift
    drops the second half's first token, which is unpredictable).
    """
    import torch

    half = torch.randint(first_id, vocab_size, (batch_size, length), generator=generator)
    ids = torch.cat([half, half], dim=1)
    labels = ids.clone()
    labels[:, :length] = -100
    return ids, labels


def copy_conversations(tokenizer, num: int, length: int = 48, seed: int = 0) -> list[dict]:
    """`num` chat conversations whose answer repeats the user's random text: induction in the SFT mix.

    The text is `length` random non-special token ids decoded; SFT's loss on the
    assistant turn is then a copy loss, so mixed into AgentSFT's data they keep
    training the copy skill during SFT (measured at two rows of eight per batch:
    not enough to learn it there; docs/learning.md, section 2).
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    first_id = first_plain_id(tokenizer)
    rows = []
    for i in range(num):
        ids = torch.randint(first_id, len(tokenizer), (length,), generator=generator).tolist()
        text = tokenizer.decode(ids).strip()
        rows.append({"item_id": f"copy_{seed}_{i}", "messages": [{"role": "user", "content": text},
                                                                 {"role": "assistant", "content": text}]})
    return rows


def draw_length(config: InductionConfig, generator) -> int:
    """A batch's half length L ~ Uniform{min_length, ..., length}.

    With one fixed L, "attend to the token L - 1 positions back" solves the task
    as well as induction does, and the model learns that positional shortcut:
    measured, it then copies raw repeats (0.08 nats) but not a copy in chat
    format (11 nats), where the offset differs. A varying L leaves only content
    matching.
    """
    import torch

    return int(torch.randint(min(config.min_length, config.length), config.length + 1, (1,), generator=generator))


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up: lr_t = lr * min(1, (t + 1) / warmup_steps)."""
    return min(1.0, (step + 1) / max(1, warmup_steps))


def train_induction(model, tokenizer, config: InductionConfig = InductionConfig(),
                    log: Callable[[str], None] = print) -> dict:
    """Train a causal LM in place on `config.steps` induction batches (bf16 autocast where the CPU
    has bf16 units, fp32 weights, as AgentSFT trains). Returns {"steps", "seconds", "first_loss",
    "final_loss" (mean of the last 10), "curve" ([step, loss] every 50 steps)}."""
    import torch

    from rllib_agentgym.core.precision import autocast

    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: warmup_factor(s, config.warmup_steps))
    first_id = first_plain_id(tokenizer)
    started, losses, curve = time.perf_counter(), [], []
    for step in range(config.steps):
        ids, labels = induction_batch(config.batch_size, draw_length(config, generator), len(tokenizer), first_id,
                                      generator)
        with autocast("cpu", torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        if (step + 1) % 50 == 0:
            curve.append([step + 1, round(losses[-1], 4)])
            log(f"induction step {step + 1}/{config.steps}: loss {losses[-1]:.4f} "
                f"(chance {math.log(len(tokenizer) - first_id):.2f}) {time.perf_counter() - started:.0f} s")
    tail = losses[-10:]
    return {"steps": config.steps, "seconds": round(time.perf_counter() - started, 1),
            "first_loss": round(losses[0], 4), "final_loss": round(sum(tail) / len(tail), 4), "curve": curve}


def pretrain_induction(base: Path, out: Path, config: InductionConfig = InductionConfig(),
                       log: Callable[[str], None] = print) -> dict:
    """`train_induction` on the model folder `base`; the result (with the base's tokenizer files) goes to `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    stats = train_induction(model, tokenizer, config, log)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for file in Path(base).iterdir():  # tokenizer and generation config, as the base has them
        if file.is_file() and not (out / file.name).exists():
            shutil.copy2(file, out / file.name)
    return stats
