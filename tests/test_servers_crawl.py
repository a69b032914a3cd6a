"""Crawl server end to end: the demo site and the crawl server as real processes, the StandIn as summary model."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import httpx
import pytest
from encoded_http import EncodedSite, gzip_bomb

from afm.common.kvcache import open_cache
from afm.common.procs import ServerProcess, free_port
from afm.demo_content.web import DEMO_DOCUMENTS
from afm.offline.openai_standin import StandIn
from afm.servers.crawl_server import Crawler, CrawlRequest, CrawlSettings, normalise_url, split_urls
from afm.servers.demo_site import BOILERPLATE_MARKERS, DemoSite
from afm.servers.fetch import FetchLimits, PageFetcher, body_to_text
from afm.servers.ssrf import AllowList, UrlPolicy
from afm.servers.summarize import NO_RELEVANT, Summarizer, SummaryBudget, cut_text, split_chunks
from afm.servers.worker_metrics import WorkerMetrics

DOCS = {d.slug: d for d in DEMO_DOCUMENTS}
PAGE_TEXT = re.compile(r"<<<PAGE\n(.*?)\nPAGE>>>", re.DOTALL)


@pytest.fixture(scope="module")
def site():
    with DemoSite() as s:
        yield s


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply="Default summary.", model="standin-summary") as s:
        yield s


def crawl_server(tmp_path, env: dict[str, str]):
    port = free_port()
    base = {"CRAWL_CACHE": str(tmp_path / "crawl.sqlite"), "AFM_METRICS_DB": str(tmp_path / "metrics.sqlite"),
            "JINA_API_KEY": "", "AFM_SERVER_TOKEN": "",
            "SUMMARY_OPENAI_API_BASE_URL": "", "CRAWL_SUMMARY_TYPE": "once"}
    return ServerProcess(["-m", "afm.servers.crawl_server", "--port", str(port)], port, env={**base, **env})


@pytest.fixture(scope="module")
def server(site, llm, tmp_path_factory):
    """With a summary model; short fetch and model timeouts so the failure tests stay fast. The fetch's 15 s is room
    for a busy machine to read and extract the first MB of the 20 MB page: 1.5 s failed at a load of 5-14, 6 s with
    three CPU-bound jobs on 2 cores."""
    env = {"CRAWL_PAGE_ALLOW": f"127.0.0.1:{site.port}", "SUMMARY_OPENAI_API_BASE_URL": llm.base_url,
           "SUMMARY_OPENAI_API_KEY": "sk-test", "SUMMARY_MODEL": "standin-summary", "SUMMARY_TIMEOUT": "1",
           "SUMMARY_MAX_RETRIES": "1", "SUMMARY_BACKOFF": "0.05", "SUMMARY_MAX_INPUT_CHARS": "5000",
           "SUMMARY_MAX_CHUNKS": "8", "CRAWL_FETCH_TIMEOUT": "15", "CRAWL_MAX_BYTES": "1000000",
           "CRAWL_MAX_URLS": "10"}
    with crawl_server(tmp_path_factory.mktemp("with-llm"), env) as s:
        yield s


@pytest.fixture(scope="module")
def plain_server(site, tmp_path_factory):
    """Without a summary model; a short whole-request limit and a long fetch limit (for the 504 test)."""
    env = {"CRAWL_PAGE_ALLOW": f"127.0.0.1:{site.port}", "CRAWL_REQUEST_TIMEOUT": "2",
           "CRAWL_FETCH_TIMEOUT": "30", "CRAWL_TEXT_CHARS": "2000"}
    with crawl_server(tmp_path_factory.mktemp("no-llm"), env) as s:
        yield s


@pytest.fixture
def model(llm):
    llm.reset()
    return llm


def post(server, body: dict | None = None, **kw) -> httpx.Response:
    kw.setdefault("timeout", 30)
    return httpx.post(f"{server.url}/crawl_page", json=body, **kw) if body is not None else \
        httpx.post(f"{server.url}/crawl_page", **kw)


def crawl(server, **body) -> dict:
    r = post(server, body)
    assert r.status_code == 200, r.text
    return r.json()


def site_hits(site, path: str) -> int:
    return httpx.get(f"{site.url}/_stats", timeout=5).json().get(path, 0)


def goal(tag: str) -> dict[str, str]:
    """A goal no other test uses, so summary-cache entries never leak between tests."""
    u = uuid.uuid4().hex[:8]
    return {"task": f"Task {tag} {u}: what is the capital of Veltria?", "web_search_query": f"veltria capital {u}",
            "think_content": f"I should find the capital city ({u})."}


def prompts(llm) -> list[str]:
    return [r["body"]["messages"][-1]["content"] for r in llm.requests()]


def test_extraction_keeps_the_article_and_drops_boilerplate(site, plain_server):
    slugs = ["veltria", "quillhaven", "national-observatory"]
    data = crawl(plain_server, urls=[site.page_url(s) for s in slugs], summary_type="none")
    assert data["success"] is True and data["summary_type"] == "none"
    blocks = data["obs"].split("\n\nPage ")
    assert len(blocks) == 3
    for i, (slug, block, page) in enumerate(zip(slugs, blocks, data["pages"], strict=True), start=1):
        assert block.removeprefix("Page ").startswith(f"{i} [{site.page_url(slug)}] Content:\n")
        for paragraph in DOCS[slug].paragraphs:
            assert paragraph in block
        for marker in BOILERPLATE_MARKERS:
            assert marker not in block
        assert page["status"] == "ok" and page["summary"] == "text" and page["chars"] > 100


def test_without_a_model_the_text_is_cut_and_the_observation_says_so(site, plain_server):
    data = crawl(plain_server, urls=f"{site.url}/huge?mb=0.2", **goal("no-llm"))
    page = data["pages"][0]
    assert page["summary"] == "no_llm" and page["chars"] > 150_000
    block = data["obs"]
    assert "Content:\n[Note: Not summarised: the crawl server has no summary model configured." in block
    assert f"of {page['chars']} characters" in block
    body = block.split("]\n", 1)[1]
    assert 1600 <= len(body) <= 2000 and body.startswith("# Ledger")


def test_once_mode_sends_one_goal_aware_prompt(site, server, model):
    model.rules({"match": "Marrowgate", "content": "The capital of Veltria is Marrowgate."})
    g = goal("once")
    data = crawl(server, urls=[site.page_url("veltria")], summary_type="once", **g)
    assert data["obs"] == f"Page 1 [{site.page_url('veltria')}] Summary:\nThe capital of Veltria is Marrowgate."
    assert data["pages"][0]["summary"] == "summary"
    requests = model.requests()
    assert len(requests) == 1
    body = requests[0]["body"]
    assert body["model"] == "standin-summary" and body["messages"][0]["role"] == "system"
    user = body["messages"][-1]["content"]
    for value in g.values():
        assert value in user
    page_text = PAGE_TEXT.search(user).group(1)
    for paragraph in DOCS["veltria"].paragraphs:
        assert paragraph in page_text
    assert not any(marker in user for marker in BOILERPLATE_MARKERS)
    assert NO_RELEVANT in user


def test_once_cuts_to_the_model_budget_and_page_sends_the_full_text(site, server, model):
    url = f"{site.url}/huge?mb=0.05"
    once = crawl(server, urls=[url], summary_type="once", **goal("budget"))
    full = crawl(server, urls=[url], summary_type="page", **goal("page"))
    chars = once["pages"][0]["chars"]
    assert chars > 40_000 and full["pages"][0]["chars"] == chars
    texts = [PAGE_TEXT.search(p).group(1) for p in prompts(model)]
    assert len(texts) == 2
    assert 4000 <= len(texts[0]) <= 5000 and "Summary of the first" in once["obs"]
    assert len(texts[1]) == chars and "[Note:" not in full["obs"]


def test_chunk_mode_summarises_each_part_then_merges(site, server, model):
    url = f"{site.url}/huge?mb=0.01"
    model.rules({"match": "Merge the notes", "content": "Merged ledger summary."},
                {"match": "Harbour ledger entry", "content": "Barrels were unloaded at Marrowgate pier."})
    g = goal("chunk")
    data = crawl(server, urls=[url], summary_type="chunk", chunk_size=3000, **g)
    assert data["obs"] == f"Page 1 [{url}] Summary:\nMerged ledger summary."
    raw = httpx.get(url, timeout=10)
    expected = split_chunks(body_to_text(raw.content, raw.headers["content-type"], url), 3000)
    assert len(expected) >= 3
    texts = prompts(model)
    parts = [t for t in texts if "Merge the notes" not in t]
    merges = [t for t in texts if "Merge the notes" in t]
    assert len(parts) == len(expected) and len(merges) == 1
    by_index = {int(re.search(r"Text of part (\d+) of (\d+)", t).group(1)): t for t in parts}
    for i, chunk in enumerate(expected, start=1):
        assert PAGE_TEXT.search(by_index[i]).group(1) == chunk
        assert f"part {i} of {len(expected)}" in by_index[i]
        assert all(value in by_index[i] for value in g.values())
    assert merges[0].count("Barrels were unloaded") == len(expected) and g["task"] in merges[0]


def test_chunk_mode_caps_parts_and_skips_merge_when_nothing_is_relevant(site, server, model):
    model.set_default(NO_RELEVANT)
    data = crawl(server, urls=[f"{site.url}/huge?mb=0.05"], summary_type="chunk", chunk_size=2000,
                 **goal("cap"))
    texts = prompts(model)
    assert len(texts) == 8 and not any("Merge the notes" in t for t in texts)  # SUMMARY_MAX_CHUNKS=8
    assert "Summary:\nNo relevant information\n[Note: only the first 8 of " in data["obs"]


@pytest.mark.parametrize(("failure", "reason"), [({"status": 503}, "HTTP 503"),
                                                 ({"raw": "<html>bad gateway</html>"}, "answered with a malformed response"),
                                                 ({"delay": 2.5}, "timed out after 1 s")],
                         ids=["503", "garbage", "slow"])
def test_model_failure_falls_back_to_text_with_a_note(site, server, model, failure, reason):
    model.queue(failure, failure)  # SUMMARY_MAX_RETRIES=1: two attempts, both fail
    g = goal("fail")
    url = site.page_url("marrowgate")
    data = crawl(server, urls=[url], summary_type="once", **g)
    assert data["success"] is True and data["pages"][0]["summary"] == "fallback"
    assert f"Page 1 [{url}] Content:\n[Note: Not summarised: the summary model failed ({reason}" in data["obs"]
    assert "after 2 attempt(s)" in data["obs"]
    assert all(p in data["obs"] for p in DOCS["marrowgate"].paragraphs)
    assert len(model.requests()) == 2
    # A fallback is not cached: the same goal asks the (now healthy) model again.
    again = crawl(server, urls=[url], summary_type="once", **g)
    assert again["obs"] == f"Page 1 [{url}] Summary:\nDefault summary." and len(model.requests()) == 3


def test_cache_hits_and_a_new_goal_resummarises_without_refetching(site, server, model):
    url = f"{site.page_url('petra-lund')}?v={uuid.uuid4().hex}"
    path = "/petra-lund.html"
    g1, g2 = goal("cache-1"), goal("cache-2")
    start = site_hits(site, path)
    before = httpx.get(f"{server.url}/metrics", timeout=5).json()  # the server is shared by this module's tests
    first = crawl(server, urls=[url], **g1)
    assert first["pages"][0]["cached"] is False and site_hits(site, path) == start + 1
    repeat = crawl(server, urls=[url], **g1)
    assert repeat["obs"] == first["obs"] and repeat["pages"][0]["cached"] is True
    assert repeat["pages"][0]["summary"] == "cached" and len(model.requests()) == 1
    other = crawl(server, urls=[url], **g2)
    assert other["pages"][0]["cached"] is True and other["pages"][0]["summary"] == "summary"
    assert len(model.requests()) == 2 and g2["think_content"] in prompts(model)[1]
    assert site_hits(site, path) == start + 1  # fetched once for three requests
    metrics = httpx.get(f"{server.url}/metrics", timeout=5).json()
    # the repeat hit both caches; the new goal hit only the page cache
    assert metrics["summary_cache_hits"] - before.get("summary_cache_hits", 0) == 1
    assert metrics["fetch_cache_hits"] - before.get("fetch_cache_hits", 0) == 2
    assert metrics["summary_model"] == "standin-summary" and metrics["cache"].startswith("sqlite://")


def test_caps_on_size_redirects_and_time(site, server):
    start = time.monotonic()
    huge, loop, chain, slow = (f"{site.url}/huge?mb=20", f"{site.url}/redirect-loop",
                               f"{site.url}/redirect-chain?n=9", f"{site.url}/slow?s=120")
    data = crawl(server, urls=[huge, loop, chain, slow], summary_type="none")
    elapsed = time.monotonic() - start
    pages = {p["url"]: p for p in data["pages"]}
    assert pages[huge]["status"] == "ok" and pages[huge]["truncated"] is True
    assert 500_000 < pages[huge]["chars"] <= 1_000_000
    assert "[Note: the page is larger than 1000000 bytes; only its beginning was read" in data["obs"]
    assert "redirect loop" in pages[loop]["error"]
    assert pages[chain]["error"] == "too many redirects (more than 5)"
    assert pages[slow]["status"] == "timeout" and pages[slow]["error"] == "timed out after 15 s"
    assert elapsed < 100  # fetched concurrently; the slow host is cut at 15 s, not waited for its 120


def test_content_types(site, server):
    urls = {"plain": f"{site.url}/plain.txt", "json": f"{site.url}/json", "bin": f"{site.url}/binary",
            "pdf": f"{site.url}/report.pdf", "404": f"{site.url}/missing",
            "bad-redirect": f"{site.url}/redirect?to=http://[::1"}
    data = crawl(server, urls=list(urls.values()), summary_type="none")
    pages = {p["url"]: p for p in data["pages"]}
    assert "The ferry from Marrowgate to Quillhaven leaves daily at 07:40" in data["obs"]
    assert '"population": 212000' in data["obs"]
    assert pages[urls["bin"]]["error"] == "not a text page (application/octet-stream)"
    assert pages[urls["pdf"]]["error"].startswith("not a text page (application/pdf)")
    assert pages[urls["404"]]["error"] == "HTTP 404 Not Found" and pages[urls["404"]]["status"] == "error"
    assert "Invalid URL in location header" in pages[urls["bad-redirect"]]["error"]


def test_url_forms_numbering_and_the_per_request_cap(site, server):
    v, q = site.page_url("veltria"), site.page_url("quillhaven")
    data = crawl(server, urls=f" [Veltria]({v}) | <{q}> | {v} | see https://example | not a url ",
                 summary_type="none")
    assert [p["url"] for p in data["pages"]] == [v, q, "https://example", "not a url"]
    assert f"Page 1 [{v}] Content:" in data["obs"] and f"Page 2 [{q}] Content:" in data["obs"]
    assert data["pages"][2]["status"] == "refused"  # a bare name, no DNS answer
    assert "Page 4 [not a url]: [Page content not accessible: not a URL" in data["obs"]
    many = [f"{site.url}/plain.txt?n={i}" for i in range(12)]
    data = crawl(server, urls=many, summary_type="none")
    assert [p["status"] for p in data["pages"]] == ["ok"] * 10 + ["skipped"] * 2
    assert "Page 12 [" in data["obs"] and "at most 10 URLs per request" in data["obs"]


def test_url_helpers():
    assert split_urls("a | b|a||") == ["a", "b"] and split_urls(["x", " ", "x", "y"]) == ["x", "y"]
    assert split_urls("[A](http://e.org/a) | http://e.org/a | <http://e.org/b>") == ["[A](http://e.org/a)",
                                                                                   "<http://e.org/b>"]
    assert normalise_url("[t](https://e.org/p)") == "https://e.org/p"
    assert normalise_url("'<http://e.org/a?b=1>'") == "http://e.org/a?b=1"
    assert normalise_url("look at https://e.org/x.") == "https://e.org/x"
    assert normalise_url("ftp://e.org/f") == "ftp://e.org/f"  # kept so the policy explains the refusal
    assert normalise_url("e.org/page") is None and normalise_url("hello") is None
    assert cut_text("aaaaaaaaa bb ccc", 14) == ("aaaaaaaaa bb", True)  # at a word end near the limit
    assert cut_text("aaaa bbbbbbbbb", 10) == ("aaaa bbbbb", True)  # none near: a hard cut
    assert cut_text("short", 10) == ("short", False)
    assert split_chunks("p1 " * 10 + "\n\n" + "p2 " * 10, 40) == ["p1 " * 9 + "p1", "p2 " * 9 + "p2"]


@pytest.mark.parametrize(("kwargs", "status", "error"), [
    ({"json": {"urls": []}}, 400, "no URLs given"),
    ({"json": {"urls": " | "}}, 400, "no URLs given"),
    ({"json": {"task": "x"}}, 422, "invalid request"),
    ({"json": {"urls": 123}}, 422, "invalid request"),
    ({"json": {"urls": ["http://e.org"], "summary_type": "all"}}, 422, "invalid request"),
    ({"json": {"urls": ["http://e.org"], "chunk_size": 5}}, 422, "invalid request"),
    ({"json": ["http://e.org"]}, 422, "invalid request"),
    ({"content": b"{not json"}, 400, "invalid JSON"),
    ({"content": b""}, 400, "empty request body"),
    ({"content": b"x" * 10_000_000}, 413, "request body too large"),
], ids=["empty-list", "empty-string", "missing-urls", "wrong-type", "bad-mode", "bad-chunk", "not-object",
        "invalid-json", "empty-body", "10MB"])
def test_bad_input_gets_a_json_4xx(plain_server, kwargs, status, error):
    r = httpx.post(f"{plain_server.url}/crawl_page", timeout=30, **kwargs)
    assert r.status_code == status, r.text
    assert r.json()["error"] == error
    assert httpx.get(f"{plain_server.url}/health", timeout=5).status_code == 200


def test_non_url_items_are_answered_200_with_success_false_and_the_reasons(plain_server):
    # The original server's answer (200, success false, "No valid URL found"): its verl client reads any other
    # status as a server error.
    r = httpx.post(f"{plain_server.url}/crawl_page", json={"urls": "hello | world"}, timeout=10)
    assert r.status_code == 200
    data = r.json()
    assert data["success"] is False and data["error_message"].startswith("No valid URL found: hello: not a URL")
    assert data["obs"].startswith("Page 1 [hello]: [Page content not accessible: not a URL")
    assert [(p["url"], p["success"], p["status"]) for p in data["pages"]] == [("hello", False, "invalid"),
                                                                             ("world", False, "invalid")]
    long = "http://e.org/" + "a" * 500_000
    r = httpx.post(f"{plain_server.url}/crawl_page", json={"urls": [long]}, timeout=10)
    assert r.status_code == 200 and len(r.text) < 2000 and r.json()["success"] is False
    assert "longer than 4096 characters" in r.json()["obs"]


def test_whole_request_timeout_is_a_504_and_the_server_keeps_serving(site, plain_server):
    before = httpx.get(f"{plain_server.url}/metrics", timeout=5).json().get("request_timeouts", 0)  # absent until counted
    start = time.monotonic()
    r = post(plain_server, {"urls": [f"{site.url}/slow?s=4"], "summary_type": "none"})
    assert r.status_code == 504 and r.json()["error"] == "timeout"
    assert "CRAWL_REQUEST_TIMEOUT" in r.json()["detail"]
    assert time.monotonic() - start < 3.5
    ok = crawl(plain_server, urls=[site.page_url("tomas-ekwall")], summary_type="none")
    assert "won the Lantern Regatta five times" in ok["obs"]
    metrics = httpx.get(f"{plain_server.url}/metrics", timeout=5).json()
    assert metrics["request_timeouts"] == before + 1 and metrics["summary_model"] is None


def test_jina_reader_is_used_when_keyed(site):
    # The fetcher against a local stand-in for r.jina.ai (the demo site's /headers echoes what it was sent).
    async def run():
        policy = UrlPolicy(AllowList())
        fetcher = PageFetcher(policy, FetchLimits(timeout_s=5), jina_api_key="jina-test-key",
                              jina_base_url=f"{site.url}/headers?")
        try:
            return (await fetcher.fetch("https://news.example.org/story?id=7"),
                    await fetcher.fetch("http://127.0.0.1/admin"))
        finally:
            await fetcher.aclose()

    ok, refused = asyncio.run(run())
    assert ok.ok and ok.via == "jina", ok.error
    assert '"authorization": "Bearer jina-test-key"' in ok.text and '"x-retain-images": "none"' in ok.text
    assert '"_path": "/headers?/https://news.example.org/story?id=7"' in ok.text
    assert ok.final_url == "https://news.example.org/story?id=7"
    assert refused.status == "refused" and refused.via == "jina"  # literal loopback refused before Jina


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size (VmHWM) so far."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


def test_stacked_gzip_bombs_are_cut_while_they_stream(tmp_path):
    # The case: 978 bytes on the wire, 512 MiB decoded (Content-Encoding: gzip, gzip), two in one request.
    # Before, the server's peak memory grew by about 1 GiB per such page.
    with EncodedSite() as bombs:
        wire = gzip_bomb(512, layers=2)
        urls = [bombs.add(f"/bomb-{i}", wire, "gzip, gzip") for i in range(2)]
        warm = bombs.add("/warm", b"a small page " * 100)
        env = {"CRAWL_PAGE_ALLOW": f"127.0.0.1:{bombs.port}", "CRAWL_MAX_BYTES": "1000000", "CRAWL_CACHE": "off"}
        with crawl_server(tmp_path, env) as srv:
            assert crawl(srv, urls=[warm], summary_type="none")["success"] is True
            before = peak_rss_kib(srv.proc.pid)
            data = crawl(srv, urls=urls, summary_type="none")
            growth_mib = (peak_rss_kib(srv.proc.pid) - before) / 1024
    assert len(wire) < 1024
    for page in data["pages"]:
        assert page["status"] == "ok" and page["truncated"] is True and page["chars"] == 1_000_000
    assert data["obs"].count("[Note: the page is larger than 1000000 bytes; only its beginning was read") == 2
    # Two capped pages (1 MB each, held as bytes and text) and the decoder's 64 KiB steps; 200 MiB is a wide margin.
    assert growth_mib < 200, f"peak RSS grew by {growth_mib:.0f} MiB"


def test_the_policy_runs_before_the_cache_and_the_key_holds_the_allow_list(site, tmp_path):
    url = f"{site.page_url('quillhaven')}?policy={uuid.uuid4().hex}"
    path = "/quillhaven.html"
    start = site_hits(site, path)
    allowed = {"CRAWL_PAGE_ALLOW": f"127.0.0.1:{site.port},10.0.0.0/8"}
    with crawl_server(tmp_path, allowed) as a:  # every server here shares tmp_path/crawl.sqlite
        first = crawl(a, urls=[url], summary_type="none")
        assert first["pages"][0]["status"] == "ok" and first["pages"][0]["cached"] is False
        assert crawl(a, urls=[url], summary_type="none")["pages"][0]["cached"] is True
    assert site_hits(site, path) == start + 1
    # No allow-list: refused with the policy's reason, although the page sits in the shared cache.
    with crawl_server(tmp_path, {"CRAWL_PAGE_ALLOW": ""}) as b:
        refused = crawl(b, urls=[url], summary_type="none")
        metrics = httpx.get(f"{b.url}/metrics", timeout=5).json()
    page = refused["pages"][0]
    assert refused["success"] is False and page["status"] == "refused" and page["cached"] is False
    assert "not a public address (loopback) and is not allow-listed" in page["error"]
    assert "Quillhaven" not in refused["obs"] and metrics.get("fetch_cache_hits", 0) == 0
    # Another allow-list that also admits the page: its own entries, so a fetch rather than the other list's answer.
    with crawl_server(tmp_path, {"CRAWL_PAGE_ALLOW": "127.0.0.1"}) as c:
        other = crawl(c, urls=[url], summary_type="none")
    assert other["pages"][0]["status"] == "ok" and other["pages"][0]["cached"] is False
    assert site_hits(site, path) == start + 2
    # The first list written another way is the same list: its entry is found.
    with crawl_server(tmp_path, {"CRAWL_PAGE_ALLOW": f" 10.0.0.0/8  127.0.0.1:{site.port} "}) as d:
        same = crawl(d, urls=[url], summary_type="none")
    assert same["pages"][0]["cached"] is True and same["obs"] == first["obs"]
    assert site_hits(site, path) == start + 2


def test_a_cached_page_whose_redirect_now_resolves_to_a_refused_address_is_refused(site, tmp_path):
    # Same allow-list, but DNS moved a redirect hop: the cached page must not outlive the check of that hop.
    answers = {"moving.example": ["127.0.0.1"]}

    async def resolver(host: str, port: int) -> list[str]:
        return answers[host]

    async def run() -> list[dict]:
        settings = CrawlSettings(allow=f"127.0.0.1:{site.port}", limits=FetchLimits(timeout_s=10))
        policy = UrlPolicy(AllowList.parse(settings.allow), resolver=resolver)
        crawler = Crawler(settings, PageFetcher(policy, settings.limits), Summarizer(None, SummaryBudget()),
                          open_cache(str(tmp_path / "crawl.sqlite"), "crawl", 3600.0),
                          WorkerMetrics("crawl", db_path=tmp_path / "metrics.sqlite"))
        url = f"{site.url}/redirect?to=http://moving.example:{site.port}/veltria.html"
        req = CrawlRequest(urls=[url], summary_type="none")
        try:
            out = [(await crawler.crawl(req, [url]))["pages"][0]]
            out.append((await crawler.crawl(req, [url]))["pages"][0])
            answers["moving.example"] = ["10.1.2.3"]
            out.append((await crawler.crawl(req, [url]))["pages"][0])
            return out
        finally:
            await crawler.aclose()

    fetched, hit, moved = asyncio.run(run())
    assert fetched["status"] == "ok" and fetched["cached"] is False
    assert fetched["final_url"] == f"http://moving.example:{site.port}/veltria.html"
    assert hit["status"] == "ok" and hit["cached"] is True
    assert moved["status"] == "refused" and moved["cached"] is False
    assert "which is refused: moving.example resolves to 10.1.2.3, which is not a public address" in moved["error"]
