"""The rollout engine: token-in-token-out invariant, finish reasons, malformed calls, budgets, backends, and the
hooks that let a subclass of the loop speak another tool protocol.

The model is either the scripted OpenAI-compatible stand-in on 127.0.0.1 (answering with token ids from the tiny
model's tokenizer, like vLLM) or the tiny HF model in process; tools are the real code sandbox and small Tool
subclasses defined here for failure modes.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from afm.agent import AgentConfig, SamplingParams, TokenizerAdapter, ToolRunner, Trajectory, run_trajectory
from afm.agent.backend import Generation
from afm.agent.loop import DUPLICATE_CRAWL_NOTE, DUPLICATE_SEARCH_NOTE, AgentLoop
from afm.agent.openai_backend import OpenAIBackend
from afm.agent.record import FinishReason, ToolCallRecord
from afm.offline.openai_standin import StandIn
from afm.tools import Tool, ToolContext, ToolResult
from afm.tools.code import CodeTool
from afm.trajectory import format_observation
from afm.trajectory.parse import ToolCall

F = "```"


class EchoSearch(Tool):
    """Answers instantly; counts calls (to check duplicate suppression)."""

    name = "web_search"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.calls: list[str] = []

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        self.calls.append(body)
        size = int(self.config.get("size", 0))
        return ToolResult(("result for " + body) + ("x" * size))


class Broken(Tool):
    name = "crawl_page"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        if body == "hang":
            await asyncio.sleep(30)
        raise RuntimeError("disk on fire")


@pytest.fixture(scope="module")
def tok(tiny_model) -> TokenizerAdapter:
    return TokenizerAdapter.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


@pytest.fixture(scope="module")
def code_tool():
    tool = CodeTool({"timeout": 5})
    yield tool


def run(llm, tok, replies, *, tools=None, config=None, retries=0, question="q?") -> tuple[Trajectory, list]:
    llm.reset()
    llm.queue(*replies)
    tools = tools if tools is not None else {"web_search": EchoSearch()}
    cfg = config or AgentConfig(tools=tuple(tools), sampling=SamplingParams(temperature=0), max_turns=6)

    async def go() -> Trajectory:
        backend = OpenAIBackend(llm.base_url, "standin", tok, retries=retries, timeout_s=30)
        prompt = tok.chat_prompt_ids([{"role": "user", "content": question}])
        try:
            return await run_trajectory(backend, tok, ToolRunner(tools, cfg), cfg, prompt, question=question)
        finally:
            await backend.aclose()
            for t in tools.values():
                await t.aclose()

    traj = asyncio.run(go())
    return traj, llm.requests()


def assert_invariant(traj: Trajectory, requests: list[dict], tok: TokenizerAdapter) -> None:
    """Every request's prompt is exactly the context so far; masks mark observations; texts decode from ids."""
    context = list(traj.prompt_ids)
    model_segments = 0
    for seg in traj.segments:
        if seg.kind == "model":
            assert requests[model_segments]["body"]["prompt"] == context
            model_segments += 1
        else:
            assert tok.decode(seg.ids) == seg.text
            assert seg.text.startswith("\n\n<observation>\n") and seg.text.endswith("\n</observation>\n\n")
        context += seg.ids
    assert model_segments == len(requests) == traj.turns
    assert traj.context_ids() == context
    mask = traj.response_mask()
    assert len(mask) == len(traj.response_ids())
    pos = 0
    for seg in traj.segments:
        assert set(mask[pos:pos + len(seg.ids)]) <= {1 if seg.kind == "model" else 0}
        pos += len(seg.ids)


def test_tool_loop_token_invariant_and_answer(llm, tok, code_tool):
    replies = [f"<think> compute </think>\n<code>\n{F}py\nprint(6 * 7)\n{F}\n</code> ignored after the stop",
               "<think> it printed 42 </think>\n<answer>42</answer> also ignored"]
    traj, reqs = run(llm, tok, replies, tools={"code": code_tool})
    assert traj.finish_reason == "answer" and traj.final_answer() == "42"
    assert [(c.name, c.status) for c in traj.tool_calls] == [("code", "ok")]
    obs = next(s for s in traj.segments if s.kind == "observation")
    assert obs.text == format_observation("[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]")
    assert traj.segments[0].text.endswith("</code>") and "ignored" not in traj.response_text()
    assert traj.ids_source == "sampled"
    assert_invariant(traj, reqs, tok)
    # the stop strings sent are the enabled tools' closing tags + </answer>
    assert reqs[0]["body"]["stop"] == ["</code>", "</answer>"]
    assert reqs[0]["body"]["include_stop_str_in_output"] is True


