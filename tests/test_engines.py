"""Engine dialects (afm.agent.engines) against the OpenAI stand-in speaking each engine's documented dialect.

The stand-in runs on 127.0.0.1 with the tiny model's tokenizer; ``dialect="llamacpp"`` answers as llama-server
does (stop strings cut from the text, ids only on the native ``/completion``). The same checks against the real
llama-server are in tests/test_llamacpp_engine.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from afm.agent import AgentConfig, SamplingParams, TokenizerAdapter, ToolRunner, run_trajectory
from afm.agent.infer import main as infer_main
from afm.agent.openai_backend import OpenAIBackend
from afm.eval.report import write_report
from afm.offline.openai_standin import StandIn
from afm.tools import Tool, ToolContext, ToolResult

CALL = "<think> look it up </think>\n<wiki_search> Town 6080</wiki_search>"


class Wiki(Tool):
    """Answers every query at once and remembers it."""

    name = "wiki_search"

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.queries: list[str] = []

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        self.queries.append(body)
        return ToolResult(f"Town 6080 is in the north ({body}).")


@pytest.fixture(scope="module")
def tok(tiny_model) -> TokenizerAdapter:
    return TokenizerAdapter.from_pretrained(str(tiny_model))


@pytest.fixture(scope="module")
def llama(tiny_model):
    with StandIn(tokenizer=str(tiny_model), dialect="llamacpp") as server:
        yield server


def trajectory(llm: StandIn, tok: TokenizerAdapter, replies: list[Any], engine: str = "auto"):
    llm.reset()
    llm.queue(*replies)
    wiki = Wiki()
    cfg = AgentConfig(tools=("wiki_search",), sampling=SamplingParams(temperature=0), max_turns=4)

    async def go():
        backend = OpenAIBackend(llm.base_url, "standin", tok, retries=0, timeout_s=30, engine=engine)
        prompt = tok.chat_prompt_ids([{"role": "user", "content": "Where is Town 6080?"}])
        try:
            traj = await run_trajectory(backend, tok, ToolRunner({"wiki_search": wiki}, cfg), cfg, prompt)
        finally:
            await backend.aclose()
        return traj, backend

    traj, backend = asyncio.run(go())
    return traj, backend, wiki, llm.requests()


def test_llamacpp_stop_string_is_a_tool_call(llama, tok):
    """llama-server cuts the stop string and names no stop_reason: afm must still see the tool call (issue 24 §1)."""
    traj, backend, wiki, reqs = trajectory(llama, tok, [CALL + " never sent", "<answer>the north</answer>"])
    assert backend.dialect is not None and backend.dialect.name == "llamacpp"  # asked the server (GET /props)
    assert [r["path"] for r in reqs] == ["/completion", "/completion"]
    assert reqs[0]["body"]["stop"] == ["</wiki_search>", "</answer>"] and reqs[0]["body"]["return_tokens"] is True
    assert wiki.queries == ["Town 6080"] and [c.name for c in traj.tool_calls] == ["wiki_search"]
    assert traj.finish_reason == "answer" and traj.final_answer() == "the north"
    model = [s for s in traj.segments if s.kind == "model"]
    assert model[0].text.endswith("</wiki_search>") and tok.decode(model[0].ids) == model[0].text
    assert traj.ids_source == "sampled" and backend.retokenized == 0
    # the second request's prompt is the first's plus the sampled ids (stop string's included) and the observation
    assert reqs[1]["body"]["prompt"] == reqs[0]["body"]["prompt"] + model[0].ids + traj.segments[1].ids


def test_llamacpp_eos_and_length(llama, tok):
    traj, _, _, _ = trajectory(llama, tok, ["<think> nothing to call </think>"])
    assert traj.finish_reason == "eos" and traj.segments[0].ids[-1] in tok.eos_ids
    assert traj.segments[0].ids.count(traj.segments[0].ids[-1]) == 1  # the engine's EOS, not a second one
    cfg_reply = {"content": "<think> " + "word " * 40, "finish_reason": "length"}
    traj, _, _, reqs = trajectory(llama, tok, [cfg_reply])
    assert reqs[0]["body"]["n_predict"] > 0 and traj.segments[0].ids[-1] not in tok.eos_ids


def test_llamacpp_n_samples_in_one_request(llama, tok):
    llama.reset()
    llama.queue(CALL)

    async def go():
        backend = OpenAIBackend(llama.base_url, "standin", tok, retries=0, engine="llamacpp")
        try:
            return await backend.generate_n(tok.encode("q"), SamplingParams(stop=("</wiki_search>",)), 3)
        finally:
            await backend.aclose()

    gens = asyncio.run(go())
    assert len(llama.requests()) == 1 and llama.requests()[0]["body"]["n"] == 3
    assert [g.finish for g in gens] == ["stop"] * 3 and all(g.text.endswith("</wiki_search>") for g in gens)


def test_openai_endpoint_of_llamacpp_is_ambiguous_without_the_dialect(llama, tok):
    """What afm did before it knew the dialect: /v1/completions of llama-server reads the tool call as an EOS and
    retokenizes, and says so once on the console."""
    traj, backend, wiki, reqs = trajectory(llama, tok, [CALL], engine="openai")
    assert reqs[0]["path"] == "/v1/completions"
    assert wiki.queries == [] and traj.finish_reason == "eos"
    assert traj.ids_source == "retokenized" and backend.retokenized == 1
    assert "retokenized" in (backend.fallback_note or "")


def test_vllm_standin_detected_as_generic_openai(tiny_model, tok):
    with StandIn(tokenizer=str(tiny_model)) as llm:
        traj, backend, wiki, _ = trajectory(llm, tok, [CALL, "<answer>north</answer>"])
    assert backend.dialect is not None and backend.dialect.name == "openai"  # no /props, owned_by "afm"
    assert wiki.queries == ["Town 6080"] and traj.ids_source == "sampled" and backend.fallback_note is None


def test_fallback_said_once_and_in_the_summary(tiny_model, tmp_path, capsys, caplog):
    """A server that returns no ids: one console line for the run, a summary line, a report headline."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": i, "question": f"q{i}", "answer": "a"}) + "\n" for i in range(3)))
    with StandIn(tokenizer=str(tiny_model)) as llm:
        llm.rules({"match": ".", "content": "<answer>a</answer>", "no_token_ids": True})
        with caplog.at_level(logging.WARNING, logger="afm.agent"):
            rc = infer_main(["--input", str(questions), "--output", str(tmp_path / "t.jsonl"), "--model", "standin",
                             "--tokenizer", str(tiny_model), "--base-url", llm.base_url, "--prompt", "code_agent",
                             "--quiet", "--concurrency", "2"])
    assert rc == 0
    said = [r for r in caplog.records if "retokenized" in r.getMessage()]
    assert len(said) == 1
    out = capsys.readouterr().out
    assert "token ids retokenized from text in 3 of 3 trajectories" in out


