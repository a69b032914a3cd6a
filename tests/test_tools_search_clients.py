"""The web_search and wiki_search tools against real search/wiki servers (and a misbehaving fake server): exact
observation formats, and every failure turned into an explanatory observation."""

from __future__ import annotations

import asyncio
import re

import pytest
from fake_http import FakeHTTP

from afm.common.procs import ServerProcess, free_port
from afm.servers.demo_data import write_demo_corpora
from afm.tools.base import ToolContext
from afm.tools.registry import build_tool
from afm.tools.web_search import WebSearchTool, default_search_url, format_results
from afm.tools.wiki_search import WikiSearchTool, default_wiki_url

SITE = "http://demo.invalid"
TOKEN = "tool-test-token"
CTX = ToolContext(question="q")


def call(tool, body: str):
    return asyncio.run(tool.call(body, CTX))


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("servers")
    corpora = write_demo_corpora(tmp, SITE)
    env = {"WEB_SEARCH_CACHE": str(tmp / "cache.sqlite"), "AFM_METRICS_DB": str(tmp / "m.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "local", "AFM_SERVER_TOKEN": "",
           "WEB_SEARCH_INDEX_DIR": "", "WIKI_RETRIEVER": "", "WIKI_INDEX_DIR": "", "WIKI_TOPK": ""}
    sport, wport = free_port(), free_port()
    search = ServerProcess(["-m", "afm.servers.search_server", "--port", str(sport), "--corpus",
                            str(corpora.search), "--token", TOKEN], sport, env=env)
    wiki = ServerProcess(["-m", "afm.servers.wiki_server", "--port", str(wport), "--corpus", str(corpora.wiki)],
                         wport, env=env)
    with search, wiki:
        yield {"search": search.url + "/search", "wiki": wiki.url + "/retrieve"}


def test_web_search_observation_has_the_original_format(servers):
    tool = build_tool("web_search", {"url": servers["search"], "token": TOKEN, "num_results": 3})
    assert isinstance(tool, WebSearchTool)
    res = call(tool, "\n  Who designed the Brassel Lighthouse?\n")
    assert res.status == "ok" and res.meta["n_results"] == 3 and res.meta["cached"] is False
    header = "Found 3 results:\n\n## Web Results\n"
    assert res.text.startswith(header)
    entries = res.text[len(header):].split("\n\n")
    assert len(entries) == 3
    for i, entry in enumerate(entries, start=1):
        lines = entry.split("\n")
        m = re.fullmatch(r"(\d+)\. \[(.+)\]\((\S+)\)", lines[0])
        assert m and int(m[1]) == i and lines[1] == m[3] and m[3].startswith(SITE + "/")
        assert len(lines) == 3 and lines[2]  # link line, then the snippet (no date/source in the local corpus)
    assert entries[0].startswith(f"1. [Brassel Lighthouse]({SITE}/brassel-lighthouse.html)\n")
    assert call(tool, "who designed the brassel lighthouse?").meta["cached"] is True


def test_web_search_without_results_and_with_an_empty_body(servers):
    tool = WebSearchTool({"url": servers["search"], "token": TOKEN})
    res = call(tool, "xylophone   quasar")
    assert (res.status, res.text) == ("ok", "No results found for query: 'xylophone quasar'. Use a less specific query.")
    empty = call(tool, " \n ")
    assert empty.status == "error" and "The query is empty" in empty.text and empty.meta["reason"] == "empty_query"


def test_format_results_prints_date_and_source_and_drops_video_noise():
    text = format_results("q", [
        {"title": "A", "link": "https://a.example", "snippet": "Your browser can't play this video. Alpha.",
         "date": "Mar 3, 2021", "source": "Example News"},
        {"title": "B", "link": "https://b.example", "snippet": "Beta."},
    ])
    assert text == ("Found 2 results:\n\n## Web Results\n"
                    "1. [A](https://a.example)\nDate published: Mar 3, 2021\nSource: Example News\n"
                    "https://a.example\nAlpha.\n\n"
                    "2. [B](https://b.example)\nhttps://b.example\nBeta.")


def test_wiki_search_observation_has_the_original_format(servers):
    tool = build_tool("wiki_search", {"url": servers["wiki"], "topk": 2})
    assert isinstance(tool, WikiSearchTool)
    res = call(tool, "Who designed the Brassel Lighthouse?")
    assert res.status == "ok"
    # Exactly the original's layout: "Doc i (Title: <first line>)\n<rest>", blocks separated by a blank line,
    # each block one record of the demo wiki corpus, and the two best documents are about the lighthouse.
    from afm.demo_content.web import demo_wiki_corpus

    records = {r["contents"] for r in demo_wiki_corpus()}
    blocks = res.text.split("\n\n")
    assert len(blocks) == 2
    titles = []
    for i, block in enumerate(blocks, 1):
        m = re.fullmatch(rf'Doc {i} \(Title: ("[^"\n]+")\)\n(.+)', block, re.DOTALL)
        assert m, block
        assert f"{m.group(1)}\n{m.group(2)}" in records
        titles.append(m.group(1))
    assert set(titles) <= {'"Ilse Varnholt"', '"Brassel Lighthouse"'} and "Brassel Lighthouse" in res.text
    # One query per line: answered in one request, sections joined by ---.
    multi = call(tool, "capital of Veltria\n\nPetra Lund asteroid\n")
    sections = multi.text.split("\n---\n")
    assert multi.meta["n_queries"] == 2 and len(sections) == 2
    assert all(s.startswith("Doc 1 (Title: ") for s in sections) and "5127 Lund" in sections[1]
    none = call(tool, "xylophone quasar")
    assert none.status == "ok" and none.text == "No documents found for query: 'xylophone quasar'. Use different keywords."


def test_wiki_search_rejects_empty_and_too_many_queries_without_calling(servers):
    tool = WikiSearchTool({"url": servers["wiki"], "max_queries": 2})
    assert call(tool, "").status == "error"
    res = call(tool, "a\nb\nc")
    assert res.status == "error" and "3 queries" in res.text and res.meta["reason"] == "too_many_queries"


@pytest.mark.parametrize("tool_cls", [WebSearchTool, WikiSearchTool])
def test_server_down_becomes_an_error_observation(tool_cls):
    url = f"http://127.0.0.1:{free_port()}/x"
    res = call(tool_cls({"url": url, "retries": 1, "backoff": 0.01, "timeout": 2}), "capital of Veltria")
    assert res.status == "error" and res.meta["reason"] == "unreachable" and res.meta["attempts"] == 2
    assert "could not be reached" in res.text and url in res.text and "do not repeat the same call" in res.text
    assert res.infra  # the environment's failure, not the model's


@pytest.mark.parametrize("tool_cls", [WebSearchTool, WikiSearchTool])
def test_misbehaving_server_failures_become_observations(tool_cls):
    with FakeHTTP() as fake:
        tool = tool_cls({"url": fake.url + "/x", "retries": 1, "backoff": 0.01, "timeout": 0.5})
        # Too slow: a timeout status, after the retry.
        fake.script(("sleep", 1.2), ("sleep", 1.2))
        res = call(tool, "capital of Veltria")
        assert res.status == "timeout" and "did not answer" in res.text and len(fake.requests) == 2 and res.infra
        # A 500 is retried; when the retry succeeds, the observation is normal.
        ok = {"organic": []} if tool_cls is WebSearchTool else {"result": [[]]}
        fake.script(("json", 500, {"error": "boom"}), ("json", 200, ok))
        res = call(tool, "capital of Veltria")
        assert res.status == "ok" and len(fake.requests) == 2 and res.meta["attempts"] == 2 and not res.infra
        # 5xx every time: an error naming the status and the server's reason.
        fake.script(("json", 502, {"error": "search backend failed", "detail": "Serper answered HTTP 503"}),
                    ("json", 502, {"error": "search backend failed", "detail": "Serper answered HTTP 503"}))
        res = call(tool, "capital of Veltria")
        assert res.status == "error" and "HTTP 502" in res.text and "Serper answered HTTP 503" in res.text
        assert res.infra
        # A 504 relayed by the server reads as a timeout.
        fake.script(("json", 504, {"error": "search backend failed"}), ("json", 504, {"error": "x"}))
        res = call(tool, "capital of Veltria")
        assert res.status == "timeout" and res.infra
        # 4xx: not retried; the model is told to rewrite its query.
        fake.script(("json", 422, {"error": "invalid request", "detail": "query too long"}))
        res = call(tool, "capital of Veltria")
        assert res.status == "error" and "HTTP 422" in res.text and "query too long" in res.text
        assert "Rewrite" in res.text and len(fake.requests) == 1
        assert not res.infra  # the query's fault: the model can and should rewrite it
        # Garbage and wrongly shaped answers.
        for bad in (("raw", 200, "<html>not json</html>"), ("json", 200, {"unexpected": 1}), ("json", 200, [1])):
            fake.script(bad)
            res = call(tool, "capital of Veltria")
            assert res.status == "error" and "unreadable answer" in res.text and res.meta["reason"] == "bad_response"
            assert res.infra
        # A dropped connection is an unreachable server.
        fake.script(("close",), ("close",))
        res = call(tool, "capital of Veltria")
        assert res.status == "error" and res.meta["reason"] == "unreachable" and res.infra


def test_real_server_rejections_and_the_bearer_token(servers):
    no_token = call(WebSearchTool({"url": servers["search"], "retries": 0}), "capital of Veltria")
    assert no_token.status == "error" and "HTTP 401" in no_token.text and "access token" in no_token.text
    too_long = call(WebSearchTool({"url": servers["search"], "token": TOKEN}), "veltria " * 400)
    assert too_long.status == "error" and "HTTP 422" in too_long.text and too_long.meta["attempts"] == 1
    assert not no_token.infra and not too_long.infra  # 4xx: a refusal, never an outage
    described = WebSearchTool({"token": TOKEN}).describe()
    assert described["config"]["token"] == "<set>" and TOKEN not in repr(described)


def test_urls_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("SERVER_HOST", "10.1.2.3")
    monkeypatch.setenv("WEBSEARCH_PORT", "9123")
    monkeypatch.delenv("WIKI_RAG_SERVER_URL", raising=False)
    monkeypatch.setenv("WIKI_RAG_PORT", "8123")
    assert default_search_url() == "http://10.1.2.3:9123/search"
    assert default_wiki_url() == "http://10.1.2.3:8123/retrieve"
    monkeypatch.setenv("WIKI_RAG_SERVER_URL", "http://wiki.example:8000/retrieve")
    assert WikiSearchTool().url == "http://wiki.example:8000/retrieve"
    assert WebSearchTool({"url": "http://override/search"}).url == "http://override/search"


def test_web_search_num_results_default_from_the_originals_variable(monkeypatch):
    monkeypatch.setenv("WEB_SEARCH_SERP_NUM", "4")
    assert WebSearchTool({"url": "http://127.0.0.1:9/search"}).num_results == 4
    assert WebSearchTool({"url": "http://127.0.0.1:9/search", "num_results": 2}).num_results == 2
    monkeypatch.delenv("WEB_SEARCH_SERP_NUM")
    assert WebSearchTool({"url": "http://127.0.0.1:9/search"}).num_results == 10
