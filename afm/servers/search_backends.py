"""Search backends of the search server: Serper (google.serper.dev) and a local BM25 index over a JSONL corpus.

Both return a Serper-shaped payload ``{"organic": [{title, link, snippet, position, date?, source?}], ...}`` so
that one formatter serves both. Failures raise :class:`UpstreamError` with the HTTP status the server should answer
(502 bad or failed upstream, 504 upstream timeout); the server never caches them.

Serper: ``X-API-KEY`` from ``WEB_SEARCH_SERPER_API_KEY`` (never logged), a per-attempt timeout, and retries with
exponential backoff and jitter on timeouts, connection errors, 429 and 5xx. Other 4xx (a bad key, quota) are not
retried. ``WEB_SEARCH_SERPER_URL`` points the backend elsewhere (a proxy, or a fake Serper in tests).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from pathlib import Path
from typing import Any, Protocol

import httpx

from afm.servers.bm25_index import BM25Index, ensure_index, tokenize

log = logging.getLogger(__name__)

SERPER_URL = "https://google.serper.dev/search"
SNIPPET_CHARS = 300
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


class UpstreamError(Exception):
    """The backend failed; ``status`` is what the server answers (502 or 504)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class SearchBackend(Protocol):
    """What the search server needs from a backend.

    Cache keys are built from :attr:`cache_scope` and :meth:`cache_query`, which together must hold exactly what
    the answer depends on: two requests with equal keys get the same answer from the backend, and nothing else
    shares a key.
    """

    name: str
    cache_scope: str  # what every answer of this backend instance depends on (its data, its endpoint, its format)

    def cache_query(self, query: str, num: int) -> str:
        """What one answer depends on besides :attr:`cache_scope`, in the backend's own normalisation."""
        ...

    async def search(self, query: str, num: int) -> dict[str, Any]:
        """A Serper-shaped payload with at most ``num`` organic results."""
        ...

    async def aclose(self) -> None: ...


def _result(item: dict[str, Any], position: int) -> dict[str, Any]:
    out: dict[str, Any] = {
        "title": str(item.get("title") or ""),
        "link": str(item.get("link") or ""),
        "snippet": str(item.get("snippet") or ""),
        "position": position,
    }
    for key in ("date", "source"):
        if item.get(key):
            out[key] = str(item[key])
    return out


