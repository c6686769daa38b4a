"""Where the agent's greedy tokens go wrong when it is fed the expert's own context (teacher forcing).

    python benchmarks/teacher_forced_errors.py --conversations 60 \\
        --out docs/results/agent/teacher_forced_errors.json

A diagnostic for docs/learning.md, section 2, not a speed benchmark. It plays
`--conversations` expert episodes per env family and split, feeds each whole
conversation to the agent model (`embedded-agent` unless `--model`) in one
forward pass, and compares every response token's argmax with the expert's
token. Per family and split it reports

- token accuracy over all response tokens,
- the share of responses (and of first responses) whose tokens are all right,
- the share of actions (the tokens after `Action:`) whose tokens are all right,

and, on the test split, the first wrong action token of the first few wrong
actions with the context before it. Train and test scoring alike says the
model did not memorise its data; a wrong action token whose answer is a few
tokens back in the same response says it does not copy.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/...`

from benchmarks.common import emit, meta  # noqa: E402

FAMILIES = {"textcraft": 15, "babyai": 12}  # family -> max turns of its expert episodes (the agent recipe's)
ACTION_MARKER = "Action:"


def response_spans(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of each maximal run of 1s in a token mask: the responses of a conversation."""
    spans, start = [], None
    for i, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans


def action_start(tokenizer, ids: list[int], span: tuple[int, int]) -> int | None:
    """Index of the first token after the response's `Action:` (None if it has none)."""
    start, end = span
    for i in range(start, end):
        if ACTION_MARKER in tokenizer.decode(ids[start:i + 1]):
            return i + 1
    return None


def score(model, tokenizer, chat, conversations, max_len: int, examples: int) -> dict:
    """Teacher-forced greedy accuracy of `model` on the responses of `conversations` (see the module doc)."""
    import torch

    from rllib_agentgym.data.conversations import normalize, tokenize_with_observations

    counts = dict(tokens=0, tokens_right=0, responses=0, responses_right=0, first=0, first_right=0,
                  actions=0, actions_right=0)
    wrong = []
    for conversation in conversations:
        ids, mask, _ = tokenize_with_observations(tokenizer, chat, normalize(conversation))
        ids, mask = ids[:max_len], mask[:max_len]
        with torch.no_grad():
            predicted = model(input_ids=torch.tensor([ids])).logits[0].argmax(-1).tolist()
        right = [False] + [predicted[t - 1] == ids[t] for t in range(1, len(ids))]  # token t is predicted at t - 1
        for k, (start, end) in enumerate(response_spans(mask)):
            all_right = all(right[start:end])
            counts["tokens"] += end - start
            counts["tokens_right"] += sum(right[start:end])
            counts["responses"] += 1
            counts["responses_right"] += all_right
            counts["first"] += k == 0
            counts["first_right"] += k == 0 and all_right
            action = action_start(tokenizer, ids, (start, end))
            if action is None:
                continue
            counts["actions"] += 1
            counts["actions_right"] += all(right[action:end])
            if len(wrong) < examples and not all(right[action:end]):
                t = next(t for t in range(action, end) if not right[t])
                wrong.append({"context": tokenizer.decode(ids[start:t]), "expected": tokenizer.decode([ids[t]]),
                              "predicted": tokenizer.decode([predicted[t - 1]])})
    share = lambda a, b: round(counts[a] / max(1, counts[b]), 4)  # noqa: E731
    return {"conversations": len(conversations), "response_tokens": counts["tokens"],
            "token_accuracy": share("tokens_right", "tokens"),
            "responses_all_right": share("responses_right", "responses"),
            "first_responses_all_right": share("first_right", "first"),
            "actions_all_right": share("actions_right", "actions"), "first_wrong_action_tokens": wrong}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="model folder (default: the embedded agent)")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--conversations", type=int, default=60, help="expert episodes per family and split")
    parser.add_argument("--examples", type=int, default=12, help="wrong test-split action tokens to keep")
    parser.add_argument("--max-len", type=int, default=1536, help="tokens per conversation (the recipe's)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rllib_agentgym.agent_model import agent_model_path
    from rllib_agentgym.core.chat import ChatFormat
    from rllib_agentgym.data.experts import expert_conversations

    path = args.model or str(agent_model_path())
    tokenizer = AutoTokenizer.from_pretrained(path)
    chat = ChatFormat.from_tokenizer(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    results = {}
    for family in args.families.split(","):
        for split in ("train", "test"):
            rows = list(expert_conversations(f"agentgym/{family}", split, args.conversations, FAMILIES[family]))
            results[f"{family}/{split}"] = score(model, tokenizer, chat, rows, args.max_len,
                                                 args.examples if split == "test" else 0)
    return emit({"benchmark": "teacher_forced_errors", "model": path, "results": results,
                 "meta": meta(__file__, argv)}, args.out)


if __name__ == "__main__":
    main()
