"""A tool protocol added by subclassing the loop (no fork): JSON tool calls in ``<tool_call>``, outputs in
``<tool_response>``, a final answer closed by ``</final>``. The loop's guarantees (token-in-token-out, loss mask,
one finish reason) hold for it as for the CoA protocol."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from afm.agent import AgentConfig, SamplingParams, TokenizerAdapter, ToolRunner
from afm.agent.backend import Generation
from afm.agent.loop import AgentLoop
from afm.agent.openai_backend import OpenAIBackend
from afm.agent.record import FinishReason, ToolCallRecord
from afm.testing.openai_standin import StandIn
from afm.tools import Tool, ToolContext, ToolResult
from afm.trajectory.parse import ToolCall


class Search(Tool):
    name = "web_search"

    def __init__(self) -> None:
        super().__init__(None)
        self.calls: list[str] = []

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        self.calls.append(body)
        return ToolResult(f"Paris is the capital of {body.split()[-1]}.")


class JsonToolLoop(AgentLoop):
    def stop_strings(self) -> tuple[str, ...]:
        return ("</tool_call>", "</final>")

    def parse_tool_call(self, text: str, gen: Generation) -> ToolCall | None:
        m = re.search(r"<tool_call>(.*?)</tool_call>\s*$", text, re.S)
        if m is None:
            return None
        call = json.loads(m.group(1))
        return ToolCall(call["name"], call["arguments"]["query"], m.start(), m.end(), True)

    def should_stop(self, gen: Generation, text: str, cut: bool) -> FinishReason | None:
        return "answer" if gen.stop_str == "</final>" else super().should_stop(gen, text, cut)

    def on_observation(self, call: ToolCallRecord, content: str) -> str:
        return json.dumps({"name": call.name, "content": content})

    def format_observation(self, content: str) -> str:
        return f"\n<tool_response>\n{content}\n</tool_response>\n"


@pytest.fixture(scope="module")
def tok(tiny_model) -> TokenizerAdapter:
    return TokenizerAdapter.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


def _run(llm, tok, loop_cls: type[AgentLoop], replies: list[str]):
    llm.reset()
    llm.queue(*replies)
    search = Search()
    cfg = AgentConfig(tools=("web_search",), sampling=SamplingParams(temperature=0), max_turns=4)

    async def go():
        backend = OpenAIBackend(llm.base_url, "standin", tok, timeout_s=30)
        prompt = tok.chat_prompt_ids([{"role": "user", "content": "What is the capital of France?"}])
        try:
            return await loop_cls(backend, tok, ToolRunner({"web_search": search}, cfg), cfg).run(prompt)
        finally:
            await backend.aclose()

    return asyncio.run(go()), llm.requests(), search


REPLIES = ['Let me look.<tool_call>{"name": "web_search", "arguments": {"query": "capital of France"}}</tool_call>'
           " ignored after the stop",
           "It says Paris. Paris</final> ignored"]


def test_a_subclass_runs_its_own_tool_protocol(llm, tok):
    traj, reqs, search = _run(llm, tok, JsonToolLoop, REPLIES)
    assert traj.finish_reason == "answer" and traj.turns == 2
    assert [r["body"]["stop"] for r in reqs] == [["</tool_call>", "</final>"]] * 2
    assert search.calls == ["capital of France"]
    assert [(c.name, c.argument, c.status) for c in traj.tool_calls] == [("web_search", "capital of France", "ok")]
    model, obs, final = traj.segments
    assert model.text.endswith("</tool_call>") and final.text.endswith("Paris</final>")
    content = json.dumps({"name": "web_search", "content": "Paris is the capital of France."})
    assert obs.kind == "observation" and obs.text == f"\n<tool_response>\n{content}\n</tool_response>\n"
    assert obs.ids == tok.encode(obs.text)
    # token-in-token-out: the second request is the prompt + the sampled ids + the observation ids, nothing re-encoded
    assert reqs[1]["body"]["prompt"] == traj.prompt_ids + model.ids + obs.ids
    assert traj.response_mask() == [1] * len(model.ids) + [0] * len(obs.ids) + [1] * len(final.ids)


def test_the_default_loop_does_not_read_that_protocol(llm, tok):
    """The same replies under the CoA protocol: no stop on </tool_call>, no tool run (the hooks made the difference)."""
    traj, reqs, search = _run(llm, tok, AgentLoop, REPLIES)
    assert reqs[0]["body"]["stop"] == ["</web_search>", "</answer>"]
    assert search.calls == [] and traj.finish_reason == "eos"
