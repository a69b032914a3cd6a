"""Pieces every afm tool server shares: the app factory (health, auth, JSON errors), latency metrics, CLI/launch.

Conventions: bind 127.0.0.1 unless told otherwise; an optional bearer token (``--token`` or ``AFM_SERVER_TOKEN``)
protects every route but ``/health``; errors are JSON ``{"error": ..., "detail": ...}`` with a 4xx/5xx status;
secrets are never logged (``redact``).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from afm.common.env_defaults import default_port

TOKEN_ENV = "AFM_SERVER_TOKEN"


def redact(secret: str | None) -> str:
    """How a secret may appear in logs: whether it is set, never its value."""
    return "<set>" if secret else "<unset>"


class EnvReader:
    """A server's settings from environment variables, read one way by every server (CLI flags become variables).

    Unset and empty both mean "the default" (except :meth:`raw`); surrounding spaces are ignored; a value of the
    wrong kind raises a ValueError that names the variable, which each server turns into a start-up error.
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = os.environ if env is None else env

    def raw(self, name: str, default: str = "") -> str:
        """The value as set, empty included (``WEB_SEARCH_CACHE=`` means no cache); ``default`` when unset."""
        return self.env.get(name, default)

    def text(self, name: str, default: str = "") -> str:
        """The stripped value, ``default`` when unset or empty."""
        return (self.env.get(name) or "").strip() or default

    def optional(self, name: str) -> str | None:
        """The stripped value, None when unset or empty."""
        return self.text(name) or None

    def number(self, name: str, default: float) -> float:
        return self._parse(name, default, float)

    def integer(self, name: str, default: int) -> int:
        return self._parse(name, default, int)

    def choice(self, name: str, default: str, choices: Iterable[str], *, fold_case: bool = False) -> str:
        """The value (lower-cased with ``fold_case``), which must be one of ``choices``."""
        value = self.text(name, default)
        value = value.lower() if fold_case else value
        options = tuple(choices)
        if value not in options:
            raise ValueError(f"{name}={value!r}: expected one of {', '.join(options)}")
        return value

    def _parse(self, name: str, default: Any, kind: type) -> Any:
        raw = self.text(name)
        if not raw:
            return default
        try:
            return kind(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r}: expected {'an integer' if kind is int else 'a number'}") from None


def flags_to_env(args: argparse.Namespace, variables: Mapping[str, str], paths: Iterable[str] = ()) -> dict[str, str]:
    """``{variable: value}`` for each CLI flag in ``variables`` (flag dest -> variable) that was given; the flags in
    ``paths`` are made absolute, because the workers may run from another directory."""
    paths = set(paths)
    env: dict[str, str] = {}
    for flag, var in variables.items():
        value = getattr(args, flag)
        if value is not None:
            env[var] = str(Path(value).resolve()) if flag in paths else str(value)
    return env


