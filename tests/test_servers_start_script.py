"""server/start_servers.sh with real servers: the demo site is allow-listed only when the same call starts it,
the search backend is named (and the demo corpus flagged) by start and status, an explicit Serper backend never
falls back, status checks the address the clients use (SERVER_HOST), and binding beyond loopback needs a token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from afm.common.procs import free_port
from afm.servers.common import bind_problem, is_loopback
from afm.servers.demo_site import DemoSite

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "server" / "start_servers.sh"


def script_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "AFM_RUN_DIR": str(tmp_path / "run"), "AFM_PYTHON": sys.executable,
           "WEBSEARCH_PORT": str(free_port()), "CRAWL_PAGE_PORT": str(free_port()),
           "WIKI_RAG_PORT": str(free_port()), "AFM_DEMO_SITE_PORT": str(free_port()),
           "WEB_SEARCH_CACHE": "off", "CRAWL_CACHE": "off", "AFM_METRICS_DB": str(tmp_path / "metrics.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "auto", "WEB_SEARCH_CORPUS": "", "WIKI_CORPUS": "",
           "CRAWL_PAGE_ALLOW": "", "AFM_SERVER_TOKEN": "", "AFM_SERVER_BIND": "", "SERVER_HOST": "",
           "WIKI_RAG_SERVER_URL": "", "SUMMARY_OPENAI_API_BASE_URL": "", "UNI_API_URLS": "",
           "WEB_SEARCH_WORKERS": "1", "CRAWL_PAGE_WORKERS": "1"}
    env.update(extra)
    return env


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture
def stop_after():
    envs: list[dict[str, str]] = []
    yield envs.append
    for env in envs:
        run("stop", env=env)


def crawl_demo_page(env: dict[str, str]) -> dict:
    site = f"http://127.0.0.1:{env['AFM_DEMO_SITE_PORT']}/veltria.html"
    r = httpx.post(f"http://127.0.0.1:{env['CRAWL_PAGE_PORT']}/crawl_page",
                   json={"urls": [site], "summary_type": "none"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["pages"][0]


def test_start_crawl_alone_does_not_allow_the_demo_port(tmp_path, stop_after):
    env = script_env(tmp_path)
    stop_after(env)
    # Something (here a demo site the script did not start) listens on the demo port: it must stay unreachable.
    with DemoSite(int(env["AFM_DEMO_SITE_PORT"])):
        started = run("start", "crawl", env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        page = crawl_demo_page(env)
        assert page["status"] == "refused", page
        assert "--allow" not in (tmp_path / "run" / "crawl.log").read_text()
    assert run("stop", "crawl", env=env).returncode == 0
    # Started together, the demo site (and only it) is allow-listed.
    started = run("start", "demo_site", "crawl", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert crawl_demo_page(env)["status"] == "ok"
    log = (tmp_path / "run" / "crawl.log").read_text()
    assert f"--allow 127.0.0.1:{env['AFM_DEMO_SITE_PORT']}" in log


def test_search_backend_is_named_and_the_demo_corpus_is_flagged(tmp_path, stop_after):
    env = script_env(tmp_path)
    stop_after(env)
    started = run("start", "search", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "search: up" in started.stdout and "backend=local (WEB_SEARCH_BACKEND=auto)" in started.stdout
    assert "WARNING: answering from the DEMO corpus" in started.stdout
    log = (tmp_path / "run" / "search.log").read_text()
    assert "backend=local BM25 over" in log and "WEB_SEARCH_SERPER_API_KEY is empty" in log
    status = run("status", "search", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "health ok backend=local (WEB_SEARCH_BACKEND=auto)" in status.stdout
    assert "DEMO corpus" in status.stdout
    health = httpx.get(f"http://127.0.0.1:{env['WEBSEARCH_PORT']}/health", timeout=5).json()
    assert health["status"] == "healthy" and health["backend"] == "local"


def test_a_corpus_of_ones_own_is_not_flagged_as_demo(tmp_path, stop_after):
    corpus = tmp_path / "mine.jsonl"
    corpus.write_text('{"id": "1", "title": "Own", "url": "http://e.org/1", "text": "my own page"}\n')
    env = script_env(tmp_path, WEB_SEARCH_CORPUS=str(corpus))
    stop_after(env)
    started = run("start", "search", env=env)
    assert started.returncode == 0 and "DEMO" not in started.stdout, started.stdout + started.stderr
    assert "backend=local" in run("status", "search", env=env).stdout


def test_explicit_serper_never_falls_back(tmp_path, stop_after):
    env = script_env(tmp_path, WEB_SEARCH_BACKEND="serper")
    stop_after(env)
    started = run("start", "search", env=env)
    assert started.returncode == 1
    assert "backend 'serper' needs WEB_SEARCH_SERPER_API_KEY" in started.stderr
    assert not (tmp_path / "run" / "demo").exists()  # no demo corpus was even written
    # With a key, the server uses Serper (here an unreachable one): a failure is a 502, never local results.
    dead = f"http://127.0.0.1:{free_port()}/search"
    env.update(WEB_SEARCH_SERPER_API_KEY="k", WEB_SEARCH_SERPER_URL=dead, WEB_SEARCH_SERPER_RETRIES="0")
    started = run("start", "search", env=env)
    assert started.returncode == 0 and "backend=serper (WEB_SEARCH_BACKEND=serper)" in started.stdout
    r = httpx.post(f"http://127.0.0.1:{env['WEBSEARCH_PORT']}/search", json={"q": "Petra Lund"}, timeout=30)
    assert r.status_code == 502 and r.json()["backend"] == "serper"


def test_status_checks_the_address_clients_use(tmp_path, stop_after):
    # 127.0.0.2 is this machine too, but a server bound to 127.0.0.1 does not answer there: the situation of the
    # original's SERVER_HOST=$(hostname -I) with afm's loopback default.
    env = script_env(tmp_path, SERVER_HOST="127.0.0.2")
    stop_after(env)
    started = run("start", "search", "wiki", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    assert "not at http://127.0.0.2:" in started.stderr
    status = run("status", "search", "wiki", env=env)
    assert status.returncode == 3
    for name in ("search", "wiki"):
        assert f"{name}: the server answers on http://127.0.0.1:" in status.stderr
    assert "set AFM_SERVER_BIND=0.0.0.0 (or this address) and AFM_SERVER_TOKEN" in status.stderr
    assert "set SERVER_HOST to 127.0.0.1" in status.stderr
    # WIKI_RAG_SERVER_URL is what the wiki client uses; a right one passes although SERVER_HOST is wrong.
    env["WIKI_RAG_SERVER_URL"] = f"http://127.0.0.1:{env['WIKI_RAG_PORT']}/retrieve"
    assert run("status", "wiki", env=env).returncode == 0
    assert run("stop", env=env).returncode == 0
    # Bound to the address the clients use, status passes.
    env.update(AFM_SERVER_BIND="127.0.0.2", WIKI_RAG_SERVER_URL="")
    started = run("start", "search", "wiki", env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    status = run("status", "search", "wiki", env=env)
    assert status.returncode == 0 and status.stdout.count("health ok") == 2, status.stdout + status.stderr


def test_binding_beyond_loopback_needs_a_token(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("127.0.0.2") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("myhost")
    assert bind_problem("127.0.0.1", None) is None and bind_problem("0.0.0.0", "t") is None
    assert bind_problem("0.0.0.0", None, allow_no_token=True) is None  # the explicit opt-out
    assert "set a bearer token (AFM_SERVER_TOKEN or --token" in bind_problem("0.0.0.0", None)
    for module in ("search_server", "crawl_server", "wiki_server"):
        proc = subprocess.run([sys.executable, "-m", f"afm.servers.{module}", "--host", "0.0.0.0", "--port",
                               str(free_port())], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "AFM_SERVER_TOKEN": "", "AFM_SERVER_ALLOW_NO_TOKEN": ""})
        assert proc.returncode == 2, (module, proc.stderr)
        assert "binding 0.0.0.0 exposes the server to the network" in proc.stderr