def test_fallback_in_the_eval_report_headline(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"key": f"nq/{i}#0", "benchmark": "nq", "qid": str(i), "sample": 0, "status": "ok", "score": 1.0,
             "acc": 1.0, "method": "em", "data_source": "nq", "tool_calls": 0, "model_tokens": 5,
             "observation_tokens": 0, "turns": 1, "finish_reason": "answer",
             "ids_source": "retokenized" if i < 2 else "sampled"} for i in range(4)]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = write_report(run).read_text()
    headline = report.split("- run:", 1)[0]
    assert "**Token ids retokenized from text** (nq 2/4 samples)" in headline


def test_llamacpp_server_error_fails_the_sample(llama, tok):
    traj, _, _, reqs = trajectory(llama, tok, [{"status": 500, "content": "slot crashed"}])
    assert traj.finish_reason == "error" and "HTTP 500" in (traj.error or "") and len(reqs) == 1


@pytest.fixture(scope="module")
def llama_python(tiny_model):
    """The stand-in answering as llama-cpp-python's server (HTTP 500 to token-id prompts, no ids)."""
    with StandIn(tokenizer=str(tiny_model), dialect="llamacpp-python") as server:
        yield server


def test_server_refusing_token_id_prompts_gets_text_prompts(llama_python, tiny_model, tok, tmp_path, capsys,
                                                            caplog):
    """llama-cpp-python's server answers HTTP 500 to a prompt given as token ids: afm sends text prompts from
    then on, says so once (console, summary), and every sample succeeds instead of failing."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": i, "question": f"q{i}", "answer": "a"}) + "\n" for i in range(3)))
    llm = llama_python
    llm.reset()
    llm.rules({"match": ".", "content": "<answer>a</answer>"})
    with caplog.at_level(logging.WARNING, logger="afm.agent"):
        rc = infer_main(["--input", str(questions), "--output", str(tmp_path / "t.jsonl"), "--model", "standin",
                         "--tokenizer", str(tiny_model), "--base-url", llm.base_url, "--prompt", "code_agent",
                         "--quiet", "--concurrency", "1"])
    reqs = llm.requests()
    assert rc == 0
    records = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(records) == 3 and {r["status"] for r in records} == {"ok"}
    assert {r["ids_source"] for r in records} == {"retokenized"}
    prompts = [r["body"]["prompt"] for r in reqs if r["path"] == "/v1/completions"]
    refused = [p for p in prompts if isinstance(p, list)]
    # sample 0: ids refused, the same as text answered, ids refused again; then text only
    assert [isinstance(p, list) for p in prompts] == [True, False, True, False, False]
    assert tok.decode(refused[0]) in prompts  # the refused prompt, sent again as its text (chat template and all)
    said = [r.getMessage() for r in caplog.records if "token-id prompts" in r.getMessage()]
    assert len(said) == 1 and "as text" in said[0]
    assert len([r for r in caplog.records if "retokenized" in r.getMessage()]) == 1
    out = capsys.readouterr().out
    assert "token ids retokenized from text in 3 of 3 trajectories" in out


def test_text_prompt_fallback_keeps_real_failures(llama_python, tok):
    """A server that fails the text prompt too is a failing server: the sample fails, with the server's error."""
    traj, backend, _, reqs = trajectory(llama_python, tok, [{"status": 500, "content": "out of memory"}] * 3)
    assert traj.finish_reason == "error" and "HTTP 500" in (traj.error or "")
    assert [isinstance(r["body"]["prompt"], list) for r in reqs] == [True, False]  # text tried once, failed too
    assert backend.id_prompts is None  # not taken for a refusal of ids: later prompts still go as ids


