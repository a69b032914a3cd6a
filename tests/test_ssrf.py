"""SSRF guard of the crawl server: the URL policy alone, the fetcher's pinning and redirects, and the real server."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess

import httpx
import pytest

from afm.common.procs import ServerProcess, free_port
from afm.servers.demo_site import DemoSite
from afm.servers.fetch import FetchLimits, PageFetcher
from afm.servers.ssrf import AllowList, UrlPolicy, URLRefused, address_problem


def refusal(url: str, policy: UrlPolicy | None = None) -> str:
    """The policy's reason for refusing ``url`` (the test fails if it is accepted)."""
    with pytest.raises(URLRefused) as info:
        asyncio.run((policy or UrlPolicy()).resolve(url))
    return str(info.value)


def fixed_resolver(table: dict[str, list[str]], calls: list[str] | None = None):
    """A resolver answering from ``table`` (and recording the names asked), for names no DNS knows."""

    async def resolve(host: str, port: int) -> list[str]:
        if calls is not None:
            calls.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


# (url, words the reason must contain): every one refused by the default policy (empty allow-list).
REFUSED = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.255.0.9:8080/x", "loopback"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://192.168.1.1/admin", "private"),
    ("http://100.64.0.1/", "CGNAT"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://169.254.10.1/", "link-local"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[::ffff:7f00:1]:9000/", "loopback"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[2002:a00:1::]/", "private, embedded in IPv6"),  # 6to4 carrying 10.0.0.1
    ("http://[64:ff9b::7f00:1]/", "loopback, embedded in IPv6"),  # NAT64 carrying 127.0.0.1
    ("http://[fe80::1]/", "link-local"),
    ("http://[fc00::5]/", "private"),
    ("http://224.0.0.1/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://240.0.0.1/", "reserved"),
    ("http://192.0.2.10/", "not globally routable"),
    ("http://2130706433/", "non-canonical"),  # 127.0.0.1 as one decimal number
    ("http://0x7f.1/", "non-canonical"),  # hex and shortened
    ("http://0x7f000001/", "non-canonical"),
    ("http://017700000001/", "non-canonical"),  # octal
    ("http://127.1/", "non-canonical"),
    ("http://0/", "non-canonical"),
    ("ftp://example.com/file", "only http and https"),
    ("file:///etc/passwd", "only http and https"),
    ("gopher://example.com/", "only http and https"),
    ("javascript:alert(1)", "only http and https"),
    ("http://user:secret@example.com/", "credentials"),
    ("http:///nohost", "no host"),
]


@pytest.mark.parametrize(("url", "reason"), REFUSED, ids=[u for u, _ in REFUSED])
def test_policy_refuses_non_public_targets(url, reason):
    assert reason in refusal(url)


def test_octal_dotted_quad_is_refused_whoever_rejects_it():
    # httpx itself already rejects leading-zero octets; either way the URL must never be fetched.
    reason = refusal("http://0177.0.0.1/")
    assert "non-canonical" in reason or "malformed" in reason


def test_public_addresses_pass_and_are_pinned():
    target = asyncio.run(UrlPolicy().resolve("http://93.184.216.34:8080/a?b=1#frag"))
    assert [str(a) for a in target.addresses] == ["93.184.216.34"]
    assert target.port == 8080 and str(target.url) == "http://93.184.216.34:8080/a?b=1"
    assert address_problem(target.addresses[0]) is None

    calls: list[str] = []
    policy = UrlPolicy(resolver=fixed_resolver({"news.example": ["93.184.216.34", "2606:2800:220:1::1"]}, calls))
    target = asyncio.run(policy.resolve("https://News.Example./story"))
    assert target.host == "news.example" and target.port == 443
    assert [str(a) for a in target.addresses] == ["93.184.216.34", "2606:2800:220:1::1"]
    assert calls == ["news.example"]


def test_a_name_is_refused_when_any_of_its_addresses_is_private():
    policy = UrlPolicy(resolver=fixed_resolver({"mixed.example": ["93.184.216.34", "10.1.2.3"],
                                                "inner.example": ["192.168.7.7"]}))
    assert "mixed.example resolves to 10.1.2.3" in refusal("http://mixed.example/", policy)
    assert "inner.example resolves to 192.168.7.7, which is not a public address (private)" in refusal(
        "http://inner.example/", policy)
    assert "could not resolve" in refusal("http://unknown.example/", policy)


