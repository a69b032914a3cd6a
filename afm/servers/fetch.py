"""Fetch one web page and turn it into text: direct httpx (behind the SSRF guard) or the Jina reader.

Direct fetches connect only to addresses that :class:`afm.servers.ssrf.UrlPolicy` checked: the checked IP is put
in the request URL (``Host`` header and TLS SNI keep the original name), redirects are followed by hand with the
same check on every hop, a loop or more than ``max_redirects`` hops stops, the body is read up to ``max_bytes``
of *decoded* bytes as it streams (:mod:`afm.servers.content_decoding` decodes every ``Content-Encoding`` layer in
bounded steps, so a compression bomb, stacked or not, costs at most the cap) and the whole fetch, redirects
included, has one time limit. Environment proxies are not
used, so a proxy cannot carry the request somewhere the guard did not check.

Content types: HTML goes through trafilatura (main text as markdown or plain text, boilerplate dropped); plain
text, markdown, CSV, XML and JSON pass through; PDFs and other binary bodies give a "not a text page" error.
With ``jina_api_key`` the page is read through ``{jina_base_url}/{url}`` instead (its text passes through); the
target URL still gets the syntax checks, but no local DNS check because Jina, not this machine, connects to it.

Every expected failure comes back as a :class:`FetchResult` with ``ok=False`` and a reason; nothing raises.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

from afm.servers.content_decoding import ACCEPT_ENCODING, ContentDecoder, ContentDecodingError
from afm.servers.ssrf import Target, UrlPolicy, URLRefused

log = logging.getLogger(__name__)

FetchStatus = Literal["ok", "refused", "error", "timeout"]
REDIRECT_CODES = frozenset({301, 302, 303, 307, 308})
TEXT_TYPES = ("text/plain", "text/markdown", "text/x-markdown", "text/csv", "text/xml", "application/xml",
              "application/json", "application/ld+json", "application/rss+xml", "application/atom+xml")
HTML_TYPES = ("text/html", "application/xhtml+xml")
DEFAULT_JINA_BASE_URL = "https://r.jina.ai"
MIN_EXTRACTED_SIZE = 25  # trafilatura's setting (its default is 250; see _trafilatura_config)
USER_AGENT = "Mozilla/5.0 (compatible; afm-crawl/0.1; +https://github.com/OPPO-PersonalAI/Agent_Foundation_Models)"


@dataclass(frozen=True)
class FetchLimits:
    """Caps on one page fetch."""

    max_bytes: int = 5_000_000
    max_redirects: int = 5
    timeout_s: float = 20.0
    connect_timeout_s: float = 5.0
    output_format: Literal["markdown", "txt"] = "markdown"


@dataclass
class FetchResult:
    """One fetched page: its text, or why there is none. ``url`` is the URL as requested."""

    url: str
    ok: bool
    status: FetchStatus = "ok"
    text: str = ""
    error: str = ""
    final_url: str = ""
    content_type: str = ""
    http_status: int | None = None
    truncated: bool = False
    via: Literal["direct", "jina"] = "direct"
    elapsed_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FetchResult:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


class FetchFailed(Exception):
    """Internal: a failure with the status it maps to."""

    def __init__(self, message: str, status: FetchStatus = "error", http_status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.http_status = http_status


def media_type(content_type: str) -> str:
    """``text/html; charset=utf-8`` -> ``text/html``."""
    return content_type.split(";", 1)[0].strip().lower()


def sniff_type(body: bytes) -> str:
    """A media type guessed from the first bytes, for responses without a usable Content-Type."""
    head = body[:2048].lstrip().lower()
    if head.startswith(b"%pdf"):
        return "application/pdf"
    if b"\x00" in head:
        return "application/octet-stream"
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head:
        return "text/html"
    if head.startswith((b"{", b"[")):
        return "application/json"
    return "text/plain"


def decode_text(body: bytes, content_type: str) -> str:
    """Decode with the declared charset, else UTF-8; undecodable bytes are replaced, never fatal."""
    charset = "utf-8"
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip('"\'')
    try:
        return body.decode(charset, errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


@functools.cache
def _trafilatura_config() -> Any:
    from trafilatura.settings import use_config

    cfg = use_config()
    # The default (250 characters) makes trafilatura drop the structure of short articles and return one
    # flattened line; short pages are common answers for an agent (definitions, infoboxes).
    cfg.set("DEFAULT", "MIN_EXTRACTED_SIZE", str(MIN_EXTRACTED_SIZE))
    return cfg


def extractor_version() -> str:
    """The HTML extractor and its settings, for cache keys: another trafilatura may extract other text."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"trafilatura {version('trafilatura')}; min_extracted_size {MIN_EXTRACTED_SIZE}"
    except PackageNotFoundError:
        return "trafilatura ?"


def extract_html(body: bytes | str, url: str = "", output_format: str = "markdown") -> str:
    """Main text of an HTML page with trafilatura; falls back to all visible text when it finds no main part."""
    import trafilatura  # heavy import, only where HTML is handled

    text = trafilatura.extract(body, url=url or None, output_format=output_format, include_links=True,
                               include_tables=True, include_comments=False, include_images=False,
                               with_metadata=False, deduplicate=False, config=_trafilatura_config())
    if not text or not text.strip():
        # Pages trafilatura judges too short or without an article still have text worth showing.
        text = trafilatura.html2txt(body)
    return (text or "").strip()


