"""The demo's tool servers as real processes on 127.0.0.1: the demo web site and the search, crawl and wiki servers
over the demo corpora or a demo world (:mod:`afm.quickstart.world`); used by the quickstart, the recipe and the tests."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from afm.common.procs import ServerProcess, free_port

# The demo site's port of a seeded run, below Linux's ephemeral range (32768-60999) where free_port() draws the others
SITE_PORT_BASE, SITE_PORT_SPAN = 20000, 10000


def seed_site_port(seed: int) -> int | None:
    """The demo site's port for a run of ``seed``, or None when something on 127.0.0.1 holds it (then a random one).

    The site's address is in every page URL of the teacher's trajectories, so it is in the SFT rows: with a random
    port, two runs of one seed trained on different digits and ended differently (lookup RL - SFT +48 [+28, +68] and
    +28 [+0, +56] on two runs of seed 0, benchmarks/RESULTS.md 2026-11-29 nineteenth session). A port of the seed
    makes the seed the whole of the run's data."""
    port = SITE_PORT_BASE + (seed * 7919) % SITE_PORT_SPAN
    with socket.socket() as s:
        # as the site's server binds (SO_REUSEADDR): the previous run's connections left in TIME_WAIT do not hold it,
        # a process listening there does
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
    return port


class DemoServers:
    """The demo web site and the search, crawl and wiki servers over the demo corpora, as real processes."""

    def __init__(self, workdir: str | Path, world: Any = None, site_port: int | None = None) -> None:
        """``world``: an :class:`afm.quickstart.world.World` whose towns, people and pages the servers hold instead of
        the fixed demo corpora (the demo site serves both). ``site_port``: serve the site there, e.g. the port in
        the page URLs a student was trained on (it learns the site's address), to evaluate it again later."""
        from afm.servers.demo_data import DemoCorpora, write_demo_corpora

        self.work = Path(workdir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.ports = {name: free_port() for name in ("site", "search", "crawl", "wiki")}
        if site_port:
            self.ports["site"] = int(site_port)
        self.site = f"http://127.0.0.1:{self.ports['site']}"
        site_args: list[str] = []
        self.world = world
        if world is None:
            corpora = write_demo_corpora(self.work / "corpora", self.site)
        else:
            import json

            folder = self.work / "corpora"
            folder.mkdir(parents=True, exist_ok=True)
            corpora = DemoCorpora(folder / "world_search.jsonl", folder / "world_wiki.jsonl")
            for path, rows in ((corpora.search, world.search_corpus(self.site)), (corpora.wiki, world.wiki_corpus())):
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
            pages = folder / "world_pages.json"
            pages.write_text(json.dumps(world.site_documents()))
            site_args = ["--documents", str(pages)]
        env = {"WEB_SEARCH_BACKEND": "local", "WEB_SEARCH_CORPUS": str(corpora.search),
               "WEB_SEARCH_CACHE": str(self.work / "search_cache.sqlite"), "WIKI_CORPUS": str(corpora.wiki),
               "CRAWL_CACHE": "off", "SUMMARY_OPENAI_API_BASE_URL": ""}
        p = self.ports
        self.servers = [
            ServerProcess(["-m", "afm.servers.demo_site", "--port", str(p["site"]), *site_args], p["site"], env=env,
                          log_path=self.work / "demo_site.log"),
            ServerProcess(["-m", "afm.servers.search_server", "--port", str(p["search"])], p["search"], env=env,
                          log_path=self.work / "search_server.log"),
            ServerProcess(["-m", "afm.servers.crawl_server", "--port", str(p["crawl"]), "--allow",
                           f"127.0.0.1:{p['site']}", "--summary-type", "none"], p["crawl"], env=env,
                          log_path=self.work / "crawl_server.log"),
            ServerProcess(["-m", "afm.servers.wiki_server", "--port", str(p["wiki"])], p["wiki"], env=env,
                          log_path=self.work / "wiki_server.log"),
        ]

    def tools_config(self) -> dict[str, Any]:
        """A tools config (``afm.tools.load_tools_config`` shape) pointing the clients at these servers."""
        p = self.ports
        return {"tools": [
            {"name": "web_search", "config": {"url": f"http://127.0.0.1:{p['search']}/search", "num_results": 3}},
            {"name": "crawl_page", "config": {"url": f"http://127.0.0.1:{p['crawl']}/crawl_page",
                                              "summary_type": "none"}},
            {"name": "wiki_search", "config": {"url": f"http://127.0.0.1:{p['wiki']}/retrieve", "topk": 3}},
            {"name": "code", "config": {"timeout": 10, "mode": "pool"}}]}

    def __enter__(self) -> DemoServers:
        # everything up to the return inside the try: a signal turned into SystemExit while the "servers up" line is
        # printed is raised in __enter__, where the with statement would not call __exit__
        try:
            for server in self.servers:
                server.start()
            p = self.ports
            print(f"servers up on 127.0.0.1: demo site :{p['site']}, search :{p['search']}, crawl :{p['crawl']}, "
                  f"wiki :{p['wiki']}", flush=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for server in reversed(self.servers):
            server.stop()