def test_finish_reasons(llm, tok):
    traj, reqs = run(llm, tok, ["<think> done thinking, no answer </think>"])
    assert traj.finish_reason == "eos" and traj.segments[0].ids[-1] in tok.eos_ids
    assert_invariant(traj, reqs, tok)
    cfg = AgentConfig(tools=("web_search",), max_tokens_per_turn=5, max_turns=3)
    traj, reqs = run(llm, tok, ["<think> " + "word " * 50 + "</think>"], config=cfg)
    assert traj.finish_reason == "max_tokens" and len(traj.segments[0].ids) == 5
    cfg = AgentConfig(tools=("web_search",), max_turns=2)
    traj, reqs = run(llm, tok, ["<web_search>a</web_search>", "<web_search>b</web_search>",
                                "<answer>never asked</answer>"], config=cfg)
    assert traj.finish_reason == "max_turns" and traj.turns == 2 and len(traj.tool_calls) == 2
    assert_invariant(traj, reqs, tok)
    traj, _ = run(llm, tok, [{"status": 500, "content": "boom"}])
    assert traj.finish_reason == "error" and "HTTP 500" in traj.error
    cfg = AgentConfig(tools=("web_search",), trajectory_timeout_s=0.5)
    traj, _ = run(llm, tok, [{"content": "<answer>late</answer>", "delay": 2}], config=cfg)
    assert traj.finish_reason == "timeout"


def test_retries_then_success(llm, tok):
    traj, reqs = run(llm, tok, [{"status": 503, "content": "busy"}, "<answer>ok</answer>"], retries=2)
    assert traj.finish_reason == "answer" and len(reqs) == 2


def test_malformed_calls_become_observations(llm, tok, code_tool):
    tools = {"web_search": EchoSearch(), "crawl_page": Broken(), "code": code_tool}
    cfg = AgentConfig(tools=("web_search", "crawl_page", "code"), max_turns=8, tool_timeout_s=0.5)
    replies = ["stray closing </web_search>",             # closing tag without its opener
               "<web_search>   </web_search>",             # empty body
               "<code>the final answer is 4</code>",       # no python in the code body
               "<crawl_page>http://example.com</crawl_page>",  # the tool raises
               "<crawl_page>hang</crawl_page>",            # the tool hangs past its timeout
               "<answer>4</answer>"]
    traj, reqs = run(llm, tok, replies, tools=tools, config=cfg)
    assert traj.finish_reason == "answer"
    texts = [s.text for s in traj.segments if s.kind == "observation"]
    assert "Could not read a complete tool call" in texts[0]
    assert "The <web_search> call was empty" in texts[1]
    assert "No Python code found" in texts[2] and "<answer>" in texts[2]
    assert "The crawl_page tool failed (RuntimeError: disk on fire)" in texts[3]
    assert "did not answer within" in texts[4]
    assert [c.status for c in traj.tool_calls] == ["invalid", "invalid", "error", "error", "timeout"]
    assert_invariant(traj, reqs, tok)


def test_a_call_after_a_block_left_open_is_run(llm, tok):
    # the real SFT'd Gemma's turn (issue 24): its <plan> closed by a made-up tag, then a complete call at the stop
    search = EchoSearch()
    replies = ["<think>Town 5033: I need its founding year.</think>\n<plan>1. Find when Town 5033 was founded. "
               "2. Answer.</subtracting>\n<think>Look up the town.</think>\n<web_search> Town 5033</web_search>",
               "<answer>1342</answer>"]
    traj, reqs = run(llm, tok, replies, tools={"web_search": search})
    assert search.calls == ["Town 5033"]
    assert [(c.name, c.status) for c in traj.tool_calls] == [("web_search", "ok")]
    assert traj.finish_reason == "answer"
    assert_invariant(traj, reqs, tok)


