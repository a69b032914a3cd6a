"""The wiki retrieval server: ``POST /retrieve {queries, topk, return_scores}`` in Search-R1's shape.

    python -m afm.servers.wiki_server --corpus wiki.jsonl [--retriever bm25|dense] [--port PORT] [--topk 3]

Answer: ``{"result": [[{"document": {"id", "contents", ...}, "score": float}, ...] per query]}``, or with
``return_scores: false`` plain document lists ``{"result": [[{"id", "contents"}, ...], ...]}`` (as Search-R1's
retrieval server). The corpus is JSONL with ``{id, contents}`` (``contents = '"Title"\\ntext'``); records with
``title``/``text`` instead get ``contents`` made from them.

Retrievers: ``bm25`` (default; ``afm.servers.bm25_index``, index folder ``<corpus>.bm25``) and ``dense`` (e5 +
FAISS, ``afm.servers.dense_retriever``, folder ``<corpus>.dense``; model ``--dense-model``, a prebuilt FAISS
file with ``--faiss-index``). Indexes are built once, persisted, loaded at start and rebuilt when the corpus (or
the encoder) changes. Every query of a request is answered in one batch; requests are not merged with each other.

Threat model: binds 127.0.0.1 by default; optional bearer token on every route but ``/health``; request bodies are
capped (413) and validated (400/422).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from afm.servers.body import BadRequest, read_request
from afm.servers.common import EnvReader, create_app, flags_to_env, serve, server_arg_parser
from afm.servers.corpus import wiki_document
from afm.servers.worker_metrics import RUN_ID_ENV, WorkerMetrics, new_run_id

MAX_BODY_BYTES = 4 << 20
MAX_QUERIES = 512
MAX_QUERY_CHARS = 4096
MAX_TOPK = 100
DEFAULT_DENSE_MODEL = "intfloat/e5-base-v2"


class Retriever(Protocol):
    def search(self, query: str, k: int) -> list[tuple[int, float]]: ...
    def document(self, i: int) -> dict[str, Any]: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class WikiSettings:
    """The server's settings, read from the environment (CLI flags are turned into these variables)."""

    corpus: str | None
    retriever: str
    index_dir: str | None
    topk: int
    dense_model: str
    faiss_index: str | None
    dense_device: str | None
    dense_batch: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WikiSettings:
        read = EnvReader(env)
        return cls(
            corpus=read.optional("WIKI_CORPUS"),
            retriever=read.text("WIKI_RETRIEVER", "bm25").lower(),  # check() names the choices
            index_dir=read.optional("WIKI_INDEX_DIR"),
            topk=read.integer("WIKI_TOPK", 3),
            dense_model=read.text("WIKI_DENSE_MODEL", DEFAULT_DENSE_MODEL),
            faiss_index=read.optional("WIKI_FAISS_INDEX"),
            dense_device=read.optional("WIKI_DENSE_DEVICE"),
            dense_batch=read.integer("WIKI_DENSE_BATCH", 64),
        )

    def check(self) -> None:
        """Raise ValueError with the fix when the settings cannot work."""
        if self.retriever not in ("bm25", "dense"):
            raise ValueError(f"WIKI_RETRIEVER={self.retriever!r}: use bm25 or dense")
        if not self.corpus:
            raise ValueError("the wiki server needs a corpus: --corpus FILE.jsonl or WIKI_CORPUS (records {id, contents}; "
                             "the demo one: python -m afm.servers.demo_data DIR)")
        if not Path(self.corpus).is_file():
            raise ValueError(f"corpus not found: {self.corpus}")
        if not 1 <= self.topk <= MAX_TOPK:
            raise ValueError(f"WIKI_TOPK={self.topk}: must be 1..{MAX_TOPK}")

    def open_retriever(self) -> Retriever:
        corpus = self.corpus or ""
        if self.retriever == "dense":
            from afm.servers.dense_retriever import E5Encoder, ensure_dense_index

            encoder = E5Encoder(self.dense_model, self.dense_device, batch_size=self.dense_batch)
            return ensure_dense_index(corpus, self.index_dir or f"{corpus}.dense", encoder,
                                      faiss_index=self.faiss_index)
        from afm.servers.bm25_index import ensure_index

        return ensure_index(corpus, self.index_dir)


