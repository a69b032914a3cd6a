"""``afm_agent`` inside verl's real ``AgentLoopWorker.generate_sequences`` (no Ray), and the tool yamls.

The worker is built from the real Hydra ``ppo_trainer`` config (``rollout.name=vllm`` names the engine; nothing is
started), ``configs/verl/agent_loops.yaml`` and ``configs/verl/tools/afm.yaml``. The LLM client is an in-process
token server over the tiny Qwen2 model: it either samples from the model (``transformers`` generate honouring
max_tokens, stop strings, include_stop_str_in_output, temperature, logprobs) or, for the tool-call paths, returns
scripted continuations tokenised with the model's tokenizer. Tools are real: the code tool runs in the sandbox and
web_search talks to the BM25 search server over the demo corpus.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import verl
import yaml
from hydra import compose, initialize_config_dir
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
from verl.protocol import DataProto
from verl.tools.tool_registry import initialize_tools_from_config
from verl.workers.rollout.replica import TokenOutput

from afm.agent.record import Segment, Trajectory
from afm.common.procs import ServerProcess, free_port
from afm.rl.agent_loop import select_tools
from afm.rl.backend import VerlServerBackend
from afm.rl.tools import AfmVerlTool, afm_tools_from_verl, context_kwargs, load_afm_tools
from afm.servers.demo_data import write_demo_corpora
from afm.tools import Tool, ToolContext, ToolResult
from afm.tools.code import CodeTool
from afm.tools.web_search import WebSearchTool
from afm.trajectory import format_observation

REPO = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path(verl.__file__).parent / "trainer" / "config"
AGENT_LOOPS = REPO / "configs" / "verl" / "agent_loops.yaml"
TOOLS = REPO / "configs" / "verl" / "tools"
F = "```"
OBS_OPEN, OBS_CLOSE = "\n\n<observation>\n", "\n</observation>\n\n"


# ---- the token server -------------------------------------------------------------------------------------------
class TinyServer:
    """``generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput`` like verl's ``LLMServerClient``.

    ``script`` maps a marker (found in the decoded prompt) to the replies of turns 1, 2, …; the turn is the number of
    earlier calls with the same request id, so a trajectory that changed its request id would replay turn 1.
    Prompts without a marker are answered by sampling from the tiny model.
    """

    def __init__(self, model_dir: Path, script: dict[str, list[str]] | None = None, delay_s: float = 0.0) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.eos = {self.tok.convert_tokens_to_ids("<|im_end|>"), self.tok.eos_token_id}
        self.script = script or {}
        self.delay_s = delay_s
        self.default_max_tokens = 192  # what verl's vLLM server uses when a loop sends no max_tokens
        self.calls: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **kwargs: Any) -> TokenOutput:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        context = self.tok.decode(prompt_ids)
        turn = sum(1 for c in self.calls if c["request_id"] == request_id)
        marker = next((m for m in self.script if m in context), None)
        if marker is not None:
            replies = self.script[marker]
            ids = self._stop(self.tok.encode(replies[min(turn, len(replies) - 1)], add_special_tokens=False),
                             sampling_params)
            logprobs = [-0.01 * (1 + (len(prompt_ids) + i) % 97) for i in range(len(ids))]
        else:
            ids, logprobs = await asyncio.to_thread(self._sample, prompt_ids, sampling_params)
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "params": dict(sampling_params),
                           "ids": ids, "logprobs": logprobs, "marker": marker, "kwargs": kwargs})
        return TokenOutput(token_ids=ids, log_probs=logprobs if sampling_params.get("logprobs") else None,
                           stop_reason="completed", num_preempted=0)

    def _stop(self, ids: list[int], params: dict[str, Any]) -> list[int]:
        """vLLM's behaviour: end at EOS or after the first stop string (kept), at most max_tokens ids."""
        ids = ids[: params.get("max_tokens", self.default_max_tokens)]
        for k in range(1, len(ids) + 1):
            if ids[k - 1] in self.eos:
                return ids[:k]
            text = self.tok.decode(ids[:k])
            if params.get("stop") and any(s in text for s in params["stop"]):
                assert params.get("include_stop_str_in_output") is True
                return ids[:k]
        return ids

    def _sample(self, prompt_ids: list[int], params: dict[str, Any]) -> tuple[list[int], list[float]]:
        temperature = float(params.get("temperature", 1.0))
        kw: dict[str, Any] = {"max_new_tokens": params.get("max_tokens", self.default_max_tokens), "do_sample": temperature > 0,
                              "eos_token_id": sorted(self.eos), "pad_token_id": self.tok.pad_token_id,
                              "output_scores": True, "return_dict_in_generate": True}
        if temperature > 0:
            kw.update(temperature=temperature, top_p=float(params.get("top_p", 1.0)))
            if int(params.get("top_k", -1)) > 0:
                kw["top_k"] = int(params["top_k"])
        if params.get("stop"):
            kw.update(stop_strings=list(params["stop"]), tokenizer=self.tok)
        torch.manual_seed(len(self.calls))
        with torch.no_grad():
            out = self.model.generate(input_ids=torch.tensor([prompt_ids]),
                                      attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long), **kw)
        ids = out.sequences[0, len(prompt_ids):].tolist()
        logprobs = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, ids, strict=False)]
        kept = self._stop(ids, params)
        return kept, logprobs[: len(kept)]


