"""The retriever as an HTTP service shared by many env sessions.

    python -m envs.searchqa.retriever --corpus wiki-18.jsonl --port 8001
    python -m envs.searchqa.retriever --method dense --encoder /models/e5-base-v2 --corpus wiki-18.jsonl
    python -m envs.searchqa.retriever --port 0            # the generated world, BM25

Routes:

    POST /retrieve {"queries": [str, ...], "topk": k}
        -> {"results": [[{"id", "title", "text", "score"}, ...] per query]}
    GET  /health -> {"status": "ok", "method", "corpus", "num_docs", ...}

Requests arriving together are merged into one batched search (see
BatchingRetriever), which is what makes one service worth sharing: a
dense encoder on a GPU, or BM25 over 21M passages, serves every env session
of every env server. Envs point at it with the env option `retriever_url`.
The index is built (or loaded memory-mapped) before the service announces
`LISTENING http://host:port`, so a client that waits for that line never
talks to a half-ready service.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from envs.common.cli import serve
from envs.common.server import MAX_ACTION_CHARS, BodyLimit
from envs.searchqa.retrieval import (
    BatchingRetriever,
    Retriever,
    RetrieverError,
    build_retriever,
)

MAX_QUERIES = 4096
MAX_QUERY_CHARS = MAX_ACTION_CHARS  # an env server's longest action, so every search it forwards fits
MAX_TOPK = 100
MAX_BODY_BYTES = 32 << 20  # a full batch of long queries fits; a runaway client does not


class RetrieveBody(BaseModel):
    queries: list[str]
    topk: int = Field(3, ge=1, le=MAX_TOPK)


def create_retriever_app(retriever: Retriever, max_batch: int = 256) -> FastAPI:
    """FastAPI app serving `retriever`; concurrent requests are batched together."""
    batched = retriever if isinstance(retriever, BatchingRetriever) else BatchingRetriever(retriever, max_batch)
    app = FastAPI(title="rllib-agentgym searchqa retriever")
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return JSONResponse(status_code=422, content={"error": f"malformed request: {where}: {first.get('msg', 'invalid')}"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException):
        return JSONResponse(status_code=exc.status_code, content={"error": str(exc.detail)})

    @app.exception_handler(RetrieverError)
    async def _backend_error(_: Request, exc: RetrieverError):
        return JSONResponse(status_code=502, content={"error": str(exc)})

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", **batched.describe()}

    @app.post("/retrieve")
    def retrieve(body: RetrieveBody):
        if len(body.queries) > MAX_QUERIES:
            return JSONResponse(status_code=422, content={"error": f"at most {MAX_QUERIES} queries per request"})
        if any(len(q) > MAX_QUERY_CHARS for q in body.queries):
            return JSONResponse(status_code=422, content={"error": f"a query longer than {MAX_QUERY_CHARS} characters"})
        return {"results": batched.retrieve(body.queries, body.topk)}

    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envs.searchqa.retriever", description="Serve a search engine over a corpus.")
    parser.add_argument("--corpus", help="wiki-18 style JSONL corpus; default: the generated world")
    parser.add_argument("--method", choices=("bm25", "dense"), default="bm25")
    parser.add_argument("--encoder", help="local path of the embedding model (dense), e.g. e5-base-v2")
    parser.add_argument("--dense-index", help="prebuilt FAISS index of the corpus (dense; row i = corpus line i)")
    parser.add_argument("--index-dir", help="where the corpus index is kept (default: under $RLLIB_AGENTGYM_CACHE)")
    parser.add_argument("--world-seed", type=int, default=0, help="seed of the generated world (no --corpus)")
    parser.add_argument("--device", help="encoder device (default: cuda when available)")
    parser.add_argument(
        "--bm25-backend",
        choices=("numpy", "numba"),
        default="numba" if importlib.util.find_spec("numba") else "numpy",
        help="numba searches ~15x faster but compiles for 10-20 s at start (default when installed)",
    )
    parser.add_argument("--max-batch", type=int, default=256, help="most queries merged into one search")
    parser.add_argument("--build-only", action="store_true", help="build the index and exit")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001, help="0 picks a free port (printed on start)")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    retriever = build_retriever(
        args.corpus,
        method=args.method,
        index_dir=args.index_dir,
        encoder=args.encoder,
        dense_index=args.dense_index,
        world_seed=args.world_seed,
        device=args.device,
        bm25_backend=args.bm25_backend,
    )
    if args.build_only:
        print(retriever.describe(), flush=True)
        return
    app = create_retriever_app(retriever, args.max_batch)
    serve(lambda: app, "searchqa.retriever", argv=["--host", args.host, "--port", str(args.port), "--log-level", args.log_level])


if __name__ == "__main__":
    main()
