"""The multi-agent teacher with the web tools: real search and crawl servers over the demo site (127.0.0.1), the
stand-in playing the roles; the run converts into a web-agent SFT record that validates and is masked."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import lf_config
from teacher_replies import (
    ANSWERER,
    PLANNER,
    REFLECTOR,
    VERIFIER,
    agent,
    answer_reply,
    plan_reply,
    reflect_reply,
    rule,
    verify_reply,
)

from afm.data.convert import main as convert_main
from afm.data.records import RunRecord
from afm.data.teacher import ChatClient, Teacher, TeacherTask, teacher_config_from_dict
from afm.offline.openai_standin import StandIn
from afm.quickstart.servers import DemoServers
from afm.sft.report import preprocess
from afm.tools import load_tools_config
from afm.trajectory import validate

QUESTION = "Who designed the street plan of the capital of Veltria?"


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    with DemoServers(tmp_path_factory.mktemp("demo")) as s:
        yield s


def test_web_run_searches_crawls_and_converts(servers, tmp_path, tiny_model):
    page = f"{servers.site}/ilse-varnholt.html"
    steps = ["web_search: find the capital", "web_search: who planned it", "crawl_page: read the architect's page",
             "web_search: confirm the architect", "crawl_page: read the capital's page",
             "answer: name the architect"]
    queries = iter(["capital of Veltria", "Marrowgate street plan architect", "Ilse Varnholt architect"])
    urls = iter([page, f"{servers.site}/marrowgate.html"])
    with StandIn(default_reply="(no rule matched)") as llm:
        llm.rules(
            rule(PLANNER, plan_reply(steps, plan="1. Find the capital. 2. Find who planned it. 3. Answer.")),
            *[rule(agent("web_search"), f"<think>Search for it.</think>\n<argument>{q}</argument>", times=1)
              for q in queries],
            *[rule(agent("crawl_page"), f"<think>Read the page.</think>\n<argument>{u}</argument>", times=1)
              for u in urls],
            rule(REFLECTOR, reflect_reply("good")), rule(ANSWERER, answer_reply("Ilse Varnholt")),
            rule(VERIFIER, verify_reply(4)))
        cfg = teacher_config_from_dict({"default": {"base_url": llm.base_url, "model": "teacher-m", "max_retries": 1,
                                                    "timeout_s": 30}, "controller": {"reflect_every": 2}})
        task = TeacherTask(question_id="v1", question=QUESTION, gold="Ilse Varnholt", task="web",
                           data_source="search", tools=("web_search", "crawl_page"), prompt_key="web_agent")

        async def go() -> RunRecord:
            tools = load_tools_config(servers.tools_config())
            try:
                async with ChatClient(backoff_s=0.01) as chat:
                    return await Teacher(cfg, {n: tools[n] for n in ("web_search", "crawl_page")}, chat).run(
                        task, "v1#0")
            finally:
                for t in tools.values():
                    await t.aclose()

        rec = asyncio.run(go())
    assert rec.status == "ok", rec.error
    assert [c["name"] for c in rec.tool_calls] == ["web_search", "web_search", "crawl_page", "web_search",
                                                    "crawl_page"]
    assert all(c["status"] == "ok" for c in rec.tool_calls)
    text = rec.trajectory
    assert "<web_search>capital of Veltria</web_search>\n\n<observation>\n" in text
    assert "Marrowgate" in text and "She designed the street plan of Marrowgate" in text  # the crawled page
    assert rec.has_reflection and rec.final_answer == "Ilse Varnholt" and text.endswith("<answer>Ilse Varnholt</answer>")
    assert validate(text) == []

    runs = tmp_path / "runs.jsonl"
    runs.write_text(rec.to_json() + "\n")
    out = tmp_path / "sft"
    assert convert_main(["--input", str(runs), "--output-dir", str(out), "--name", "web_sft", "--format", "sharegpt"]) == 0
    records = json.loads((out / "web_sft_sharegpt.json").read_text())
    assert len(records) == 1 and records[0]["conversations"][-1]["value"] == text
    # LLaMA-Factory's own preprocessing with the afm overlay: kept, and the 5 observations masked
    cfg = lf_config(tiny_model, out, tmp_path / "lf", dataset="web_sft_sharegpt", cutoff_len=16384)
    report = preprocess(cfg).reports["train"]
    assert report.samples_seen == report.samples_kept == 1 and report.drops == {}
    assert report.observations == 5 and 0 < report.tokens_masked < report.tokens_target