# ---- worker plumbing --------------------------------------------------------------------------------------------
def compose_config(model_dir: Path, agent_loops: Path, tool_config: Path | None, *, prompt_length: int = 256,
                   response_length: int = 192, extra: tuple[str, ...] = ()) -> Any:
    overrides = ["actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.model.path={model_dir}",
                 "trainer.device=cpu", f"actor_rollout_ref.rollout.prompt_length={prompt_length}",
                 f"actor_rollout_ref.rollout.response_length={response_length}",
                 f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent_loops}",
                 "actor_rollout_ref.rollout.calculate_log_probs=true",
                 "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=4000", *extra]
    if tool_config is not None:
        overrides.append(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config}")
    with initialize_config_dir(config_dir=str(VERL_CONFIG), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


def agent_loops_yaml(tmp: Path, **changes: Any) -> Path:
    """The real agent_loops.yaml with some keys of the afm_agent entry changed."""
    entries = yaml.safe_load(AGENT_LOOPS.read_text())
    entries[0].update(changes)
    path = tmp / "agent_loops.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path


def objects(values: list[Any]) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        arr[i] = v
    return arr


def batch(rows: list[dict[str, Any]]) -> DataProto:
    keys = sorted({k for r in rows for k in r})
    return DataProto(non_tensor_batch={k: objects([r.get(k) for r in rows]) for k in keys}, meta_info={})


def row(question: str, agent: str = "afm_agent", **extra_info: Any) -> dict[str, Any]:
    return {"raw_prompt": [{"role": "system", "content": "Answer with tools."}, {"role": "user", "content": question}],
            "agent_name": agent, "extra_info": {"index": question, **extra_info},
            "tools_kwargs": extra_info.get("tools_kwargs", {}), "index": question}


def run_worker(worker: AgentLoopWorker, rows: list[dict[str, Any]]) -> DataProto:
    data = batch(rows)
    data.non_tensor_batch["priority"] = np.arange(len(rows), dtype=np.int64)  # AgentLoopManager adds this column
    return asyncio.run(worker.generate_sequences(data))


def close_tools(worker: AgentLoopWorker) -> None:
    async def go() -> None:
        for tool in afm_tools_from_verl(worker.tools).values():
            await tool.aclose()
    asyncio.run(go())


def runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """``(value, start, end)`` of the maximal runs of equal values."""
    out: list[tuple[int, int, int]] = []
    for i, m in enumerate(mask):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], i + 1)
        else:
            out.append((m, i, i + 1))
    return out