# vLLM 0.31-0.32's answer to a request with more stop strings than VLLM_MAX_STOP_STRINGS (4 by default), as its
# server sent it on this machine (tests/test_vllm_engine.py meets the real one)
VLLM_STOP_CAP_400 = ("2 validation errors:\n  {'type': 'string_type', 'loc': 'body.stop', 'msg': 'Input should be a valid "
                     "string', 'input': '<list of 5 items>'}\n  {'type': 'too_long', 'loc': 'body.stop', 'msg': 'List "
                     "should have at most 4 items after validation, not 5', 'input': '<list of 5 items>'}")


def test_an_engine_refusing_afms_request_stops_the_run_at_the_first_sample(tiny_model, tmp_path, capsys):
    """An HTTP 4xx for afm's own request shape would fail every sample alike: the run stops with one line (exit 2)
    that says what to do, instead of recording each sample as failed (issue 40: 5 stop strings against vLLM's 4)."""
    questions = tmp_path / "q.jsonl"
    questions.write_text("".join(json.dumps({"id": i, "question": f"q{i}", "answer": "a"}) + "\n" for i in range(20)))
    out = tmp_path / "t.jsonl"
    with StandIn(tokenizer=str(tiny_model)) as llm:
        llm.rules({"match": ".", "content": VLLM_STOP_CAP_400, "status": 400})
        rc = infer_main(["--input", str(questions), "--output", str(out), "--model", "standin", "--tokenizer",
                         str(tiny_model), "--base-url", llm.base_url, "--prompt", "afm_all_tools", "--quiet",
                         "--concurrency", "2"])
        asked = [r for r in llm.requests() if r["path"].endswith("/completions")]
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(asked) <= 2, (rc, len(asked))  # the two already in flight, no more
    line = next(x for x in err if x.startswith("afm infer: stopped at the first trajectory"))
    assert "takes at most 4 stop strings" in line and "VLLM_MAX_STOP_STRINGS=" in line
    assert not out.exists() or not out.read_text().strip()  # nothing stored: a rerun starts clean
    # any other refusal says the status and the engine's words
    with StandIn(tokenizer=str(tiny_model)) as llm:
        llm.rules({"match": ".", "content": "model 'standin' does not exist", "status": 404})
        rc = infer_main(["--input", str(questions), "--output", str(tmp_path / "u.jsonl"), "--model", "standin",
                         "--tokenizer", str(tiny_model), "--base-url", llm.base_url, "--prompt", "code_agent",
                         "--quiet", "--concurrency", "2"])
    assert rc == 2 and "refused afm's request: HTTP 404" in capsys.readouterr().err


