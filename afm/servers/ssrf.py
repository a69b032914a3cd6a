"""Which URLs the crawl server may fetch: a guard against server-side request forgery (SSRF).

Threat model. The URLs come from a language model, and whoever writes the pages or search results it reads can
make it ask for any URL. The crawl server usually runs inside a cluster, next to cloud metadata services, internal
dashboards and the other tool servers; without a guard it would fetch them and hand their content to the model.

What the guard does:

- only ``http`` and ``https``; no credentials in URLs (``http://user@host`` hides the real host from a reader);
- IP literals must be written canonically: resolvers accept ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and
  ``127.1`` as 127.0.0.1 (``inet_aton``), so those forms are refused outright, allow-list or not;
- the host name is resolved once and *every* address must be public: loopback, private (RFC 1918, fc00::/7),
  shared (CGNAT 100.64/10), link-local, multicast, unspecified, reserved and other special-purpose ranges are
  refused, also when embedded in IPv6 (IPv4-mapped, IPv4-compatible, 6to4, NAT64, Teredo);
- cloud metadata endpoints (``169.254.169.254``, ``fd00:ec2::254``, ``metadata.google.internal``, ...) are refused
  even when an allow-list entry covers them;
- :meth:`UrlPolicy.resolve` returns the checked addresses and the fetcher connects to one of *them* (the IP is
  pinned in the request URL), so a second, different DNS answer (DNS rebinding) is never used;
- the fetcher runs the same check on every redirect hop.

An explicit allow-list (``CRAWL_PAGE_ALLOW=127.0.0.1:8080,10.0.0.0/8,wiki.corp,*.intranet.example``) lets tests
and intranet users reach chosen non-public targets; an entry with a port only allows that port.

Not covered: the Jina reader fetches pages from Jina's network, so for it only :meth:`UrlPolicy.check_syntax` runs
(no local DNS: we never connect to the target); proxies are not used for direct fetches.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], Awaitable[list[str]]]

ALLOW_ENV = "CRAWL_PAGE_ALLOW"

METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    "169.254.170.2",  # AWS ECS task credentials
    "fd00:ec2::254",  # AWS IMDS over IPv6
    "100.100.100.200",  # Alibaba Cloud
    "192.0.0.192",  # Oracle Cloud
))
METADATA_HOSTS = frozenset({
    "metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal",
    "metadata.azure.internal",
})
# Names of this machine or an internal network: refused where no DNS check follows (the Jina reader).
LOCAL_NAMES = ("localhost", ".localhost", ".local", ".internal")

_SHARED = ipaddress.ip_network("100.64.0.0/10")
_RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"))
_NAT64 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48"))
_V4_COMPAT = ipaddress.ip_network("::/96")
# One to four dot-separated parts, each decimal, octal (leading 0) or hex (0x): what inet_aton accepts.
_INET_ATON = re.compile(r"^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}$", re.IGNORECASE)


class URLRefused(Exception):
    """The policy refuses a URL; ``str(exc)`` is the reason, written for the agent and the operator."""


def address_problem(ip: IPAddress) -> str | None:
    """Why ``ip`` is not a public unicast address (``None`` when it is)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            inner = address_problem(embedded)
            if inner:
                return f"{inner}, embedded in IPv6 {ip}"
    if ip.is_loopback:
        return "loopback"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if ip in _SHARED:
        return "shared address space (CGNAT)"
    if any(ip in net for net in _RFC1918):
        return "private"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private or not ip.is_global:
        return "special-purpose (not globally routable)"
    return None


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64, Teredo client), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if any(ip in net for net in _NAT64) or (ip in _V4_COMPAT and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def canonical_address(ip: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 addresses as plain IPv4, so ``::ffff:10.0.0.1`` matches an allow-list entry ``10.0.0.1``."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def is_metadata(host: str, ip: IPAddress | None) -> bool:
    """Whether a host name or address is a cloud metadata endpoint."""
    return host in METADATA_HOSTS or (ip is not None and canonical_address(ip) in METADATA_ADDRESSES)


@dataclass(frozen=True)
class AllowEntry:
    """One allow-list entry: a network or a host name (``*.suffix`` for subdomains), optionally one port."""

    network: IPNetwork | None = None
    host: str | None = None
    port: int | None = None

    def permits(self, host: str, ip: IPAddress | None, port: int) -> bool:
        """Whether this entry covers ``host`` (by name) or ``ip`` on ``port``; ``ip=None`` matches names only."""
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return ip is not None and ip.version == self.network.version and ip in self.network
        name = self.host or ""
        return host.endswith(name[1:]) if name.startswith("*.") else host == name

    def canonical(self) -> str:
        """``10.0.0.0/8``, ``[::1/128]:8080``, ``wiki.corp:80``: one spelling per entry."""
        if self.network is not None:
            where = f"[{self.network}]" if self.network.version == 6 and self.port is not None else str(self.network)
        else:
            where = self.host or ""
        return where if self.port is None else f"{where}:{self.port}"


@dataclass(frozen=True)
class AllowList:
    """Non-public targets the operator allows (``CRAWL_PAGE_ALLOW``); empty by default."""

    entries: tuple[AllowEntry, ...] = ()

    @classmethod
    def parse(cls, spec: str | Iterable[str] | None) -> AllowList:
        """Parse ``"127.0.0.1:8080, 10.0.0.0/8, [::1]:9000, wiki.corp, *.intranet"`` (commas or whitespace)."""
        items = re.split(r"[,\s]+", spec) if isinstance(spec, str) else list(spec or [])
        return cls(tuple(_parse_entry(item.strip()) for item in items if item and item.strip()))

    def permits(self, host: str, ip: IPAddress, port: int) -> bool:
        """Whether some entry covers this host name or address on this port."""
        ip = canonical_address(ip)
        return any(entry.permits(host, ip, port) for entry in self.entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def canonical(self) -> str:
        """The entries in one canonical spelling, sorted (``""`` when empty): what a cache key records of the list."""
        return ",".join(sorted({entry.canonical() for entry in self.entries}))


def _parse_entry(item: str) -> AllowEntry:
    port: int | None = None
    body = item
    if body.startswith("["):  # [v6] or [v6]:port
        end = body.find("]")
        if end < 0:
            raise ValueError(f"allow-list entry {item!r}: missing ']'")
        rest = body[end + 1:]
        body = body[1:end]
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise ValueError(f"allow-list entry {item!r}: expected [address]:port")
            port = int(rest[1:])
    elif body.count(":") == 1:  # host:port or v4:port or v4/cidr:port
        body, _, port_text = body.partition(":")
        if not port_text.isdigit():
            raise ValueError(f"allow-list entry {item!r}: bad port {port_text!r}")
        port = int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"allow-list entry {item!r}: port out of range")
    try:
        return AllowEntry(network=ipaddress.ip_network(body, strict=False), port=port)
    except ValueError:
        pass  # not an address or network: read it as a host name below
    host = body.lower().rstrip(".")
    if not re.fullmatch(r"(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*", host) or _INET_ATON.match(host):
        raise ValueError(f"allow-list entry {item!r}: not an address, network, host name or *.domain")
    return AllowEntry(host=host, port=port)


@dataclass(frozen=True)
class Target:
    """A URL that passed the policy, with the checked addresses to connect to (in resolver order)."""

    url: httpx.URL
    host: str
    port: int
    addresses: tuple[IPAddress, ...]


async def system_resolver(host: str, port: int) -> list[str]:
    """Addresses of ``host`` from the system resolver (``getaddrinfo``), in its preference order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        addr = str(info[4][0]).split("%", 1)[0]  # drop an IPv6 zone id
        if addr not in seen:
            seen.append(addr)
    return seen


class UrlPolicy:
    """Checks URLs against the rules in the module docstring; ``resolve`` also picks the addresses to connect to."""

    def __init__(self, allow: AllowList | None = None, *, resolver: Resolver | None = None,
                 resolve_timeout: float = 5.0) -> None:
        self.allow = allow or AllowList()
        self.resolver = resolver or system_resolver
        self.resolve_timeout = resolve_timeout

    def check_syntax(self, url: str | httpx.URL, *, local_names: bool = True) -> tuple[httpx.URL, str, int]:
        """Scheme, credentials, host spelling and IP literals, without DNS; returns (url, host, port).

        With ``local_names`` (used where no DNS check follows, i.e. for the Jina reader) names such as
        ``localhost`` or ``*.internal`` are refused unless a host-name entry allows them.
        """
        try:
            parsed = url if isinstance(url, httpx.URL) else httpx.URL(url.strip())
        except Exception as exc:
            raise URLRefused(f"malformed URL ({exc})") from None
        if parsed.scheme not in ("http", "https"):
            raise URLRefused(f"scheme {parsed.scheme or '(none)'!r} is not allowed: only http and https")
        if parsed.userinfo:
            raise URLRefused("URLs with credentials (user@host) are not allowed")
        host = parsed.host.rstrip(".").lower()
        if not host:
            raise URLRefused("URL has no host")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        literal = _ip_literal(host)
        if literal is None and _INET_ATON.match(host):
            raise URLRefused(f"host {host!r} is an IP address in a non-canonical encoding (decimal, octal, hex or "
                             "shortened); write it as a dotted quad")
        if is_metadata(host, literal):
            raise URLRefused(f"{host} is a cloud metadata endpoint")
        if literal is not None:
            self._check_address(host, literal, port)
        elif local_names and (host == LOCAL_NAMES[0] or host.endswith(LOCAL_NAMES[1:])) \
                and not self._name_allowed(host, port):
            raise URLRefused(f"host {host!r} names a local or internal machine and is not allow-listed "
                             f"({ALLOW_ENV})")
        return parsed.copy_with(fragment=None), host, port

    async def resolve(self, url: str | httpx.URL) -> Target:
        """Full check (syntax, then DNS); every resolved address must pass. Raises :class:`URLRefused`."""
        parsed, host, port = self.check_syntax(url, local_names=False)
        literal = _ip_literal(host)
        if literal is not None:
            return Target(parsed, host, port, (canonical_address(literal),))
        try:
            raw = await asyncio.wait_for(self.resolver(host, port), self.resolve_timeout)
        except TimeoutError:
            raise URLRefused(f"could not resolve {host!r} within {self.resolve_timeout:g} s") from None
        except OSError as exc:
            raise URLRefused(f"could not resolve {host!r} ({exc.strerror or exc})") from None
        addresses: list[IPAddress] = []
        for text in raw:
            try:
                addresses.append(ipaddress.ip_address(text))
            except ValueError:
                raise URLRefused(f"resolver returned a non-address {text!r} for {host!r}") from None
        if not addresses:
            raise URLRefused(f"{host!r} has no addresses")
        for ip in addresses:
            self._check_address(host, ip, port)
        return Target(parsed, host, port, tuple(dict.fromkeys(canonical_address(ip) for ip in addresses)))

    def _check_address(self, host: str, ip: IPAddress, port: int) -> None:
        if canonical_address(ip) in METADATA_ADDRESSES:
            raise URLRefused(f"{host} resolves to {ip}, a cloud metadata endpoint")
        problem = address_problem(ip)
        if problem and not self.allow.permits(host, ip, port):
            where = f"{host} is" if _ip_literal(host) == ip else f"{host} resolves to {ip}, which is"
            raise URLRefused(f"{where} not a public address ({problem}) and is not allow-listed for port {port} "
                             f"({ALLOW_ENV})")

    def _name_allowed(self, host: str, port: int) -> bool:
        return any(entry.permits(host, None, port) for entry in self.allow.entries if entry.host)


def _ip_literal(host: str) -> IPAddress | None:
    """``host`` as an address when it is a canonical IP literal (httpx strips IPv6 brackets)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None
