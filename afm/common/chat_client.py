"""One async client for OpenAI-compatible ``/chat/completions`` endpoints (teacher roles, judges, selectors).

Retries timeouts, connection errors, 429 and 5xx with jittered exponential backoff (honouring ``Retry-After``);
other 4xx fail at once. Token usage is returned with every reply so callers can account for cost. A leaf module:
it imports nothing from afm, and httpx lazily (extra ``servers``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from typing import Any, TypeVar

RETRY_STATUS = frozenset({408, 409, 425, 429})


class ChatError(RuntimeError):
    """A request that failed for good: ``status`` is the HTTP status (None for transport errors or bad bodies)."""

    def __init__(self, message: str, status: int | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts


@dataclass
class ChatReply:
    """The first choice's text with its usage; ``attempts`` counts HTTP requests made (1 = no retry)."""

    content: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    model: str = ""
    latency_s: float = 0.0
    attempts: int = 1
    usage_reported: bool = True  # False when the server sent no token counts (they are 0 then)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


# The environment variable of each endpoint field read by :meth:`ChatEndpoint.from_env`, after its prefix.
ENV_SUFFIXES: dict[str, str] = {"base_url": "BASE_URL", "api_key": "API_KEY", "model": "MODEL", "timeout_s": "TIMEOUT",
                                "retries": "RETRIES"}
# Names the configs gave these fields before they shared ChatEndpoint; constructors still take them.
ENDPOINT_ALIASES: dict[str, str] = {"timeout": "timeout_s", "max_retries": "retries", "backoff_s": "backoff"}


