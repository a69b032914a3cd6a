#!/usr/bin/env python
"""Search-server throughput on cached queries and BM25 query latency on a 100k-document corpus, each with a
baseline measured in the same run.

    .venv/bin/python benchmarks/bench_search.py [--duration 5] [--concurrency 1,8,32] [--docs 100000]

1. **Cached ``/search``.** The search server (``afm.servers.search_server``, local backend on the demo corpus,
   SQLite cache, **one** uvicorn worker) runs as a real process on 127.0.0.1. Every query is asked once to fill
   the cache, then a load generator in this process keeps ``C`` keep-alive connections busy for ``--duration``
   seconds (a minimal asyncio HTTP/1.1 client, so that the client costs little of the second core), for each
   concurrency ``C``. Baseline: the same server's ``GET /health`` (the app factory's route: no body, no cache)
   under the same load. Targets: ≥ 1000 requests/s and p99 < 20 ms.
2. **BM25 latency.** A seeded synthetic corpus (``--docs`` documents of 20–60 Zipf-distributed words from a
   50k-word vocabulary, written as JSONL ``{id, title, url, text}``) is indexed with ``afm.servers.bm25_index``
   (build and load times printed), then ``--queries`` queries of 2–5 words are timed one at a time through
   ``BM25Index.search`` (tokenise + score + top-10) and through the local backend (plus document lookup and
   snippet). Baselines: bm25s's own ``retrieve`` on the same index with pre-tokenised queries, and a brute-force
   scan (count of query words per document) on a few queries. Target: p50 < 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from afm.common.procs import ServerProcess, free_port
from afm.servers.bm25_index import BM25Index, build_index, tokenize
from afm.servers.common import percentile
from afm.servers.demo_data import write_demo_corpora
from afm.servers.search_backends import LocalBackend

DEMO_QUERIES = ["capital of Veltria", "Brassel Lighthouse height", "Ilse Varnholt birthplace", "Lantern Regatta record",
                "Veltrian crown shells", "National Observatory director", "Petra Lund asteroid", "Tomas Ekwall museum",
                "Quillhaven harbour", "Corvan Maritime Museum", "Treaty of Ostel", "salt mark exchange rate",
                "Marrowgate population", "Grey Heron sloop", "variable stars catalogue", "Cape Brassel"]


def stats_ms(latencies: list[float]) -> dict[str, float]:
    s = sorted(latencies)
    return {f"p{q}": percentile(s, q) * 1000 for q in (50, 90, 99)}


# ---- 1. cached /search -------------------------------------------------------------------------------------------

def http_request(method: str, path: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    if body:
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


async def connection(port: int, requests: list[bytes], stop_at: float, latencies: list[float],
                     errors: list[str]) -> None:
    """One keep-alive connection sending requests back to back until ``stop_at``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = random.randrange(len(requests))
    try:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            writer.write(requests[i % len(requests)])
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - t0)
            if head[9:12] != b"200":
                errors.append(head[9:12].decode())
            i += 1
    finally:
        writer.close()


