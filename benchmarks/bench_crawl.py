#!/usr/bin/env python
"""Crawl+extract throughput of the crawl server on the local demo site, with baselines measured in the same run.

    .venv/bin/python benchmarks/bench_crawl.py [--pages 1000] [--rounds 3] [--concurrency 8] [--urls-per-request 5]

Starts the demo site (``afm.servers.demo_site``) and the crawl server (``afm.servers.crawl_server``, summary mode
``none``, cache off, the site's port allow-listed) as real processes on 127.0.0.1, then fetches the ten demo
pages over and over (each URL made unique with a query string) in four ways:

1. **raw GET**: httpx GETs of the pages, no extraction: what the site and the network cost;
2. **extract only**: trafilatura on the already downloaded HTML, in this process, one thread: what extraction
   costs;
3. **fetcher in-process**: ``PageFetcher`` (SSRF check, pinned connection, capped read, extraction): the crawl
   pipeline without the HTTP server around it;
4. **crawl server**: ``POST /crawl_page`` with ``--urls-per-request`` URLs per request, ``--concurrency``
   requests in flight.

Every figure is pages per second, the median of ``--rounds`` interleaved rounds (and latency percentiles over
all server requests). On a 2-core machine the site, the
server and this client share the cores, so the server figure includes their contention; the ratios to the raw
GET and extract-only baselines say how much of the cost is the crawl pipeline itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from afm.common.procs import ServerProcess, free_port
from afm.demo_content.web import DEMO_DOCUMENTS
from afm.servers.demo_site import DemoSite
from afm.servers.fetch import FetchLimits, PageFetcher, extract_html
from afm.servers.ssrf import AllowList, UrlPolicy


def page_urls(site: DemoSite, n: int, run: str) -> list[str]:
    """``n`` distinct URLs cycling over the demo pages (the query string defeats any cache)."""
    return [f"{site.page_url(DEMO_DOCUMENTS[i % len(DEMO_DOCUMENTS)].slug)}?{run}={i}" for i in range(n)]


async def bounded(jobs: list, concurrency: int) -> list:
    """Run coroutine factories with at most ``concurrency`` in flight; returns their results in order."""
    sem = asyncio.Semaphore(concurrency)

    async def one(job):
        async with sem:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs))


async def raw_get(urls: list[str], concurrency: int) -> tuple[float, list[bytes]]:
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        async def get(url: str):
            r = await client.get(url)
            r.raise_for_status()
            return r.content

        start = time.perf_counter()
        bodies = await bounded([lambda u=u: get(u) for u in urls], concurrency)
        return time.perf_counter() - start, bodies


def extract_only(bodies: list[bytes]) -> float:
    start = time.perf_counter()
    for body in bodies:
        if not extract_html(body):
            raise RuntimeError("extraction returned nothing")
    return time.perf_counter() - start


async def fetcher_in_process(urls: list[str], concurrency: int, allow: str) -> float:
    fetcher = PageFetcher(UrlPolicy(AllowList.parse(allow)), FetchLimits())
    try:
        start = time.perf_counter()
        results = await bounded([lambda u=u: fetcher.fetch(u) for u in urls], concurrency)
        elapsed = time.perf_counter() - start
    finally:
        await fetcher.aclose()
    bad = [r for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} in-process fetches failed, e.g. {bad[0].error}")
    return elapsed


async def through_server(server_url: str, urls: list[str], per_request: int,
                         concurrency: int) -> tuple[float, list[float], int]:
    groups = [urls[i:i + per_request] for i in range(0, len(urls), per_request)]
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120, trust_env=False) as client:
        async def post(group: list[str]) -> int:
            t = time.perf_counter()
            r = await client.post(f"{server_url}/crawl_page", json={"urls": group, "summary_type": "none"})
            latencies.append(time.perf_counter() - t)
            r.raise_for_status()
            return sum(p["status"] == "ok" for p in r.json()["pages"])

        start = time.perf_counter()
        ok = await bounded([lambda g=g: post(g) for g in groups], concurrency)
        return time.perf_counter() - start, latencies, sum(ok)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pages", type=int, default=1000, help="page fetches per measurement and round (default 1000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; figures are medians (default 3)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    p.add_argument("--urls-per-request", type=int, default=5, help="URLs per /crawl_page request (default 5)")
    p.add_argument("--workers", type=int, default=1, help="crawl server uvicorn workers (default 1)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args(argv)

    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, httpx {httpx.__version__}")
    n = args.pages
    with DemoSite() as site, tempfile.TemporaryDirectory() as tmp:
        allow = f"127.0.0.1:{site.port}"
        port = free_port()
        env = {"CRAWL_PAGE_ALLOW": allow, "CRAWL_CACHE": "off", "SUMMARY_OPENAI_API_BASE_URL": "",
               "AFM_METRICS_DB": str(Path(tmp) / "metrics.sqlite"),
               "JINA_API_KEY": "", "AFM_SERVER_TOKEN": "", "CRAWL_MAX_URLS": str(max(10, args.urls_per_request))}
        argv_server = ["-m", "afm.servers.crawl_server", "--port", str(port), "--workers", str(args.workers)]
        with ServerProcess(argv_server, port, env=env, log_path=Path(tmp) / "crawl.log") as server:
            # Warm-up: imports, connection pools, trafilatura's first call.
            asyncio.run(through_server(server.url, page_urls(site, 20, "warm"), args.urls_per_request, 4))
            asyncio.run(raw_get(page_urls(site, 20, "warm"), 4))

            # Rounds interleave the four measurements, so that load from other work on the machine hits them
            # alike; each figure is the median over rounds.
            times: dict[str, list[float]] = {k: [] for k in ("raw", "extract", "fetcher", "server")}
            latencies: list[float] = []
            for r in range(args.rounds):
                t_raw, bodies = asyncio.run(raw_get(page_urls(site, n, f"raw{r}"), args.concurrency))
                times["raw"].append(t_raw)
                times["extract"].append(extract_only(bodies))
                times["fetcher"].append(asyncio.run(fetcher_in_process(page_urls(site, n, f"fetcher{r}"),
                                                                       args.concurrency, allow)))
                t_server, lat, ok = asyncio.run(through_server(
                    server.url, page_urls(site, n, f"server{r}"), args.urls_per_request, args.concurrency))
                if ok != n:
                    print(f"ERROR: only {ok} of {n} pages came back ok through the server")
                    return 1
                times["server"].append(t_server)
                latencies.extend(lat)
    rates = {k: [n / t for t in v] for k, v in times.items()}
    figures = {f"{k}_pages_s": statistics.median(v) for k, v in rates.items()}
    figures.update(server_latency_p50_ms=1000 * statistics.median(latencies),
                   server_latency_p99_ms=1000 * pct(latencies, 99),
                   html_bytes_mean=sum(map(len, bodies)) / len(bodies))
    print(f"\n{n} pages per measurement and round, {args.rounds} rounds (the 10 demo pages, mean "
          f"{figures['html_bytes_mean']:.0f} bytes of HTML), concurrency {args.concurrency}, "
          f"{args.urls_per_request} URLs per server request, {args.workers} server worker(s)\n")
    print("| measurement | pages/s (median) | per round | vs raw GET |\n|---|---|---|---|")
    for label, key in (("raw httpx GET (baseline: site + network)", "raw"),
                       ("trafilatura extract only, 1 thread (baseline: extraction)", "extract"),
                       ("PageFetcher in-process (guard + fetch + extract)", "fetcher"),
                       ("crawl server POST /crawl_page, summary none", "server")):
        value = figures[f"{key}_pages_s"]
        rounds = " / ".join(f"{x:,.0f}" for x in rates[key])
        print(f"| {label} | {value:,.0f} | {rounds} | {value / figures['raw_pages_s']:.2f} |")
    print(f"\ncrawl server request latency ({args.urls_per_request} pages each): "
          f"p50 {figures['server_latency_p50_ms']:.1f} ms, p99 {figures['server_latency_p99_ms']:.1f} ms")
    print(f"crawl server / extract-only: {figures['server_pages_s'] / figures['extract_pages_s']:.2f} "
          "(1.0 would mean fetching and serving cost nothing beyond extraction)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), **figures}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
