"""Corpus documents (wiki-18 JSONL) and QA datasets (FlashRAG JSONL).

Corpus: one JSON object a line, ``{"id": "1", "contents": "\\"Title\\"\\ntext"}``,
the format of the wiki-18 dump that Search-R1 and FlashRAG retrieve from
(21M passages, ~14 GB). It is never loaded whole: `JsonlCorpus` keeps a table
of line offsets (saved next to the index, memory-mapped) and reads a
document with one `pread` when a search returns it.

QA data: FlashRAG's JSONL, ``{"id"?, "question", "golden_answers": [...]}``,
laid out as ``<qa_dir>/<dataset>/<split>.jsonl`` (nq, triviaqa, popqa,
hotpotqa, 2wikimultihopqa, musique, bamboogle), or files named one by one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Doc:
    id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The wiki-18 `contents` string (what BM25 indexes and e5 encodes)."""
        return f'"{self.title}"\n{self.text}'

    def as_dict(self, score: float) -> dict[str, object]:
        return {"id": self.id, "title": self.title, "text": self.text, "score": float(score)}


def doc_from_json(obj: Mapping[str, object], line_no: int) -> Doc:
    """A Doc from a wiki-18 line (`contents`) or a title/text line."""
    doc_id = str(obj.get("id", line_no))
    if "contents" in obj:
        head, _, text = str(obj["contents"]).partition("\n")
        title = head.strip()
        if len(title) >= 2 and title[0] == title[-1] == '"':
            title = title[1:-1]
        return Doc(doc_id, title, text.strip())
    if "text" in obj:
        return Doc(doc_id, str(obj.get("title", "")), str(obj["text"]))
    raise ValueError(f"corpus line {line_no} has neither 'contents' nor 'text'")


def write_wiki_jsonl(docs: Iterable[Doc], path: str | os.PathLike[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": doc.id, "contents": doc.contents}, ensure_ascii=False) + "\n" for doc in docs)


class DocList:
    """An in-memory corpus (the generated world)."""

    def __init__(self, docs: Sequence[Doc], name: str):
        self._docs = list(docs)
        self.name = name

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, i: int) -> Doc:
        return self._docs[i]

    def __iter__(self) -> Iterator[Doc]:
        return iter(self._docs)


class JsonlCorpus:
    """Random access into a wiki-18 JSONL file through its line offsets.

    `offsets` has one entry per document plus the file size, so document i is
    the bytes offsets[i]:offsets[i+1]. Reads use os.pread, so concurrent
    threads need no lock.
    """

    def __init__(self, path: str | os.PathLike[str], offsets: np.ndarray):
        self.path = str(path)
        self.name = self.path
        self._offsets = offsets
        self._fd = os.open(self.path, os.O_RDONLY)

    @staticmethod
    def scan_offsets(path: str | os.PathLike[str]) -> np.ndarray:
        """Byte offset of every non-empty line, plus the file size at the end."""
        offsets: list[int] = []
        pos = 0
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    offsets.append(pos)
                pos += len(line)
        offsets.append(pos)
        return np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Doc:
        if not 0 <= i < len(self):
            raise IndexError(f"document {i} out of range (corpus has {len(self)})")
        start, end = int(self._offsets[i]), int(self._offsets[i + 1])
        raw = os.pread(self._fd, end - start, start)
        return doc_from_json(json.loads(raw), i)

    def __iter__(self) -> Iterator[Doc]:
        """Stream the documents in order (for indexing); reads sequentially."""
        with open(self.path, "rb") as f:
            i = 0
            for line in f:
                if line.strip():
                    yield doc_from_json(json.loads(line), i)
                    i += 1

    def close(self) -> None:
        os.close(self._fd)


# FlashRAG directory names -> the names in the paper's tables, in table order.
DATASET_NAMES = {
    "nq": "NQ",
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
    "hotpotqa": "HotpotQA",
    "2wikimultihopqa": "2Wiki",
    "2wiki": "2Wiki",
    "musique": "Musique",
    "bamboogle": "Bamboogle",
}
# The datasets as the paper's table lists them (its columns, left to right).
PAPER_DATASET_ORDER = tuple(dict.fromkeys(DATASET_NAMES.values()))
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class QAItem:
    question: str
    answers: tuple[str, ...]
    dataset: str  # display name, e.g. "HotpotQA"
    split: str
    qid: str


def dataset_display_name(key: str) -> str:
    return DATASET_NAMES.get(key.lower(), key)


def find_qa_files(qa_dir: str | os.PathLike[str]) -> dict[tuple[str, str], Path]:
    """{(dataset, split): path} for every <qa_dir>/<dataset>/<split>.jsonl."""
    root = Path(qa_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"QA directory {root} does not exist")
    found = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        for split in SPLITS:
            path = sub / f"{split}.jsonl"
            if path.is_file():
                found[(sub.name, split)] = path
    if not found:
        raise FileNotFoundError(f"no <dataset>/<split>.jsonl files under {root}")
    return found


def parse_qa_files(spec: str | Mapping[str, str]) -> dict[tuple[str, str], Path]:
    """Explicit QA files: {"nq/test": path, ...} or "nq/test=path,hotpotqa/dev=path"."""
    items = spec.items() if isinstance(spec, Mapping) else (part.split("=", 1) for part in spec.split(",") if part.strip())
    files = {}
    for key, path in items:
        dataset, sep, split = key.strip().partition("/")
        if not sep or split not in SPLITS:
            raise ValueError(f"QA file key {key!r} must be '<dataset>/<split>' with split in {SPLITS}")
        files[(dataset, split)] = Path(path.strip())
    return files


def _dataset_order(dataset: str) -> tuple[int, str]:
    name = dataset_display_name(dataset)
    order = PAPER_DATASET_ORDER
    return (order.index(name) if name in order else len(order), name)


def load_qa(files: Mapping[tuple[str, str], Path]) -> list[QAItem]:
    """All QA items, datasets in the paper's table order, then train/dev/test."""
    items: list[QAItem] = []
    for dataset, split in sorted(files, key=lambda k: (_dataset_order(k[0]), SPLITS.index(k[1]))):
        path = files[(dataset, split)]
        with open(path, encoding="utf-8") as f:
            for line_no, line in enumerate(f):
                if not line.strip():
                    continue
                obj = json.loads(line)
                golds = obj.get("golden_answers", obj.get("answers"))
                if isinstance(golds, str):
                    golds = [golds]
                if "question" not in obj or not golds:
                    raise ValueError(f"{path}:{line_no + 1}: needs 'question' and non-empty 'golden_answers'")
                items.append(
                    QAItem(
                        question=str(obj["question"]).strip(),
                        answers=tuple(str(a) for a in golds),
                        dataset=dataset_display_name(dataset),
                        split=split,
                        qid=str(obj.get("id", f"{split}_{line_no}")),
                    )
                )
    return items
