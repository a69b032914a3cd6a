"""Malformed request bodies against every server, as real processes on 127.0.0.1: each gets a JSON 4xx (never a
500, never a dropped connection) and the server keeps answering. The search, crawl and wiki servers share
``afm.servers.body``; the demo site takes no bodies (405)."""

from __future__ import annotations

import json

import httpx
import pytest

from afm.common.procs import ServerProcess, free_port
from afm.servers.demo_data import write_demo_corpora
from afm.servers.demo_site import DemoSite

ROUTES = {"search": "/search", "crawl": "/crawl_page", "wiki": "/retrieve"}
# One body that is valid for every route (each ignores the others' fields): the server is checked with it after
# every malformed one.
VALID = {"q": "Petra Lund", "num": 2, "urls": ["not a url"], "queries": ["Petra Lund"], "summary_type": "none"}


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("malformed")
    corpora = write_demo_corpora(tmp / "corpora", "http://demo.invalid")
    common = {"AFM_METRICS_DB": str(tmp / "metrics.sqlite"), "AFM_SERVER_TOKEN": ""}
    specs = {
        "search": (["-m", "afm.servers.search_server", "--corpus", str(corpora.search), "--cache", "off"],
                   {"WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "auto", "WEB_SEARCH_INDEX_DIR": ""}),
        "crawl": (["-m", "afm.servers.crawl_server", "--cache", "off"],
                  {"SUMMARY_OPENAI_API_BASE_URL": "", "UNI_API_URLS": "", "CRAWL_PAGE_ALLOW": ""}),
        "wiki": (["-m", "afm.servers.wiki_server", "--corpus", str(corpora.wiki), "--index-dir", str(tmp / "wiki")],
                 {"WIKI_RETRIEVER": "", "WIKI_INDEX_DIR": "", "WIKI_TOPK": ""}),
    }
    procs = {}
    try:
        for name, (argv, env) in specs.items():
            port = free_port()
            procs[name] = ServerProcess([*argv, "--port", str(port)], port, env={**common, **env}).start()
        with DemoSite() as site:
            yield {**{n: p.url + ROUTES[n] for n, p in procs.items()}, "demo_site": site.url}
    finally:
        for p in procs.values():
            p.stop()


def deep(depth: int, opener: bytes = b"[") -> bytes:
    return opener * depth


# (id, request keyword arguments for httpx.post, status expected from search/crawl/wiki)
MALFORMED = [
    ("deep-list", {"content": deep(50_000)}, 400),  # under every size cap (search: 64 KiB)
    ("deep-list-closed", {"content": deep(20_000) + b"]" * 20_000}, 400),
    ("deep-object", {"content": deep(10_000, b'{"a":')}, 400),
    ("deep-in-a-field", {"content": b'{"q": "x", "urls": ' + deep(30_000) + b"}"}, 400),
    ("deep-chunked", {"content": iter([deep(10_000)] * 3)}, 400),  # no Content-Length
    ("invalid-utf8", {"content": b'{"q": "\xff\xfe", "urls": ["\xff"], "queries": ["\xff"]}'}, 400),
    ("latin1-declared", {"content": '{"q": "café"}'.encode("latin-1"),
                         "headers": {"content-type": "application/json; charset=latin-1"}}, 400),
    ("lone-surrogate", {"content": b'{"q": "\\ud800", "urls": ["http://e.org/\\udfff"], "queries": ["\\ud800"]}'}, 400),
    ("huge-integer", {"content": b'{"q": "x", "num": ' + b"7" * 5000 + b', "urls": ' + b"7" * 5000
                      + b', "queries": ["x"], "topk": ' + b"7" * 5000 + b"}"}, 400),
    ("empty", {"content": b""}, 400),
    ("whitespace", {"content": b" \n\t "}, 400),
    ("truncated", {"content": b'{"q": "x", "urls": ["http://e.org"'}, 400),
    ("form-urlencoded", {"data": {"q": "x", "urls": "http://e.org"}}, 400),
    ("multipart", {"files": {"q": ("q.txt", b"x")}}, 400),
    ("xml", {"content": b"<q>x</q>", "headers": {"content-type": "application/xml"}}, 400),
    ("null", {"content": b"null"}, 422),
    ("string", {"content": b'"x"'}, 422),
    ("list", {"content": b"[1, 2]"}, 422),
    ("deep-but-parsable", {"content": deep(900) + b"]" * 900}, 422),
    ("wrong-types", {"json": {"q": {"a": 1}, "num": "many", "urls": {"a": 1}, "queries": "x", "topk": [1],
                              "summary_type": 3, "chunk_size": "big"}}, 422),
    ("huge-float", {"content": b'{"q": "x", "num": 1e999, "urls": ["http://e.org"], "chunk_size": 1e999, '
                               b'"queries": ["x"], "topk": 1e999}'}, 422),
    ("nan", {"content": b'{"q": "x", "num": NaN, "urls": ["http://e.org"], "chunk_size": NaN, "queries": ["x"], '
                        b'"topk": NaN}'}, 422),
    ("out-of-range", {"json": {"q": "x", "num": 10 ** 30, "urls": ["http://e.org"], "chunk_size": -1,
                               "queries": ["x"], "topk": 10 ** 30}}, 422),
]


@pytest.mark.parametrize("server", ["search", "crawl", "wiki"])
@pytest.mark.parametrize(("kwargs", "status"), [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_body_gets_a_json_4xx_and_the_server_stays_up(servers, server, kwargs, status):
    url = servers[server]
    r = httpx.post(url, timeout=30, **kwargs)
    assert r.status_code == status, (server, r.status_code, r.text[:300])
    body = r.json()
    assert body["error"] in ("invalid JSON", "empty request body", "invalid request"), body
    assert len(r.text) < 5000  # the error never echoes a huge body
    ok = httpx.post(url, json=VALID, timeout=30)
    assert ok.status_code == 200, ok.text[:300]


@pytest.mark.parametrize("server", ["search", "crawl", "wiki"])
def test_json_sent_with_another_content_type_is_read(servers, server):
    # curl -d sends application/x-www-form-urlencoded; a JSON body is still JSON (the content type is not checked).
    r = httpx.post(servers[server], content=json.dumps(VALID).encode(),
                   headers={"content-type": "application/x-www-form-urlencoded"}, timeout=30)
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("server", ["search", "wiki"])
def test_surrogate_pairs_are_real_characters(servers, server):
    r = httpx.post(servers[server], content=b'{"q": "Petra \\ud83d\\ude00", "queries": ["Petra \\ud83d\\ude00"]}',
                   timeout=30)
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_demo_site_refuses_bodies_with_405(servers, method):
    site = servers["demo_site"]
    r = httpx.request(method, site + "/veltria.html", content=deep(50_000), timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "GET" and r.json()["error"] == "method not allowed"
    bad = httpx.get(site + "/slow?s=abc", timeout=10)
    assert bad.status_code == 400 and bad.json()["error"] == "bad query parameter"
    health = httpx.get(site + "/health", timeout=10)
    assert health.status_code == 200 and health.json()["status"] == "healthy"
