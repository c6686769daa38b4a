"""Induction pretraining: random sequences written twice, loss on the second copy only."""

from __future__ import annotations

import math

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rllib_agentgym.algorithms.sft.induction import (InductionConfig, induction_batch, pretrain_induction,
                                                     train_induction, warmup_factor)


def test_induction_batch_repeats_each_row_and_masks_the_first_copy():
    ids, labels = induction_batch(4, 6, 100, 3, torch.Generator().manual_seed(0))
    assert ids.shape == labels.shape == (4, 12)
    assert torch.equal(ids[:, :6], ids[:, 6:])
    assert int(ids.min()) >= 3 and int(ids.max()) < 100  # never a special token
    assert bool((labels[:, :6] == -100).all()) and torch.equal(labels[:, 6:], ids[:, 6:])
    again, _ = induction_batch(4, 6, 100, 3, torch.Generator().manual_seed(0))
    assert torch.equal(ids, again)  # seeded: the same data on every build


def test_warmup_factor_rises_linearly_to_one():
    assert [warmup_factor(s, 4) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_factor(0, 0) == 1.0


def test_train_induction_starts_at_chance_and_lowers_the_copy_loss(embedded_model):
    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    model = AutoModelForCausalLM.from_pretrained(embedded_model, torch_dtype=torch.float32)
    config = InductionConfig(steps=100, batch_size=16, length=8, min_length=8, lr=3e-3, warmup_steps=10)
    stats = train_induction(model, tokenizer, config, log=lambda _: None)
    chance = math.log(len(tokenizer) - max(tokenizer.all_special_ids) - 1)
    assert stats["steps"] == 100
    assert abs(stats["first_loss"] - chance) < 1.0  # a fresh model guesses
    # Tokens are uniform, so nothing but copying from the first half beats chance (measured:
    # 4.6 nats at step 100 for the 4-layer test model). One half length (8) keeps this test short:
    # the positional form of copying is learned first; lengths that vary need far more steps.
    assert stats["final_loss"] < chance - 1.0


def test_pretrain_induction_writes_a_loadable_model_folder(embedded_model, tmp_path):
    out = tmp_path / "induced"
    stats = pretrain_induction(embedded_model, out, InductionConfig(steps=2, batch_size=2, length=4),
                               log=lambda _: None)
    assert stats["steps"] == 2
    model = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(embedded_model)
    changed = [not torch.equal(a, b) for a, b in zip(model.parameters(), base.parameters())]
    assert any(changed)
    assert AutoTokenizer.from_pretrained(out).get_vocab() == AutoTokenizer.from_pretrained(embedded_model).get_vocab()


def test_copy_conversations_answer_with_the_users_random_text(embedded_model):
    from rllib_agentgym.algorithms.sft.induction import copy_conversations

    tokenizer = AutoTokenizer.from_pretrained(embedded_model)
    rows = copy_conversations(tokenizer, 3, length=12, seed=5)
    assert len(rows) == 3 and len({r["item_id"] for r in rows}) == 3
    for row in rows:
        user, assistant = row["messages"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert user["content"] == assistant["content"] and user["content"]
        assert not set(tokenizer(user["content"])["input_ids"]) & set(tokenizer.all_special_ids)
    assert rows == copy_conversations(tokenizer, 3, length=12, seed=5)  # seeded
    assert rows != copy_conversations(tokenizer, 3, length=12, seed=6)


def test_half_lengths_vary_per_batch_within_bounds():
    from rllib_agentgym.algorithms.sft.induction import draw_length

    generator = torch.Generator().manual_seed(0)
    lengths = {draw_length(InductionConfig(min_length=8, length=48), generator) for _ in range(100)}
    assert min(lengths) >= 8 and max(lengths) <= 48
    assert len(lengths) > 20  # no single offset solves every batch
    assert draw_length(InductionConfig(min_length=8, length=4), generator) == 4  # a short max wins