async def load(port: int, requests: list[bytes], concurrency: int, duration: float) -> dict[str, float]:
    latencies: list[float] = []
    errors: list[str] = []
    start = time.perf_counter()
    await asyncio.gather(*(connection(port, requests, start + duration, latencies, errors)
                           for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {"rps": len(latencies) / elapsed, "n": len(latencies), "errors": len(errors), **stats_ms(latencies)}


def bench_cached_search(args: argparse.Namespace, work: Path) -> list[dict]:
    import httpx

    corpora = write_demo_corpora(work / "demo", "http://127.0.0.1:9002")
    port = free_port()
    env = {"WEB_SEARCH_CACHE": str(work / "cache.sqlite"), "AFM_METRICS_DB": str(work / "metrics.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "local", "AFM_SERVER_TOKEN": ""}
    searches = [http_request("POST", "/search", json.dumps({"q": q, "num": 10}).encode()) for q in DEMO_QUERIES]
    health = [http_request("GET", "/health")]
    rows = []
    with ServerProcess(["-m", "afm.servers.search_server", "--port", str(port), "--workers", "1",
                        "--corpus", str(corpora.search)], port, env=env) as srv:
        for q in DEMO_QUERIES:  # fill the cache
            assert httpx.post(srv.url + "/search", json={"q": q, "num": 10}).status_code == 200
        asyncio.run(load(port, searches, 4, 1.0))  # warm-up
        for c in args.concurrency:
            h = asyncio.run(load(port, health, c, args.duration))
            s = asyncio.run(load(port, searches, c, args.duration))
            rows.append({"concurrency": c, "search": s, "health": h})
            print(f"  C={c:<3} /search {s['rps']:7.0f} req/s  p50 {s['p50']:.2f} ms  p99 {s['p99']:.2f} ms  "
                  f"errors {s['errors']} | /health {h['rps']:7.0f} req/s  p99 {h['p99']:.2f} ms | "
                  f"ratio {s['rps'] / h['rps']:.2f}", flush=True)
        m = httpx.get(srv.url + "/metrics").json()
        print(f"  server metrics: requests {m['requests']}, hits {m['hits']}, misses {m['misses']}, "
              f"hit_rate {m['hit_rate']}, server-side p50/p99 {m['latency_ms']['p50']}/{m['latency_ms']['p99']} ms")
    return rows


# ---- 2. BM25 latency ---------------------------------------------------------------------------------------------

def synthetic_corpus(path: Path, n_docs: int, seed: int) -> list[str]:
    """Write ``n_docs`` Zipf-worded documents; returns the vocabulary (most frequent first)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = sorted({"".join(rng.choice(letters, rng.integers(3, 10))) for _ in range(60_000)})[:50_000]
    rng.shuffle(vocab)
    ranks = np.arange(1, len(vocab) + 1)
    probs = 1.0 / ranks**1.07
    probs /= probs.sum()
    lengths = rng.integers(20, 61, n_docs)
    words = rng.choice(len(vocab), size=int(lengths.sum()) + 3 * n_docs, p=probs)
    pos = 0
    with path.open("w") as f:
        for i, length in enumerate(lengths):
            title = " ".join(vocab[w] for w in words[pos:pos + 3])
            text = " ".join(vocab[w] for w in words[pos + 3:pos + 3 + length]) + "."
            pos += 3 + length
            f.write(json.dumps({"id": f"d{i}", "title": title, "url": f"https://synthetic.example/{i}",
                                "text": text}) + "\n")
    return list(vocab)


def bench_bm25(args: argparse.Namespace, work: Path) -> dict:
    corpus = work / "synthetic.jsonl"
    t0 = time.perf_counter()
    vocab = synthetic_corpus(corpus, args.docs, args.seed)
    print(f"  corpus: {args.docs} documents, {corpus.stat().st_size / 1e6:.1f} MB, written in "
          f"{time.perf_counter() - t0:.1f}s", flush=True)
    t0 = time.perf_counter()
    manifest = build_index(corpus, work / "synthetic.bm25")
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = BM25Index.load(work / "synthetic.bm25", corpus)
    load_s = time.perf_counter() - t0
    print(f"  index: built in {build_s:.1f}s (vocabulary {manifest['vocab_size']}), loaded (mmap) in "
          f"{load_s * 1000:.0f} ms", flush=True)

    rng = random.Random(args.seed)
    # "mixed": ranks drawn log-uniformly over the vocabulary (frequent and rare words, as users' queries mix them);
    # "frequent": words drawn like the documents' own (Zipf), so most are among the commonest and their posting
    # lists are the longest: the slow end.
    ranks = 1.0 / np.arange(1, len(vocab) + 1) ** 1.07
    nprng = np.random.default_rng(args.seed + 1)
    query_sets = {
        "mixed": [" ".join(vocab[min(len(vocab) - 1, int(10 ** rng.uniform(0, 4.7)))]
                           for _ in range(rng.randint(2, 5))) for _ in range(args.queries)],
        "frequent": [" ".join(vocab[i] for i in nprng.choice(len(vocab), rng.randint(2, 5), p=ranks / ranks.sum()))
                     for _ in range(args.queries)],
    }
    for q in query_sets["frequent"][:20]:  # warm-up (page cache of the mmapped arrays)
        index.search(q, 10)

    def timed(fn, items) -> list[float]:
        out = []
        for item in items:
            t = time.perf_counter()
            fn(item)
            out.append(time.perf_counter() - t)
        return out

    backend = LocalBackend(index)
    res: dict = {"build_s": build_s, "load_ms": load_s * 1000}
    for set_name, queries in query_sets.items():
        tokenised = [[t for t in tokenize(q) if t in index.retriever.vocab_dict] or [vocab[0]] for q in queries]
        figures = {
            "ours": stats_ms(timed(lambda q: index.search(q, 10), queries)),
            "backend": stats_ms(timed(lambda q: backend.search_sync(q, 10), queries)),
            "bm25s_retrieve": stats_ms(timed(lambda toks: index.retriever.retrieve(
                [toks], k=10, show_progress=False, n_threads=0), tokenised)),
        }
        # Agreement: our top-10 scores equal those of bm25s's own retrieve on the same index (documents with
        # equal scores may be ordered differently, so scores are compared, not ids).
        same = 0
        for q, toks in zip(queries[:100], tokenised[:100], strict=True):
            mine = [sc for _, sc in index.search(q, 10)]
            _docs, scores = index.retriever.retrieve([toks], k=10, show_progress=False)
            same += bool(np.allclose(mine, scores[0][: len(mine)], rtol=1e-5))
        figures["agree"] = f"{same}/{min(100, len(queries))}"
        res[set_name] = figures
        print(f"  {set_name} queries (top-10 scores identical to bm25s.retrieve on {figures['agree']}):")
        for name in ("ours", "backend", "bm25s_retrieve"):
            st = figures[name]
            print(f"    {name:<15} p50 {st['p50']:7.2f} ms  p90 {st['p90']:7.2f} ms  p99 {st['p99']:7.2f} ms", flush=True)
        print(f"    ours/bm25s p50 ratio {figures['ours']['p50'] / figures['bm25s_retrieve']['p50']:.2f}", flush=True)

    records = (json.loads(line) for line in corpus.open())
    doc_tokens = [set(tokenize(r["title"] + "\n" + r["text"])) for r in records]
    brute_queries = query_sets["mixed"][: args.brute_queries]
    brute = stats_ms(timed(lambda q: sorted(((sum(t in d for t in tokenize(q)), i) for i, d in enumerate(doc_tokens)),
                                            reverse=True)[:10], brute_queries))
    res["brute_scan"] = brute
    print(f"  brute-force scan ({len(brute_queries)} mixed queries): p50 {brute['p50']:.1f} ms = "
          f"{brute['p50'] / res['mixed']['ours']['p50']:.0f}x ours", flush=True)
    index.close()
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=5.0, help="seconds per load run")
    p.add_argument("--concurrency", default="1,8,32", help="comma-separated connection counts")
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=500)
    p.add_argument("--brute-queries", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip", choices=["search", "bm25"], help="leave one part out")
    p.add_argument("--json", help="also write the figures to this JSON file")
    args = p.parse_args()
    args.concurrency = [int(x) for x in args.concurrency.split(",")]
    import bm25s

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, bm25s {bm25s.__version__}, load average {os.getloadavg()[0]:.2f}")
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="afm-bench-search-") as tmp:
        work = Path(tmp)
        if args.skip != "search":
            print(f"1. cached /search, one worker, {args.duration:g}s per run:", flush=True)
            out["cached_search"] = bench_cached_search(args, work)
        if args.skip != "bm25":
            print(f"2. BM25 over {args.docs} synthetic documents, {args.queries} queries, top-10:", flush=True)
            out["bm25"] = bench_bm25(args, work)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