def unpad(out: DataProto, i: int) -> dict[str, Any]:
    """One sample's tensors without padding, checking the padding conventions on the way."""
    b = out.batch
    plen, rlen = b["prompts"].shape[1], b["responses"].shape[1]
    attn = b["attention_mask"][i].tolist()
    n_prompt, n_resp = sum(attn[:plen]), sum(attn[plen:])
    assert attn[:plen] == [0] * (plen - n_prompt) + [1] * n_prompt  # prompts are left-padded
    assert attn[plen:] == [1] * n_resp + [0] * (rlen - n_resp)  # responses are right-padded
    assert b["input_ids"][i].tolist() == b["prompts"][i].tolist() + b["responses"][i].tolist()
    pos = b["position_ids"][i].tolist()
    assert pos[plen - n_prompt: plen + n_resp] == list(range(n_prompt + n_resp))
    mask = b["response_mask"][i].tolist()
    assert mask[n_resp:] == [0] * (rlen - n_resp)
    return {"prompt": b["prompts"][i].tolist()[plen - n_prompt:], "response": b["responses"][i].tolist()[:n_resp],
            "mask": mask[:n_resp], "logprobs": b["rollout_log_probs"][i].tolist()[:n_resp],
            "pad_logprobs": b["rollout_log_probs"][i].tolist()[n_resp:]}


def check_sample(server: TinyServer, s: dict[str, Any]) -> list[str]:
    """The response is the server's sampled ids and the observation ids, concatenated in order: every masked span
    decodes to exactly an observation framing (and is that text's encoding), every unmasked span is exactly what
    the server returned (never re-tokenised) with its logprobs, and every call saw exactly the context so far.
    Returns the observation bodies."""
    tok = server.tok
    calls = [c for c in server.calls if c["prompt_ids"][: len(s["prompt"])] == s["prompt"] and c["ids"]]
    assert len({c["request_id"] for c in calls}) == 1  # one sticky request id for all turns
    bodies, pos, k = [], 0, 0
    for value, a, b in runs(s["mask"]):
        if value == 1:
            while pos < b:
                c = calls[k]
                k += 1
                assert c["prompt_ids"] == s["prompt"] + s["response"][:pos]
                n = min(len(c["ids"]), b - pos)  # only a call cut by the budget or a stop keeps a prefix
                assert s["response"][pos: pos + n] == c["ids"][:n]
                assert s["logprobs"][pos: pos + n] == pytest.approx(c["logprobs"][:n], abs=1e-6)
                pos += n
        else:
            span = s["response"][a:b]
            text = tok.decode(span)
            assert text.startswith(OBS_OPEN) and text.endswith(OBS_CLOSE), text
            body = text[len(OBS_OPEN): -len(OBS_CLOSE)]
            assert text == format_observation(body)
            assert tok.encode(text, add_special_tokens=False) == span
            assert s["logprobs"][a:b] == [0.0] * (b - a)
            bodies.append(body)
            pos = b
    assert k == len(calls)  # no sampled output went missing
    return bodies


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def search_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("search")
    corpora = write_demo_corpora(tmp / "corpora", "http://demo.invalid")
    port = free_port()
    env = {"WEB_SEARCH_BACKEND": "local", "WEB_SEARCH_CACHE": str(tmp / "cache.sqlite"),
           "AFM_METRICS_DB": str(tmp / "metrics.sqlite"), "WEB_SEARCH_SERPER_API_KEY": "", "AFM_SERVER_TOKEN": "",
           "WEB_SEARCH_INDEX_DIR": "", "WEB_SEARCH_SERPER_URL": ""}
    with ServerProcess(["-m", "afm.servers.search_server", "--port", str(port), "--corpus", str(corpora.search)],
                       port, env=env, log_path=tmp / "search.log") as srv:
        yield srv, port


@pytest.fixture
def afm_env(monkeypatch, search_server):
    """configs/verl/tools/afm.yaml's web_search default URL points at the test search server."""
    monkeypatch.setenv("SERVER_HOST", "127.0.0.1")
    monkeypatch.setenv("WEBSEARCH_PORT", str(search_server[1]))
    monkeypatch.delenv("AFM_SERVER_TOKEN", raising=False)


def make_worker(tiny_model: Path, tmp: Path, server: TinyServer, tool_config: Path | None = TOOLS / "afm.yaml",
                loop_changes: dict[str, Any] | None = None, **kw: Any) -> AgentLoopWorker:
    cfg = compose_config(tiny_model, agent_loops_yaml(tmp, **(loop_changes or {})), tool_config, **kw)
    return AgentLoopWorker(cfg, llm_client=server)