# vLLM 0.31's answer to a prompt longer than --max-model-len (vllm/renderers/params.py's wording)
VLLM_TOO_LONG_400 = ('{"error": {"message": "This model\'s maximum context length is 2048 tokens. However, you requested '
                     '4100 tokens (4084 in the messages, 16 in the completion).", "type": "BadRequestError", '
                     '"param": null, "code": 400}}')


def test_a_prompt_too_long_for_the_engine_fails_that_sample_only(tiny_model, tmp_path, capsys):
    """A 4xx about one prompt's length (vLLM's "maximum context length", llama-server's exceed_context_size_error)
    is that sample's failure, not retried; the other prompts still run and the run exits 1, not 2."""
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"id": "long", "question": "LONGPROMPT", "answer": "a"}) + "\n"
                         + json.dumps({"id": "short", "question": "q", "answer": "a"}) + "\n")
    out = tmp_path / "t.jsonl"
    with StandIn(tokenizer=str(tiny_model)) as llm:
        llm.rules({"match": "LONGPROMPT", "content": VLLM_TOO_LONG_400, "status": 400},
                  {"match": ".", "content": "<answer>a</answer>"})
        rc = infer_main(["--input", str(questions), "--output", str(out), "--model", "standin", "--tokenizer",
                         str(tiny_model), "--base-url", llm.base_url, "--prompt", "code_agent", "--quiet"])
        asked = [r for r in llm.requests() if r["path"].endswith("/completions")]
    assert rc == 1, capsys.readouterr().err
    records = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert records["long"]["status"] == "failed" and records["long"]["failure"].startswith("engine:")
    assert "as too long" in records["long"]["failure"] and "maximum context length is 2048" in records["long"]["failure"]
    assert records["short"]["status"] == "ok"
    assert len(asked) == 2  # the refused prompt was asked once: no retry can make it fit


def test_an_int_stop_reason_is_a_stop_token_kept_once(tok):
    """vLLM names a stop token id (a second end-of-turn id of the generation config) in stop_reason as an int, and
    keeps it in the ids: afm ends the turn there and adds no EOS of its own."""
    from afm.agent.engines import DIALECTS

    backend = OpenAIBackend("http://127.0.0.1:1/v1", "m", tok, engine="vllm")
    choice = {"index": 0, "text": "", "finish_reason": "stop", "stop_reason": 300, "token_ids": [17, 300]}
    gen = backend._generation(DIALECTS["vllm"].parse({"choices": [choice]}, SamplingParams(stop=("</code>",)))[0])
    assert gen.finish == "eos" and gen.ids == [17, 300]
    eos = min(tok.eos_ids)
    choice = {"index": 0, "text": "x", "finish_reason": "stop", "stop_reason": None, "token_ids": [17, eos]}
    gen = backend._generation(DIALECTS["vllm"].parse({"choices": [choice]}, SamplingParams())[0])
    assert gen.finish == "eos" and gen.ids == [17, eos]  # vLLM keeps the EOS id: not added twice
