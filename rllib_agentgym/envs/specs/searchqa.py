"""Deep Search (Search-R1 style QA with a search engine): the agent-side spec.

The model does not use the ReAct "Thought/Action" format here: it writes
<think>...</think> and then <search>query</search> or <answer>text</answer>,
and the server parses the raw text itself (send_raw_text=True), as
AgentGym's SearchQA and Search-R1 do.
"""

from __future__ import annotations

import re

from rllib_agentgym.envs.spec import EnvSpec

INSTRUCTION = """You answer questions with the help of a search engine.

Every turn, first reason step by step inside <think> and </think>. Then do exactly one of:
- Search: write <search> your query </search>. The search engine returns the most relevant documents between <information> and </information>.
- Answer: write <answer> your answer </answer>, giving only the short answer (a name, a place, a year) with no explanation, for example <answer> Lisbon </answer>.

Search as often as you need, and reason inside <think> again whenever new information arrives. Many questions need several searches in a row: find one fact, then search for the entity it names. Your answer is checked by exact match against the reference answer."""

_ACTION_END = re.compile(r"</(search|answer)>", re.IGNORECASE)


def parse_tagged_action(text: str) -> str | None:
    """The turn up to and including its first </search> or </answer>, or None.

    Text after the first action (a hallucinated <information> block, a second
    action) is what a stop sequence would have cut; None marks a turn with no
    complete action (a format error; the server explains it to the model).
    """
    match = _ACTION_END.search(text)
    return text[: match.end()] if match else None


SPEC = EnvSpec(
    format_response=lambda thought, action: action,  # the expert's action is the whole turn
    name="searchqa",
    env_class="envs.searchqa.env:SearchQAEnv",
    server_module="envs.searchqa",
    instruction=INSTRUCTION,
    parse_action=parse_tagged_action,
    tasks_module="envs.searchqa.tasks",
    default_max_new_tokens=512,
    send_raw_text=True,
)
