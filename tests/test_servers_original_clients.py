"""The original project's tool clients against afm's servers (real processes on 127.0.0.1).

The small clients below send what the original's clients send and read what they read (facts taken from its
verl fork: ``verl/tools/web_search_v2.py``, ``crawl_page_v2.py``, ``utils/search_r1_like_utils.py``, and its
``tool_servers/web_server/server_tests``), with the libraries they use (aiohttp, requests). The crawl server finds
its summary model through the original's ``UNI_API_URLS``/``UNI_API_KEY`` and the search server its default
``num`` through ``WEB_SEARCH_SERP_NUM``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
import requests

from afm.common.procs import ServerProcess, free_port
from afm.offline.openai_standin import StandIn
from afm.servers.demo_data import write_demo_corpora
from afm.servers.demo_site import DemoSite
from afm.servers.summarize import alias_notes, summary_endpoint

SUMMARY = "Petra Lund founded the observatory."


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("original-clients")
    with DemoSite() as site, StandIn(default_reply=SUMMARY, model="qwen2.5-72b-instruct") as llm:
        corpora = write_demo_corpora(tmp / "corpora", site.url)
        common = {"AFM_METRICS_DB": str(tmp / "metrics.sqlite"), "AFM_SERVER_TOKEN": ""}
        specs = {
            "search": (["-m", "afm.servers.search_server", "--corpus", str(corpora.search), "--cache", "off"],
                       {"WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "local", "WEB_SEARCH_INDEX_DIR": "",
                        "WEB_SEARCH_SERP_NUM": "3"}),
            # The summary model as the original's environment.sh named it (SUMMARY_* left empty, as afm's
            # environment.sh leaves them).
            "crawl": (["-m", "afm.servers.crawl_server", "--cache", "off", "--allow", f"127.0.0.1:{site.port}"],
                      {"SUMMARY_OPENAI_API_BASE_URL": "", "SUMMARY_OPENAI_API_KEY": "",
                       "UNI_API_URLS": f"{llm.base_url} | http://127.0.0.1:9/v1", "UNI_API_KEY": "sk-uni",
                       "JINA_BASE_URL": "https://s.jina.ai/", "JINA_API_KEY": ""}),
            "wiki": (["-m", "afm.servers.wiki_server", "--corpus", str(corpora.wiki), "--index-dir",
                      str(tmp / "wiki")], {"WIKI_RETRIEVER": "", "WIKI_INDEX_DIR": "", "WIKI_TOPK": ""}),
        }
        procs: dict[str, ServerProcess] = {}
        try:
            for name, (argv, env) in specs.items():
                port = free_port()
                procs[name] = ServerProcess([*argv, "--port", str(port)], port, env={**common, **env}).start()
            yield {"site": site, "llm": llm, **procs}
        finally:
            for p in procs.values():
                p.stop()


# ---- the original's clients, request and response handling as they are ------------------------------------------

async def original_web_search(url: str, query: str, num_results: int = 10) -> tuple[str, dict[str, Any]]:
    """SerperCacheAPITool.execute: POST {q, num} with X-API-KEY; any status but 200 is an error."""
    headers = {"Content-Type": "application/json", "X-API-KEY": "serper-key-of-the-client"}
    async with aiohttp.ClientSession() as session, session.post(
            url, json={"q": query, "num": num_results}, headers=headers,
            timeout=aiohttp.ClientTimeout(total=500)) as response:
        if response.status != 200:
            return json.dumps({"error": f"Server returned status {response.status}"}), {"error": "server_error"}
        result = await response.json()
    return format_serper(result, query), {"num_results": num_results}


def format_serper(serper: dict[str, Any], query: str) -> str:
    """The original client's observation: numbered markdown links, optional date and source, link, snippet."""
    pages = serper.get("organic") or []
    if not pages:
        return f"No results found for query: '{query}'. Use a less specific query."
    entries = []
    for i, page in enumerate(pages, 1):
        date = f"\nDate published: {page['date']}" if "date" in page else ""
        source = f"\nSource: {page.get('source', '')}" if "source" in page else ""
        snippet = f"\n{page.get('snippet', '')}".replace("Your browser can't play this video.", "")
        link = page.get("link", "#")
        entries.append(f"{i}. [{page.get('title', 'No Title')}]({link}){date}{source}\n{link}{snippet}".strip())
    return f"Found {len(entries)} results:\n\n## Web Results\n" + "\n\n".join(entries)


async def original_crawl(url: str, query: str, summary_type: str = "page") -> tuple[str, dict[str, Any]]:
    """CrawlPageV2Tool.execute: the full payload (with the summary API settings), 200 or error, then success."""
    urls = [u.strip() for u in query.split("|") if u.strip()]
    # task "" as in RL data (messages[1] is not the user turn); think_content took its default there too.
    payload = {"urls": urls, "task": "", "web_search_query": "who founded the observatory",
               "think_content": "general content extraction", "summary_type": summary_type,
               "chunk_size": 8192, "do_last_summary": False, "api_url": "http://summary.invalid/v1",
               "api_key": "sk-client", "model": "qwen2.5-72b-instruct"}
    async with aiohttp.ClientSession() as session, session.post(
            url, json=payload, headers={"Content-Type": "application/json"}) as response:
        if response.status != 200:
            return json.dumps({"error": f"Server returned status {response.status}, fail to call {url}"}), \
                {"error": "server_error", "status": response.status}
        result = await response.json()
    if not result.get("success", False):
        message = result.get("error_message", "Unknown server error") + f"fail to use {url}"
        return json.dumps({"error": message}), {"error": "server_processing_error"}
    return result.get("obs", ""), {"urls_count": len(urls), "processing_time": result.get("processing_time", 0)}