# ---- tool yamls -------------------------------------------------------------------------------------------------
EXPECTED = {"web": {"web_search": "WebSearchTool", "crawl_page": "CrawlPageTool"},
            "mhqa": {"wiki_search": "WikiSearchTool"}, "code": {"code": "CodeTool"},
            "afm": {"web_search": "WebSearchTool", "crawl_page": "CrawlPageTool", "wiki_search": "WikiSearchTool",
                    "code": "CodeTool"}}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_tool_yamls_load_with_our_loader_and_verls(name):
    path = TOOLS / f"{name}.yaml"
    ours = load_afm_tools(path)
    assert {k: type(v).__name__ for k, v in ours.items()} == EXPECTED[name]
    theirs = initialize_tools_from_config(str(path))
    assert all(isinstance(t, AfmVerlTool) for t in theirs)
    assert [t.name for t in theirs] == list(EXPECTED[name])
    assert [t.tool_schema.function.name for t in theirs] == list(EXPECTED[name])
    assert {k: type(v).__name__ for k, v in afm_tools_from_verl(theirs).items()} == EXPECTED[name]
    for tool in theirs:  # adapter keys stay out of the afm tool's config; the tool's own keys reach it
        assert not {"type", "afm_tool", "call_timeout"} & set(tool.afm_tool.config)
    if "code" in EXPECTED[name]:
        code = next(t.afm_tool for t in theirs if t.name == "code")
        assert code.sandbox_config.limits.wall_s == 30 and code.max_obs_length == 1536


def test_tool_yaml_errors(tmp_path):
    bad = {"tools": [{"class_name": "afm.rl.tools.AfmVerlTool",
                      "config": {"type": "native", "afm_tool": "web_search"},
                      "tool_schema": {"type": "function", "function": {"name": "search", "description": "x"}}}]}
    with pytest.raises(ValueError, match="must be the same name"):
        load_afm_tools(bad)
    with pytest.raises(ValueError, match="not an afm tool"):
        load_afm_tools({"tools": [{"class_name": "verl.tools.base_tool.BaseTool", "config": {"type": "native"},
                                   "tool_schema": {"type": "function", "function": {"name": "x", "description": "x"}}}]})
    # interpolation from the environment, as verl's own loader resolves it
    path = tmp_path / "t.yaml"
    path.write_text("tools:\n  - class_name: afm.rl.tools.AfmVerlTool\n    config:\n      type: native\n"
                    "      afm_tool: web_search\n      url: ${oc.env:AFM_TEST_SEARCH_URL,http://127.0.0.1:1/search}\n")
    tool = load_afm_tools(path)["web_search"]
    assert isinstance(tool, WebSearchTool) and tool.url == "http://127.0.0.1:1/search"
    assert initialize_tools_from_config(str(path))[0].tool_schema.function.name == "web_search"  # default schema


class KwargsEcho(Tool):
    """Shows what a tool receives: its body, question and per-sample kwargs."""

    name = "web_search"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        return ToolResult(json.dumps({"body": body, "question": ctx.question, "kwargs": dict(ctx.kwargs)},
                                     sort_keys=True))


def test_afm_verl_tool_lifecycle_with_the_sandbox():
    tool = initialize_tools_from_config(str(TOOLS / "code.yaml"))[0]

    async def go() -> list[Any]:
        out = []
        iid, created = await tool.create(create_kwargs={"question": "q", "ground_truth": "42"})
        out.append(created.text)
        out.append(await tool.execute(iid, {"code": f"{F}py\nprint(int(input()) * 2)\n{F}\n{F}sh\n21\n{F}"}))
        out.append(await tool.execute(iid, {"code": "no program here"}))
        out.append(await tool.execute(iid, {"a": 1, "b": 2}))
        await tool.release(iid)
        await tool.afm_tool.aclose()
        return out

    created, ok, no_code, bad_args = asyncio.run(go())
    assert created is None
    resp, reward, metrics = ok
    assert resp.text == "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"
    assert reward == 0.0 and metrics["status"] == "ok" and metrics["exec_status"] == "ok"
    assert no_code[0].text.startswith("No Python code found") and no_code[2]["status"] == "error"
    assert "needs the argument 'code'" in bad_args[0].text and bad_args[2]["status"] == "invalid"
    assert tool._instances == {}

    echo = AfmVerlTool({"type": "native", "afm_tool": "web_search", "afm_class": f"{__name__}:KwargsEcho"}, None)

    async def go_echo() -> Any:
        iid, _ = await echo.create(create_kwargs={"question": "q", "ground_truth": "secret", "lang": "en"})
        return await echo.execute(iid, {"query": ["a", "b"]})

    seen = json.loads(asyncio.run(go_echo())[0].text)
    assert seen == {"body": "a\nb", "question": "", "kwargs": {"question": "q", "lang": "en"}}  # no ground truth