def test_system_dns_name_resolving_to_loopback_is_refused():
    out = subprocess.run(["getent", "hosts", "localhost"], capture_output=True, text=True).stdout.split()
    assert out and out[0] in ("127.0.0.1", "::1"), f"unexpected /etc/hosts entry for localhost: {out}"
    assert f"localhost resolves to {out[0]}" in refusal("http://localhost:8080/")


def test_allow_list_entries_and_their_limits():
    allow = AllowList.parse("127.0.0.1:8080, 10.0.0.0/8 [::1]:9000 wiki.corp *.intranet.example 169.254.0.0/16")
    policy = UrlPolicy(allow, resolver=fixed_resolver({"wiki.corp": ["10.9.9.9"], "localhost": ["127.0.0.1"],
                                                       "docs.intranet.example": ["172.20.0.4"],
                                                       "other.corp": ["172.20.0.5"]}))
    for url in ("http://127.0.0.1:8080/", "http://localhost:8080/", "http://[::ffff:127.0.0.1]:8080/",
                "http://10.200.3.4/", "http://[::1]:9000/", "http://wiki.corp/", "http://docs.intranet.example/"):
        asyncio.run(policy.resolve(url))  # allowed: no exception
    target = asyncio.run(policy.resolve("http://[::ffff:127.0.0.1]:8080/"))
    assert [str(a) for a in target.addresses] == ["127.0.0.1"]  # connect to the plain IPv4 address
    assert "port 8081" in refusal("http://127.0.0.1:8081/", policy)  # port-qualified entry
    assert "loopback" in refusal("http://[::1]:9001/", policy)
    assert "private" in refusal("http://other.corp/", policy)
    assert "metadata" in refusal("http://169.254.169.254/", policy)  # never allowed, even inside an entry
    assert "non-canonical" in refusal("http://2130706433:8080/", policy)  # encodings stay refused
    for bad in ("[::1", "host:port", "0x7f.1", "127.0.0.1:99999", "a b/c"):
        with pytest.raises(ValueError):
            AllowList.parse([bad])


def test_allow_list_canonical_form_names_the_list_not_its_spelling():
    # The crawl cache keys pages by this form: equal lists share entries, any other list gets its own.
    spec = "127.0.0.1:8080, 10.0.0.0/8 [::1]:9000 WIKI.corp. *.intranet.example 10.1.2.3/8"
    assert AllowList.parse(spec).canonical() == "*.intranet.example,10.0.0.0/8,127.0.0.1/32:8080,[::1/128]:9000,wiki.corp"
    assert AllowList.parse("*.intranet.example wiki.corp [::1]:9000 10.0.0.0/8 127.0.0.1:8080").canonical() == \
        AllowList.parse(spec).canonical()
    assert AllowList.parse("127.0.0.1").canonical() != AllowList.parse("127.0.0.1:8080").canonical()
    assert AllowList.parse("").canonical() == "" and AllowList().canonical() == ""


def test_syntax_only_check_refuses_local_names():
    # Where no DNS check follows (Jina reader), local names and non-public literals are refused on sight.
    policy = UrlPolicy()
    for url in ("http://localhost/", "http://db.localhost/", "http://printer.local/", "http://api.internal/",
                "http://10.0.0.1/"):
        with pytest.raises(URLRefused):
            policy.check_syntax(url)
    assert policy.check_syntax("https://example.org/a#b")[1:] == ("example.org", 443)
    allowed = UrlPolicy(AllowList.parse("api.internal"))
    assert allowed.check_syntax("http://api.internal/x")[1] == "api.internal"


@pytest.fixture(scope="module")
def site():
    with DemoSite() as s:
        yield s


def hits(site: DemoSite, path: str) -> int:
    return httpx.get(f"{site.url}/_stats", timeout=5).json().get(path, 0)


def fetch(site: DemoSite, url: str, resolver=None) -> object:
    async def run():
        policy = UrlPolicy(AllowList.parse(f"127.0.0.1:{site.port}"), resolver=resolver)
        fetcher = PageFetcher(policy, FetchLimits(timeout_s=5, max_redirects=5))
        try:
            return await fetcher.fetch(url)
        finally:
            await fetcher.aclose()

    return asyncio.run(run())


def test_connection_goes_to_the_checked_address_with_the_original_host(site):
    # No DNS server knows atlas.test: the request can only have reached the site through the pinned address,
    # and the resolver is asked once, so a second (rebinding) answer could never be used.
    calls: list[str] = []
    answers = iter([["127.0.0.1"], ["169.254.169.254"]])

    async def rebinding(host: str, port: int) -> list[str]:
        calls.append(host)
        return next(answers)

    result = fetch(site, f"http://atlas.test:{site.port}/headers", rebinding)
    assert result.ok, result.error
    assert f'"host": "atlas.test:{site.port}"' in result.text
    assert calls == ["atlas.test"]


