"""Rollout-engine overhead and concurrency.

1. Engine overhead per turn with an instant backend and an instant tool (target < 1 ms/turn), against the bare
   cost of the same backend + tool + observation encoding called in a plain loop (baseline, same run).
2. 1000 concurrent trajectories on this machine with a backend that answers after a fixed latency: wall time vs
   the ideal (turns x latency).
3. Trajectories/s against the local OpenAI-compatible stand-in (token ids, like vLLM), printed with the
   stand-in's own raw request rate at the same concurrency as the baseline.

    python benchmarks/bench_agent.py [--trajectories 200] [--turns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from afm.agent import AgentConfig, Generation, SamplingParams, TokenizerAdapter, ToolRunner, run_trajectory
from afm.agent.openai_backend import OpenAIBackend
from afm.demo_content.samples import tokenizer_corpus
from afm.model.tiny import build_tiny_model
from afm.offline.openai_standin import StandIn
from afm.tools import Tool, ToolContext, ToolResult
from afm.trajectory import format_observation


class InstantTool(Tool):
    name = "web_search"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        return ToolResult("1. [Result](http://example.com)\nsnippet text for the query " + body)


class TurnBackend:
    """Stateless scripted backend: the turn is the number of tool calls already in the context."""

    def __init__(self, tok: TokenizerAdapter, turns: int, latency_s: float = 0.0) -> None:
        self.obs_open = tok.encode("<observation>")[0]
        self.calls = [tok.encode(f"<think> step {i} </think>\n<web_search>query {i}</web_search>")
                      for i in range(turns)]
        self.answer = tok.encode("<think> done </think>\n<answer>42</answer>")
        self.latency_s = latency_s

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        turn = prompt_ids.count(self.obs_open)
        if turn < len(self.calls):
            return Generation(self.calls[turn], "stop", _TEXT[0][turn], "</web_search>")
        return Generation(self.answer, "stop", _TEXT[1], "</answer>")

    async def aclose(self) -> None:
        return None


_TEXT: list = [[], ""]


async def overhead(tok: TokenizerAdapter, n: int, turns: int) -> tuple[float, float]:
    backend = TurnBackend(tok, turns)
    _TEXT[0] = [tok.decode(c) for c in backend.calls]
    _TEXT[1] = tok.decode(backend.answer)
    cfg = AgentConfig(tools=("web_search",), max_turns=turns + 2)
    tool = InstantTool()
    runner = ToolRunner({"web_search": tool}, cfg)
    prompt = tok.chat_prompt_ids([{"role": "user", "content": "benchmark question"}])
    # Baseline: the same backend calls, tool calls and observation encodings in a plain loop.
    t0 = time.perf_counter()
    for _ in range(n):
        ctx = list(prompt)
        for _turn in range(turns + 1):
            gen = await backend.generate(ctx, cfg.sampling)
            ctx += gen.ids
            if gen.stop_str == "</answer>":
                break
            res = await tool.call("q", ToolContext())
            ctx += tok.encode(format_observation(res.text))
    base = (time.perf_counter() - t0) / (n * (turns + 1))
    t0 = time.perf_counter()
    for _ in range(n):
        traj = await run_trajectory(backend, tok, runner, cfg, prompt)
        assert traj.finish_reason == "answer", traj.finish_reason
    engine = (time.perf_counter() - t0) / (n * (turns + 1))
    return engine * 1000, base * 1000


async def concurrent(tok: TokenizerAdapter, n: int, turns: int, latency: float) -> tuple[float, float]:
    backend = TurnBackend(tok, turns, latency)
    cfg = AgentConfig(tools=("web_search",), max_turns=turns + 2)
    runner = ToolRunner({"web_search": InstantTool()}, cfg)
    prompt = tok.chat_prompt_ids([{"role": "user", "content": "benchmark question"}])
    t0 = time.perf_counter()
    trajs = await asyncio.gather(*[run_trajectory(backend, tok, runner, cfg, prompt) for _ in range(n)])
    wall = time.perf_counter() - t0
    assert all(t.finish_reason == "answer" for t in trajs)
    return wall, (turns + 1) * latency


async def against_standin(tok: TokenizerAdapter, model_dir: Path, n: int, concurrency: int) -> tuple[float, float]:
    reply = "<think> one step </think>\n<web_search>some query</web_search>"
    with StandIn(tokenizer=str(model_dir)) as llm:
        llm.rules({"match": "observation", "content": "<think> done </think>\n<answer>42</answer>"})
        llm.set_default(reply)
        prompt = tok.chat_prompt_ids([{"role": "user", "content": "benchmark question"}])
        # Baseline: the stand-in's raw request rate with the same request body and concurrency.
        sem = asyncio.Semaphore(concurrency)
        backend = OpenAIBackend(llm.base_url, "standin", tok, concurrency=concurrency)
        body = backend.request_body(prompt, SamplingParams(stop=("</web_search>", "</answer>")))
        async with httpx.AsyncClient(timeout=60) as client:
            async def one() -> None:
                async with sem:
                    r = await client.post(f"{llm.base_url}/completions", json=body)
                    r.raise_for_status()

            t0 = time.perf_counter()
            await asyncio.gather(*[one() for _ in range(2 * n)])
            raw = 2 * n / (time.perf_counter() - t0)
        cfg = AgentConfig(tools=("web_search",), max_turns=4)
        runner = ToolRunner({"web_search": InstantTool()}, cfg)
        t0 = time.perf_counter()
        trajs = await asyncio.gather(*[run_trajectory(backend, tok, runner, cfg, prompt) for _ in range(n)])
        rate = n / (time.perf_counter() - t0)
        await backend.aclose()
        assert all(t.finish_reason == "answer" for t in trajs), {t.finish_reason for t in trajs}
        return rate, raw


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trajectories", type=int, default=200)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--concurrent", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.05)
    args = ap.parse_args()
    model_dir = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny", tokenizer_corpus(0))
    tok = TokenizerAdapter.from_pretrained(str(model_dir))
    eng, base = asyncio.run(overhead(tok, args.trajectories, args.turns))
    print(f"1. per turn: engine {eng:.3f} ms vs bare backend+tool+encode loop {base:.3f} ms "
          f"-> engine overhead {eng - base:.3f} ms/turn (target < 1 ms)")
    wall, ideal = asyncio.run(concurrent(tok, args.concurrent, args.turns, args.latency))
    print(f"2. {args.concurrent} concurrent trajectories x {args.turns + 1} turns, backend latency "
          f"{args.latency * 1000:.0f} ms: wall {wall:.2f} s vs ideal {ideal:.2f} s (x{wall / ideal:.2f})")
    rate, raw = asyncio.run(against_standin(tok, model_dir, 200, 32))
    print(f"3. against the stand-in (2 requests per trajectory): {rate:.1f} trajectories/s = "
          f"{2 * rate:.1f} requests/s vs the stand-in's raw {raw:.1f} requests/s (x{2 * rate / raw:.2f})")


if __name__ == "__main__":
    main()
