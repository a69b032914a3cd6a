"""Server settings are read one way (afm.servers.common.EnvReader) and ports are stated only in environment.sh."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from afm.common.env_defaults import ENVIRONMENT_SH, default_port, environment_default, port
from afm.servers.common import EnvReader, server_arg_parser
from afm.servers.crawl_server import CrawlSettings
from afm.servers.search_server import SearchSettings, default_num
from afm.servers.summarize import SummaryBudget
from afm.servers.wiki_server import WikiSettings
from afm.tools.crawl_page import default_crawl_url
from afm.tools.web_search import default_search_url
from afm.tools.wiki_search import default_wiki_url

REPO = Path(__file__).resolve().parents[1]
PORTS = {"WEBSEARCH_PORT": 9001, "CRAWL_PAGE_PORT": 9000, "WIKI_RAG_PORT": 8000, "AFM_DEMO_SITE_PORT": 9002}


@pytest.fixture
def no_port_env(monkeypatch):
    for name in (*PORTS, "SERVER_HOST", "WIKI_RAG_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)


def test_environment_sh_states_the_ports_and_is_read_when_they_are_unset(no_port_env, monkeypatch):
    assert ENVIRONMENT_SH == REPO / "environment.sh"
    assert {name: port(name) for name in PORTS} == PORTS
    assert environment_default("WIKI_RAG_SERVER_URL") is None  # refers to other variables: not a literal
    assert default_search_url() == "http://127.0.0.1:9001/search"
    assert default_crawl_url() == "http://127.0.0.1:9000/crawl_page"
    assert default_wiki_url() == "http://127.0.0.1:8000/retrieve"
    monkeypatch.setenv("WEBSEARCH_PORT", "19001")
    assert default_search_url() == "http://127.0.0.1:19001/search"
    assert server_arg_parser("t", "WEBSEARCH_PORT").parse_args([]).port == 19001
    assert server_arg_parser("t", "CRAWL_PAGE_PORT").parse_args([]).port == 9000


def test_a_port_without_variable_or_environment_sh_must_be_given(tmp_path, monkeypatch, no_port_env):
    missing = tmp_path / "environment.sh"
    with pytest.raises(ValueError, match=r"WEBSEARCH_PORT is not set and there is no environment\.sh default"):
        port("WEBSEARCH_PORT", path=missing)
    assert port("WEBSEARCH_PORT", {"WEBSEARCH_PORT": "7"}, path=missing) == 7
    with pytest.raises(ValueError, match="WEBSEARCH_PORT='nine': expected a port number"):
        default_port("WEBSEARCH_PORT", {"WEBSEARCH_PORT": "nine"})
    monkeypatch.setenv("WIKI_RAG_PORT", "70000")
    with pytest.raises(SystemExit):
        server_arg_parser("t", "WIKI_RAG_PORT")


def test_no_default_port_is_written_outside_environment_sh():
    # Ports may appear as examples; a default is `or 9001`, `:-9001`, `default=9001` or `DEFAULT_PORT = 9001`.
    pattern = re.compile(r"""(\bor\s*["']?|:-|default=|DEFAULT_PORT\s*=\s*)(9000|9001|9002|8000)\b""")
    files = subprocess.run(["git", "ls-files", "afm", "server", "scripts", "inference", "evaluation", "experiments"],
                           capture_output=True, text=True, cwd=REPO, check=True).stdout.split()
    offenders = [f"{f}:{n}" for f in files if f.endswith((".py", ".sh"))
                 for n, line in enumerate((REPO / f).read_text(encoding="utf-8").splitlines(), 1)
                 if pattern.search(line)]
    assert offenders == []


def test_env_reader_treats_unset_and_empty_alike_and_names_bad_variables():
    read = EnvReader({"A": " 3 ", "E": "", "B": "x", "C": "Local"})
    assert (read.integer("A", 1), read.integer("E", 1), read.integer("U", 1)) == (3, 1, 1)
    assert (read.text("E", "d"), read.raw("E", "d"), read.optional("E"), read.raw("U", "d")) == ("d", "", None, "d")
    assert read.choice("C", "auto", ("auto", "local"), fold_case=True) == "local"
    with pytest.raises(ValueError, match="B='x': expected an integer"):
        read.integer("B", 0)
    with pytest.raises(ValueError, match="B='x': expected a number"):
        read.number("B", 0.0)
    with pytest.raises(ValueError, match="C='Local': expected one of auto, local"):
        read.choice("C", "auto", ("auto", "local"))


def test_every_server_reports_a_bad_variable_by_name(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match="WIKI_TOPK='three': expected an integer"):
        WikiSettings.from_env({"WIKI_TOPK": "three"})
    with pytest.raises(ValueError, match=r"WEB_SEARCH_SERPER_RETRIES='2\.5': expected an integer"):
        SearchSettings.from_env({"WEB_SEARCH_SERPER_RETRIES": "2.5"})
    with pytest.raises(ValueError, match="WEB_SEARCH_BACKEND='bing': expected one of auto, serper, local"):
        SearchSettings.from_env({"WEB_SEARCH_BACKEND": "bing"})
    with pytest.raises(ValueError, match="WEB_SEARCH_SERP_NUM=0: expected a whole number from 1 to 100"):
        default_num({"WEB_SEARCH_SERP_NUM": "0"})
    monkeypatch.setenv("CRAWL_MAX_URLS", "ten")
    with pytest.raises(ValueError, match="CRAWL_MAX_URLS='ten': expected an integer"):
        CrawlSettings.from_env()
    monkeypatch.setenv("SUMMARY_MAX_CHUNKS", "many")
    with pytest.raises(ValueError, match="SUMMARY_MAX_CHUNKS='many': expected an integer"):
        SummaryBudget.from_env()
    settings = SearchSettings.from_env({"WEB_SEARCH_BACKEND": " Local ", "WEB_SEARCH_CORPUS": str(tmp_path),
                                        "WEB_SEARCH_CACHE": "", "WEB_SEARCH_CACHE_TTL": "0"})
    assert (settings.backend, settings.corpus, settings.cache, settings.cache_ttl) == ("local", str(tmp_path), "", None)