def original_wiki_search(url: str, query: str, topk: int = 3) -> tuple[str, dict[str, Any]]:
    """search_r1_like_utils: requests.post {queries, topk, return_scores: true}; docs as "Doc i (Title: ...)"."""
    response = requests.post(url, headers={"Content-Type": "application/json", "Accept": "application/json"},
                             json={"queries": [query], "topk": topk, "return_scores": True}, timeout=30)
    response.raise_for_status()
    raw = response.json().get("result", [])
    if not raw:
        return json.dumps({"result": "No search results found."}), {"status": "no_results"}
    blocks = []
    for retrieval in raw:
        docs = []
        for i, item in enumerate(retrieval):
            lines = item["document"]["contents"].split("\n")
            docs.append(f"Doc {i + 1} (Title: {lines[0]})\n" + "\n".join(lines[1:]))
        blocks.append("\n\n".join(docs).strip())
    return json.dumps({"result": "\n---\n".join(blocks)}), {"status": "success", "total_results": len(raw[0])}


# ---- tests ----------------------------------------------------------------------------------------------------------

def test_health_says_healthy_on_every_server(stack):
    for name in ("search", "crawl", "wiki"):
        body = requests.get(stack[name].url + "/health", timeout=5).json()
        assert body["status"] == "healthy" and isinstance(body["timestamp"], float), (name, body)
    assert requests.get(stack["site"].url + "/health", timeout=5).json()["status"] == "healthy"


def test_original_web_search_client(stack):
    url = stack["search"].url + "/search"
    text, metrics = asyncio.run(original_web_search(url, "Brassel Lighthouse designer", 2))
    assert metrics == {"num_results": 2}
    assert text.startswith("Found 2 results:\n\n## Web Results\n1. [")
    assert f"]({stack['site'].url}/" in text
    empty, _ = asyncio.run(original_web_search(url, "xylophone quasar"))
    assert empty == "No results found for query: 'xylophone quasar'. Use a less specific query."
    # Without num, the server's default is WEB_SEARCH_SERP_NUM (3 here), the original environment.sh's name.
    r = requests.post(url, json={"q": "Veltria"}, timeout=30).json()
    assert r["searchParameters"]["num"] == 3 and len(r["organic"]) == 3


def test_original_crawl_client_reads_summaries(stack):
    url = stack["crawl"].url + "/crawl_page"
    page = stack["site"].page_url("petra-lund")
    for summary_type in ("page", "once"):  # the verl config's mode and the server test's other mode
        obs, metrics = asyncio.run(original_crawl(url, f"{page} | [Brassel](http://127.0.0.1:1/x)", summary_type))
        assert obs.startswith(f"Page 1 [{page}] Summary:\n{SUMMARY}"), obs
        assert "Page 2 [http://127.0.0.1:1/x]: [Page content not accessible: refused" in obs
        assert metrics["urls_count"] == 2 and metrics["processing_time"] > 0
    # The summary model came from UNI_API_URLS (its first URL), not from the client's api_url.
    assert any(r["path"] == "/v1/chat/completions" for r in stack["llm"].requests())
    log = stack["crawl"].log()
    assert log.count("summary model URL from UNI_API_URLS (the first of 2)") == 1
    assert log.count("summary model key from UNI_API_KEY") == 1 and "sk-uni" not in log
    assert "JINA_BASE_URL is ignored" in log


def test_original_crawl_client_gets_200_and_success_false_for_non_urls(stack):
    url = stack["crawl"].url + "/crawl_page"
    obs, metrics = asyncio.run(original_crawl(url, "the lighthouse page | another one"))
    assert metrics == {"error": "server_processing_error"}  # not "server_error": the status was 200
    message = json.loads(obs)["error"]
    assert message.startswith("No valid URL found: the lighthouse page: not a URL")
    assert message.endswith(f"fail to use {url}")


def test_original_wiki_client(stack):
    text, meta = original_wiki_search(stack["wiki"].url + "/retrieve", "Who designed the Brassel Lighthouse?")
    assert meta == {"status": "success", "total_results": 3}
    result = json.loads(text)["result"]
    assert result.startswith("Doc 1 (Title: ") and "Doc 3 (Title: " in result and "Ilse Varnholt" in result
    with pytest.raises(requests.HTTPError) as err:  # a bad request is a 4xx, which the client does not retry
        original_wiki_search(stack["wiki"].url + "/retrieve", " ")
    assert err.value.response.status_code == 422


def test_summary_endpoint_aliases():
    assert summary_endpoint({"UNI_API_URLS": "http://a/v1|http://b/v1", "UNI_API_KEY": "k"}) == ("http://a/v1", "k")
    ours = {"SUMMARY_OPENAI_API_BASE_URL": "http://s/v1", "SUMMARY_OPENAI_API_KEY": "s", "UNI_API_URLS": "http://a",
            "UNI_API_KEY": "k"}
    assert summary_endpoint(ours) == ("http://s/v1", "s") and alias_notes(ours) == []  # afm's names win
    assert summary_endpoint({"UNI_API_KEY": "k"}) == ("", "")  # a key alone configures nothing
    # The uniapi key is never sent to an endpoint given with afm's names.
    local = {"SUMMARY_OPENAI_API_BASE_URL": "http://127.0.0.1:8000/v1", "UNI_API_KEY": "k"}
    assert summary_endpoint(local) == ("http://127.0.0.1:8000/v1", "") and alias_notes(local) == []