class RetrieveRequest(BaseModel):
    """``POST /retrieve`` body (Search-R1's)."""

    model_config = ConfigDict(extra="ignore")

    queries: list[str] = Field(min_length=1, max_length=MAX_QUERIES)
    topk: int | None = Field(default=None, ge=1, le=MAX_TOPK)
    return_scores: bool = False

    @field_validator("queries")
    @classmethod
    def _queries_ok(cls, v: list[str]) -> list[str]:
        for i, q in enumerate(v):
            if not q.strip():
                raise ValueError(f"query {i} is blank")
            if len(q) > MAX_QUERY_CHARS:
                raise ValueError(f"query {i} has {len(q)} characters; the limit is {MAX_QUERY_CHARS}")
        return v


def _answer(retriever: Retriever, req: RetrieveRequest, topk: int) -> list[list[Any]]:
    search_many = getattr(retriever, "search_many", None)
    hits = (search_many(req.queries, topk) if search_many is not None
            else [retriever.search(q, topk) for q in req.queries])
    out: list[list[Any]] = []
    for per_query in hits:
        docs = [(wiki_document(retriever.document(i), i), score) for i, score in per_query]
        out.append([{"document": d, "score": s} for d, s in docs] if req.return_scores else [d for d, _ in docs])
    return out


def create_wiki_app(settings: WikiSettings | None = None) -> FastAPI:
    """The app (uvicorn factory): settings from the environment unless given."""
    settings = settings or WikiSettings.from_env()
    settings.check()
    retriever = settings.open_retriever()
    metrics = WorkerMetrics("wiki")
    metrics.publish_quietly()
    app = create_app("afm wiki retrieval server", description=__doc__.split("\n\n")[0],
                     health={"retriever": settings.retriever})
    app.state.retriever = retriever
    # One search at a time per worker: the index is CPU-bound and parallel numpy/torch calls only contend.
    gate = asyncio.Semaphore(1)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Any:
        t0 = time.perf_counter()
        try:
            req = await read_request(request, RetrieveRequest, MAX_BODY_BYTES, metrics)
        except BadRequest as exc:
            return exc.response()
        metrics.inc("queries", len(req.queries))
        async with gate:
            result = await asyncio.to_thread(_answer, retriever, req, req.topk or settings.topk)
        metrics.observe(time.perf_counter() - t0)
        return JSONResponse({"result": result})

    @app.get("/metrics")
    async def get_metrics() -> dict[str, Any]:
        out = await asyncio.to_thread(metrics.aggregate)
        out.setdefault("requests", 0)
        out["retriever"] = settings.retriever
        out["documents"] = len(retriever)  # type: ignore[arg-type]
        out["index"] = getattr(retriever, "manifest", {}).get("format")
        return out

    return app


def main(argv: list[str] | None = None) -> int:
    """CLI entry: check settings, build or check the index once, then serve."""
    p = server_arg_parser("afm wiki retrieval server: POST /retrieve {queries, topk, return_scores}",
                          "WIKI_RAG_PORT")
    p.add_argument("--corpus", help="JSONL {id, contents} (default $WIKI_CORPUS)")
    p.add_argument("--retriever", choices=["bm25", "dense"], help="default $WIKI_RETRIEVER or bm25")
    p.add_argument("--index-dir", help="index folder (default $WIKI_INDEX_DIR or <corpus>.bm25 / <corpus>.dense)")
    p.add_argument("--topk", type=int, help="results per query when a request gives none (default 3)")
    p.add_argument("--dense-model", help=f"encoder folder or hub id (default {DEFAULT_DENSE_MODEL})")
    p.add_argument("--faiss-index", help="prebuilt FAISS index whose vector i is corpus record i (dense)")
    args = p.parse_args(argv)
    # --dense-model is a path when such a folder exists, else a hub id.
    paths = ("corpus", "index_dir", "faiss_index", *(("dense_model",) if args.dense_model and
                                                      Path(args.dense_model).exists() else ()))
    env = flags_to_env(args, {"corpus": "WIKI_CORPUS", "retriever": "WIKI_RETRIEVER", "index_dir": "WIKI_INDEX_DIR",
                              "topk": "WIKI_TOPK", "dense_model": "WIKI_DENSE_MODEL",
                              "faiss_index": "WIKI_FAISS_INDEX"}, paths)
    try:
        settings = WikiSettings.from_env({**os.environ, **env})
        settings.check()
        # Build (or check) the index once here, so that N workers do not race to build it.
        settings.open_retriever().close()
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"wiki server: {exc}", file=sys.stderr)
        return 2
    env[RUN_ID_ENV] = new_run_id("wiki")
    print(f"wiki server on {args.host}:{args.port}: retriever={settings.retriever} corpus={settings.corpus} "
          f"topk={settings.topk} workers={args.workers}", file=sys.stderr, flush=True)
    serve("afm.servers.wiki_server:create_wiki_app", args, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
