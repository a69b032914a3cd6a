"""The crawl server: ``POST /crawl_page`` fetches pages, extracts their main text and summarises it for the agent.

    python -m afm.servers.crawl_server [--port PORT] [--allow 10.0.0.0/8] [--cache PATH|redis://...] [--workers N]

Request ``{urls, task, web_search_query, think_content, summary_type, chunk_size}``: ``urls`` is a list or one
``|``-separated string (markdown links ``[text](http...)`` are accepted); ``summary_type`` is ``none``, ``once``,
``chunk`` or ``page`` (see :mod:`afm.servers.summarize`). Response ``{success, obs, error_message,
processing_time, pages: [{url, success, status, cached, chars, ...}]}``; ``obs`` is what the agent sees, one block
per page: ``Page i [url] Summary:\\n...`` or ``Page i [url]: [Page content not accessible: reason]``. ``success``
is true when at least one page was read. A request in which no item is a URL answers 200 with ``success: false``
and ``error_message`` "No valid URL found: ..." (the original server's answer, which its verl client expects); a
request that is not valid JSON, misses ``urls`` or gives none answers 4xx.

Defaults that differ from the original server, on purpose: ``summary_type`` ``once`` (the original: ``page``)
and a 120 s whole-request limit (the original: 500 s); server/tool_server_readme.md says why.

Pages are fetched concurrently under the SSRF policy of :mod:`afm.servers.ssrf` and the caps of
:mod:`afm.servers.fetch`. The policy runs before any cache look-up. Extracted text is cached per (URL, fetch
scope: allow-list, route, CAs, caps, format, extractor; see :func:`fetch_scope`), summaries per (text, URL, mode,
goal, model and its sampling settings, prompts), both with a TTL, so a new goal re-summarises without fetching
again. A request that runs past ``CRAWL_REQUEST_TIMEOUT`` answers 504. Settings come from environment variables (listed in :class:`CrawlSettings`), so every uvicorn worker
sees the same ones. Threat model: see :mod:`afm.servers.ssrf`; the server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from afm.common.kvcache import KVCache, cache_key, open_cache
from afm.servers.body import BadRequest, read_request
from afm.servers.common import EnvReader, create_app, flags_to_env, redact, serve, server_arg_parser
from afm.servers.fetch import (
    DEFAULT_JINA_BASE_URL,
    FetchLimits,
    FetchResult,
    PageFetcher,
    extractor_version,
    tls_context,
)
from afm.servers.ssrf import ALLOW_ENV, AllowList, UrlPolicy
from afm.servers.summarize import (
    PROMPT_VERSION,
    SUMMARY_MODES,
    ChatClient,
    Goal,
    LLMSettings,
    Summarizer,
    SummaryBudget,
    alias_notes,
)
from afm.servers.worker_metrics import RUN_ID_ENV, WorkerMetrics, new_run_id

log = logging.getLogger(__name__)

# Part of every crawl cache key: entries written under another format (or by afm before it existed) never match.
CACHE_FORMAT = 2
MAX_URL_CHARS = 4096
_MD_LINK = re.compile(r"^\[[^\]]*\]\((\S+?)\)$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_EMBEDDED_URL = re.compile(r"https?://[^\s<>\"'\])]+")


@dataclass(frozen=True)
class CrawlSettings:
    """Server settings; each field has one environment variable (name, default) given in ``from_env``."""

    allow: str = ""
    cache: str = "~/.cache/afm/crawl_cache.sqlite"
    cache_ttl_s: float = 3 * 3600.0
    default_mode: str = "once"
    request_timeout_s: float = 120.0
    max_urls: int = 10
    max_body_bytes: int = 1_000_000
    limits: FetchLimits = field(default_factory=FetchLimits)
    jina_api_key: str = ""
    jina_base_url: str = DEFAULT_JINA_BASE_URL
    ca_bundle: str = ""

    @classmethod
    def from_env(cls) -> CrawlSettings:
        env = EnvReader()
        mode = env.choice("CRAWL_SUMMARY_TYPE", cls.default_mode, SUMMARY_MODES)
        AllowList.parse(env.raw(ALLOW_ENV))  # a bad entry is an error at start, not a silent refusal later
        fmt = env.choice("CRAWL_TEXT_FORMAT", "markdown", ("markdown", "txt"))
        limits = FetchLimits(max_bytes=env.integer("CRAWL_MAX_BYTES", FetchLimits.max_bytes),
                             max_redirects=env.integer("CRAWL_MAX_REDIRECTS", FetchLimits.max_redirects),
                             timeout_s=env.number("CRAWL_FETCH_TIMEOUT", FetchLimits.timeout_s),
                             output_format=fmt)  # type: ignore[arg-type]
        return cls(allow=env.raw(ALLOW_ENV),
                   cache=env.raw("CRAWL_CACHE", cls.cache),
                   cache_ttl_s=env.number("CRAWL_CACHE_TTL", cls.cache_ttl_s),
                   default_mode=mode,
                   request_timeout_s=env.number("CRAWL_REQUEST_TIMEOUT", cls.request_timeout_s),
                   max_urls=env.integer("CRAWL_MAX_URLS", cls.max_urls),
                   max_body_bytes=env.integer("CRAWL_MAX_BODY_BYTES", cls.max_body_bytes),
                   limits=limits,
                   jina_api_key=env.raw("JINA_API_KEY"),
                   jina_base_url=env.text("JINA_READER_BASE_URL", DEFAULT_JINA_BASE_URL),
                   ca_bundle=env.raw("CRAWL_CA_BUNDLE"))


class CrawlRequest(BaseModel):
    """Body of ``POST /crawl_page``; unknown fields (the original's api_url, model, ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    urls: list[str] | str
    task: str = ""
    web_search_query: str = ""
    think_content: str = ""
    summary_type: Literal["none", "once", "chunk", "page"] | None = None
    chunk_size: int | None = Field(default=None, ge=200, le=1_000_000)


def split_urls(urls: list[str] | str) -> list[str]:
    """The requested items, in order, without blanks or repeats (of the same URL); a string is split on ``|``."""
    items = urls.split("|") if isinstance(urls, str) else urls
    seen: dict[str, str] = {}
    for item in items:
        item = item.strip() if item else ""
        if item:
            seen.setdefault(normalise_url(item) or item, item)
    return list(seen.values())


def normalise_url(item: str) -> str | None:
    """The URL an item stands for (markdown link, ``<url>``, quoted, or embedded in text), ``None`` if none.

    Anything with a ``scheme://`` is returned as is, so that the policy can refuse ``ftp://`` or ``file://``
    with its reason rather than the item being reported as "not a URL".
    """
    text = item.strip().strip("\"'`").strip()
    if text.startswith("<") and text.endswith(">"):
        text = text[1:-1].strip()
    link = _MD_LINK.match(text)
    if link:
        text = link.group(1)
    if _SCHEME.match(text) and not re.search(r"\s", text):
        return text
    found = _EMBEDDED_URL.search(text)
    return found.group(0).rstrip(".,;:") if found else None


def shown_item(item: str, limit: int = 200) -> str:
    """An item as echoed back in the observation: never more than ``limit`` characters of it."""
    return item if len(item) <= limit else item[:limit] + "..."


@dataclass
class PageOutcome:
    """What became of one requested item: the observation block and its record in ``pages``."""

    block: str
    record: dict[str, Any]

    @property
    def ok(self) -> bool:
        return self.record["status"] == "ok"


def page_block(index: int, url: str, *, text: str = "", kind: str = "", note: str = "", error: str = "") -> str:
    """One page's part of the observation, in the original server's layout."""
    if error:
        return f"Page {index} [{url}]: [Page content not accessible: {error}]"
    if kind == "summary":
        return f"Page {index} [{url}] Summary:\n{text}" + (f"\n[Note: {note}]" if note else "")
    return f"Page {index} [{url}] Content:\n" + (f"[Note: {note}]\n" if note else "") + text


def fetch_scope(settings: CrawlSettings, fetcher: PageFetcher) -> str:
    """What a fetched page depends on besides its URL, as one string in every page-cache key: the policy's
    allow-list, the route (direct or which Jina reader), the trusted CAs, the caps that shape the text, the output
    format and the extractor. A server whose answer could differ never reads another's entries."""
    ca = settings.ca_bundle
    try:
        ca_id = hashlib.sha256(Path(ca).read_bytes()).hexdigest() if ca else ""
    except OSError:
        ca_id = f"unreadable:{ca}"
    limits = settings.limits
    return json.dumps({"format": CACHE_FORMAT, "allow": fetcher.policy.allow.canonical(),
                       "via": fetcher.jina_base_url if fetcher.jina_api_key else "direct", "ca": ca_id,
                       "max_bytes": limits.max_bytes, "max_redirects": limits.max_redirects,
                       "output_format": limits.output_format, "extractor": extractor_version()}, sort_keys=True)


class Crawler:
    """Fetch, cache and summarise; one per worker process."""

    def __init__(self, settings: CrawlSettings, fetcher: PageFetcher, summarizer: Summarizer,
                 cache: KVCache | None, metrics: WorkerMetrics) -> None:
        self.settings = settings
        self.fetcher = fetcher
        self.summarizer = summarizer
        self.cache = cache
        self.metrics = metrics
        self.fetch_scope = fetch_scope(settings, fetcher)

    async def aclose(self) -> None:
        await self.fetcher.aclose()
        await self.summarizer.aclose()
        if self.cache is not None:
            self.cache.close()

    async def crawl(self, req: CrawlRequest, items: list[str]) -> dict[str, Any]:
        """Process every item concurrently; the caller enforces the request deadline."""
        goal = Goal(req.task, req.web_search_query, req.think_content)
        mode = req.summary_type or self.settings.default_mode
        tasks = []
        for i, item in enumerate(items, start=1):
            if i > self.settings.max_urls:
                tasks.append(self._skipped(i, item))
            else:
                tasks.append(self._page(i, item, goal, mode, req.chunk_size))
        outcomes: list[PageOutcome] = await asyncio.gather(*tasks)
        ok = sum(o.ok for o in outcomes)
        for o in outcomes:
            self.metrics.inc(f"pages_{o.record['status']}")
            o.record["success"] = o.ok
        failures = "; ".join(f"{o.record['url']}: {o.record['error']}" for o in outcomes if not o.ok)
        return {"success": ok > 0, "obs": "\n\n".join(o.block for o in outcomes),
                "error_message": None if ok else (failures or "no page could be read"),
                "pages": [o.record for o in outcomes], "summary_type": mode}

    async def _skipped(self, index: int, item: str) -> PageOutcome:
        error = f"not crawled: at most {self.settings.max_urls} URLs per request"
        return PageOutcome(page_block(index, shown_item(item), error=error),
                           {"url": shown_item(item), "status": "skipped", "cached": False, "chars": 0,
                            "error": error})

    async def _page(self, index: int, item: str, goal: Goal, mode: str, chunk_size: int | None) -> PageOutcome:
        url = normalise_url(item) if len(item) <= MAX_URL_CHARS else None
        if url is None:
            error = (f"longer than {MAX_URL_CHARS} characters" if len(item) > MAX_URL_CHARS
                     else "not a URL (give a full http:// or https:// address)")
            return PageOutcome(page_block(index, shown_item(item), error=error),
                               {"url": shown_item(item), "status": "invalid", "cached": False, "chars": 0,
                                "error": error})
        fetched, cached = await self._fetch(url)
        record: dict[str, Any] = {"url": url, "status": fetched.status, "cached": cached,
                                  "chars": len(fetched.text), "final_url": fetched.final_url or None,
                                  "truncated": fetched.truncated, "summary": None, "error": fetched.error or None}
        if not fetched.ok:
            return PageOutcome(page_block(index, url, error=fetched.error), record)
        if not fetched.text.strip():
            record.update(status="empty", error="the page has no readable text")
            return PageOutcome(page_block(index, url, error=record["error"]), record)
        truncation = (f"the page is larger than {self.settings.limits.max_bytes} bytes; only its beginning was "
                      "read") if fetched.truncated else ""
        summary_key = self._summary_key(fetched, fetched.final_url or url, goal, mode, chunk_size)
        hit = await self._cache_get(summary_key) if mode != "none" and summary_key else None
        if hit is not None:
            self.metrics.inc("summary_cache_hits")
            text, kind, note = json.loads(hit)
            record["summary"] = "cached"
        else:
            result = await self.summarizer.summarize(fetched.text, fetched.final_url or url, goal, mode, chunk_size)
            text, kind, note = result.text, result.kind, result.note
            self.metrics.inc("summary_calls", result.llm_calls)
            self.metrics.inc(f"summaries_{kind}")
            record["summary"] = kind
            if kind == "summary" and summary_key:
                await self._cache_set(summary_key, json.dumps([text, kind, note]))
        note = "; ".join(n for n in (truncation, note) if n)
        return PageOutcome(page_block(index, url, text=text, kind=kind, note=note), record)

    async def _fetch(self, url: str) -> tuple[FetchResult, bool]:
        # The policy first, always: a page another server (another allow-list) cached is no reason to serve it.
        refused = await self.fetcher.admit(url)
        if refused is not None:
            return refused, False
        key = cache_key("fetch", self.fetch_scope, url)
        hit = await self._cache_get(key)
        if hit is not None:
            cached = FetchResult.from_json(json.loads(hit))
            # Same allow-list, but DNS may have moved a redirect hop somewhere it now refuses: then fetch again,
            # which gives the refusal with its reason.
            if await self.fetcher.admits_hops(cached):
                self.metrics.inc("fetch_cache_hits")
                return cached, True
        self.metrics.inc("fetches")
        result = await self.fetcher.fetch(url)
        if result.ok:
            await self._cache_set(key, json.dumps(result.to_json()))
        return result, False

    def _summary_key(self, page: FetchResult, url: str, goal: Goal, mode: str,
                     chunk_size: int | None) -> str | None:
        """Everything a summary depends on: the text summarised (by hash), the URL the model is shown, the goal,
        the mode and its budget, the model, its sampling settings and the prompts."""
        if self.summarizer.client is None:
            return None
        budget = self.summarizer.budget
        size = (chunk_size or budget.chunk_size, budget.max_chunks) if mode == "chunk" else (
            budget.input_chars if mode == "once" else None)
        llm = self.summarizer.client.settings
        text_hash = hashlib.sha256(page.text.encode("utf-8", "surrogatepass")).hexdigest()
        return cache_key("summary", CACHE_FORMAT, PROMPT_VERSION, self.summarizer.model_key, llm.max_tokens,
                         llm.temperature, mode, size, text_hash, url, goal.task, goal.web_search_query,
                         goal.think_content)

    async def _cache_get(self, key: str) -> str | None:
        if self.cache is None:
            return None
        try:
            return await asyncio.to_thread(self.cache.get, key)
        except Exception as exc:  # a broken cache must not break crawling
            self.metrics.inc("cache_errors")
            log.warning("crawl cache read failed: %s", exc)
            return None

    async def _cache_set(self, key: str, value: str) -> None:
        if self.cache is None:
            return
        try:
            await asyncio.to_thread(self.cache.set, key, value)
        except Exception as exc:
            self.metrics.inc("cache_errors")
            log.warning("crawl cache write failed: %s", exc)


def build_crawler(settings: CrawlSettings, llm: LLMSettings | None = None,
                  budget: SummaryBudget | None = None) -> Crawler:
    """A crawler from settings (``llm=None`` reads ``SUMMARY_*``; an empty base URL means no summary model)."""
    llm = llm or LLMSettings.from_env()
    policy = UrlPolicy(AllowList.parse(settings.allow))
    fetcher = PageFetcher(policy, settings.limits, jina_api_key=settings.jina_api_key,
                          jina_base_url=settings.jina_base_url, verify=tls_context(settings.ca_bundle))
    summarizer = Summarizer(ChatClient(llm) if llm.endpoint.configured else None, budget or SummaryBudget.from_env())
    cache_off = settings.cache.strip().lower() in ("", "off", "none")
    cache = None if cache_off else open_cache(os.path.expanduser(settings.cache), "crawl", settings.cache_ttl_s)
    return Crawler(settings, fetcher, summarizer, cache, WorkerMetrics("crawl"))


def create_crawl_app() -> FastAPI:
    """The app factory uvicorn runs in each worker (settings from the environment)."""
    settings = CrawlSettings.from_env()
    crawler = build_crawler(settings)
    app = create_app("afm crawl server", description=__doc__.splitlines()[0])
    app.state.crawler = crawler
    app.router.on_shutdown.append(crawler.aclose)
    metrics = crawler.metrics
    llm = crawler.summarizer.client.settings if crawler.summarizer.client else None
    log.info("crawl server: allow=%r cache=%s summary_model=%s jina=%s", settings.allow,
             crawler.cache.url if crawler.cache else "off", llm.endpoint.model if llm else "none",
             redact(settings.jina_api_key))

    @app.post("/crawl_page")
    async def crawl_page(request: Request) -> JSONResponse:
        start = time.monotonic()
        try:
            req = await read_request(request, CrawlRequest, settings.max_body_bytes, metrics)
        except BadRequest as exc:
            return exc.response()
        items = split_urls(req.urls)
        if not items:
            metrics.inc("bad_requests")
            return BadRequest(400, "no URLs given", "urls must name at least one http(s) URL").response()
        try:
            result = await asyncio.wait_for(crawler.crawl(req, items), settings.request_timeout_s)
        except TimeoutError:
            metrics.inc("request_timeouts")
            detail = f"the request took longer than {settings.request_timeout_s:g} s (CRAWL_REQUEST_TIMEOUT)"
            return JSONResponse({"error": "timeout", "detail": detail, "success": False, "obs": "",
                                 "error_message": detail,
                                 "processing_time": round(time.monotonic() - start, 3)}, 504)
        elapsed = time.monotonic() - start
        metrics.observe(elapsed)
        result["processing_time"] = round(elapsed, 3)
        if not any(p["status"] not in ("invalid", "skipped") for p in result["pages"]):
            # Nothing in the request was a URL. Answered 200 with success false, as the original server did: its
            # verl crawl tool reads any other status as "server error" and would hide the reasons in obs.
            metrics.inc("no_valid_url")
            result["error_message"] = f"No valid URL found: {result['error_message']}"
        return JSONResponse(result)

    @app.get("/metrics")
    async def get_metrics() -> dict[str, Any]:
        snap = await asyncio.to_thread(metrics.aggregate)  # summed over the server's uvicorn workers
        snap["cache"] = crawler.cache.url if crawler.cache else "off"
        snap["cache_entries"] = await asyncio.to_thread(len, crawler.cache) if crawler.cache else 0
        snap["summary_model"] = llm.endpoint.model if llm else None
        snap["jina"] = bool(settings.jina_api_key)
        snap["default_summary_type"] = settings.default_mode
        return snap

    return app


def main(argv: list[str] | None = None) -> None:
    p = server_arg_parser("afm crawl server: fetch, extract and summarise pages", "CRAWL_PAGE_PORT")
    p.add_argument("--allow", default=None, help=f"allow-list of non-public targets (default ${ALLOW_ENV}), e.g. "
                                                 "'127.0.0.1:8765,10.0.0.0/8,wiki.corp'")
    p.add_argument("--cache", default=None, help="cache file or redis:// URL; 'off' disables "
                                                 "(default $CRAWL_CACHE or ~/.cache/afm/crawl_cache.sqlite)")
    p.add_argument("--summary-type", choices=SUMMARY_MODES, default=None,
                   help="default summary mode when a request gives none (default $CRAWL_SUMMARY_TYPE or once)")
    args = p.parse_args(argv)
    env = flags_to_env(args, {"allow": ALLOW_ENV, "cache": "CRAWL_CACHE", "summary_type": "CRAWL_SUMMARY_TYPE"})
    env[RUN_ID_ENV] = new_run_id("crawl")  # the workers of this launch publish metrics under one id
    os.environ.update(env)
    try:  # fail here with a usage error, not in every worker
        CrawlSettings.from_env(), LLMSettings.from_env(), SummaryBudget.from_env()
    except ValueError as exc:
        p.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings, llm = CrawlSettings.from_env(), LLMSettings.from_env()
    for note in alias_notes(os.environ):  # said once, here, not by every worker
        print(f"crawl server: {note}", file=sys.stderr, flush=True)
    summary_model = llm.endpoint.model if llm.endpoint.configured else "none"
    print(f"crawl server on {args.host}:{args.port}: summary_model={summary_model} "
          f"default_summary_type={settings.default_mode} request_timeout={settings.request_timeout_s:g}s "
          f"allow={settings.allow or '-'} jina={redact(settings.jina_api_key)} workers={args.workers}",
          file=sys.stderr, flush=True)
    serve("afm.servers.crawl_server:create_crawl_app", args, env)


if __name__ == "__main__":
    main()
