"""``web_search``: the tag body is one query, sent to the search server (``afm.servers.search_server``).

Config (tool YAML ``config:``), each optional:
``url`` (default ``http://$SERVER_HOST:$WEBSEARCH_PORT/search``, the port from environment.sh when unset),
``num_results`` (default ``$WEB_SEARCH_SERP_NUM``, the original environment.sh's name, else 10), ``timeout`` seconds per attempt (60), ``retries`` (1; connection errors, timeouts, 5xx),
``backoff`` (0.5 s, doubled per retry), ``token`` (bearer token; default ``$AFM_SERVER_TOKEN``).

Observation (the original's format)::

    Found 2 results:

    ## Web Results
    1. [Title](https://link)
    Date published: …          (when known)
    Source: …                  (when known)
    https://link
    snippet

    2. …

No results: ``No results found for query: '<q>'. Use a less specific query.`` Failures become an explanatory
observation with status ``error`` or ``timeout``, marked ``infra`` unless the server rejected the query (4xx).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from afm.common.env_defaults import port as env_port
from afm.tools.base import ToolContext, ToolResult
from afm.tools.server_client import JsonClient, ServerCallError, ServerTool, failure_result, server_token

_VIDEO_NOISE = "Your browser can't play this video."


def default_search_url() -> str:
    host = os.environ.get("SERVER_HOST") or "127.0.0.1"
    port = env_port("WEBSEARCH_PORT")  # environment.sh's default when unset
    return f"http://{host}:{port}/search"


def format_results(query: str, organic: list[dict[str, Any]]) -> str:
    """The observation text for a Serper-shaped ``organic`` list."""
    entries = []
    for i, item in enumerate(organic, start=1):
        title = str(item.get("title") or "").strip()
        link = str(item.get("link") or "").strip()
        entry = f"{i}. [{title}]({link})"
        if item.get("date"):
            entry += f"\nDate published: {item['date']}"
        if item.get("source"):
            entry += f"\nSource: {item['source']}"
        snippet = str(item.get("snippet") or "").replace(_VIDEO_NOISE, "").strip()
        entry += f"\n{link}\n{snippet}"
        entries.append(entry)
    if not entries:
        return f"No results found for query: '{query}'. Use a less specific query."
    return f"Found {len(entries)} results:\n\n## Web Results\n" + "\n\n".join(entries)


class WebSearchTool(ServerTool):
    """Client of the search server's ``POST /search``."""

    name = "web_search"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.url = str(self.config.get("url") or default_search_url())
        self.num_results = int(self.config.get("num_results") or os.environ.get("WEB_SEARCH_SERP_NUM") or 10)
        self.client = JsonClient(self.url, timeout=float(self.config.get("timeout", 60)),
                                 retries=int(self.config.get("retries", 1)),
                                 backoff=float(self.config.get("backoff", 0.5)), token=server_token(self.config))

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        t0 = time.perf_counter()
        query = " ".join(body.split())
        if not query:
            return ToolResult("[web_search failed] The query is empty. Write a search query between <web_search> "
                              "and </web_search>, e.g. <web_search>capital of Veltria</web_search>.", "error",
                              time.perf_counter() - t0, {"reason": "empty_query"})
        try:
            data, info = await self.client.post({"q": query, "num": self.num_results})
        except ServerCallError as err:
            return failure_result(self.name, "search server", self.url, err,
                                  "Rewrite it as a short plain-text search phrase.", time.perf_counter() - t0)
        organic = data.get("organic") if isinstance(data, dict) else None
        if not isinstance(organic, list) or not all(isinstance(x, dict) for x in organic):
            return failure_result(self.name, "search server", self.url,
                                  ServerCallError("bad_response", "no 'organic' result list"), "",
                                  time.perf_counter() - t0)
        return ToolResult(format_results(query, organic), "ok", time.perf_counter() - t0,
                          {"n_results": len(organic), "cached": bool(data.get("cached")), **info})
