"""Deep Search retrieval speed: index build (documents/s) and search (queries/s).

    python -m benchmarks.searchqa_retrieval                       # generated world x10 (~30k pages)
    python -m benchmarks.searchqa_retrieval --corpus wiki-18.jsonl --max-queries 2000
    python -m benchmarks.searchqa_retrieval --encoder /models/e5-base-v2   # adds dense

Measures, for BM25 with bm25s's numpy and numba backends (and dense when
--encoder is given):
- build: scan + tokenize + index + save of a JSONL corpus into a fresh index
  dir, then open (numba: including its once-per-process JIT compile),
- load: re-opening the saved index (memory-mapped),
- in-process search at several batch sizes,
- the HTTP retriever service: many concurrent one-query clients (merged by the
  service's batcher) and one client sending batches.
Prints one JSON object (with the machine and versions, see benchmarks/common.py).
Run from the repository root. Not run by the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import uvicorn

from benchmarks.common import emit, meta
from envs.searchqa.data import doc_from_json, write_wiki_jsonl
from envs.searchqa.retrieval import LocalRetriever, build_retriever
from envs.searchqa.retriever import create_retriever_app
from envs.searchqa.world import generate_world


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _search_rates(retriever: LocalRetriever, queries: list[str], batch_sizes: list[int], topk: int) -> dict[str, float]:
    rates = {}
    for size in batch_sizes:
        n = max(size, len(queries) // size * size)
        batches = [queries[i : i + size] for i in range(0, n, size)]
        retriever.retrieve(batches[0], topk)  # warm-up
        start = time.perf_counter()
        for batch in batches:
            retriever.retrieve(batch, topk)
        rates[f"batch_{size}"] = round(sum(map(len, batches)) / (time.perf_counter() - start), 1)
    return rates


def _service_rates(retriever: LocalRetriever, queries: list[str], topk: int, clients: int) -> dict[str, float]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_retriever_app(retriever), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/retrieve"
    try:
        with httpx.Client(timeout=300) as http:
            http.post(url, json={"queries": queries[:8], "topk": topk})

            def one(q: str) -> None:
                http.post(url, json={"queries": [q], "topk": topk}).raise_for_status()

            with ThreadPoolExecutor(clients) as pool:
                _, seconds = _timed(lambda: list(pool.map(one, queries)))
            concurrent = len(queries) / seconds
            batches = [queries[i : i + 64] for i in range(0, len(queries), 64)]
            _, seconds = _timed(lambda: [http.post(url, json={"queries": b, "topk": topk}).raise_for_status() for b in batches])
            batched = len(queries) / seconds
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    return {f"http_{clients}_clients_single_query": round(concurrent, 1), "http_batch_64": round(batched, 1)}


def _bench(options: dict, corpus: Path, queries: list[str], args: argparse.Namespace, num_docs: int) -> dict:
    method = options["method"]
    with tempfile.TemporaryDirectory() as index_dir:
        _, build_s = _timed(lambda: build_retriever(str(corpus), index_dir=index_dir, **options))
        retriever, load_s = _timed(lambda: build_retriever(str(corpus), index_dir=index_dir, **options))
        sizes = [1, 8, 64, 256] if method == "bm25" else [1, 64]
        return {
            "build_s": round(build_s, 2),
            "build_docs_per_s": round(num_docs / build_s, 1),
            "load_s": round(load_s, 3),
            "queries_per_s": _search_rates(retriever, queries, sizes, args.topk),
            "service_queries_per_s": _service_rates(retriever, queries, args.topk, args.clients),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="wiki-18 style JSONL (default: a generated world written to a temp file)")
    parser.add_argument("--scale", type=float, default=10.0, help="generated world size (1.0 = ~3k pages)")
    parser.add_argument("--encoder", help="local embedding model path: also benchmark dense retrieval")
    parser.add_argument("--max-queries", type=int, default=2048)
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()
    run_meta = meta()  # load average before the run

    with tempfile.TemporaryDirectory() as tmp:
        if args.corpus:
            corpus = Path(args.corpus)
            with open(corpus, encoding="utf-8") as f:  # titles of the first pages as queries
                head = [doc_from_json(json.loads(line), i).title for i, line in zip(range(20 * args.max_queries), f)]
            queries = random.Random(0).sample(head, min(args.max_queries, len(head)))
        else:
            world = generate_world(0, scale=args.scale)
            corpus = Path(tmp) / "world.jsonl"
            write_wiki_jsonl(world.docs(), corpus)
            rng = random.Random(0)
            texts = [q.text for q in world.questions] + [e.name for e in world.entities]
            queries = rng.sample(texts, min(args.max_queries, len(texts)))
        with open(corpus, "rb") as f:
            num_docs = sum(1 for line in f if line.strip())
        report = {"meta": run_meta, "corpus": str(args.corpus or f"generated world, scale {args.scale}"), "num_docs": num_docs, "num_queries": len(queries)}
        for backend in ("numpy", "numba") if importlib.util.find_spec("numba") else ("numpy",):
            report[f"bm25_{backend}"] = _bench({"method": "bm25", "bm25_backend": backend}, corpus, queries, args, num_docs)
        if args.encoder:
            report["dense"] = _bench({"method": "dense", "encoder": args.encoder}, corpus, queries, args, num_docs)
    emit(report, args.out)


if __name__ == "__main__":
    main()
