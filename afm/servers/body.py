"""Reading a JSON request body with a size cap, so that huge or malformed bodies get a 4xx JSON error.

FastAPI would parse a declared body model before the route runs, buffering any size; the servers read the raw
body here instead and validate it themselves. An oversized body is drained (up to a hard limit) before answering
413, so that clients that send first and read afterwards still see the status instead of a reset connection.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

# Past this many bytes the rest of an oversized body is not even read: the connection is closed after the 413.
DRAIN_LIMIT = 64 << 20
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

M = TypeVar("M", bound=BaseModel)


class Counter(Protocol):
    """What :func:`read_request` counts on (:class:`afm.servers.worker_metrics.WorkerMetrics`)."""

    def inc(self, name: str, by: int = 1) -> None: ...


class BadRequest(Exception):
    """A client error that becomes ``{"error": ..., "detail": ...}`` with ``status``."""

    def __init__(self, status: int, error: str, detail: Any = None) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.detail = detail

    def response(self) -> JSONResponse:
        return JSONResponse({"error": self.error, "detail": self.detail}, self.status)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The parsed JSON body; raises :class:`BadRequest` (413 too large, 400 empty or not JSON).

    The content type is not checked: a JSON body sent as ``text/plain`` or without a header (``curl -d``) is read;
    anything that is not JSON (a form, bytes that are not UTF-8) is a 400.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > DRAIN_LIMIT:
        raise BadRequest(413, "request body too large", f"{declared} bytes; the limit is {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= max_bytes:
            chunks.append(chunk)
        elif size > DRAIN_LIMIT:
            break
    if size > max_bytes:
        raise BadRequest(413, "request body too large", f"{size}+ bytes; the limit is {max_bytes}")
    raw = b"".join(chunks)
    if not raw.strip():
        raise BadRequest(400, "empty request body", "send a JSON object")
    try:
        data = json.loads(raw)
        if _SURROGATE_ESCAPE.search(raw):
            # A lone surrogate (\ud800) is valid JSON but no text: it would fail the UTF-8 encoding of any answer
            # that echoes it. Pairs (emoji written as two escapes) decode to real characters and pass this check.
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        return data
    except RecursionError:
        # The C decoder recurses once per nesting level: ``[[[[...`` under the size cap overflows the stack.
        raise BadRequest(400, "invalid JSON", "nested too deeply") from None
    except ValueError as exc:
        # JSONDecodeError, UnicodeDecodeError/UnicodeEncodeError (bytes that are not UTF-8, lone surrogates), and
        # the int-digits limit (``{"num": 1111...}``) that json.loads raises as a plain ValueError.
        raise BadRequest(400, "invalid JSON", str(exc)[:300]) from None


def validate(model: type[M], data: Any) -> M:
    """``model`` validated from ``data``; raises :class:`BadRequest` 422 listing the problems."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        raise BadRequest(422, "invalid request", problems) from None


async def read_request(request: Request, model: type[M], max_bytes: int, metrics: Counter) -> M:
    """Count the request (``requests``), then read its body and validate it as ``model``; a :class:`BadRequest`
    is counted (``bad_requests``) and raised."""
    metrics.inc("requests")
    try:
        return validate(model, await read_json(request, max_bytes))
    except BadRequest:
        metrics.inc("bad_requests")
        raise
