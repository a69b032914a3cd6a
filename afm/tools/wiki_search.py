"""``wiki_search``: retrieval from the wiki server (``afm.servers.wiki_server``, Search-R1's ``/retrieve``).

The tag body is one query; several queries may be given **one per line** (at most ``max_queries``), answered in
one request, and their results are joined by ``\\n---\\n``.

Config (tool YAML ``config:``), each optional:
``url`` (default ``$WIKI_RAG_SERVER_URL``, else ``http://$SERVER_HOST:$WIKI_RAG_PORT/retrieve`` with
the port from environment.sh when unset), ``topk`` (3), ``timeout`` seconds per attempt (30), ``retries`` (3;
connection errors, timeouts, 5xx), ``backoff`` (0.5 s, doubled per retry), ``max_queries`` (5), ``token``
(bearer token; default ``$AFM_SERVER_TOKEN``).

Observation (the original's format): per document ``Doc i (Title: <first line of contents>)\\n<rest>``, joined by
a blank line. Failures become an explanatory observation with status ``error`` or ``timeout``, marked ``infra``
unless the server rejected the query (4xx).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from afm.common.env_defaults import port as env_port
from afm.tools.base import ToolContext, ToolResult
from afm.tools.server_client import JsonClient, ServerCallError, ServerTool, failure_result, server_token


def default_wiki_url() -> str:
    url = os.environ.get("WIKI_RAG_SERVER_URL")
    if url:
        return url
    host = os.environ.get("SERVER_HOST") or "127.0.0.1"
    return f"http://{host}:{env_port('WIKI_RAG_PORT')}/retrieve"  # environment.sh's port when unset


def format_documents(query: str, docs: list[dict[str, Any]]) -> str:
    """``Doc i (Title: …)\\ntext`` blocks for one query's documents."""
    if not docs:
        return f"No documents found for query: '{query}'. Use different keywords."
    blocks = []
    for i, doc in enumerate(docs, start=1):
        title, _, text = str(doc.get("contents") or "").partition("\n")
        blocks.append(f"Doc {i} (Title: {title})\n{text}")
    return "\n\n".join(blocks)


def _documents(item: Any) -> list[dict[str, Any]] | None:
    """The documents of one query's result (with or without scores), or None if the shape is wrong."""
    if not isinstance(item, list):
        return None
    docs = []
    for entry in item:
        doc = entry.get("document", entry) if isinstance(entry, dict) else None
        if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
            return None
        docs.append(doc)
    return docs


class WikiSearchTool(ServerTool):
    """Client of the wiki server's ``POST /retrieve``."""

    name = "wiki_search"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.url = str(self.config.get("url") or default_wiki_url())
        self.topk = int(self.config.get("topk", 3))
        self.max_queries = int(self.config.get("max_queries", 5))
        self.client = JsonClient(self.url, timeout=float(self.config.get("timeout", 30)),
                                 retries=int(self.config.get("retries", 3)),
                                 backoff=float(self.config.get("backoff", 0.5)), token=server_token(self.config))

    def _fail(self, text: str, t0: float, reason: str, status: str = "error", **meta: Any) -> ToolResult:
        return ToolResult(text, status, time.perf_counter() - t0, {"reason": reason, **meta})  # type: ignore[arg-type]

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        t0 = time.perf_counter()
        queries = [" ".join(line.split()) for line in body.splitlines() if line.strip()]
        if not queries:
            return self._fail("[wiki_search failed] The query is empty. Write a query between <wiki_search> and "
                              "</wiki_search>, e.g. <wiki_search>capital of Veltria</wiki_search>.", t0, "empty_query")
        if len(queries) > self.max_queries:
            return self._fail(f"[wiki_search failed] {len(queries)} queries in one call (one per line); the limit is "
                              f"{self.max_queries}. Search fewer queries at a time.", t0, "too_many_queries")
        try:
            data, info = await self.client.post({"queries": queries, "topk": self.topk, "return_scores": True})
        except ServerCallError as err:
            return failure_result(self.name, "wiki retrieval server", self.url, err,
                                  "Rewrite the query as a short plain-text phrase.", time.perf_counter() - t0)
        result = data.get("result") if isinstance(data, dict) else None
        per_query = [_documents(x) for x in result] if isinstance(result, list) else None
        if per_query is None or len(per_query) != len(queries) or any(d is None for d in per_query):
            return failure_result(self.name, "wiki retrieval server", self.url,
                                  ServerCallError("bad_response", "no 'result' list of documents per query"), "",
                                  time.perf_counter() - t0)
        text = "\n---\n".join(format_documents(q, d or []) for q, d in zip(queries, per_query, strict=True))
        return ToolResult(text, "ok", time.perf_counter() - t0,
                          {"n_queries": len(queries), "n_documents": sum(len(d or []) for d in per_query), **info})