def test_unknown_tool_and_duplicates(llm, tok):
    search = EchoSearch()
    cfg = AgentConfig(tools=("web_search", "crawl_page"), max_turns=6)
    replies = ["<web_search>Capital  of France</web_search>", "<web_search>capital of france</web_search>",
               "<crawl_page>http://a.example</crawl_page>", "<answer>Paris</answer>"]
    traj, _reqs = run(llm, tok, replies, tools={"web_search": search}, config=cfg)
    texts = [s.text for s in traj.segments if s.kind == "observation"]
    assert search.calls == ["Capital  of France"]
    assert DUPLICATE_SEARCH_NOTE in texts[1]
    assert "There is no tool named 'crawl_page'" in texts[2]
    assert [c.status for c in traj.tool_calls] == ["ok", "duplicate", "invalid"]
    assert DUPLICATE_CRAWL_NOTE.startswith("I have crawled this URL before")


def test_context_budget_shrinks_or_stops(llm, tok):
    big = {"web_search": EchoSearch({"size": 20000})}
    cfg = AgentConfig(tools=("web_search",), max_model_len=600, max_response_tokens=500, max_turns=5,
                      min_turn_tokens=16)
    traj, reqs = run(llm, tok, ["<web_search>q</web_search>", "<answer>a</answer>"], tools=big, config=cfg)
    assert traj.tool_calls[0].truncated
    assert len(traj.context_ids()) <= 600 and traj.n_response_tokens <= 500
    assert_invariant(traj, reqs, tok)
    cfg = AgentConfig(tools=("web_search",), max_model_len=10_000, max_response_tokens=40, max_turns=5,
                      min_turn_tokens=16)
    traj, _ = run(llm, tok, ["<think> a b c d e f g h i j k l m n o p q r s t u v </think><web_search>q</web_search>"],
                  tools=big, config=cfg)
    assert traj.finish_reason == "max_tokens"
    assert traj.n_response_tokens <= 40


def test_observation_that_cannot_fit_ends_with_max_tokens(llm, tok):
    # Room for the tool call but not for even a shrunk observation: the trajectory stops cleanly (it used to end
    # as an engine error), and the call is recorded with no observation tokens.
    reply = "<web_search>q</web_search>"
    shell = len(tok.encode(format_observation("")))
    cfg = AgentConfig(tools=("web_search",), max_model_len=10_000, min_turn_tokens=16, max_turns=5,
                      max_response_tokens=len(tok.encode(reply)) + 16 + shell + 3)
    traj, reqs = run(llm, tok, [reply], tools={"web_search": EchoSearch({"size": 5000})}, config=cfg)
    assert traj.finish_reason == "max_tokens" and traj.error is None
    assert len(traj.tool_calls) == 1 and traj.tool_calls[0].observation_tokens == 0
    assert [s.kind for s in traj.segments] == ["model"] and traj.n_response_tokens <= cfg.max_response_tokens
    assert_invariant(traj, reqs, tok)


def test_text_only_servers_are_retokenized_and_say_so(llm, tok):
    traj, _reqs = run(llm, tok, [{"content": "<web_search>x</web_search>", "no_token_ids": True},
                                "<answer>y</answer>"])
    assert traj.ids_source == "retokenized" and traj.finish_reason == "answer"
    assert traj.segments[0].text.endswith("</web_search>")


def test_record_round_trips_as_json(llm, tok):
    traj, _ = run(llm, tok, ["<web_search>x</web_search>", "<answer>y</answer>"])
    d = traj.to_dict()
    assert d["answer"] == "y" and d["counts"]["tool_calls"] == 1 and d["finish_reason"] == "answer"
    back = Trajectory.from_dict(d)
    assert back.response_ids() == traj.response_ids() and back.response_mask() == traj.response_mask()
    assert back.tool_calls[0].name == "web_search"


