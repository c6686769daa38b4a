"""Conversations (chat messages) <-> token ids with the same loss masks as RL rollouts.

Accepted JSONL rows:
  * ours:      {"messages": [{"role": "system"|"user"|"assistant", "content": ...}], ...}
  * AgentGym:  {"conversations": [{"from": "human"|"gpt", "value": ..., "loss": bool?}], ...}

A conversation is tokenized exactly as `LLMEnvRunner` builds a trajectory:
the prompt (system + first user turn), then per assistant turn its content
ids plus the eos id (mask 1), then the next user turn's ids (mask 0), all
from `ChatFormat`. So SFT and RL train the same positions of the same text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from rllib_agentgym.core.chat import ChatFormat

_AGENTGYM_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


def normalize(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Messages of one JSONL row, in our form (role, content, loss)."""
    if "messages" in row:
        return [{"role": m["role"], "content": m["content"], "loss": m.get("loss", m["role"] == "assistant")} for m in row["messages"]]
    if "conversations" in row:
        out = []
        for turn in row["conversations"]:
            role = _AGENTGYM_ROLES.get(turn.get("from"))
            if role is None:
                raise ValueError(f"unknown speaker {turn.get('from')!r} (expected human / gpt)")
            out.append({"role": role, "content": turn["value"], "loss": bool(turn.get("loss", role == "assistant"))})
        return out
    raise ValueError("a conversation row needs `messages` or `conversations`")


def load_jsonl(paths: str | Sequence[str]) -> list[list[dict[str, Any]]]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    conversations = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    conversations.append(normalize(json.loads(line)))
                except (ValueError, KeyError) as exc:
                    raise ValueError(f"{path}:{n}: {exc}") from None
    return conversations


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def tokenize(tokenizer, chat: ChatFormat, messages: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of one conversation; see the module doc."""
    ids, mask, _ = tokenize_with_observations(tokenizer, chat, messages)
    return ids, mask


def tokenize_with_observations(tokenizer, chat: ChatFormat,
                               messages: list[dict[str, Any]]) -> tuple[list[int], list[int], list[int]]:
    """(token ids, loss mask, observation mask): the mask is 1 on the observation tokens, i.e. the
    user turns with the chat-template tokens around them, and 0 on the system prompt and responses."""
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else ""
    rest = messages[1:] if messages and messages[0]["role"] == "system" else list(messages)
    if not rest or rest[0]["role"] != "user":
        raise ValueError("a conversation must start with a user turn (after an optional system turn)")
    ids = chat.prompt_ids(tokenizer, system, rest[0]["content"])
    mask = [0] * len(ids)
    # The first observation starts where the prompt stops matching the same prompt with an empty one.
    empty = chat.prompt_ids(tokenizer, system, "")
    start = next((i for i, (a, b) in enumerate(zip(ids, empty)) if a != b), min(len(ids), len(empty)))
    observation = [0] * start + [1] * (len(ids) - start)
    previous = "user"
    for message in rest[1:]:
        if message["role"] == previous:
            raise ValueError("user and assistant turns must alternate")
        if message["role"] == "assistant":
            part = list(tokenizer(message["content"], add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
            ids += part
            mask += [1 if message.get("loss", True) else 0] * len(part)
            observation += [0] * len(part)
        else:
            part = chat.observation_ids(tokenizer, message["content"], response_closed=True)
            ids += part
            mask += [0] * len(part)
            observation += [1] * len(part)
        previous = message["role"]
    return ids, mask, observation