class SerperBackend:
    """google.serper.dev (or any server speaking its protocol) with timeout, retries and backoff."""

    name = "serper"

    def __init__(self, api_key: str, url: str = SERPER_URL, timeout: float = 20.0, retries: int = 2,
                 backoff: float = 0.5) -> None:
        if not api_key:
            raise ValueError("the serper backend needs WEB_SEARCH_SERPER_API_KEY")
        self.url = url
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self._key = api_key
        self._client = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(max_connections=100))
        # The endpoint decides the answer (a proxy, another Serper route); the key does not, and stays out.
        self.cache_scope = json.dumps({"backend": self.name, "url": url})

    @staticmethod
    def request_body(query: str, num: int) -> dict[str, Any]:
        """The JSON body sent to Serper for a query (the query as given: Google's own normalisation is unknown)."""
        # Serper bills per page of 10; asking a multiple of 10 and trimming gives the same results.
        return {"q": query, "num": min(100, max(10, -(-num // 10) * 10))}

    def cache_query(self, query: str, num: int) -> str:
        """Every parameter sent, plus ``num`` (the answer is trimmed to it)."""
        return json.dumps([self.request_body(query, num), num], sort_keys=True, ensure_ascii=False)

    async def search(self, query: str, num: int) -> dict[str, Any]:
        body = self.request_body(query, num)
        last: UpstreamError | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1)
                await asyncio.sleep(delay * (1 + 0.25 * random.random()))
            try:
                resp = await self._client.post(self.url, json=body,
                                               headers={"X-API-KEY": self._key})
            except httpx.TimeoutException:
                last = UpstreamError(504, f"Serper did not answer within {self.timeout:g}s")
                continue
            except httpx.HTTPError as exc:
                last = UpstreamError(502, f"cannot reach Serper ({type(exc).__name__})")
                continue
            if resp.status_code == 429 or resp.status_code >= 500:
                last = UpstreamError(502, f"Serper answered HTTP {resp.status_code}")
                continue
            if resp.status_code != 200:
                # 400/401/403: a bad query, key or quota; retrying would fail the same way.
                raise UpstreamError(502, f"Serper answered HTTP {resp.status_code}: {resp.text[:200]}")
            return self._parse(resp, num)
        last = last or UpstreamError(502, "Serper failed")
        log.warning("serper failed after %d attempts: %s", self.retries + 1, last.message)
        raise last

    @staticmethod
    def _parse(resp: httpx.Response, num: int) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError:
            raise UpstreamError(502, "Serper answered with a body that is not JSON") from None
        organic = data.get("organic") if isinstance(data, dict) else None
        if not isinstance(organic, list):
            raise UpstreamError(502, "Serper answered without an 'organic' result list")
        results = [_result(item, i) for i, item in enumerate((x for x in organic if isinstance(x, dict)), 1)]
        payload: dict[str, Any] = {"organic": results[:num]}
        for key in ("answerBox", "knowledgeGraph"):
            if isinstance(data.get(key), dict):
                payload[key] = data[key]
        return payload

    async def aclose(self) -> None:
        await self._client.aclose()


def snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """The sentences of ``text`` that share most words with ``query``, in text order, cut to ``limit``."""
    sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()]
    if not sentences:
        return ""
    words = set(tokenize(query))
    ranked = sorted(range(len(sentences)), key=lambda i: -len(words.intersection(tokenize(sentences[i]))))
    chosen: list[int] = []
    size = 0
    for i in ranked:
        if chosen and size + len(sentences[i]) > limit:
            break
        chosen.append(i)
        size += len(sentences[i]) + 1
    out = " ".join(sentences[i] for i in sorted(chosen))
    return out if len(out) <= limit else out[: limit - 3].rstrip() + "..."


class LocalBackend:
    """BM25 over a JSONL corpus of ``{id, title, url, text}``; the index is built once and persisted."""

    name = "local"

    def __init__(self, index: BM25Index) -> None:
        self.index = index
        manifest = index.manifest
        # The corpus by content (an edit and a restart changes it), and how it was indexed and is shown.
        self.cache_scope = json.dumps({"backend": self.name, "index": manifest.get("format"),
                                       "corpus_sha256": manifest.get("corpus", {}).get("sha256"),
                                       "tokenizer": manifest.get("tokenizer"), "snippet_chars": SNIPPET_CHARS},
                                      sort_keys=True)

    def cache_query(self, query: str, num: int) -> str:
        """The query's BM25 tokens (lower-cased, stopwords dropped), in order: ranking and snippets see nothing
        else of it, so queries with equal tokens get equal answers and any other query gets its own entry."""
        return json.dumps([tokenize(query), num], ensure_ascii=False)

    @classmethod
    def open(cls, corpus: str | Path, index_dir: str | Path | None = None) -> LocalBackend:
        return cls(ensure_index(corpus, index_dir))

    def search_sync(self, query: str, num: int) -> dict[str, Any]:
        results = []
        for position, (doc, _score) in enumerate(self.index.search(query, num), start=1):
            rec = self.index.document(doc)
            text = str(rec.get("text") or rec.get("contents") or "")
            results.append(_result({"title": rec.get("title") or text.split("\n")[0][:100],
                                    "link": rec.get("url") or rec.get("link") or "",
                                    "snippet": snippet(text, query),
                                    "date": rec.get("date"), "source": rec.get("source")}, position))
        return {"organic": results}

    async def search(self, query: str, num: int) -> dict[str, Any]:
        return await asyncio.to_thread(self.search_sync, query, num)

    async def aclose(self) -> None:
        self.index.close()