@dataclass(frozen=True)
class ChatEndpoint:
    """Where and how to call: ``base_url`` ends before ``/chat/completions`` (e.g. ``http://host:8000/v1``).

    The one description of an LLM endpoint: the judge, the best-of-N selector, the crawl server's summary model and
    each teacher role hold one. An empty ``base_url`` means "not configured" (callers fall back without a model).
    """

    base_url: str = ""
    model: str = ""
    api_key: str = field(default="", repr=False)  # a config printed in a log never shows its key
    timeout_s: float = 120.0  # seconds per HTTP request, whole reply included
    retries: int = 3  # attempts = 1 + retries
    backoff: float = 1.0  # wait before the first retry; doubles each retry (with jitter)
    max_backoff: float = 30.0
    max_connections: int = 64

    def __post_init__(self) -> None:
        # None is how the configs spelled "unset" before; keep the fields plain strings.
        for name in ("base_url", "model", "api_key"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, "")
        checks = {"timeout_s": self.timeout_s > 0, "retries": self.retries >= 0, "backoff": self.backoff >= 0,
                  "max_backoff": self.max_backoff >= 0, "max_connections": self.max_connections >= 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid ChatEndpoint values: {', '.join(f'{n}={getattr(self, n)!r}' for n in bad)}")

    @property
    def configured(self) -> bool:
        """True when a base URL is set."""
        return bool(self.base_url)

    def redacted(self) -> dict[str, Any]:
        """The fields as a dict with the key masked (for logs and reports)."""
        data = asdict(self)
        data["api_key"] = "***" if self.api_key else None
        return data

    @classmethod
    def from_env(cls, prefix: str, env: Mapping[str, str] | None = None, *,
                 names: Mapping[str, str | None] | None = None, **defaults: Any) -> ChatEndpoint:
        """``defaults`` (field names) overlaid with ``<prefix>BASE_URL``, ``<prefix>API_KEY``, ``<prefix>MODEL``,
        ``<prefix>TIMEOUT`` and ``<prefix>RETRIES``; unset or empty variables keep the default.

        ``names`` maps a field to the variable users already set for it instead (``{"model": "GRM_MODEL_NAME"}``),
        to None when it is not read from the environment, or adds a field (``{"backoff": "SUMMARY_BACKOFF"}``).
        A value that is not a number where one is needed raises a ValueError naming the variable.
        """
        env = os.environ if env is None else env
        values = endpoint_kwargs(dict(defaults))
        variables = {name: prefix + suffix for name, suffix in ENV_SUFFIXES.items()}
        variables.update(names or {})
        types = {f.name: f.type for f in fields(cls)}
        for name, var in variables.items():
            if name not in types:
                raise ValueError(f"ChatEndpoint has no field {name!r} (read from {var})")
            raw = env.get(var, "") if var else ""
            if name != "api_key":
                raw = raw.strip()
            if not raw:
                continue
            kind = {"float": float, "int": int}.get(str(types[name]), str)
            try:
                values[name] = kind(raw)
            except ValueError:
                raise ValueError(f"{var}={raw!r}: expected {'an integer' if kind is int else 'a number'}") from None
        return cls(**values)


def endpoint_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Remove the :class:`ChatEndpoint` fields (or their older names) from ``kwargs`` and return them by field name."""
    known = {f.name for f in fields(ChatEndpoint)}
    out: dict[str, Any] = {}
    spelt: dict[str, str] = {}
    for given in [k for k in kwargs if k in known or k in ENDPOINT_ALIASES]:
        name = ENDPOINT_ALIASES.get(given, given)
        if name in out:
            raise TypeError(f"{' and '.join(sorted((spelt[name], given)))} name the same endpoint setting: give one")
        out[name], spelt[name] = kwargs.pop(given), given
    return out


T = TypeVar("T")


def holds_endpoint(cls: type[T]) -> type[T]:
    """Class decorator for a dataclass with an ``endpoint: ChatEndpoint`` field: its constructor, and so
    ``dataclasses.replace``, also takes the endpoint's fields by name (``base_url=``, ``timeout_s=``, or the older
    ``timeout=``/``max_retries=``) and applies them over ``endpoint`` (or the field's default). This keeps the
    configs' flat keyword arguments, the ``judge_<field>`` options and flat YAML keys working."""
    generated = cls.__init__  # type: ignore[misc]
    spec = next(f for f in fields(cls) if f.name == "endpoint")  # type: ignore[arg-type]

    def default_endpoint() -> ChatEndpoint:
        if spec.default_factory is not MISSING:
            return spec.default_factory()  # type: ignore[misc,no-any-return]
        return spec.default  # type: ignore[return-value]

    @functools.wraps(generated)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        flat = endpoint_kwargs(kwargs)
        if flat:
            if args:  # endpoint is the first field
                kwargs["endpoint"], args = args[0], args[1:]
            kwargs["endpoint"] = replace(kwargs.get("endpoint") or default_endpoint(), **flat)
        generated(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def reply_content(body: Any) -> str | None:
    """Text of the first choice of a chat (or completions) response body, or None when it is not there."""
    try:
        choice = body["choices"][0]
        content = choice["message"]["content"] if "message" in choice else choice["text"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None


def retry_delay(attempt: int, backoff: float, max_backoff: float, retry_after: float | None = None) -> float:
    """Jittered exponential delay before retry number ``attempt`` (1-based), at least ``Retry-After``."""
    delay = min(max_backoff, backoff * 2 ** (attempt - 1)) * (0.5 + random.random() / 2)
    if retry_after is not None:
        delay = max(delay, min(retry_after, max_backoff))
    return delay


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return float(headers.get("retry-after", ""))
    except ValueError:
        return None


class ChatClient:
    """Async client for one endpoint; reuse it across requests (it holds a connection pool)."""

    def __init__(self, endpoint: ChatEndpoint) -> None:
        self.endpoint = endpoint
        self._client: Any = None

    def _http(self) -> Any:
        if self._client is None:
            try:
                import httpx
            except ImportError as exc:  # pragma: no cover - httpx ships with the servers extra
                raise ImportError("OpenAI-compatible clients need httpx: pip install 'afm[servers]'") from exc
            ep = self.endpoint
            self._client = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=ep.max_connections, max_keepalive_connections=ep.max_connections),
                timeout=httpx.Timeout(ep.timeout_s))
        return self._client

    async def complete(self, messages: Sequence[Mapping[str, str]], *,
                       check: Callable[[str], str | None] | None = None, **params: Any) -> ChatReply:
        """One chat completion; ``params`` (temperature, max_tokens, stop, ...) go into the request body.

        ``check(content)`` returns None to accept a reply, or a reason to treat it like a failed attempt (retried,
        and the reason reported if every attempt fails): a judge whose reply holds no verdict, an empty summary.
        """
        import httpx

        ep = self.endpoint
        url = ep.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {ep.api_key}"} if ep.api_key else {}
        body = {"model": ep.model, "messages": [dict(m) for m in messages], **params}
        error, status, retry_after = "", None, None
        t0 = time.monotonic()
        for attempt in range(ep.retries + 1):
            if attempt:
                await asyncio.sleep(retry_delay(attempt, ep.backoff, ep.max_backoff, retry_after))
            retry_after = None
            try:
                async with asyncio.timeout(ep.timeout_s):
                    resp = await self._http().post(url, json=body, headers=headers)
            except (TimeoutError, httpx.TimeoutException):
                error, status = f"timed out after {ep.timeout_s:g} s", None
                continue
            except httpx.HTTPError as exc:
                error, status = f"request failed ({type(exc).__name__}: {exc})", None
                continue
            status = resp.status_code
            if status in RETRY_STATUS or status >= 500:
                error, retry_after = f"HTTP {status}: {resp.text[:200]}", _retry_after(resp.headers)
                continue
            if status >= 400:
                raise ChatError(f"HTTP {status} (not retried): {resp.text[:300]}", status, attempt + 1)
            try:
                data = resp.json()
            except ValueError:
                data = None
            content = reply_content(data)
            if content is None:
                error = f"answered with a malformed response: {resp.text[:200]!r}"
                continue
            problem = check(content) if check is not None else None
            if problem is not None:
                error = problem
                continue
            usage = data.get("usage") or {}
            choice = data["choices"][0]
            reported = all(isinstance(usage.get(k), int) for k in ("prompt_tokens", "completion_tokens"))
            return ChatReply(content=content, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                             completion_tokens=int(usage.get("completion_tokens") or 0), usage_reported=reported,
                             finish_reason=choice.get("finish_reason"), model=str(data.get("model") or ep.model),
                             latency_s=time.monotonic() - t0, attempts=attempt + 1, raw=data)
        raise ChatError(f"{error} after {ep.retries + 1} attempt(s)", status, ep.retries + 1)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()


async def counted_complete(client: ChatClient, messages: Sequence[Mapping[str, str]], *, stats: Any,
                           limit: asyncio.Semaphore | None = None, check: Callable[[str], str | None] | None = None,
                           **params: Any) -> ChatReply:
    """:meth:`ChatClient.complete` under ``limit``, counting into ``stats`` (any object with ``requests``,
    ``retries``, ``in_flight`` and ``max_in_flight`` fields, e.g. the judge's and the selector's stats)."""
    if limit is None:
        limit = asyncio.Semaphore(1 << 30)
    async with limit:
        stats.in_flight += 1
        stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
        try:
            reply = await client.complete(messages, check=check, **params)
        except ChatError as exc:
            stats.requests += exc.attempts
            stats.retries += exc.attempts - 1
            raise
        finally:
            stats.in_flight -= 1
    stats.requests += reply.attempts
    stats.retries += reply.attempts - 1
    return reply
