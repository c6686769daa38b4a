"""BM25 retrieval with bm25s: built once, saved, loaded memory-mapped.

Documents are indexed by their wiki-18 `contents` (title line + text), as
Search-R1's Lucene index does. Tokenization is bm25s's own (lowercase, words
of 2+ characters, English stopwords dropped, no stemming) and queries are cut
the same way, so a query word matches exactly the index vocabulary.

Backends: "numpy" starts at once; "numba" searches ~15x faster but compiles
for 10-20 s in every new process (done at load, before the first query), so
it suits the long-lived retriever service rather than short test processes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN
from bm25s.tokenization import Tokenizer

_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
_find_words = re.compile(_TOKEN_PATTERN).findall
_STOPWORDS = frozenset(STOPWORDS_EN)


def query_tokens(query: str) -> list[str]:
    return [w for w in _find_words(query.lower()) if w not in _STOPWORDS]


class BM25Index:
    """`search(queries, k)` -> (doc indices, scores), both shaped (len(queries), k)."""

    def __init__(self, model: bm25s.BM25, num_docs: int):
        self._model = model
        self.num_docs = num_docs
        if model.backend == "numba":
            self.search(["warm up"], 1)  # pay the JIT compile now, not on a live query

    @classmethod
    def build(cls, contents: Iterable[str], backend: str = "numpy", show_progress: bool = False) -> BM25Index:
        """Index an iterable of document strings (streamed: never held as one list)."""
        tokenizer = Tokenizer(lower=True, splitter=_TOKEN_PATTERN, stopwords=list(STOPWORDS_EN))
        token_ids = list(tokenizer.streaming_tokenize(contents))
        model = bm25s.BM25(backend=backend)
        model.index((token_ids, tokenizer.get_vocab_dict()), show_progress=show_progress)
        return cls(model, len(token_ids))

    def save(self, directory: str | Path) -> None:
        self._model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: str | Path, num_docs: int, backend: str = "numpy", mmap: bool = True) -> BM25Index:
        model = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False, backend=backend)
        return cls(model, num_docs)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k per query; a hit with score 0 matched no query word (callers drop it)."""
        k = min(k, self.num_docs)
        ids, scores = self._model.retrieve([query_tokens(q) for q in queries], k=k, show_progress=False)
        return np.asarray(ids), np.asarray(scores)