# ---- pure pieces ------------------------------------------------------------------------------------------------
def test_select_tools_precedence():
    avail = ["web_search", "crawl_page", "wiki_search", "code"]
    assert select_tools(avail, extra_info={}, tools_kwargs={}) == avail
    assert select_tools(avail, extra_info={}, tools_kwargs={}, default=["code"]) == ["code"]
    assert select_tools(avail, extra_info={}, tools_kwargs={"code": {}, "web_search": {}}) == ["web_search", "code"]
    assert select_tools(avail, extra_info={}, tools_kwargs={"code": {}, "web_search": None}) == ["code"]
    assert select_tools(avail, extra_info={"tool_selection": None}, tools_kwargs={"code": None}) == avail
    assert select_tools(avail, extra_info={"tool_selection": np.array(["wiki_search"])},
                        tools_kwargs={"code": {}}) == ["wiki_search"]
    assert select_tools(avail, extra_info={"tool_selection": []}, tools_kwargs={"code": {}}) == []
    with pytest.raises(ValueError, match="visual_inspector"):
        select_tools(avail, extra_info={}, tools_kwargs={"visual_inspector": {}})
    assert context_kwargs({"create_kwargs": {"question": "q", "ground_truth": "a"}, "execute_kwargs": {"k": 1},
                           "release_kwargs": {"x": 1}, "lang": "en"}) == {"question": "q", "k": 1, "lang": "en"}


def test_backend_finish_and_params(tokenizer):
    from afm.agent import SamplingParams, TokenizerAdapter

    tok = TokenizerAdapter(tokenizer)
    backend = VerlServerBackend(None, tok, "r1", {"temperature": 0.5, "logprobs": True, "stop_token_ids": [7]})
    ids = tok.encode("<code>\nprint(1)\n</code>\nmore text after")
    gen = backend.finish(ids, ("</code>", "</answer>"))
    assert gen.finish == "stop" and gen.stop_str == "</code>" and gen.ids == ids[: len(gen.ids)]
    assert gen.text.rstrip().endswith("</code>") and len(gen.ids) < len(ids)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert backend.finish([*tok.encode("done"), im_end], ("</code>",)).finish == "eos"
    assert backend.finish(tok.encode("still going"), ("</code>",)).finish == "length"
    params = backend.engine_params(SamplingParams(max_new_tokens=9, temperature=0.7, stop=("</code>",)))
    assert params == {"logprobs": True, "stop_token_ids": [7], "max_tokens": 9, "temperature": 0.7, "top_p": 1.0,
                      "top_k": -1, "repetition_penalty": 1.0, "stop": ["</code>"], "include_stop_str_in_output": True}
    sglang = VerlServerBackend(None, tok, "r1", {}, engine="sglang")
    assert sglang.engine_params(SamplingParams(stop=("</a>",)))["no_stop_trim"] is True


def test_segment_logprobs_round_trip():
    traj = Trajectory(prompt_ids=[1], segments=[Segment("model", [2, 3], "ab", [-0.5, -0.25]),
                                                Segment("observation", [4], "c")])
    back = Trajectory.from_dict(json.loads(traj.to_json()))
    assert back.segments == traj.segments
    old = traj.to_dict()
    for s in old["segments"]:
        del s["logprobs"]
    assert Trajectory.from_dict(old).segments[0].logprobs is None


