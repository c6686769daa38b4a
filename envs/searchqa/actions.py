"""The Deep Search turn format: parse the model's tags, render search results.

The model writes free text with tags, as in Search-R1 and AgentGym's SearchQA:

    <think>reasoning</think> <search>query</search>     ask the search engine
    <think>reasoning</think> <answer>text</answer>      give the final answer

The server receives the raw text and parses it here, so the rules (what
counts as one well-formed action) live in one place. Reasoning inside
<think> is never parsed for actions. Search results come back as

    <information>Doc 1(Title: ...) text
    Doc 2(Title: ...) text</information>
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

FORMAT_HELP = (
    "Write your reasoning inside <think>...</think>, then exactly one action: "
    "<search>your query</search> to search, or <answer>your answer</answer> to answer."
)

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_OPEN_TAG = re.compile(r"<(search|answer)>", re.IGNORECASE)


class ActionFormatError(ValueError):
    """The text holds no single well-formed action; the message says why."""


@dataclass(frozen=True)
class Action:
    kind: Literal["search", "answer"]
    content: str


def parse_action(text: str) -> Action:
    """The one <search> or <answer> action in `text`, or ActionFormatError."""
    body = _THINK.sub(" ", text)
    searches = _SEARCH.findall(body)
    answers = _ANSWER.findall(body)
    if searches and answers:
        raise ActionFormatError("the text has both a <search> and an <answer>; give one action per turn.")
    found = searches or answers
    if not found:
        opened = _OPEN_TAG.search(body)
        if opened:
            tag = opened.group(1).lower()
            raise ActionFormatError(f"<{tag}> is not closed; end it with </{tag}>.")
        raise ActionFormatError("no <search> or <answer> tag found.")
    kind: Literal["search", "answer"] = "search" if searches else "answer"
    if len(found) > 1:
        raise ActionFormatError(f"the text has {len(found)} <{kind}> tags; give one action per turn.")
    content = " ".join(found[0].split())
    if not content:
        what = "query" if kind == "search" else "answer"
        raise ActionFormatError(f"the {what} inside <{kind}></{kind}> is empty.")
    return Action(kind, content)


def format_information(docs: Sequence[Mapping[str, object]]) -> str:
    """Render retrieved documents the way Search-R1 shows them to the model."""
    if not docs:
        return "<information>No documents found.</information>"
    lines = [f"Doc {i}(Title: {doc['title']}) {doc['text']}" for i, doc in enumerate(docs, start=1)]
    return "<information>" + "\n".join(lines) + "</information>"


_DOC_LINE = re.compile(r"^Doc \d+\(Title: (.*?)\) (.*)$")


def parse_information(observation: str) -> list[tuple[str, str]]:
    """(title, text) of each document in an <information> block, in rank order."""
    start, end = observation.find("<information>"), observation.rfind("</information>")
    if start < 0 or end < start:
        return []
    body = observation[start + len("<information>") : end]
    return [(m.group(1), m.group(2)) for line in body.split("\n") if (m := _DOC_LINE.match(line))]