def test_hf_backend_batches_concurrent_trajectories(tiny_model, tok):
    from afm.agent.hf_backend import HFBackend

    backend = HFBackend.from_pretrained(str(tiny_model), max_batch=4, batch_wait_s=0.05)
    cfg = AgentConfig(tools=("web_search", "code"), max_turns=3, max_tokens_per_turn=24,
                      sampling=SamplingParams(temperature=0.0))
    runner = ToolRunner({"web_search": EchoSearch()}, cfg)

    async def go() -> list[Trajectory]:
        prompts = [tok.chat_prompt_ids([{"role": "user", "content": f"question {i}"}]) for i in range(4)]
        try:
            return await asyncio.gather(*[run_trajectory(backend, tok, runner, cfg, p) for p in prompts])
        finally:
            await backend.aclose()

    trajs = asyncio.run(go())
    assert backend.batches < backend.batched_requests  # several trajectories shared a generate call
    for t in trajs:
        assert t.finish_reason in ("eos", "max_tokens", "max_turns", "answer"), t.error
        assert t.n_model_tokens > 0 and t.ids_source == "sampled"
        assert t.context_ids() == t.prompt_ids + [i for s in t.segments for i in s.ids]
        for seg in t.segments:
            if seg.kind == "model":
                assert len(seg.ids) <= 24

def test_hf_backend_samples_do_not_depend_on_batching(tiny_model):
    """What a request samples is its own: the same requests in batches of 4 or one at a time, in another order, give
    the same samples (identical prompts interchangeable), with a top-p cut too; a request's seed fixes its ids."""
    from afm.agent.hf_backend import HFBackend

    prompts = [[1, 2, 3], [1, 2, 3], [4, 5], [1, 2, 3], [6]]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=0.9)

    def sample(order: list[int], max_batch: int) -> list[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]:
        backend = HFBackend.from_pretrained(str(tiny_model), max_batch=max_batch, batch_wait_s=0.05, seed=2)

        async def go():
            try:
                if max_batch > 1:
                    return await asyncio.gather(*[backend.generate(prompts[i], sampling) for i in order])
                return [await backend.generate(prompts[i], sampling) for i in order]
            finally:
                await backend.aclose()

        outs = asyncio.run(go())
        assert backend.batches == (1 if max_batch > 1 else len(order))
        by_prompt: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for i, g in zip(order, outs, strict=True):
            by_prompt.setdefault(tuple(prompts[i]), []).append(tuple(g.ids))
        return sorted((p, tuple(sorted(v))) for p, v in by_prompt.items())

    batched = sample([0, 1, 2, 3, 4], 8)
    assert batched == sample([4, 3, 2, 1, 0], 1)
    assert len(set(dict(batched)[(1, 2, 3)])) > 1

    backend = HFBackend.from_pretrained(str(tiny_model), max_batch=4, batch_wait_s=0.05)

    async def seeded():
        try:
            s = sampling.with_(seed=9)
            return await asyncio.gather(backend.generate([1, 2, 3], s), backend.generate([1, 2, 3], s),
                                        backend.generate([1, 2, 3], sampling.with_(seed=10)))
        finally:
            await backend.aclose()

    a, b, c = asyncio.run(seeded())
    assert a.ids == b.ids != c.ids and backend.batches == 1  # other seeds, one batch


def test_hf_backend_samples_the_whole_distribution_without_top_k(tiny_model):
    """top_k -1 is no top-k (as verl's rollouts sample): at a high temperature the random model's first token is
    near uniform over its 1024 entries, so 120 draws give far more than the 50 that transformers' default top_k
    would leave; top_k 8 keeps them to 8."""
    from afm.agent.hf_backend import HFBackend

    backend = HFBackend.from_pretrained(str(tiny_model), max_batch=1, batch_wait_s=0.0)

    async def firsts(top_k: int) -> set[int]:
        out = set()
        for seed in range(120):
            gen = await backend.generate([1, 2, 3], SamplingParams(max_new_tokens=1, temperature=50.0, top_k=top_k,
                                                                   seed=seed))
            out.add(gen.ids[0])
        return out

    async def go() -> tuple[set[int], set[int]]:
        try:
            return await firsts(-1), await firsts(8)
        finally:
            await backend.aclose()

    every, cut = asyncio.run(go())
    assert len(every) > 60, len(every)
    assert len(cut) <= 8


# -- hooks: a tool protocol added by subclassing the loop (no fork) ------------------------------------------------
# JSON tool calls in <tool_call>, outputs in <tool_response>, a final answer closed by </final>. The loop's
# guarantees (token-in-token-out, loss mask, one finish reason) hold for it as for the CoA protocol.


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