# ---- afm_agent through verl's worker ----------------------------------------------------------------------------
def test_afm_agent_tool_calls_masks_and_padding(tiny_model, tmp_path, afm_env, tokenizer):
    code_q, search_q, broken_q = "QCODE: what is 6*7?", "QSEARCH: capital of Veltria?", "QBROKEN: try tools"
    script = {
        "QCODE": [f"<think>compute it</think>\n<code>\n{F}py\nprint(6*7)\n{F}\n</code>",
                  "<answer>42</answer><|im_end|>"],
        "QSEARCH": ["<web_search>capital of Veltria</web_search>", "<web_search>capital of Veltria</web_search>",
                    "<answer>Veltria City</answer>"],
        "QBROKEN": ["<code></code>", "I ran it </code>", f"<code>\n{F}py\nprint(6*\n{F}\n</code>",
                    "<answer>none</answer>"],
    }
    server = TinyServer(tiny_model, script)
    worker = make_worker(tiny_model, tmp_path, server, response_length=2048)
    try:
        out = run_worker(worker, [
            row(code_q, tool_selection=["code"]),
            row(search_q, tools_kwargs={"web_search": {"create_kwargs": {"question": "capital of Veltria?",
                                                                         "ground_truth": "x"}}}),
            row(broken_q, tool_selection=["code"]),
        ])
    finally:
        close_tools(worker)
    assert out.batch["prompts"].shape == (3, 256) and out.batch["responses"].shape == (3, 2048)
    assert out.batch["input_ids"].shape == (3, 2304) and out.batch["rollout_log_probs"].shape == (3, 2048)
    ef = out.non_tensor_batch
    samples = [unpad(out, i) for i in range(3)]

    # prompt ids: the model's chat template over raw_prompt (oracle: the tokenizer's own apply_chat_template)
    for i, q in enumerate([code_q, search_q, broken_q]):
        text = tokenizer.apply_chat_template(row(q)["raw_prompt"], tokenize=False, add_generation_prompt=True)
        assert samples[i]["prompt"] == tokenizer.encode(text, add_special_tokens=False)
        assert samples[i]["pad_logprobs"] == [0.0] * len(samples[i]["pad_logprobs"])

    # stop strings of the sample's own tools, the stop string kept, one request id per sample
    by_marker: dict[str, list[dict]] = {}
    for c in server.calls:
        by_marker.setdefault(c["marker"], []).append(c)
    assert by_marker["QCODE"][0]["params"]["stop"] == ["</code>", "</answer>"]
    assert by_marker["QSEARCH"][0]["params"]["stop"] == ["</web_search>", "</answer>"]
    assert all(c["params"]["include_stop_str_in_output"] is True and c["params"]["logprobs"] is True
               for c in server.calls)
    assert len({cs[0]["request_id"] for cs in by_marker.values()}) == 3
    assert all(c["params"]["max_tokens"] <= 2048 for c in server.calls)
    assert {c["kwargs"]["priority"] for c in server.calls} == {0, 1, 2}  # the batch's priority column, per sample

    code_obs = check_sample(server, samples[0])
    assert code_obs == ["[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]"]
    assert tokenizer.decode(samples[0]["response"]).endswith("<answer>42</answer>")  # stop at </answer>, im_end cut
    search_obs = check_sample(server, samples[1])
    assert search_obs[0].startswith("Found ") and "## Web Results" in search_obs[0]
    assert search_obs[1].startswith("I have performed a web search with the same query before")
    broken_obs = check_sample(server, samples[2])
    assert broken_obs[0] == "The <code> call was empty. Put the code argument between <code> and </code>."
    assert broken_obs[1].startswith("Could not read a complete tool call")
    assert broken_obs[2].startswith("[FAILED] Code exited with status 1") and "SyntaxError" in broken_obs[2]

    assert list(ef["finish_reason"]) == ["answer", "answer", "answer"]
    assert list(ef["tools"]) == [["code"], ["web_search"], ["code"]]
    assert ef["tool_calls"][0] == {"code": 1} and ef["tool_calls"][1] == {"web_search": 2}
    assert ef["tool_status"][1] == {"ok": 1, "duplicate": 1} and ef["tool_errors"][1] == {}
    assert ef["tool_status"][2] == {"invalid": 2, "error": 1} and ef["tool_errors"][2] == {"code": 2, "": 1}
    assert list(ef["turns"]) == [2, 3, 4]
    assert ef["observation_tokens"][0] == samples[0]["mask"].count(0)
    assert ef["model_tokens"][1] == samples[1]["mask"].count(1)
    assert list(out.non_tensor_batch["__num_turns__"]) == [4, 6, 8]
    metrics = out.meta_info["metrics"]
    assert all(m["generate_sequences"] >= 0 and m["num_preempted"] == 0 for m in metrics)
    assert metrics[0]["tool_calls"] > 0


