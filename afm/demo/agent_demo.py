"""The quickstart's rollout step: the SFT'd tiny model solves demo questions through the rollout engine with
real local tools (the search server over the demo corpus as a process on 127.0.0.1, and the code sandbox)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from afm.agent import AgentConfig, SamplingParams, ToolRunner, Trajectory, run_trajectory
from afm.agent.hf_backend import HFBackend
from afm.agent.runner import JsonlStore, format_summary, summarize
from afm.demo_content.samples import DEMO_SYSTEM, demo_samples
from afm.testing.procs import ServerProcess, free_port


def show(traj: Trajectory, width: int = 100) -> str:
    """A trajectory for humans: model text as is, observations boxed (they are masked in training)."""
    out = []
    for seg in traj.segments:
        if seg.kind == "model":
            out.append(seg.text if len(seg.text) <= 600 else seg.text[:600] + f" …[{len(seg.text) - 600} more chars]")
        else:
            body = seg.text.strip("\n")
            out.append("\n  ┌ observation (inserted by the environment, loss mask 0)\n"
                       + "\n".join("  │ " + line[:width] for line in body.splitlines()) + "\n  └\n")
    return "".join(out)


class DemoServers:
    """The demo web site and the search, crawl and wiki servers over the demo corpora, as real processes."""

    def __init__(self, workdir: str | Path, world: Any = None) -> None:
        """``world``: an :class:`afm.demo.world.World` whose towns, people and pages the servers hold instead of
        the fixed demo corpora (the demo site serves both)."""
        from afm.servers.demo_data import DemoCorpora, write_demo_corpora

        self.work = Path(workdir)
        self.work.mkdir(parents=True, exist_ok=True)
        self.ports = {name: free_port() for name in ("site", "search", "crawl", "wiki")}
        self.site = f"http://127.0.0.1:{self.ports['site']}"
        site_args: list[str] = []
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
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.__exit__()
            raise
        p = self.ports
        print(f"servers up on 127.0.0.1: demo site :{p['site']}, search :{p['search']}, crawl :{p['crawl']}, "
              f"wiki :{p['wiki']}")
        return self

    def __exit__(self, *exc: object) -> None:
        for server in reversed(self.servers):
            server.stop()


def run_agent_demo(model_dir: str | Path, workdir: str | Path, n_questions: int = 4, seed: int = 7,
                   max_turns: int = 6, servers: DemoServers | None = None) -> dict[str, Any]:
    """Call each server-backed tool once, then roll out ``n_questions`` demo questions with web_search and code;
    write and summarise the trajectories. Starts :class:`DemoServers` unless running ones are given."""
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    samples = demo_samples(n_questions, seed)
    out = work / "trajectories.jsonl"
    if out.exists():
        out.unlink()
    own = servers is None
    srv = servers if servers is not None else DemoServers(work)
    if own:
        srv.__enter__()
    try:
        for line in asyncio.run(_tool_checks(srv.ports, srv.site)):
            print("  " + line)
        trajs = asyncio.run(_rollout(model_dir, srv.ports["search"], [s.question for s in samples], max_turns))
    finally:
        if own:
            srv.__exit__()
    store = JsonlStore(out)
    for i, (sample, traj) in enumerate(zip(samples, trajs, strict=True)):
        store.append({"key": f"demo{i}#0", "question": sample.question, "gold": sample.answer, **traj.to_dict()})
    store.close()
    summary = summarize(store.records())
    correct = sum(t.final_answer() is not None and t.final_answer().strip() == s.answer
                  for s, t in zip(samples, trajs, strict=True))
    best = max(range(len(trajs)), key=lambda i: (len(trajs[i].tool_calls) > 0, trajs[i].final_answer() is not None))
    print(f"question: {samples[best].question}   (gold: {samples[best].answer})")
    print(show(trajs[best]))
    print(f"finish: {trajs[best].finish_reason}; tool calls: "
          f"{[(c.name, c.status) for c in trajs[best].tool_calls]}\n")
    print(format_summary(summary))
    print(f"exact answers: {correct}/{len(samples)} (a tiny model trained for a minute: the point is the pipeline, "
          f"all of it real; trajectories in {out})")
    return {"trajectories": str(out), "summary": summary, "correct": correct}


async def _tool_checks(ports: dict[str, int], site: str) -> list[str]:
    """One call of each server-backed tool, as the engine would make it (shows every server answering)."""
    from afm.tools import ToolContext
    from afm.tools.crawl_page import CrawlPageTool
    from afm.tools.web_search import WebSearchTool
    from afm.tools.wiki_search import WikiSearchTool

    calls = [(WebSearchTool({"url": f"http://127.0.0.1:{ports['search']}/search", "num_results": 2}),
              "Brassel Lighthouse height"),
             (CrawlPageTool({"url": f"http://127.0.0.1:{ports['crawl']}/crawl_page", "summary_type": "none"}),
              f"{site}/brassel-lighthouse.html"),
             (WikiSearchTool({"url": f"http://127.0.0.1:{ports['wiki']}/retrieve", "topk": 1}),
              "Who designed the Brassel Lighthouse?")]
    lines = []
    for tool, arg in calls:
        try:
            res = await tool.call(arg, ToolContext(question="How tall is the Brassel Lighthouse?"))
        finally:
            await tool.aclose()
        first = " ".join(res.text.split())[:110]
        lines.append(f"<{tool.name}>{arg}</{tool.name}> -> {res.status}: {first}…")
    return lines


async def _rollout(model_dir: str | Path, port: int, questions: list[str], max_turns: int) -> list[Trajectory]:
    from afm.tools.code import CodeTool
    from afm.tools.web_search import WebSearchTool

    backend = HFBackend.from_pretrained(str(model_dir), max_batch=len(questions))
    tools = {"web_search": WebSearchTool({"url": f"http://127.0.0.1:{port}/search", "num_results": 3}),
             "code": CodeTool({"timeout": 10})}
    cfg = AgentConfig(tools=("web_search", "code"), sampling=SamplingParams(temperature=0.0), max_turns=max_turns,
                      max_tokens_per_turn=160, max_response_tokens=1200, max_model_len=2048, tool_timeout_s=30)
    runner = ToolRunner(tools, cfg)
    tok = backend.tok
    try:
        prompts = [tok.chat_prompt_ids([{"role": "system", "content": DEMO_SYSTEM}, {"role": "user", "content": q}])
                   for q in questions]
        return list(await asyncio.gather(*[run_trajectory(backend, tok, runner, cfg, p, question=q)
                                           for p, q in zip(prompts, questions, strict=True)]))
    finally:
        for tool in tools.values():
            await tool.aclose()
        await backend.aclose()
