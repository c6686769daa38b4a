"""Expert conversations as token rows: what AgentSFT trains on, and what GRPO's `sft_coef`
term mixes into each of its optimizer steps.

A config names the data as `sft_data` (JSONL files of conversations, ours or AgentGym's
format) and/or `sft_expert: {num, split, max_steps, expert_options, augmented_copies}`
(played by the env family's scripted expert when the run starts).
"""

from __future__ import annotations

import numpy as np

Example = tuple[list[int], list[int], list[int]]  # (token ids, response mask, observation mask)


def load_conversations(config) -> list[list[dict]]:
    """The conversations that `config.sft_data` and `config.sft_expert` name, normalized."""
    from rllib_agentgym.data.conversations import load_jsonl, normalize

    conversations = load_jsonl(config.sft_data) if config.sft_data else []
    if config.sft_expert:
        from rllib_agentgym.data.experts import expert_conversations, with_augmented_copies

        e = dict(config.sft_expert)
        rows = expert_conversations(config.env, e.get("split", "train"), int(e.get("num", 100)),
                                    int(e.get("max_steps", 100)), expert_options=e.get("expert_options"))
        rows = with_augmented_copies(rows, config.env, int(e.get("augmented_copies", 0)), seed=config.seed or 0)
        conversations += [normalize(row) for row in rows]
    if not conversations:
        raise ValueError("sft_data / sft_expert: no conversations to train on")
    return conversations


def tokenize_examples(model_path: str, conversations: list[list[dict]], max_len: int) -> tuple[list[Example], int]:
    """(examples cut to `max_len` tokens, the tokenizer's pad id), with the RL run's chat format
    and loss masks, so that the tokens trained on are the ones the policy generates."""
    from transformers import AutoTokenizer

    from rllib_agentgym.core.chat import ChatFormat
    from rllib_agentgym.core.embedded import resolve_model_path
    from rllib_agentgym.data.conversations import tokenize_with_observations

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model_path))
    chat = ChatFormat.from_tokenizer(tokenizer)
    examples = [tuple(column[:max_len] for column in tokenize_with_observations(tokenizer, chat, c))
                for c in conversations]
    return examples, tokenizer.pad_token_id or 0


class ExampleStream:
    """Examples `size` at a time, each epoch in a fresh seeded order (a pure function of the seed)."""

    def __init__(self, examples: list[Example], seed: int = 0):
        if not examples:
            raise ValueError("ExampleStream needs at least one example")
        self.examples = examples
        self._rng = np.random.default_rng(seed)
        self._order: list[int] = []

    def next(self, size: int) -> list[Example]:
        batch = []
        while len(batch) < size:
            if not self._order:
                self._order = list(self._rng.permutation(len(self.examples)))
            batch.append(self.examples[self._order.pop()])
        return batch

    def get_state(self) -> dict:
        """Where the stream is (its generator and the epoch's remaining order): a checkpoint."""
        return {"rng": self._rng.bit_generator.state, "order": [int(i) for i in self._order]}

    def set_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state["rng"]
        self._order = list(state["order"])


def pad_examples(examples: list[Example], pad_id: int) -> dict[str, np.ndarray]:
    """Right-padded arrays: input_ids, attention_mask, response_mask, observation_mask."""
    width = max(len(ids) for ids, _, _ in examples)
    b = len(examples)
    arrays = {
        "input_ids": np.full((b, width), pad_id, dtype=np.int64),
        "attention_mask": np.zeros((b, width), dtype=np.int64),
        "response_mask": np.zeros((b, width), dtype=np.float32),
        "observation_mask": np.zeros((b, width), dtype=np.float32),
    }
    for i, (ids, mask, observation) in enumerate(examples):
        arrays["input_ids"][i, : len(ids)] = ids
        arrays["attention_mask"][i, : len(ids)] = 1
        arrays["response_mask"][i, : len(mask)] = mask
        arrays["observation_mask"][i, : len(observation)] = observation
    return arrays