def test_afm_agent_samples_from_the_tiny_model(tiny_model, tmp_path, afm_env):
    server = TinyServer(tiny_model)  # no script: every turn is sampled from the model
    worker = make_worker(tiny_model, tmp_path, server, response_length=40,
                         extra=("actor_rollout_ref.rollout.temperature=1.0",))
    try:
        out = run_worker(worker, [row("sample freely one", tool_selection=["code"]),
                                  row("sample freely two", tool_selection=[])])
    finally:
        close_tools(worker)
    assert out.batch["responses"].shape == (2, 40)
    for i in range(2):
        s = unpad(out, i)
        assert 0 < len(s["response"]) <= 40
        check_sample(server, s)
        assert all(lp <= 0 and math.isfinite(lp) for lp in s["logprobs"])
        assert out.non_tensor_batch["finish_reason"][i] in {"eos", "max_tokens", "answer"}
    assert server.calls[0]["params"]["temperature"] == 1.0
    stops = {tuple(c["params"].get("stop") or ()) for c in server.calls}
    assert stops <= {("</code>", "</answer>"), ("</answer>",)}


def test_afm_agent_never_exceeds_response_length(tiny_model, tmp_path, afm_env):
    script = {"QLONG": [f"<code>\n{F}py\nfor i in range(400): print('line', i)\n{F}\n</code>",
                        "word " * 400, "<answer>x</answer>"],
              "QRAMBLE": ["blah " * 400]}
    server = TinyServer(tiny_model, script)
    worker = make_worker(tiny_model, tmp_path, server, response_length=96,
                         loop_changes={"max_observation_chars": 100000})
    try:
        out = run_worker(worker, [row("QLONG go", tool_selection=["code"]), row("QRAMBLE go", tool_selection=[])])
    finally:
        close_tools(worker)
    for i in range(2):
        s = unpad(out, i)
        assert len(s["response"]) <= 96
        check_sample(server, s)
    assert list(out.non_tensor_batch["finish_reason"]) == ["max_tokens", "max_tokens"]
    long_calls = [c for c in server.calls if c["marker"] == "QLONG"]
    assert long_calls[1]["params"]["max_tokens"] < long_calls[0]["params"]["max_tokens"] <= 96


def test_afm_agent_limits_from_the_yaml_entry(tiny_model, tmp_path, afm_env):
    script = {"QSLEEP": [f"<code>\n{F}py\nimport time\ntime.sleep(3)\n{F}\n</code>", "<answer>late</answer>"],
              "QTURNS": ["<code></code>"]}
    server = TinyServer(tiny_model, script)
    worker = make_worker(tiny_model, tmp_path, server, loop_changes={"tool_timeout_s": 1, "max_turns": 3})
    try:
        out = run_worker(worker, [row("QSLEEP now", tool_selection=["code"]), row("QTURNS now", tool_selection=["code"])])
    finally:
        close_tools(worker)
    obs = check_sample(server, unpad(out, 0))
    assert obs[0].startswith("The code tool did not answer within 1 seconds")
    assert out.non_tensor_batch["tool_status"][0] == {"timeout": 1}
    assert list(out.non_tensor_batch["finish_reason"]) == ["answer", "max_turns"]
    assert out.non_tensor_batch["turns"][1] == 3

    slow = TinyServer(tiny_model, {"QSLOW": ["<code></code>"]}, delay_s=0.4)
    worker = make_worker(tiny_model, tmp_path, slow, loop_changes={"trajectory_timeout_s": 1.0})
    try:
        out = run_worker(worker, [row("QSLOW now", tool_selection=["code"])])
    finally:
        close_tools(worker)
    assert out.non_tensor_batch["finish_reason"][0] == "timeout"
    assert 1 <= out.non_tensor_batch["turns"][0] <= 3
    check_sample(slow, unpad(out, 0))