def test_redirects_to_forbidden_targets_are_refused(site):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    other = listener.getsockname()[1]
    try:
        for target in (f"http://127.0.0.1:{other}/", f"http://localhost:{other}/", f"http://[::1]:{site.port}/",
                       "http://169.254.169.254/latest/", "http://2130706433/", "file:///etc/passwd"):
            before = hits(site, "/redirect")
            result = fetch(site, f"{site.url}/redirect?to={target}")
            assert result.status == "refused", (target, result)
            assert "redirected to" in result.error and "refused" in result.error
            assert hits(site, "/redirect") == before + 1  # the allowed first hop was fetched
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected to the forbidden port
    finally:
        listener.close()
    ok = fetch(site, f"{site.url}/redirect?to=/marrowgate.html")
    assert ok.ok and "212,000" in ok.text and ok.meta["redirects"] == 1


@pytest.fixture(scope="module")
def guarded_server(site, tmp_path_factory):
    """A crawl server with no allow-list at all, as deployed by default."""
    port = free_port()
    env = {"CRAWL_PAGE_ALLOW": "", "CRAWL_CACHE": "off", "SUMMARY_OPENAI_API_BASE_URL": "", "JINA_API_KEY": "",
           "AFM_METRICS_DB": str(tmp_path_factory.mktemp("metrics") / "metrics.sqlite"),
           "AFM_SERVER_TOKEN": "", "CRAWL_MAX_URLS": "20"}
    with ServerProcess(["-m", "afm.servers.crawl_server", "--port", str(port)], port, env=env) as server:
        yield server


def test_server_without_allow_list_refuses_local_targets(site, guarded_server):
    p = site.port
    urls = [f"http://127.0.0.1:{p}/veltria.html", f"http://localhost:{p}/veltria.html",
            f"http://2130706433:{p}/veltria.html", f"http://0x7f.1:{p}/veltria.html", f"http://[::1]:{p}/",
            f"http://[::ffff:127.0.0.1]:{p}/veltria.html", "http://10.1.2.3/", "http://169.254.169.254/latest/",
            "ftp://example.com/", "file:///etc/passwd"]
    before = hits(site, "/veltria.html")
    r = httpx.post(f"{guarded_server.url}/crawl_page", json={"urls": urls, "summary_type": "none"}, timeout=30)
    assert r.status_code == 200
    data = r.json()
    assert data["success"] is False
    assert [page["status"] for page in data["pages"]] == ["refused"] * len(urls)
    for i, url in enumerate(urls, start=1):
        assert f"Page {i} [{url}]: [Page content not accessible: refused: " in data["obs"]
    assert hits(site, "/veltria.html") == before  # the site was never contacted
    assert httpx.get(f"{guarded_server.url}/health", timeout=5).status_code == 200


def https_site(tmp_path, name: str):
    """An HTTPS demo site in a thread with a self-signed certificate for ``name``; returns (server, port, cafile)."""
    import ssl
    import threading

    from afm.servers.demo_site import make_server

    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", f"/CN={name}",
                    "-addext", f"subjectAltName=DNS:{name}"], check=True, capture_output=True)
    server = make_server()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1], str(cert)


def test_https_pinned_connection_still_verifies_the_certificate_name(tmp_path):
    # The request goes to the pinned 127.0.0.1, but TLS must check the certificate against the URL's host name.
    from afm.servers.fetch import tls_context

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    server, port, cafile = https_site(tmp_path, "atlas.test")
    try:
        async def run(name: str):
            policy = UrlPolicy(AllowList.parse(f"127.0.0.1:{port}"),
                               resolver=fixed_resolver({name: ["127.0.0.1"]}))
            fetcher = PageFetcher(policy, FetchLimits(timeout_s=5), verify=tls_context(cafile))
            try:
                return await fetcher.fetch(f"https://{name}:{port}/veltria.html")
            finally:
                await fetcher.aclose()

        good = asyncio.run(run("atlas.test"))
        assert good.ok, good.error
        assert "Its capital and largest city is Marrowgate" in good.text
        wrong = asyncio.run(run("other.test"))  # same server and address, certificate names another host
        assert not wrong.ok and "CERTIFICATE_VERIFY_FAILED" in wrong.error
    finally:
        server.shutdown()
        server.server_close()
