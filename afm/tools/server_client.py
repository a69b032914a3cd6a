"""The HTTP side of the server-backed tools: POST JSON with timeout, retries and a bearer token, and classify
every failure so that the tool can tell the model what happened.

Retried (with exponential backoff): connection errors, timeouts and 5xx answers (502/503/504 also when a server
relays a backend failure). Not retried: 4xx, bodies that are not JSON. One ``httpx.AsyncClient`` per event
loop, because a client's connections belong to the loop that opened them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from afm.tools.base import Tool, ToolResult

FailureKind = Literal["unreachable", "timeout", "http", "bad_response"]


@dataclass
class ServerCallError(Exception):
    """Why a call failed: ``kind``, the HTTP status if any, and the server's ``detail``."""

    kind: FailureKind
    detail: str
    http_status: int | None = None
    attempts: int = 1

    def __str__(self) -> str:
        status = f" HTTP {self.http_status}" if self.http_status else ""
        return f"{self.kind}{status}: {self.detail}"


def _error_detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:300] or resp.reason_phrase
    if isinstance(body, dict):
        parts = [str(body.get(k)) for k in ("error", "detail") if body.get(k)]
        if parts:
            return ": ".join(parts)[:500]
    return str(body)[:300]


class JsonClient:
    """POST JSON to one URL with the settings of a tool config."""

    def __init__(self, url: str, *, timeout: float, retries: int, backoff: float = 0.5,
                 token: str | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.retries = max(0, int(retries))
        self.backoff = backoff
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._clients: dict[int, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None or client.is_closed:
            client = httpx.AsyncClient(timeout=self.timeout, headers=self._headers)
            self._clients = {id(loop): client}  # a client of an earlier, finished loop cannot be reused
        return client

    async def post(self, payload: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The decoded JSON answer and call info (attempts, elapsed); raises :class:`ServerCallError`."""
        t0 = time.perf_counter()
        error: ServerCallError | None = None
        for attempt in range(1, self.retries + 2):
            if attempt > 1:
                await asyncio.sleep(self.backoff * 2 ** (attempt - 2))
            try:
                resp = await self._client().post(self.url, json=payload)
            except httpx.TimeoutException:
                error = ServerCallError("timeout", f"no answer within {self.timeout:g}s", attempts=attempt)
                continue
            except httpx.HTTPError as exc:
                error = ServerCallError("unreachable", f"{type(exc).__name__}: {exc}"[:300], attempts=attempt)
                continue
            if resp.status_code >= 500:
                error = ServerCallError("http", _error_detail(resp), resp.status_code, attempt)
                continue
            if resp.status_code >= 400:
                raise ServerCallError("http", _error_detail(resp), resp.status_code, attempt)
            try:
                data = resp.json()
            except ValueError:
                raise ServerCallError("bad_response", f"answer is not JSON: {resp.text[:120]!r}",
                                      resp.status_code, attempt) from None
            return data, {"attempts": attempt, "elapsed_s": time.perf_counter() - t0}
        raise error or ServerCallError("unreachable", "no attempt was made")

    async def aclose(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(RuntimeError):  # its loop is gone; nothing left to release
                await client.aclose()
        self._clients = {}


def server_token(config: dict[str, Any]) -> str | None:
    """The bearer token of a tool config, else ``AFM_SERVER_TOKEN``."""
    return config.get("token") or os.environ.get("AFM_SERVER_TOKEN") or None


def is_infra(err: ServerCallError) -> bool:
    """Whether a failed call is the infrastructure's fault (server unreachable, timeout, 5xx, unreadable answer),
    not the request's (a 4xx)."""
    return err.kind != "http" or (err.http_status is not None and err.http_status >= 500)


def failure_result(tool: str, service: str, url: str, err: ServerCallError, advice_4xx: str, latency_s: float,
                   **meta: Any) -> ToolResult:
    """The :class:`ToolResult` of a failed call: :func:`failure_text`, the reason in ``meta``, and ``infra``."""
    text, status = failure_text(tool, service, url, err, advice_4xx)
    return ToolResult(text, status, latency_s,  # type: ignore[arg-type]
                      {"reason": err.kind, "http_status": err.http_status, "attempts": err.attempts, **meta},
                      infra=is_infra(err))


def failure_text(tool: str, service: str, url: str, err: ServerCallError, advice_4xx: str) -> tuple[str, str]:
    """``(observation text, status)`` telling the model what went wrong and what to do next."""
    status = "timeout" if err.kind == "timeout" or err.http_status == 504 else "error"
    if err.kind == "unreachable":
        text = (f"[{tool} unavailable] The {service} at {url} could not be reached ({err.detail}; "
                f"{err.attempts} attempt(s)). The tool is down right now: do not repeat the same call; continue "
                f"with the information you already have, or try again later.")
    elif err.kind == "timeout":
        text = (f"[{tool} timed out] The {service} did not answer ({err.detail}; {err.attempts} attempt(s)). "
                f"Try a shorter or different query, or continue with the information you already have.")
    elif err.kind == "bad_response":
        text = (f"[{tool} failed] The {service} sent an unreadable answer ({err.detail}). Try again later, "
                f"or continue with the information you already have.")
    elif err.http_status in (401, 403):
        text = (f"[{tool} failed] The {service} refused the call (HTTP {err.http_status}: {err.detail}); the tool "
                f"is misconfigured (access token). Continue without this tool.")
    elif err.http_status is not None and err.http_status < 500:
        text = f"[{tool} failed] The {service} rejected the request (HTTP {err.http_status}: {err.detail}). {advice_4xx}"
    elif err.http_status == 504:
        text = (f"[{tool} timed out] The {service}'s backend timed out (HTTP 504: {err.detail}). Try again with a "
                f"different query, or continue with the information you already have.")
    else:
        text = (f"[{tool} failed] The {service} failed (HTTP {err.http_status}: {err.detail}). Try again with a "
                f"different query, or continue with the information you already have.")
    return text, status


class ServerTool(Tool):
    """A tool that talks to one of our servers through ``self.client`` (a :class:`JsonClient`)."""

    client: JsonClient
    infra_on_timeout = True  # the time is spent waiting on the server

    async def aclose(self) -> None:
        await self.client.aclose()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["config"] = {k: ("<set>" if k == "token" else v) for k, v in self.config.items()}
        return out