def _run_loop(llm, tok, loop_cls: type[AgentLoop], replies: list[str]):
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


JSON_REPLIES = ['Let me look.<tool_call>{"name": "web_search", "arguments": {"query": "capital of France"}}</tool_call>'
           " ignored after the stop",
           "It says Paris. Paris</final> ignored"]


def test_a_subclass_runs_its_own_tool_protocol(llm, tok):
    traj, reqs, search = _run_loop(llm, tok, JsonToolLoop, JSON_REPLIES)
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
    traj, reqs, search = _run_loop(llm, tok, AgentLoop, JSON_REPLIES)
    assert reqs[0]["body"]["stop"] == ["</web_search>", "</answer>"]
    assert search.calls == [] and traj.finish_reason == "eos"


class _Scripted:
    """A backend that samples given texts as the tokenizer encodes them (so a call ends in the ``>\\n\\n`` token a
    model trained on ``</web_search>\\n\\n<observation>`` samples)."""

    def __init__(self, tok: TokenizerAdapter, texts: list[str]) -> None:
        self.tok, self.texts = tok, list(texts)

    async def generate(self, prompt_ids, sampling) -> Generation:
        text = self.texts.pop(0)
        ids = self.tok.encode(text)
        stop = next((s for s in sampling.stop if s in text), None)
        return Generation(ids, "stop" if stop else "eos", text, stop_str=stop)


def test_observation_joins_the_newlines_the_model_sampled(tok):
    """The context reads as the SFT data does (one blank line before <observation>) whether or not the model's last
    token carried the newlines."""
    from afm.agent.loop import after_model_text

    obs = format_observation("x")
    assert after_model_text("<code>1</code>", obs) == obs
    assert after_model_text("<code>1</code>\n\n", obs) == obs[2:]
    assert after_model_text("<code>1</code>\n", obs) == obs[1:]
    assert after_model_text("</code>\n\n\n", obs) == obs[2:]

    cfg = AgentConfig(tools=("web_search",), sampling=SamplingParams(temperature=0), max_turns=4)
    for call in ("<web_search> a</web_search>", "<web_search> b</web_search>\n\n"):
        backend = _Scripted(tok, [call, "<answer> done</answer>"])
        search = EchoSearch()
        prompt = tok.chat_prompt_ids([{"role": "user", "content": "q?"}])
        traj = asyncio.run(run_trajectory(backend, tok, ToolRunner({"web_search": search}, cfg), cfg, prompt))
        body = call.strip().removeprefix("<web_search> ").removesuffix("</web_search>")
        assert traj.response_text() == (f"<web_search> {body}</web_search>\n\n<observation>\nresult for {body}\n"
                                        "</observation>\n\n<answer> done</answer>")
        obs = traj.segments[1]
        assert obs.kind == "observation" and tok.decode(obs.ids) == obs.text
        assert traj.context_ids() == prompt + traj.segments[0].ids + obs.ids + traj.segments[2].ids


def test_hf_backend_close_stops_a_generation_in_flight(tiny_model):
    """aclose() (what a SIGTERM'd run ends with) stops model.generate in its worker thread at the next token,
    instead of leaving asyncio.run to wait for the whole batch: with Gemma on a CPU that was minutes."""
    from afm.agent.hf_backend import HFBackend

    backend = HFBackend.from_pretrained(str(tiny_model), max_batch=1, batch_wait_s=0.0)
    prompt = backend.tok.encode("question 1")
    long = SamplingParams(temperature=0.0, max_new_tokens=3800)
    steps: list[int] = []
    forward = backend.model.forward

    def counting(*args, **kwargs):
        steps.append(1)
        return forward(*args, **kwargs)

    backend.model.forward = counting

    async def go() -> None:
        task = asyncio.ensure_future(backend.generate(prompt, long))
        while len(steps) < 5:  # the batch is inside model.generate
            await asyncio.sleep(0.01)
        await backend.aclose()
        task.cancel()

    asyncio.run(go())  # returns once the worker thread has left generate
    assert backend.aborted_batches == 1
    assert len(steps) < 3800  # stopped early, not at max_new_tokens