class FailingServer:
    async def generate(self, request_id: str, **kwargs: Any) -> TokenOutput:
        raise ConnectionError("replica down")


def test_afm_agent_server_failure_raises(tiny_model, tmp_path, afm_env):
    worker = make_worker(tiny_model, tmp_path, FailingServer())  # type: ignore[arg-type]
    try:
        with pytest.raises(RuntimeError, match="replica down"):
            run_worker(worker, [row("anything", tool_selection=[])])
    finally:
        close_tools(worker)


def test_afm_agent_without_a_verl_tool_list_reads_its_own_yaml(tiny_model, tmp_path):
    """``tool_config_path`` in the loop entry: the loop builds (once per process) the tools of its own yaml."""
    server = TinyServer(tiny_model, {"QC": [f"<code>\n{F}py\nprint(5)\n{F}\n</code>", "<answer>5</answer>"]})
    worker = make_worker(tiny_model, tmp_path, server, tool_config=None,
                         loop_changes={"tool_config_path": str(TOOLS / "code.yaml")})
    out = run_worker(worker, [row("QC five")])
    assert check_sample(server, unpad(out, 0)) == ["[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n5\n"
                                                   "[STDOUT:END]"]
    assert out.non_tensor_batch["tools"][0] == ["code"]
    from afm.rl.tools import shared_afm_tools

    tools = shared_afm_tools(TOOLS / "code.yaml")
    assert tools is shared_afm_tools(str(TOOLS / "code.yaml")) and isinstance(tools["code"], CodeTool)
    asyncio.run(tools["code"].aclose())


# ---- verl's own tool_agent loop with the afm tools ----------------------------------------------------------------
def test_verl_tool_agent_runs_afm_tools_next_to_afm_agent(tiny_model, tmp_path, afm_env, tokenizer):
    call = json.dumps({"name": "code", "arguments": {"code": f"{F}py\nprint(6*7)\n{F}"}})
    script = {"QHERMES": [f"<tool_call>\n{call}\n</tool_call><|im_end|>", "It is 42.<|im_end|>"],
              "QAFM": ["<answer>1</answer>"]}
    server = TinyServer(tiny_model, script)
    worker = make_worker(tiny_model, tmp_path, server, tool_config=TOOLS / "code.yaml")
    try:
        out = run_worker(worker, [row("QHERMES six times seven", agent="tool_agent"), row("QAFM one")])
    finally:
        close_tools(worker)
    s = unpad(out, 0)
    masked = "".join(tokenizer.decode(s["response"][a:b]) for v, a, b in runs(s["mask"]) if v == 0)
    assert "[EXECUTED] Code exited with status 0.\n[STDOUT:BEGIN]\n42\n[STDOUT:END]" in masked
    assert tokenizer.decode(s["response"]).endswith("It is 42.<|im_end|>")
    # both loops in one batch: afm_agent's fields are None for the tool_agent row and set for its own
    assert list(out.non_tensor_batch["finish_reason"]) == [None, "answer"]
    assert out.non_tensor_batch["tool_rewards"][0] == [0.0]


class Gate(Tool):
    """Counts how many calls run at once."""

    name = "code"

    def __init__(self) -> None:
        super().__init__({})
        self.now = self.peak = 0

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        self.now += 1
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.02)
        self.now -= 1
        return ToolResult(json.dumps(dict(ctx.kwargs)))


def test_tool_concurrency_is_shared_by_trajectories():
    from afm.rl.agent_loop import _semaphore
    from afm.rl.tools import BoundTool

    gate = Gate()

    async def go() -> list[str]:
        views = [BoundTool(gate, {"i": i}, _semaphore("code", 2)) for i in range(6)]  # one per trajectory
        return [r.text for r in await asyncio.gather(*(v.call("x", ToolContext(kwargs={"other": 1})) for v in views))]

    texts = asyncio.run(go())
    assert gate.peak == 2
    assert texts == [json.dumps({"i": i}) for i in range(6)]  # each trajectory's own kwargs
