"""The embedded tokenizer's optional whole-word tokens (EmbeddedModelConfig.whole_word_lists)."""

from __future__ import annotations

import dataclasses

import pytest

from rllib_agentgym.core.embedded import EmbeddedModelConfig, _fingerprint, build_tokenizer


@pytest.fixture(scope="module")
def item_tokenizer():
    return build_tokenizer(4096, ("textcraft_items",))


def pieces(tokenizer, text: str) -> list[str]:
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text  # the added tokens lose no character, spaces included
    return [tokenizer.decode([i]) for i in ids]


def test_item_names_become_single_tokens_in_running_text_and_brackets(item_tokenizer):
    assert pieces(item_tokenizer, "Goal: craft acacia boat.") == ["Goal", ":", " craft", " acacia boat", "."]
    assert " stripped acacia log" in pieces(item_tokenizer, "craft 4 acacia planks using 1 stripped acacia log")
    assert "oak planks" in pieces(item_tokenizer, "Inventory: [oak planks] (4)")
    # Leftmost-longest: the longer item name wins over an item name it starts with.
    assert " sticky piston" in pieces(item_tokenizer, "craft 1 sticky piston using 1 piston, 1 slime ball")


def test_other_text_and_the_default_tokenizer_are_unchanged(item_tokenizer):
    default = build_tokenizer(4096)
    text = "You see a red ball 1 steps in front of you. Action: go to red ball 1"
    assert pieces(item_tokenizer, text) == pieces(default, text)
    assert len(item_tokenizer) > len(default) + 1000  # TextCraft has ~1100 item names, in two forms each
    assert " acacia boat" not in pieces(default, "Goal: craft acacia boat.")


def test_word_lists_key_the_model_only_when_used():
    base = EmbeddedModelConfig()
    assert _fingerprint(dataclasses.replace(base, whole_word_lists=())) == _fingerprint(base)
    with_items = EmbeddedModelConfig(whole_word_lists=["textcraft_items"])  # as JSON gives it
    assert with_items.whole_word_lists == ("textcraft_items",)
    assert _fingerprint(with_items) != _fingerprint(base)
    with pytest.raises(ValueError, match="unknown whole_word_lists.*textcraft_items"):
        EmbeddedModelConfig(whole_word_lists=("minecraft",))
