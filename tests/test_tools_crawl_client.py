"""The crawl_page tool against a real crawl server (and against broken ones): goal fields, failures as text."""

from __future__ import annotations

import asyncio

import pytest

from afm.common.procs import ServerProcess, free_port
from afm.offline.openai_standin import StandIn
from afm.servers.demo_site import DemoSite
from afm.tools.base import ToolContext
from afm.tools.crawl_page import CrawlPageTool, default_crawl_url
from afm.tools.registry import build_tool

TRAJECTORY = ("<think>First I look for the observatory.</think>\n<web_search>old query</web_search>\n\n"
              "<observation>\n...\n</observation>\n\n<think>The observatory page should name its first "
              "director.</think>\n<web_search>National Observatory of Veltria first director</web_search>\n\n"
              "<observation>\n...\n</observation>\n\n<think>Open the observatory page.</think>\n<crawl_page>")
QUESTION = "Who was the first director of the observatory in the capital of Veltria?"


@pytest.fixture(scope="module")
def site():
    with DemoSite() as s:
        yield s


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply="Petra Lund was the first director.") as s:
        yield s


@pytest.fixture(scope="module")
def server(site, llm, tmp_path_factory):
    port = free_port()
    env = {"CRAWL_PAGE_ALLOW": f"127.0.0.1:{site.port}", "CRAWL_CACHE": "off", "JINA_API_KEY": "",
           "AFM_METRICS_DB": str(tmp_path_factory.mktemp("metrics") / "metrics.sqlite"),
           "AFM_SERVER_TOKEN": "", "SUMMARY_OPENAI_API_BASE_URL": llm.base_url, "SUMMARY_MAX_RETRIES": "0",
           "CRAWL_SUMMARY_TYPE": "none", "CRAWL_FETCH_TIMEOUT": "10"}
    with ServerProcess(["-m", "afm.servers.crawl_server", "--port", str(port)], port, env=env) as s:
        yield s


def run(tool: CrawlPageTool, body: str, ctx: ToolContext | None = None):
    """One call in a fresh event loop, as each ``asyncio.run`` of a host would make it (the tool is reused)."""
    return asyncio.run(tool.call(body, ctx or ToolContext(question=QUESTION, text=TRAJECTORY)))


def test_crawls_through_the_server(site, server):
    tool = build_tool("crawl_page", {"url": f"{server.url}/crawl_page", "timeout": 20})
    assert isinstance(tool, CrawlPageTool)
    url = site.page_url("national-observatory")
    result = run(tool, f" {url} | {site.url}/plain.txt ")
    assert result.status == "ok"
    assert result.text.startswith(f"Page 1 [{url}] Content:\n")
    assert "Its first director was the astronomer Petra Lund" in result.text
    assert f"Page 2 [{site.url}/plain.txt] Content:" in result.text
    assert [p["status"] for p in result.meta["pages"]] == ["ok", "ok"] and result.latency_s > 0
    again = run(tool, url)  # the same tool from another event loop
    assert again.status == "ok" and "Petra Lund" in again.text
    asyncio.run(tool.aclose())


def test_sends_the_goal_from_the_context(site, server, llm):
    llm.reset()
    tool = CrawlPageTool({"url": f"{server.url}/crawl_page", "summary_type": "once"})
    result = run(tool, site.page_url("petra-lund"))
    assert result.status == "ok"
    assert result.text == f"Page 1 [{site.page_url('petra-lund')}] Summary:\nPetra Lund was the first director."
    prompt = llm.requests()[0]["body"]["messages"][-1]["content"]
    assert QUESTION in prompt
    assert "National Observatory of Veltria first director" in prompt and "old query" not in prompt
    assert "Open the observatory page." in prompt and "First I look" not in prompt
    payload = tool.payload("a | b", ToolContext())
    assert payload == {"urls": ["a", "b"], "task": "", "web_search_query": "", "think_content": "",
                       "summary_type": "once"}


def test_empty_body_is_an_error_without_a_request():
    result = run(CrawlPageTool({"url": "http://127.0.0.1:9/crawl_page"}), "  |  ")
    assert result.status == "error" and result.text.startswith("[crawl_page failed] No URL given.")


def test_failed_pages_come_back_as_an_error_observation(server):
    tool = CrawlPageTool({"url": f"{server.url}/crawl_page"})
    refused = run(tool, "ftp://example.com/file | http://169.254.169.254/latest/")
    assert refused.status == "error"
    assert "Page 1 [ftp://example.com/file]: [Page content not accessible: refused: scheme 'ftp'" in refused.text
    assert "cloud metadata" in refused.text
    assert refused.meta["reason"] == "no_page_read"
    invalid = run(tool, "the observatory page")  # answered 200 with success false, as the original server did
    assert invalid.status == "error" and invalid.meta["reason"] == "no_valid_url"
    assert invalid.text.startswith("Page 1 [the observatory page]: [Page content not accessible: not a URL")
    assert invalid.text.endswith("Give one or more full http:// or https:// URLs separated by |.")


def test_server_down_is_an_error():
    port = free_port()
    result = run(CrawlPageTool({"url": f"http://127.0.0.1:{port}/crawl_page", "timeout": 5}), "http://e.org/")
    assert result.status == "error"
    assert result.text.startswith(f"[crawl_page unavailable] The crawl server at http://127.0.0.1:{port}/crawl_page "
                                  "could not be reached")


def test_slow_server_is_a_timeout(site, server):
    result = run(CrawlPageTool({"url": f"{server.url}/crawl_page", "timeout": 0.5}), f"{site.url}/slow?s=3")
    assert result.status == "timeout" and result.text.startswith("[crawl_page timed out] The crawl server did not")
    assert "0.5s" in result.text
    assert result.latency_s < 2.5


@pytest.mark.parametrize(("reply", "expected"), [
    ({"raw": "<html>proxy error</html>"}, "sent an unreadable answer (answer is not JSON"),
    ({"content": "a chat reply, not a crawl"}, "sent an unreadable answer (no 'obs' observation text)"),
    ({"status": 503, "content": "overloaded"}, "The crawl server failed (HTTP 503: "),
], ids=["not-json", "wrong-shape", "http-503"])
def test_bad_responses_are_errors(llm, reply, expected):
    # The stand-in plays a broken crawl server: its chat endpoint answers whatever is queued.
    llm.reset()
    llm.queue(reply)
    result = run(CrawlPageTool({"url": f"{llm.base_url}/chat/completions"}), "http://e.org/")
    assert result.status == "error" and expected in result.text
    assert len(llm.requests()) == 1  # retries default to 0: a crawl is never sent twice


def test_config(monkeypatch):
    monkeypatch.setenv("SERVER_HOST", "10.0.0.5")
    monkeypatch.setenv("CRAWL_PAGE_PORT", "9100")
    assert default_crawl_url() == "http://10.0.0.5:9100/crawl_page"
    tool = CrawlPageTool({"token": "secret", "chunk_size": 4000, "summary_type": "chunk"})
    assert tool.url == "http://10.0.0.5:9100/crawl_page" and tool.client.timeout == 150
    assert tool.describe()["config"]["token"] == "<set>"
    assert tool.payload("http://e.org", ToolContext())["chunk_size"] == 4000
    with pytest.raises(ValueError, match="summary_type"):
        CrawlPageTool({"summary_type": "everything"})
