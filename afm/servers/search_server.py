"""The search server: ``POST /search {q, num}`` → Serper-shaped results, cached persistently.

    python -m afm.servers.search_server [--backend auto|serper|local] [--corpus CORPUS.jsonl] [--port PORT]
                                        [--workers N] [--cache PATH|redis://…|off] [--cache-ttl SECONDS]

Response: ``{"searchParameters": {q, num, backend}, "organic": [{title, link, snippet, position, date?, source?}],
"cached": bool, "backend": name}``. Backends (``afm.servers.search_backends``): ``serper`` when
``WEB_SEARCH_SERPER_API_KEY`` is set, otherwise ``local`` (BM25 over ``WEB_SEARCH_CORPUS``). Results are cached
under exactly what the answer depends on (:func:`search_cache_key`: for ``local`` the corpus's SHA-256 and the
query's BM25 tokens, for ``serper`` the endpoint and every parameter sent; ``num`` for both) in SQLite (WAL; every
worker of every server on the machine can share the file) or Redis (``redis://`` URL; several nodes), with a TTL. Failures are
never cached: a backend error answers 502, a backend timeout 504, both as JSON. ``GET /metrics``: requests, hits,
misses, hit_rate, upstream_errors, latency percentiles, summed over the workers (see ``worker_metrics``).

Threat model: binds 127.0.0.1 unless told otherwise; with a bearer token (``--token``/``AFM_SERVER_TOKEN``) every
route but ``/health`` needs it. The Serper key is read from the environment and never logged or returned.
Request bodies are capped (413) and validated (400/422) before any backend call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from afm.common.kvcache import KVCache, cache_key, open_cache
from afm.servers.body import BadRequest, read_request
from afm.servers.common import EnvReader, create_app, flags_to_env, redact, serve, server_arg_parser
from afm.servers.search_backends import SERPER_URL, LocalBackend, SearchBackend, SerperBackend, UpstreamError
from afm.servers.worker_metrics import RUN_ID_ENV, WorkerMetrics, new_run_id

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
MAX_QUERY_CHARS = 2048
MAX_NUM = 100
DEFAULT_CACHE = "~/.cache/afm/search_cache.sqlite"
DEFAULT_TTL_S = 7 * 86400.0
CACHE_OFF = ("", "off", "none")
CACHE_FORMAT = 2  # in every key: entries of another format (format 1 had no scope and folded case) never match


@dataclass(frozen=True)
class SearchSettings:
    """Everything the server reads from the environment (CLI flags are turned into these variables)."""

    backend: str
    requested: str  # what WEB_SEARCH_BACKEND asked for: auto, serper or local
    corpus: str | None
    index_dir: str | None
    cache: str
    cache_ttl: float | None
    serper_key: str
    serper_url: str
    serper_timeout: float
    serper_retries: int
    serper_backoff: float

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SearchSettings:
        read = EnvReader(env)
        key = read.raw("WEB_SEARCH_SERPER_API_KEY")
        requested = read.choice("WEB_SEARCH_BACKEND", "auto", ("auto", "serper", "local"), fold_case=True)
        # Only "auto" chooses; a deployment that asked for serper gets serper or an error, never local results.
        backend = ("serper" if key else "local") if requested == "auto" else requested
        ttl = read.number("WEB_SEARCH_CACHE_TTL", DEFAULT_TTL_S)
        return cls(
            backend=backend,
            requested=requested,
            corpus=read.optional("WEB_SEARCH_CORPUS"),
            index_dir=read.optional("WEB_SEARCH_INDEX_DIR"),
            cache=read.raw("WEB_SEARCH_CACHE", DEFAULT_CACHE),
            cache_ttl=ttl if ttl > 0 else None,
            serper_key=key,
            serper_url=read.text("WEB_SEARCH_SERPER_URL", SERPER_URL),
            serper_timeout=read.number("WEB_SEARCH_SERPER_TIMEOUT", 20.0),
            serper_retries=read.integer("WEB_SEARCH_SERPER_RETRIES", 2),
            serper_backoff=read.number("WEB_SEARCH_SERPER_BACKOFF", 0.5),
        )

    def describe(self) -> str:
        """The backend in words, for the start-up line and ``start_servers.sh status``."""
        if self.backend == "serper":
            return f"serper ({self.serper_url})"
        why = " (WEB_SEARCH_BACKEND=auto and WEB_SEARCH_SERPER_API_KEY is empty)" if self.requested == "auto" else ""
        return f"local BM25 over {self.corpus}{why}"

    def check(self) -> None:
        """Raise ValueError with the fix when the settings cannot work."""
        if self.backend == "serper" and not self.serper_key:
            raise ValueError("backend 'serper' needs WEB_SEARCH_SERPER_API_KEY (or use --backend local)")
        if self.backend == "local":
            if not self.corpus:
                raise ValueError("backend 'local' needs a corpus: --corpus FILE.jsonl or WEB_SEARCH_CORPUS "
                                 "(records {id, title, url, text}; the demo one: python -m afm.servers.demo_data DIR)")
            if not Path(self.corpus).is_file():
                raise ValueError(f"corpus not found: {self.corpus}")

    def make_backend(self) -> SearchBackend:
        if self.backend == "serper":
            return SerperBackend(self.serper_key, self.serper_url, self.serper_timeout, self.serper_retries,
                                 self.serper_backoff)
        return LocalBackend.open(self.corpus or "", self.index_dir)

    def make_cache(self) -> KVCache | None:
        if self.cache.strip().lower() in CACHE_OFF:
            return None
        return open_cache(os.path.expanduser(self.cache), namespace="search", ttl=self.cache_ttl)


class SearchRequest(BaseModel):
    """``POST /search`` body (Serper's field names; other Serper fields are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore")

    q: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    num: int = Field(default_factory=lambda: default_num(), ge=1, le=MAX_NUM)

    @field_validator("q")
    @classmethod
    def _not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("the query is blank")
        return v


def default_num(env: Mapping[str, str] | None = None) -> int:
    """Results per query when a request gives no ``num``: ``WEB_SEARCH_SERP_NUM`` (the original's name) or 10."""
    num = EnvReader(env).integer("WEB_SEARCH_SERP_NUM", 10)
    if not 1 <= num <= MAX_NUM:
        raise ValueError(f"WEB_SEARCH_SERP_NUM={num}: expected a whole number from 1 to {MAX_NUM}")
    return num


def search_cache_key(backend: SearchBackend, query: str, num: int) -> str:
    """The cache key of a query as sent to ``backend``: the key format, the backend's scope (its corpus or its
    endpoint) and the query in the backend's own normalisation. Keys of earlier formats never match."""
    return cache_key("search", CACHE_FORMAT, backend.cache_scope, backend.cache_query(query, num))


class SearchService:
    """Cache in front of a backend, with metrics and coalescing of identical concurrent misses."""

    def __init__(self, backend: SearchBackend, cache: KVCache | None, metrics: WorkerMetrics) -> None:
        self.backend = backend
        self.cache = cache
        self.metrics = metrics
        self._inflight: dict[str, asyncio.Future[str]] = {}
        # SQLite lookups take microseconds: done inline. A network cache (Redis) goes to a thread.
        self._inline_get = cache is None or cache.url.startswith("sqlite://")

    async def search(self, query: str, num: int) -> tuple[str, bool]:
        """(payload JSON, cached?) for a validated request; raises UpstreamError."""
        sent = " ".join(query.split())
        key = search_cache_key(self.backend, sent, num)
        if self.cache is not None:
            try:
                hit = self.cache.get(key) if self._inline_get else await asyncio.to_thread(self.cache.get, key)
            except Exception as exc:  # an unreadable cache degrades to a miss, it does not fail the search
                self.metrics.inc("cache_read_errors")
                log.warning("cache read failed: %s", exc)
                hit = None
            if hit is not None:
                self.metrics.inc("hits")
                return hit, True
        pending = self._inflight.get(key)
        if pending is not None:
            self.metrics.inc("coalesced")
            return await asyncio.shield(pending), False
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            self.metrics.inc("misses")
            try:
                payload = json.dumps(await self.backend.search(sent, num), ensure_ascii=False)
            except asyncio.CancelledError:
                fut.cancel()
                raise
            except Exception as exc:
                fut.set_exception(exc)
                fut.exception()  # mark retrieved: waiters re-raise it, nobody else must
                raise
            fut.set_result(payload)
            # Stay registered until the write lands, so that a request in between does not call the backend again.
            await self._store(key, payload)
        finally:
            del self._inflight[key]
        return payload, False

    async def _store(self, key: str, payload: str) -> None:
        if self.cache is None:
            return
        try:
            await asyncio.to_thread(self.cache.set, key, payload)
        except Exception as exc:  # a full disk or a lost Redis must not fail the answer
            self.metrics.inc("cache_write_errors")
            log.warning("cache write failed: %s", exc)


def create_search_app(settings: SearchSettings | None = None) -> FastAPI:
    """The app (uvicorn factory): settings from the environment unless given."""
    settings = settings or SearchSettings.from_env()
    settings.check()
    backend = settings.make_backend()
    cache = settings.make_cache()
    metrics = WorkerMetrics("search")
    metrics.publish_quietly()  # so /metrics counts this worker before it has served anything
    service = SearchService(backend, cache, metrics)
    app = create_app("afm search server", description=__doc__.split("\n\n")[0],
                     health={"backend": backend.name, "requested_backend": settings.requested})
    app.state.service = service
    name = json.dumps(backend.name)

    @app.post("/search")
    async def search(request: Request) -> Response:
        t0 = time.perf_counter()
        try:
            req = await read_request(request, SearchRequest, MAX_BODY_BYTES, metrics)
            payload, cached = await service.search(req.q, req.num)
        except BadRequest as exc:
            return exc.response()
        except UpstreamError as exc:
            metrics.inc("upstream_errors")
            metrics.inc("upstream_timeouts" if exc.status == 504 else "upstream_failures")
            return JSONResponse({"error": "search backend failed", "detail": exc.message,
                                 "backend": backend.name}, exc.status)
        params = json.dumps({"q": req.q, "num": req.num, "backend": backend.name}, ensure_ascii=False)
        # The cached payload is already JSON: splice it in rather than parse and re-encode it.
        body = (f'{{"searchParameters":{params},"cached":{"true" if cached else "false"},"backend":{name},'
                f"{payload[1:]}")
        metrics.observe(time.perf_counter() - t0)
        return Response(body, media_type="application/json")

    @app.get("/metrics")
    async def get_metrics() -> dict[str, Any]:
        out = await asyncio.to_thread(metrics.aggregate)
        answered = sum(out.get(k, 0) for k in ("hits", "misses", "coalesced"))
        out["hit_rate"] = round(out.get("hits", 0) / answered, 4) if answered else 0.0
        for key in ("requests", "hits", "misses", "upstream_errors"):
            out.setdefault(key, 0)
        out["backend"] = backend.name
        out["requested_backend"] = settings.requested
        out["cache"] = cache.url if cache is not None else "off"
        out["cache_ttl_s"] = settings.cache_ttl
        return out

    return app


def main(argv: list[str] | None = None) -> int:
    """CLI entry: check the settings, build the local index once, then serve."""
    p = server_arg_parser("afm search server: POST /search {q, num}", "WEBSEARCH_PORT")
    p.add_argument("--backend", choices=["auto", "serper", "local"],
                   help="default $WEB_SEARCH_BACKEND or auto (serper when WEB_SEARCH_SERPER_API_KEY is set)")
    p.add_argument("--corpus", help="JSONL {id,title,url,text} for the local backend (default $WEB_SEARCH_CORPUS)")
    p.add_argument("--index-dir", help="BM25 index folder (default $WEB_SEARCH_INDEX_DIR or <corpus>.bm25)")
    p.add_argument("--cache", help=f"SQLite path, redis:// URL or 'off' (default $WEB_SEARCH_CACHE or {DEFAULT_CACHE})")
    p.add_argument("--cache-ttl", type=float, help="seconds a cached result lives; 0 = forever (default 7 days)")
    args = p.parse_args(argv)
    env = flags_to_env(args, {"backend": "WEB_SEARCH_BACKEND", "corpus": "WEB_SEARCH_CORPUS",
                              "index_dir": "WEB_SEARCH_INDEX_DIR", "cache": "WEB_SEARCH_CACHE",
                              "cache_ttl": "WEB_SEARCH_CACHE_TTL"}, paths=("corpus", "index_dir"))
    try:
        settings = SearchSettings.from_env({**os.environ, **env})
        settings.check()
        default_num({**os.environ, **env})
        if settings.backend == "local":
            # Build (or check) the index once here, so that N workers do not race to build it.
            settings.make_backend().index.close()  # type: ignore[attr-defined]
    except (ValueError, FileNotFoundError) as exc:
        print(f"search server: {exc}", file=sys.stderr)
        return 2
    try:
        cache = settings.make_cache()
        if cache is not None:
            cache.close()
    except Exception as exc:  # an unreachable Redis, an unwritable path: say so before any worker starts
        print(f"search server: cannot open the cache {settings.cache.split('@')[-1]!r}: {exc}", file=sys.stderr)
        return 2
    env[RUN_ID_ENV] = new_run_id("search")
    print(f"search server on {args.host}:{args.port}: backend={settings.describe()} "
          f"cache={settings.cache} ttl={settings.cache_ttl} serper_key={redact(settings.serper_key)} "
          f"default_num={default_num()} workers={args.workers}", file=sys.stderr, flush=True)
    serve("afm.servers.search_server:create_search_app", args, env)
    return 0


if __name__ == "__main__":
    sys.exit(main())
