"""Deep Search retrieval speed: index build (documents/s) and search (queries/s).

    python benchmarks/searchqa_retrieval.py                       # generated world x10 (~30k pages)
    python benchmarks/searchqa_retrieval.py --corpus wiki-18.jsonl --max-queries 2000
    python benchmarks/searchqa_retrieval.py --encoder /models/e5-base-v2   # adds dense
    python benchmarks/searchqa_retrieval.py --random-encoder 12x384 --skip-bm25   # dense cost, no weights needed

Measures, for BM25 with bm25s's numpy and numba backends (and dense with
--encoder or --random-encoder):
- build: scan + tokenize + index + save of a JSONL corpus into a fresh index
  dir, then open (numba: including its once-per-process JIT compile),
- load: re-opening the saved index (memory-mapped),
- in-process search at several batch sizes,
- the HTTP retriever service (`python -m envs.searchqa.retriever` in its own
  process, on the index built above): many concurrent one-query clients
  (merged by the service's batcher) and one client sending batches of 64,
- dense only: the index alone (FAISS flat and the NumPy matmul) on queries
  encoded beforehand, so the two search backends compare without the encoder.
Prints one JSON object (with the machine and versions, see benchmarks/common.py).
Also `python -m benchmarks.searchqa_retrieval`; part of run_all.py. Not run by the tests.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # also run as `python benchmarks/searchqa_retrieval.py`

import httpx  # noqa: E402

from benchmarks.common import ROOT, emit, limit_cpu_threads, meta  # noqa: E402
from envs.searchqa.data import doc_from_json, write_wiki_jsonl  # noqa: E402
from envs.searchqa.dense import DenseIndex, faiss_available  # noqa: E402
from envs.searchqa.retrieval import LocalRetriever, build_retriever  # noqa: E402
from envs.searchqa.world import generate_world  # noqa: E402


def _versions(*names: str) -> dict[str, str]:
    """Installed versions of the retrieval stack (benchmarks/common.py records the rest)."""
    found = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


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


def _service_args(options: dict) -> list[str]:
    """The retriever CLI flags for `build_retriever` options."""
    flags = ["--method", options["method"]]
    if options["method"] == "bm25":
        return flags + ["--bm25-backend", options["bm25_backend"]]
    return flags + ["--encoder", options["encoder"], "--device", "cpu"]


def _service_rates(corpus: Path, index_dir: str, options: dict, queries: list[str], topk: int, clients: int) -> dict[str, float]:
    """Queries/s through the real service (`python -m envs.searchqa.retriever`, its own process,
    loading the index built above): many one-query clients at once, then one client sending batches."""
    cmd = [sys.executable, "-m", "envs.searchqa.retriever", "--corpus", str(corpus), "--index-dir", index_dir,
           "--port", "0", *_service_args(options)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline().strip()
        if not line.startswith("LISTENING "):
            raise RuntimeError(f"retriever service did not start: {line!r}")
        url = line.split()[1] + "/retrieve"
        with httpx.Client(timeout=300) as http:
            for _ in range(200):  # uvicorn may need a moment after the announcement
                try:
                    http.post(url, json={"queries": queries[:8], "topk": topk}).raise_for_status()  # also warms up
                    break
                except httpx.TransportError:
                    time.sleep(0.05)

            def one(q: str) -> None:
                http.post(url, json={"queries": [q], "topk": topk}).raise_for_status()

            with ThreadPoolExecutor(clients) as pool:
                _, seconds = _timed(lambda: list(pool.map(one, queries)))
            concurrent = len(queries) / seconds
            batches = [queries[i : i + 64] for i in range(0, len(queries), 64)]
            _, seconds = _timed(lambda: [http.post(url, json={"queries": b, "topk": topk}).raise_for_status() for b in batches])
            batched = len(queries) / seconds
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {f"http_{clients}_clients_single_query": round(concurrent, 1), "http_batch_64": round(batched, 1)}


def random_encoder(shape: str, docs_texts: list[str], folder: Path) -> str:
    """A randomly initialized BERT of `shape` ("<layers>x<hidden>", e5-small-v2 is 12x384, e5-base-v2
    12x768) with a word vocabulary of the corpus, saved under `folder`: the cost of dense retrieval
    (encode, search) where no trained encoder can be downloaded, not its quality. A word vocabulary
    gives fewer tokens per passage than WordPiece, so real encoders cost somewhat more."""
    import re

    from transformers import BertConfig, BertModel, BertTokenizer

    try:
        layers, hidden = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--random-encoder wants <layers>x<hidden>, e.g. 12x384; got {shape!r}") from None
    words = sorted({w for text in docs_texts for w in re.findall(r"\w+", text.lower())})
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "query", "passage", ":"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(specials + words) + "\n")
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(folder)
    config = BertConfig(vocab_size=len(specials) + len(words), hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=hidden // 64, intermediate_size=4 * hidden, max_position_embeddings=512)
    BertModel(config).save_pretrained(folder)
    return str(folder)


def _index_rates(index: DenseIndex, queries: list[str], topk: int, batch: int = 64) -> dict[str, float]:
    """Queries/s of the dense index alone (queries encoded beforehand): FAISS flat vs NumPy matmul."""
    vectors = index.encoder.encode(queries, query=True)
    backends = {"numpy": DenseIndex(index.encoder, index._vectors, use_faiss=False)}
    if faiss_available():
        backends["faiss"] = DenseIndex(index.encoder, index._vectors, use_faiss=True)
    rates = {}
    for name, backend in backends.items():
        backend.search_vectors(vectors[:batch], topk)  # warm-up
        _, seconds = _timed(lambda: [backend.search_vectors(vectors[i : i + batch], topk) for i in range(0, len(vectors), batch)])
        rates[f"{name}_batch_{batch}"] = round(len(vectors) / seconds, 1)
    return rates


def _bench(options: dict, corpus: Path, queries: list[str], args: argparse.Namespace, num_docs: int) -> dict:
    method = options["method"]
    with tempfile.TemporaryDirectory() as index_dir:
        _, build_s = _timed(lambda: build_retriever(str(corpus), index_dir=index_dir, **options))
        retriever, load_s = _timed(lambda: build_retriever(str(corpus), index_dir=index_dir, **options))
        sizes = [1, 8, 64, 256] if method == "bm25" else [1, 64]
        result = {
            "build_s": round(build_s, 2),
            "build_docs_per_s": round(num_docs / build_s, 1),
            "load_s": round(load_s, 3),
            "queries_per_s": _search_rates(retriever, queries, sizes, args.topk),
            "service_queries_per_s": _service_rates(corpus, index_dir, options, queries, args.topk, args.clients),
        }
        if method == "dense":
            result["search_backend"] = "faiss" if retriever.index._faiss is not None else "numpy"
            result["index_only_queries_per_s"] = _index_rates(retriever.index, queries, args.topk)
        return result


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", help="wiki-18 style JSONL (default: a generated world written to a temp file)")
    parser.add_argument("--scale", type=float, default=10.0, help="generated world size (1.0 = ~3k pages)")
    parser.add_argument("--encoder", help="local embedding model path: also benchmark dense retrieval")
    parser.add_argument("--random-encoder", metavar="LAYERSxHIDDEN",
                        help="dense with a random-init BERT of this shape (e.g. 12x384): its cost, not its quality")
    parser.add_argument("--skip-bm25", action="store_true", help="dense only")
    parser.add_argument("--bm25-backends", default="numpy,numba" if importlib.util.find_spec("numba") else "numpy",
                        help="comma-separated bm25s backends to measure (numba compiles for 10-20 s, longer under load)")
    parser.add_argument("--cpu-threads", type=int, default=1,
                        help="CPU only: torch threads of the encoder (0: torch's default; two spinning threads on "
                             "2 busy cores encoded 50x slower than one here)")
    parser.add_argument("--max-queries", type=int, default=2048)
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    run_meta = meta(__file__, argv)  # load average before the run
    run_meta.update(limit_cpu_threads(args.cpu_threads) if (args.encoder or args.random_encoder) else {})

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
        report = {"meta": run_meta, "corpus": str(args.corpus or f"generated world, scale {args.scale}"), "num_docs": num_docs,
                  "num_queries": len(queries), "topk": args.topk,
                  "retrieval_versions": _versions("bm25s", "numba", "faiss-cpu", "numpy")}
        if not args.skip_bm25:
            for backend in [b.strip() for b in args.bm25_backends.split(",") if b.strip()]:
                report[f"bm25_{backend}"] = _bench({"method": "bm25", "bm25_backend": backend}, corpus, queries, args, num_docs)
        encoder = args.encoder
        if args.random_encoder:
            if encoder:
                raise SystemExit("give --encoder or --random-encoder, not both")
            from envs.searchqa.data import JsonlCorpus

            texts = [d.contents for d in JsonlCorpus(corpus, JsonlCorpus.scan_offsets(corpus))] + queries
            encoder = random_encoder(args.random_encoder, texts, Path(tmp) / f"random-bert-{args.random_encoder}")
            report["random_encoder"] = args.random_encoder  # layers x hidden, corpus-word vocabulary, random weights
        if encoder:
            report["dense"] = _bench({"method": "dense", "encoder": encoder}, corpus, queries, args, num_docs)
    return emit(report, args.out)


if __name__ == "__main__":
    main()
