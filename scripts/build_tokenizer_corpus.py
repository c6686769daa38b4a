"""Regenerate the embedded tokenizer's corpus from real env text.

    python scripts/build_tokenizer_corpus.py [--out rllib_agentgym/core/data/tokenizer_corpus.txt]

The embedded model's byte-level BPE is trained on
`rllib_agentgym/core/data/tokenizer_corpus.txt`. A tokenizer whose merges come
from the text the agent actually reads and writes (TextCraft item names and
crafting commands, BabyAI observations and action lists, the families'
instructions) turns a prompt into far fewer tokens than one trained on prose,
so rollouts and SFT are shorter and cheaper on a CPU.

What goes in, train splits only (never test text):
  * every family's instruction (the system prompt);
  * expert conversations (observations and ReAct turns) of TextCraft and
    BabyAI, and a few of SciWorld, Deep Search and WebArena where their
    engine is available on this machine (skipped with a note otherwise).

Lines are de-duplicated in first-seen order and the file is capped
(`--max-bytes`, default 1.5 MB) so it stays small enough to ship. The
output is deterministic for a given code version.

Changing the corpus changes the embedded model's fingerprint, so a new
embedded model (and agent model) is built on next use.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Iterable, Iterator

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rllib_agentgym.core.embedded import CORPUS_PATH  # noqa: E402
from rllib_agentgym.data.experts import expert_conversations  # noqa: E402
from rllib_agentgym.envs.registry import get_spec  # noqa: E402

# (family, expert conversations from the train split). TextCraft and BabyAI are
# the CPU examples' envs; the others contribute their vocabulary only.
SOURCES: tuple[tuple[str, int], ...] = (
    ("textcraft", 400),
    ("babyai", 160),
    ("sciworld", 6),
    ("searchqa", 20),
    ("webarena", 6),
)
FAMILIES = ("textcraft", "babyai", "sciworld", "searchqa", "webarena")


def family_lines(family: str, num: int) -> Iterator[str]:
    """Message lines of `num` expert conversations of one family (system prompt excluded)."""
    for row in expert_conversations(f"agentgym/{family}", "train", num, max_steps=60):
        for message in row["messages"]:
            if message["role"] != "system":
                yield from message["content"].splitlines()


def dedupe(lines: Iterable[str], max_bytes: int) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    size = 0
    for line in lines:
        line = line.rstrip()
        if not line.strip() or line in seen:
            continue
        size += len(line.encode("utf-8")) + 1
        if size > max_bytes:
            break
        seen.add(line)
        out.append(line)
    return out


def corpus_lines(max_bytes: int) -> list[str]:
    instructions = [line for f in FAMILIES for line in get_spec(f).instruction.splitlines()]
    per_family: list[str] = []
    # Each family gets an equal share of what is left, so one verbose family
    # (BabyAI's observations) cannot crowd out the others.
    budget = (max_bytes - sum(len(x) + 1 for x in instructions)) // len(SOURCES)
    for family, num in SOURCES:
        try:
            lines = dedupe(family_lines(family, num), budget)
        except Exception as exc:  # an engine missing on this machine (JVM, Chromium)
            logging.warning("skipping %s: %s", family, exc)
            continue
        print(f"{family}: {len(lines)} lines", file=sys.stderr)
        per_family += lines
    return dedupe(instructions + per_family, max_bytes)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(CORPUS_PATH))
    parser.add_argument("--max-bytes", type=int, default=1_500_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    lines = corpus_lines(args.max_bytes)
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} lines, {Path(args.out).stat().st_size} bytes to {args.out}")


if __name__ == "__main__":
    main()
