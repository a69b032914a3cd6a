"""``crawl_page``: the tag body is one or more URLs separated by ``|``, sent to the crawl server
(``afm.servers.crawl_server``), whose ``obs`` becomes the observation.

The request carries the agent's goal so that the server can summarise for it: ``task`` = the question,
``web_search_query`` = the body of the last ``<web_search>`` call, ``think_content`` = the last ``<think>`` block.

Config (tool YAML ``config:``), each optional: ``url`` (default ``http://$SERVER_HOST:$CRAWL_PAGE_PORT/crawl_page``,
the port from environment.sh when unset), ``timeout`` seconds per attempt (150, a little above the server's own
120 s request limit; raise both together, e.g. 520 with ``CRAWL_REQUEST_TIMEOUT=500``), ``retries`` (0: a crawl
with summaries is expensive, and a timed-out one would run twice), ``backoff`` (0.5 s), ``summary_type`` (``none|once|chunk|page``; default: the server's), ``chunk_size``,
``token`` (bearer token; default ``$AFM_SERVER_TOKEN``).

Observation: the server's, one block per page (``Page 1 [url] Summary:\\n...`` or
``Page 1 [url]: [Page content not accessible: reason]``); status ``error`` when no page could be read (reason
``no_page_read``, or ``no_valid_url`` with advice when no item was a URL: the server answers those 200 with
``success: false``, as the original did). Server
failures (down, timeout, 4xx/5xx, unreadable answers) become an explanatory observation with status ``error`` or
``timeout``, marked ``infra`` unless the server rejected the request (4xx). A page the server could not read is
the web's answer, not an infrastructure failure.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from afm.common.env_defaults import port as env_port
from afm.tools.base import ToolContext, ToolResult
from afm.tools.server_client import JsonClient, ServerCallError, ServerTool, failure_result, server_token

SUMMARY_TYPES = ("none", "once", "chunk", "page")
SERVICE = "crawl server"
ADVICE_4XX = "Give one or more full http:// or https:// URLs separated by |."


def default_crawl_url() -> str:
    """The crawl server endpoint from ``SERVER_HOST`` and ``CRAWL_PAGE_PORT`` (see environment.sh)."""
    host = os.environ.get("SERVER_HOST") or "127.0.0.1"
    port = env_port("CRAWL_PAGE_PORT")  # environment.sh's default when unset
    return f"http://{host}:{port}/crawl_page"


class CrawlPageTool(ServerTool):
    """Client of the crawl server's ``POST /crawl_page``."""

    name = "crawl_page"

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__(config)
        self.url = str(self.config.get("url") or default_crawl_url())
        self.summary_type = self.config.get("summary_type")
        if self.summary_type is not None and self.summary_type not in SUMMARY_TYPES:
            raise ValueError(f"crawl_page config summary_type={self.summary_type!r}: expected one of "
                             f"{', '.join(SUMMARY_TYPES)}")
        self.chunk_size = int(self.config["chunk_size"]) if self.config.get("chunk_size") else None
        self.client = JsonClient(self.url, timeout=float(self.config.get("timeout", 150)),
                                 retries=int(self.config.get("retries", 0)),
                                 backoff=float(self.config.get("backoff", 0.5)), token=server_token(self.config))

    def payload(self, body: str, ctx: ToolContext) -> dict[str, Any]:
        """The request for a tag body and the trajectory's context."""
        data: dict[str, Any] = {"urls": [u.strip() for u in body.split("|") if u.strip()], "task": ctx.question,
                                "web_search_query": ctx.last_search_query(), "think_content": ctx.last_think()}
        if self.summary_type:
            data["summary_type"] = self.summary_type
        if self.chunk_size:
            data["chunk_size"] = self.chunk_size
        return data

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        t0 = time.perf_counter()
        payload = self.payload(body, ctx)
        if not payload["urls"]:
            return ToolResult("[crawl_page failed] No URL given. Put one or more URLs separated by | between "
                              "<crawl_page> and </crawl_page>, e.g. <crawl_page>https://example.org/a | "
                              "https://example.org/b</crawl_page>.", "error", time.perf_counter() - t0,
                              {"reason": "empty_body"})
        try:
            data, info = await self.client.post(payload)
        except ServerCallError as err:
            return failure_result(self.name, SERVICE, self.url, err, ADVICE_4XX, time.perf_counter() - t0)
        obs = data.get("obs") if isinstance(data, dict) else None
        if not isinstance(obs, str) or not obs.strip():
            return failure_result(self.name, SERVICE, self.url,
                                  ServerCallError("bad_response", "no 'obs' observation text"), "",
                                  time.perf_counter() - t0)
        ok = bool(data.get("success", True))
        pages = data.get("pages")
        reason = None if ok else "no_page_read"
        if not ok and isinstance(pages, list) and pages and all(
                isinstance(p, dict) and p.get("status") == "invalid" for p in pages):
            # The server answers 200 with success false when nothing was a URL (the original's protocol).
            reason, obs = "no_valid_url", f"{obs}\n\n{ADVICE_4XX}"
        return ToolResult(obs, "ok" if ok else "error", time.perf_counter() - t0,
                          {"pages": pages, "processing_time": data.get("processing_time"), **info,
                           **({"reason": reason} if reason else {})})
