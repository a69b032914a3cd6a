"""Agent-loop cost inside verl: ``afm_agent`` against verl's own ``tool_agent`` (baseline, same process).

Both loops run through verl 0.9.1's real ``AgentLoopWorker.generate_sequences`` (no Ray) on the same batch, with a
scripted token server that answers instantly and an instant tool, so what is measured is the loops' own work per
trajectory and per turn (prompt building, stop handling, tool dispatch, observation encoding, padding): the part
that must stay negligible next to generation on GPUs. Each trajectory makes ``--turns`` tool calls then answers.

    .venv-rl/bin/python benchmarks/bench_rl_agent_loop.py [--rows 256] [--turns 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import verl
import yaml
from hydra import compose, initialize_config_dir
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.workers.rollout.replica import TokenOutput

from afm.demo_content.samples import tokenizer_corpus
from afm.model.tiny import build_tiny_model
from afm.rl.tools import afm_tools_from_verl
from afm.tools import Tool, ToolContext, ToolResult

REPO = Path(__file__).resolve().parents[1]
VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"


class InstantSearch(Tool):
    """A web_search that answers at once with a fixed-size result list."""

    name = "web_search"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        return ToolResult("\n".join(f"{i}. [Result {i}](http://example.com/{i}) snippet about {body}"
                                    for i in range(5)))


class ScriptedServer:
    """verl's LLM client interface; the reply depends on the loop (afm_agent sends stop strings, tool_agent not)
    and on how many turns this request id has had."""

    def __init__(self, tokenizer: Any, turns: int) -> None:
        enc = lambda s: tokenizer.encode(s, add_special_tokens=False)  # noqa: E731
        self.afm = [enc(f"<think>step {k}: look it up</think>\n<web_search>query number {k}</web_search>")
                    for k in range(turns)] + [enc("<think>done</think>\n<answer>Veltria City</answer>")]
        call = '<tool_call>\n{"name": "web_search", "arguments": {"query": "query number %d"}}\n</tool_call>'
        self.hermes = [enc(f"step {k}: look it up\n" + call % k + "<|im_end|>") for k in range(turns)] + [
            enc("The answer is Veltria City.<|im_end|>")]
        self.turn: Counter[str] = Counter()

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        script = self.afm if sampling_params.get("stop") else self.hermes
        k = self.turn[request_id]
        self.turn[request_id] += 1
        return TokenOutput(token_ids=list(script[min(k, len(script) - 1)]), log_probs=None, stop_reason="completed",
                           num_preempted=0)


def make_worker(model: Path, tools_yaml: Path, turns: int, server: ScriptedServer) -> AgentLoopWorker:
    overrides = ["actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={model}", "trainer.device=cpu",
                 "actor_rollout_ref.rollout.prompt_length=256", "actor_rollout_ref.rollout.response_length=4096",
                 f"actor_rollout_ref.rollout.agent.agent_loop_config_path={REPO / 'configs/verl/agent_loops.yaml'}",
                 f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools_yaml}",
                 f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={turns + 2}",
                 f"actor_rollout_ref.rollout.multi_turn.max_user_turns={turns + 2}",
                 "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4000",
                 "actor_rollout_ref.rollout.multi_turn.format=hermes"]
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        cfg = compose("ppo_trainer", overrides=overrides)
    return AgentLoopWorker(cfg, llm_client=server)


def batch(rows: int, agent: str) -> DataProto:
    def col(values: list[Any]) -> np.ndarray:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return arr

    prompts = [[{"role": "system", "content": "Answer with tools."},
                {"role": "user", "content": f"Question {i}: what is the capital of Veltria?"}] for i in range(rows)]
    data = DataProto(non_tensor_batch={
        "raw_prompt": col(prompts), "agent_name": col([agent] * rows), "index": col([str(i) for i in range(rows)]),
        "extra_info": col([{"index": i} for i in range(rows)]), "tools_kwargs": col([{} for _ in range(rows)])},
        meta_info={})
    data.non_tensor_batch["priority"] = np.arange(rows, dtype=np.int64)
    return data


def run_once(worker: AgentLoopWorker, server: ScriptedServer, rows: int, agent: str) -> tuple[float, DataProto]:
    server.turn.clear()
    t0 = time.perf_counter()
    out = asyncio.run(worker.generate_sequences(batch(rows, agent)))
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "tiny", tokenizer_corpus(0))
        tools_yaml = Path(tmp) / "tools.yaml"
        tools_yaml.write_text(yaml.safe_dump({"tools": [{
            "class_name": "afm.rl.tools.AfmVerlTool",
            "config": {"type": "native", "afm_tool": "web_search", "afm_class": f"{__name__}:InstantSearch"},
            "tool_schema": {"type": "function", "function": {
                "name": "web_search", "description": "Search the web.",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                               "required": ["query"]}}}}]}))
        from transformers import AutoTokenizer

        server = ScriptedServer(AutoTokenizer.from_pretrained(model), args.turns)
        worker = make_worker(model, tools_yaml, args.turns, server)
        results: dict[str, list[float]] = {"tool_agent": [], "afm_agent": []}
        checks: dict[str, Any] = {}
        for _ in range(args.repeats):
            for agent in ("tool_agent", "afm_agent"):  # alternate, so drift hits both alike
                wall, out = run_once(worker, server, args.rows, agent)
                results[agent].append(wall)
                mask = out.batch["response_mask"]
                checks[agent] = {"response_tokens": int(out.batch["attention_mask"][:, 256:].sum()),
                                 "masked_tokens": int((mask == 0).logical_and(out.batch["attention_mask"][:, 256:] == 1)
                                                      .sum()),
                                 "turns": float(np.mean(out.non_tensor_batch["__num_turns__"]))}

        async def close() -> None:
            for tool in afm_tools_from_verl(worker.tools).values():
                await tool.aclose()
        asyncio.run(close())

    best = {k: min(v) for k, v in results.items()}
    calls = args.rows * (args.turns + 1)
    print(f"rows={args.rows} turns={args.turns} (+1 answer turn) repeats={args.repeats}")
    for agent in ("tool_agent", "afm_agent"):
        print(f"  {agent:<10} best {best[agent] * 1e3:8.1f} ms/batch  {best[agent] / args.rows * 1e3:7.3f} ms/trajectory"
              f"  {best[agent] / calls * 1e3:7.3f} ms/turn  {json.dumps(checks[agent])}")
    print(f"  ratio afm_agent / tool_agent (wall, lower is better): {best['afm_agent'] / best['tool_agent']:.2f}")


if __name__ == "__main__":
    main()
