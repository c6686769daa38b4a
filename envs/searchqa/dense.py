"""Dense retrieval: an e5-style embedding model and an inner-product index.

The paper's retriever is e5-base-v2 over wiki-18: mean-pooled token states,
L2-normalized, with "query: " / "passage: " prefixes, searched by inner
product (FAISS flat index). Here the model loads from a local path with
transformers' AutoModel (nothing is downloaded). Passage embeddings are
written once to an .npy file and memory-mapped afterwards; search uses FAISS
when it is importable and a chunked NumPy matmul otherwise (bounded memory
even when the embeddings do not fit in RAM). A prebuilt FAISS index whose
row i embeds corpus line i (Search-R1's e5_Flat.index) can be used instead
of encoding the corpus.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

_CHUNK_ROWS = 65536


def faiss_available() -> bool:
    return importlib.util.find_spec("faiss") is not None


class Encoder:
    """Text -> L2-normalized mean-pooled embeddings (float32, shape (n, dim))."""

    def __init__(
        self,
        model_path: str,
        device: str | None = None,
        max_length: int = 256,
        batch_size: int = 64,
        query_prefix: str = "query: ",
        passage_prefix: str = "passage: ",
    ):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self._tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        self._model = AutoModel.from_pretrained(model_path, local_files_only=True, dtype=dtype).to(self.device).eval()
        self.dim = int(self._model.config.hidden_size)
        self.max_length = max_length
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix

    def encode(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
        prefix = self.query_prefix if query else self.passage_prefix
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        torch = self._torch
        for start in range(0, len(texts), self.batch_size):
            batch = [prefix + t for t in texts[start : start + self.batch_size]]
            enc = self._tokenizer(batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt").to(self.device)
            with torch.inference_mode():
                hidden = self._model(**enc).last_hidden_state.float()
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
            out[start : start + len(batch)] = pooled.cpu().numpy()
        return out


def _batches(items: Iterable[str], size: int) -> Iterator[list[str]]:
    batch: list[str] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


class DenseIndex:
    """Inner-product search over passage embeddings with an Encoder for queries."""

    def __init__(self, encoder: Encoder, vectors: np.ndarray | None = None, faiss_index=None, use_faiss: bool | None = None):
        if (vectors is None) == (faiss_index is None):
            raise ValueError("give exactly one of vectors or faiss_index")
        self.encoder = encoder
        self._vectors = vectors
        self._faiss = faiss_index
        if self._faiss is None and (use_faiss if use_faiss is not None else faiss_available()):
            import faiss

            self._faiss = faiss.IndexFlatIP(vectors.shape[1])
            self._faiss.add(np.ascontiguousarray(vectors, dtype=np.float32))
        self.num_docs = int(self._faiss.ntotal if self._faiss is not None else len(vectors))

    @staticmethod
    def encode_corpus(encoder: Encoder, contents: Iterable[str], num_docs: int, path: Path | None = None) -> np.ndarray:
        """Passage embeddings, streamed into `path` (.npy) when given, else in memory."""
        if path is None:
            vectors = np.empty((num_docs, encoder.dim), dtype=np.float32)
        else:
            vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(num_docs, encoder.dim))
        row = 0
        for batch in _batches(contents, encoder.batch_size * 16):
            vectors[row : row + len(batch)] = encoder.encode(batch, query=False)
            row += len(batch)
        if row != num_docs:
            raise ValueError(f"corpus yielded {row} documents, expected {num_docs}")
        if path is not None:
            vectors.flush()
            return np.load(path, mmap_mode="r")
        return vectors

    @classmethod
    def load(cls, encoder: Encoder, path: Path, use_faiss: bool | None = None) -> DenseIndex:
        vectors = np.load(path, mmap_mode="r")
        if vectors.shape[1] != encoder.dim:
            raise ValueError(f"{path} holds {vectors.shape[1]}-d embeddings but the encoder makes {encoder.dim}-d ones")
        return cls(encoder, vectors, use_faiss=use_faiss)

    @classmethod
    def from_faiss_file(cls, encoder: Encoder, path: str) -> DenseIndex:
        import faiss

        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        if index.d != encoder.dim:
            raise ValueError(f"FAISS index {path} is {index.d}-d but the encoder makes {encoder.dim}-d embeddings")
        return cls(encoder, faiss_index=index)

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.search_vectors(self.encoder.encode(list(queries), query=True), k)

    def search_vectors(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(doc indices, scores), each (n, k), best first."""
        k = min(k, self.num_docs)
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if self._faiss is not None:
            scores, ids = self._faiss.search(queries, k)
            return ids.astype(np.int64), scores
        best_scores = np.full((len(queries), 0), -np.inf, dtype=np.float32)
        best_ids = np.zeros((len(queries), 0), dtype=np.int64)
        for start in range(0, self.num_docs, _CHUNK_ROWS):
            block = np.asarray(self._vectors[start : start + _CHUNK_ROWS], dtype=np.float32)
            scores = queries @ block.T
            kk = min(k, scores.shape[1])
            top = np.argpartition(-scores, kk - 1, axis=1)[:, :kk]
            all_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
            all_ids = np.concatenate([best_ids, top + start], axis=1)
            order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k]
            best_scores = np.take_along_axis(all_scores, order, axis=1)
            best_ids = np.take_along_axis(all_ids, order, axis=1)
        return best_ids, best_scores