class LatencyMetrics:
    """Thread-safe counters plus a window of recent latencies for percentiles (per worker process)."""

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=window)
        self.counters: dict[str, int] = {}
        self.started = time.time()

    def inc(self, name: str, by: int = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + by

    def observe(self, seconds: float) -> None:
        with self._lock:
            self._latencies.append(seconds)

    def snapshot(self) -> dict[str, Any]:
        """Counters, latency percentiles in ms over the window, uptime and pid."""
        with self._lock:
            lat = sorted(self._latencies)
            counters = dict(self.counters)
        out: dict[str, Any] = dict(counters)
        out["latency_ms"] = {f"p{q}": round(percentile(lat, q) * 1000, 3) for q in (50, 90, 99)} if lat else {}
        out["latency_window"] = len(lat)
        out["uptime_s"] = round(time.time() - self.started, 3)
        out["pid"] = os.getpid()
        return out


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (0 for an empty list)."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class _BearerAuth:
    """Bearer-token check as plain ASGI middleware (Starlette's ``@app.middleware("http")`` costs ~40% of the
    request rate of a small route); the token is read from ``app.state.token`` on each request."""

    OPEN_PATHS = ("/health", "/docs", "/openapi.json")

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "http" and scope["path"] not in self.OPEN_PATHS:
            expected = scope["app"].state.token
            if expected:
                given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
                if not hmac.compare_digest(given, f"Bearer {expected}".encode()):
                    response = JSONResponse({"error": "unauthorized", "detail": "missing or wrong bearer token"}, 401)
                    await response(scope, receive, send)
                    return
        await self.app(scope, receive, send)


def create_app(title: str, *, token: str | None = None, version: str = "1", description: str = "",
               health: dict[str, Any] | None = None) -> FastAPI:
    """A FastAPI app with ``GET /health``, optional bearer auth and JSON error bodies for every failure.

    ``/health`` answers ``{"status": "healthy", "timestamp", ...}`` as the original project's servers did (its
    clients and scripts look for ``"healthy"``), plus ``health`` (e.g. the search backend, so that
    ``start_servers.sh status`` can name it; nothing secret: the route needs no token).
    """
    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    app = FastAPI(title=title, version=version, description=description)
    app.state.token = token

    app.add_middleware(_BearerAuth)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return JSONResponse({"error": "invalid request", "detail": errors}, 422)

    @app.exception_handler(Exception)
    async def _crash(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": "internal error", "detail": f"{type(exc).__name__}: {exc}"}, 500)

    extra = dict(health or {})

    @app.get("/health")
    async def get_health() -> dict[str, Any]:
        now = time.time()
        return {"status": "healthy", "service": title, "pid": os.getpid(), "timestamp": now, "time": now, **extra}

    return app


class _ServerArgParser(argparse.ArgumentParser):
    """Refuses, as a usage error, a bind beyond loopback without a token (before any index is built)."""

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        problem = bind_problem(parsed.host, parsed.token or os.environ.get(TOKEN_ENV),
                               os.environ.get("AFM_SERVER_ALLOW_NO_TOKEN", "").strip().lower() in ("1", "true", "yes"))
        if problem:
            self.error(problem)
        return parsed


def server_arg_parser(description: str, port_var: str) -> argparse.ArgumentParser:
    """Common CLI flags: --host (127.0.0.1), --port (``$port_var``), --workers, --token, --log-level."""
    p = _ServerArgParser(description=description)
    p.add_argument("--host", default=os.environ.get("AFM_SERVER_BIND", "127.0.0.1"),
                   help="address to bind (default $AFM_SERVER_BIND or 127.0.0.1); any other than loopback "
                        "(0.0.0.0, the host's address) exposes the server to the network and needs a token")
    try:
        port = default_port(port_var)
    except ValueError as exc:
        p.error(str(exc))
    p.add_argument("--port", type=int, default=port, required=port is None,
                   help=f"port (default ${port_var}, else environment.sh's default for it)")
    p.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    p.add_argument("--token", default=None, help=f"bearer token required by every route but /health "
                                                 f"(default: ${TOKEN_ENV}; empty = no auth)")
    p.add_argument("--log-level", default="warning")
    return p


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps a server private to this machine."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_problem(host: str, token: str | None, allow_no_token: bool = False) -> str | None:
    """Why binding ``host`` is refused (beyond loopback without a bearer token), or ``None``.

    ``allow_no_token`` (``AFM_SERVER_ALLOW_NO_TOKEN=1``) is the explicit opt-out for a private network whose
    clients cannot send a token, such as the original project's verl tools.
    """
    if is_loopback(host) or token or allow_no_token:
        return None
    return (f"binding {host} exposes the server to the network: set a bearer token (AFM_SERVER_TOKEN or --token; "
            f"afm's tool clients send $AFM_SERVER_TOKEN), or bind 127.0.0.1; on a private network whose clients "
            f"send no token (the original project's verl tools) set AFM_SERVER_ALLOW_NO_TOKEN=1")


def serve(app_factory: str, args: argparse.Namespace, env: dict[str, str] | None = None) -> None:
    """Run ``module:factory`` under uvicorn; settings reach worker processes through environment variables."""
    import uvicorn

    for key, value in (env or {}).items():
        os.environ[key] = value
    if args.token:
        os.environ[TOKEN_ENV] = args.token
    uvicorn.run(app_factory, factory=True, host=args.host, port=args.port, workers=args.workers,
                log_level=args.log_level, access_log=False)
