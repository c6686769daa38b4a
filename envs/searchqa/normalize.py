"""Answer normalization and exact match, as in the SQuAD evaluation.

Search-R1 and AgentGym-RL score Deep Search answers with SQuAD-style exact
match: both strings are lowercased, punctuation and the articles a/an/the
are dropped and whitespace is collapsed before comparing. A question may
have several gold answers (aliases); matching any of them counts.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold_answers: Iterable[str]) -> bool:
    """True when the normalized prediction equals any normalized gold answer."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(gold) for gold in gold_answers)