def body_to_text(body: bytes, content_type: str, url: str, output_format: str = "markdown") -> str:
    """Text of a response body by content type; raises :class:`FetchFailed` for non-text bodies."""
    kind = media_type(content_type)
    if not kind or kind in ("application/octet-stream", "binary/octet-stream"):
        kind = sniff_type(body)
    if kind in HTML_TYPES:
        return extract_html(body, url, output_format)
    if kind in TEXT_TYPES or kind.endswith(("+json", "+xml")) or kind.startswith("text/"):
        return decode_text(body, content_type).strip()
    if kind == "application/pdf":
        raise FetchFailed("not a text page (application/pdf): PDF extraction is not supported")
    raise FetchFailed(f"not a text page ({kind})")


def tls_context(extra_ca_file: str = "") -> ssl.SSLContext | bool:
    """TLS verification settings: the default trust store, plus ``extra_ca_file`` (a private CA) when given."""
    if not extra_ca_file:
        return True
    import certifi

    ctx = ssl.create_default_context(cafile=certifi.where())
    ctx.load_verify_locations(cafile=extra_ca_file)
    return ctx


class PageFetcher:
    """Fetches pages under a :class:`UrlPolicy` and :class:`FetchLimits`; one instance per server worker."""

    def __init__(self, policy: UrlPolicy, limits: FetchLimits | None = None, *, jina_api_key: str = "",
                 jina_base_url: str = DEFAULT_JINA_BASE_URL, max_connections: int = 100,
                 verify: ssl.SSLContext | bool = True) -> None:
        """``verify``: TLS verification of direct fetches (see :func:`tls_context`)."""
        self.policy = policy
        self.limits = limits or FetchLimits()
        self.jina_api_key = jina_api_key
        self.jina_base_url = (jina_base_url or DEFAULT_JINA_BASE_URL).rstrip("/")
        timeout = httpx.Timeout(self.limits.timeout_s, connect=self.limits.connect_timeout_s)
        pool = httpx.Limits(max_connections=max_connections, max_keepalive_connections=20)
        # trust_env=False: no proxies or netrc from the environment on the guarded path.
        self._client = httpx.AsyncClient(timeout=timeout, limits=pool, follow_redirects=False, trust_env=False,
                                         headers={"User-Agent": USER_AGENT}, verify=verify)
        self._jina: httpx.AsyncClient | None = None

    async def aclose(self) -> None:
        await self._client.aclose()
        if self._jina is not None:
            await self._jina.aclose()

    async def fetch(self, url: str) -> FetchResult:
        """Fetch ``url`` and return its text or the reason it has none (never raises for expected failures)."""
        start = time.monotonic()
        via: Literal["direct", "jina"] = "jina" if self.jina_api_key else "direct"
        try:
            coro = self._fetch_jina(url) if self.jina_api_key else self._fetch_direct(url)
            result = await asyncio.wait_for(coro, self.limits.timeout_s)
        except URLRefused as exc:
            result = FetchResult(url, False, "refused", error=f"refused: {exc}")
        except FetchFailed as exc:
            result = FetchResult(url, False, exc.status, error=str(exc), http_status=exc.http_status)
        except (TimeoutError, httpx.TimeoutException):
            result = FetchResult(url, False, "timeout",
                                 error=f"timed out after {self.limits.timeout_s:g} s")
        except httpx.HTTPError as exc:
            result = FetchResult(url, False, "error", error=f"network error: {type(exc).__name__}: {exc}".rstrip(": "))
        except Exception as exc:  # a bug or an odd page must cost one page, never the whole request
            log.exception("unexpected error fetching %s", url)
            result = FetchResult(url, False, "error", error=f"unexpected error: {type(exc).__name__}")
        result.via = via
        result.elapsed_s = round(time.monotonic() - start, 4)
        return result

    async def admit(self, url: str) -> FetchResult | None:
        """The policy's verdict on ``url`` before anything else (a cache look-up included): ``None`` when it may be
        fetched, else the refused result :meth:`fetch` would give. Direct fetches get the full check (DNS
        included); the Jina reader gets the URL checks only, as in :meth:`fetch`."""
        try:
            if self.jina_api_key:
                self.policy.check_syntax(url)
            else:
                await self.policy.resolve(url)
        except URLRefused as exc:
            return FetchResult(url, False, "refused", error=f"refused: {exc}",
                               via="jina" if self.jina_api_key else "direct")
        return None

    async def admits_hops(self, result: FetchResult) -> bool:
        """Whether every redirect hop recorded in a (cached) result still passes the policy."""
        if self.jina_api_key:
            return True  # Jina followed the redirects, not this machine; the requested URL was checked
        for hop in result.meta.get("hops", [])[1:]:
            try:
                await self.policy.resolve(hop)
            except URLRefused:
                return False
        return True

    async def _fetch_direct(self, url: str) -> FetchResult:
        visited: dict[str, None] = {}  # the hops in order: kept with the result, re-checked on a cache hit
        current: str | httpx.URL = url
        for hop in range(self.limits.max_redirects + 1):
            try:
                target = await self.policy.resolve(current)
            except URLRefused as exc:
                if hop == 0:
                    raise
                raise URLRefused(f"redirected to {current}, which is refused: {exc}") from None
            key = str(target.url)
            if key in visited:
                raise FetchFailed(f"redirect loop: {key} was already visited")
            visited[key] = None
            response = await self._send_pinned(target)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_CODES and location:
                    try:
                        current = target.url.join(location)
                    except (httpx.InvalidURL, ValueError):
                        raise FetchFailed(f"invalid redirect location {location[:200]!r}") from None
                    continue
                body, truncated = await self._read_capped(response)
            finally:
                await response.aclose()
            if response.status_code >= 400:
                raise FetchFailed(f"HTTP {response.status_code} {response.reason_phrase}".strip(),
                                  http_status=response.status_code)
            content_type = response.headers.get("content-type", "")
            # Extraction is CPU work (about 0.5 s for a 1 MB page): a thread keeps the event loop serving.
            text = await asyncio.to_thread(body_to_text, body, content_type, str(target.url),
                                           self.limits.output_format)
            return FetchResult(url, True, text=text, final_url=str(target.url), content_type=content_type,
                               http_status=response.status_code, truncated=truncated,
                               meta={"bytes": len(body), "redirects": len(visited) - 1, "hops": list(visited)})
        raise FetchFailed(f"too many redirects (more than {self.limits.max_redirects})")

    async def _send_pinned(self, target: Target) -> httpx.Response:
        """GET the target at one of its checked addresses (tried in order), keeping Host and SNI."""
        last: httpx.ConnectError | None = None
        for address in target.addresses:
            request = self._client.build_request(
                "GET", target.url.copy_with(host=str(address)),
                headers={"Host": target.url.netloc.decode("ascii"), "Accept": "text/html,text/plain,*/*;q=0.8",
                         "Accept-Encoding": ACCEPT_ENCODING},
                extensions={"sni_hostname": target.host} if target.url.scheme == "https" else {})
            try:
                return await self._client.send(request, stream=True)
            except httpx.ConnectError as exc:
                last = exc
        raise FetchFailed(f"could not connect to {target.host}:{target.port} ({last})")

    async def _read_capped(self, response: httpx.Response) -> tuple[bytes, bool]:
        """Up to ``max_bytes`` of the decoded body; True when there was more.

        The raw stream is decoded here, piece by piece, rather than by httpx: httpx inflates a whole network chunk
        at once, which for stacked encodings (``gzip, gzip``) is hundreds of MiB before any cap applies.
        """
        cap = self.limits.max_bytes
        try:
            decoder = ContentDecoder(response.headers.get("content-encoding", ""))
        except ContentDecodingError as exc:
            raise FetchFailed(str(exc)) from None
        body = bytearray()
        wire = 0
        try:
            async for raw in response.aiter_raw():
                wire += len(raw)
                for piece in decoder.decode(raw):
                    body += piece
                    if len(body) > cap:
                        return bytes(memoryview(body)[:cap]), True
                if wire > cap:  # a body that is large even before decoding (or one that decodes to nothing)
                    return bytes(body), True
        except ContentDecodingError as exc:
            raise FetchFailed(str(exc)) from None
        return bytes(body), False

    async def _fetch_jina(self, url: str) -> FetchResult:
        parsed, _, _ = self.policy.check_syntax(url)
        if self._jina is None:
            self._jina = httpx.AsyncClient(timeout=httpx.Timeout(self.limits.timeout_s,
                                                                 connect=self.limits.connect_timeout_s))
        fmt = "markdown" if self.limits.output_format == "markdown" else "text"
        headers = {"Authorization": f"Bearer {self.jina_api_key}", "X-Return-Format": fmt,
                   "X-Retain-Images": "none", "X-Timeout": str(max(1, int(self.limits.timeout_s) - 2)),
                   "Accept": "text/plain", "Accept-Encoding": ACCEPT_ENCODING}
        reader_url = f"{self.jina_base_url}/{parsed}"
        last = ""
        for attempt in range(2):
            try:
                async with self._jina.stream("GET", reader_url, headers=headers) as response:
                    body, truncated = await self._read_capped(response)
                    status = response.status_code
            except httpx.TransportError as exc:
                last = f"Jina reader unreachable ({type(exc).__name__})"
            else:
                if status < 400:
                    text = decode_text(body, response.headers.get("content-type", "")).strip()
                    return FetchResult(url, True, text=text, final_url=str(parsed), content_type="text/markdown",
                                       http_status=status, truncated=truncated, meta={"bytes": len(body)})
                last = f"Jina reader answered HTTP {status}: {decode_text(body[:300], '').strip()}"
                if status < 500 and status != 429:
                    break
            if attempt == 0:
                await asyncio.sleep(1.0)
        raise FetchFailed(last)
