"""Retrievers: local (BM25 / dense over a corpus), batched, or remote (HTTP).

Every retriever answers `retrieve(queries, topk) -> [[{"id", "title",
"text", "score"}, ...] per query]`, the body of the retriever service's
POST /retrieve, so an env does not care whether search runs in its process
or in a shared service.

Indexes of a user's corpus are built once and kept in an index directory
(default: $RLLIB_AGENTGYM_CACHE/searchqa or ~/.cache/rllib_agentgym/searchqa,
one subdirectory per corpus path):

    corpus.json          the corpus path, size and mtime it was built from
    offsets.npy          line offsets into the corpus (document lookup)
    bm25/                bm25s index (loaded with mmap=True)
    dense-<model>/       embeddings.npy (loaded memory-mapped)

A file lock serializes builds, so many processes starting at once build
the index once. A corpus whose size or mtime changed is re-indexed.
"""

from __future__ import annotations

import concurrent.futures
import fcntl
import functools
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np

from envs.searchqa.bm25 import BM25Index
from envs.searchqa.data import DocList, JsonlCorpus
from envs.searchqa.world import get_world

log = logging.getLogger(__name__)

Hit = dict[str, Any]


class Retriever(Protocol):
    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[Hit]]: ...

    def describe(self) -> dict[str, Any]: ...


class SearchIndex(Protocol):
    num_docs: int

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]: ...


class RetrieverError(RuntimeError):
    """The search backend failed (service unreachable, bad reply)."""


class LocalRetriever:
    """A search index plus the corpus it indexes."""

    def __init__(self, index: SearchIndex, corpus: DocList | JsonlCorpus, method: str):
        if index.num_docs != len(corpus):
            raise ValueError(f"index has {index.num_docs} documents but the corpus has {len(corpus)}")
        self.index = index
        self.corpus = corpus
        self.method = method

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        results: list[list[Hit]] = [[] for _ in queries]
        live = [i for i, q in enumerate(queries) if q.strip()]
        if not live or topk < 1:
            return results
        ids, scores = self.index.search([queries[i] for i in live], topk)
        for row, i in enumerate(live):
            for doc_idx, score in zip(ids[row], scores[row]):
                # BM25 pads with score-0 hits that share no word with the query.
                if self.method == "bm25" and score <= 0:
                    continue
                results[i].append(self.corpus[int(doc_idx)].as_dict(score))
        return results

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "corpus": self.corpus.name, "num_docs": len(self.corpus)}


class BatchingRetriever:
    """Merges concurrent retrieve() calls from many threads into batched ones.

    Callers block on a future; one worker thread takes everything queued at
    the moment it is free (up to `max_batch` queries) and runs it as one
    call. An idle retriever adds no wait; a busy one batches more.
    """

    def __init__(self, inner: Retriever, max_batch: int = 256):
        self.inner = inner
        self.max_batch = max_batch
        self._queue: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        if not queries:
            return []
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((list(queries), topk, future))
        with self._start_lock:
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="searchqa-retrieval", daemon=True)
                self._worker.start()
        return future.result()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "max_batch": self.max_batch}

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            size = len(batch[0][0])
            while size < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
                size += len(item[0])
            queries = [q for qs, _, _ in batch for q in qs]
            try:
                results = self.inner.retrieve(queries, max(topk for _, topk, _ in batch))
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller, never lost
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            pos = 0
            for qs, topk, future in batch:
                future.set_result([hits[:topk] for hits in results[pos : pos + len(qs)]])
                pos += len(qs)


class RemoteRetriever:
    """Client of the retriever service (`python -m envs.searchqa.retriever`)."""

    def __init__(self, url: str, timeout: float = 120.0):
        self.url = url.rstrip("/")
        self._client = httpx.Client(base_url=self.url, timeout=timeout)

    def retrieve(self, queries: Sequence[str], topk: int) -> list[list[Hit]]:
        try:
            reply = self._client.post("/retrieve", json={"queries": list(queries), "topk": topk})
        except httpx.HTTPError as exc:
            raise RetrieverError(f"retriever service at {self.url} is unreachable: {exc}") from exc
        if reply.status_code != 200:
            raise RetrieverError(f"retriever service at {self.url} answered {reply.status_code}: {reply.text[:300]}")
        return reply.json()["results"]

    def describe(self) -> dict[str, Any]:
        return {"url": self.url}


def default_cache_dir() -> Path:
    root = os.environ.get("RLLIB_AGENTGYM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rllib_agentgym")
    return Path(root) / "searchqa"


def default_index_dir(corpus: str | os.PathLike[str]) -> Path:
    path = Path(corpus).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    return default_cache_dir() / f"{path.stem}-{digest}"


@contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _open_corpus(corpus: Path, index_dir: Path) -> JsonlCorpus:
    """The corpus with its offset table, (re)scanned when the file changed."""
    stat = corpus.stat()
    meta = {"path": str(corpus.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    meta_path, offsets_path = index_dir / "corpus.json", index_dir / "offsets.npy"
    if not (meta_path.is_file() and offsets_path.is_file() and json.loads(meta_path.read_text()) == meta):
        if meta_path.is_file():
            log.warning("corpus %s changed since %s was built: re-indexing", corpus, index_dir)
        elif any(p.name != ".lock" for p in index_dir.iterdir()):
            raise ValueError(f"index_dir {index_dir} holds files but no searchqa index: give an empty or new directory")
        for old in index_dir.iterdir():
            if old.is_dir():
                shutil.rmtree(old)
            elif old.name != ".lock":
                old.unlink()
        meta_path.write_text(json.dumps(meta))  # first: marks the directory as ours
        log.info("scanning %s", corpus)
        tmp = index_dir / "offsets.npy.tmp"
        with open(tmp, "wb") as f:
            np.save(f, JsonlCorpus.scan_offsets(corpus))
        os.replace(tmp, offsets_path)
    return JsonlCorpus(corpus, np.load(offsets_path, mmap_mode="r"))


def _model_tag(model_path: str) -> str:
    path = Path(model_path).resolve()
    return f"{path.name}-{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"


def build_retriever(
    corpus: str | None = None,
    *,
    method: str = "bm25",
    index_dir: str | None = None,
    encoder: str | None = None,
    dense_index: str | None = None,
    world_seed: int = 0,
    device: str | None = None,
    bm25_backend: str = "numpy",
) -> LocalRetriever:
    """A retriever over `corpus` (wiki-18 JSONL path) or, when None, the generated world.

    method "bm25" (bm25s) or "dense" (needs `encoder`, a local embedding model
    path; `dense_index` optionally names a prebuilt FAISS index of the corpus).
    `bm25_backend` is "numpy" (instant start) or "numba" (fast search, slow start).
    The world's index is built in memory (a fraction of a second); a user
    corpus is indexed once into `index_dir` and loaded memory-mapped.
    """
    if method not in ("bm25", "dense"):
        raise ValueError(f"unknown retrieval method {method!r} (use 'bm25' or 'dense')")
    if method == "dense" and not encoder:
        raise ValueError("dense retrieval needs encoder=<local path of an embedding model, e.g. e5-base-v2>")
    if bm25_backend not in ("numpy", "numba"):
        raise ValueError(f"unknown bm25_backend {bm25_backend!r} (use 'numpy' or 'numba')")
    if method == "bm25" and (encoder or dense_index):
        raise ValueError("encoder / dense_index apply to method='dense' only")
    if corpus is None:
        if index_dir is not None:
            raise ValueError("index_dir applies to a user corpus; the generated world is indexed in memory")
        docs = DocList(get_world(world_seed).docs(), name=f"generated-world(seed={world_seed})")
        if method == "bm25":
            return LocalRetriever(BM25Index.build((d.contents for d in docs), backend=bm25_backend), docs, method)
        from envs.searchqa.dense import DenseIndex, Encoder

        enc = Encoder(encoder, device=device)
        if dense_index:
            return LocalRetriever(DenseIndex.from_faiss_file(enc, dense_index), docs, method)
        vectors = DenseIndex.encode_corpus(enc, (d.contents for d in docs), len(docs))
        return LocalRetriever(DenseIndex(enc, vectors), docs, method)

    corpus_path = Path(corpus)
    if not corpus_path.is_file():
        raise FileNotFoundError(f"corpus file {corpus_path} does not exist")
    directory = Path(index_dir) if index_dir else default_index_dir(corpus_path)
    with _locked(directory):
        docs = _open_corpus(corpus_path, directory)
        if method == "bm25":
            return LocalRetriever(_load_or_build_bm25(docs, directory / "bm25", bm25_backend), docs, method)
        from envs.searchqa.dense import DenseIndex, Encoder

        enc = Encoder(encoder, device=device)
        if dense_index:
            return LocalRetriever(DenseIndex.from_faiss_file(enc, dense_index), docs, method)
        emb_dir = directory / f"dense-{_model_tag(encoder)}"
        emb_path = emb_dir / "embeddings.npy"
        if not (emb_dir / "done").is_file():
            emb_dir.mkdir(parents=True, exist_ok=True)
            log.info("encoding %d passages of %s with %s", len(docs), corpus_path, encoder)
            DenseIndex.encode_corpus(enc, (d.contents for d in docs), len(docs), emb_path)
            (emb_dir / "done").write_text(json.dumps({"encoder": str(Path(encoder).resolve()), "dim": enc.dim}))
        return LocalRetriever(DenseIndex.load(enc, emb_path), docs, method)


def _load_or_build_bm25(docs: JsonlCorpus, bm25_dir: Path, backend: str) -> BM25Index:
    if not (bm25_dir / "params.index.json").is_file():
        log.info("building the BM25 index of %s (%d documents)", docs.path, len(docs))
        tmp = bm25_dir.with_name(bm25_dir.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        BM25Index.build(d.contents for d in docs).save(tmp)
        os.replace(tmp, bm25_dir)
    return BM25Index.load(bm25_dir, len(docs), backend=backend, mmap=True)


_shared: dict[tuple, BatchingRetriever] = {}
_shared_lock = threading.Lock()


def shared_retriever(
    corpus: str | None = None,
    method: str = "bm25",
    index_dir: str | None = None,
    encoder: str | None = None,
    dense_index: str | None = None,
    world_seed: int = 0,
    bm25_backend: str = "numpy",
) -> BatchingRetriever:
    """The in-process retriever for these settings, built once per process.

    All env sessions of a process share it, and their concurrent searches
    are batched together. The lock makes sessions created at the same time
    wait for one build instead of each building their own.
    """
    key = (corpus, method, index_dir, encoder, dense_index, world_seed, bm25_backend)
    with _shared_lock:
        if key not in _shared:
            _shared[key] = BatchingRetriever(
                build_retriever(
                    corpus,
                    method=method,
                    index_dir=index_dir,
                    encoder=encoder,
                    dense_index=dense_index,
                    world_seed=world_seed,
                    bm25_backend=bm25_backend,
                )
            )
        return _shared[key]


@functools.cache
def remote_retriever(url: str) -> RemoteRetriever:
    """One HTTP client (connection pool) per service URL per process."""
    return RemoteRetriever(url)
