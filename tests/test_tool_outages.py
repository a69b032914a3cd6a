"""The engine's tool runner against a real search server on 127.0.0.1 that goes down: a call that failed for
infrastructure reasons is retried until the server is back, and one still failing afterwards is recorded as an
infrastructure failure (``infra``) in the call record and the trajectory."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fake_http import FakeHTTP

from afm.agent.loop import AgentConfig, ToolRunner
from afm.agent.record import ToolCallRecord, Trajectory
from afm.common.procs import ServerProcess, free_port
from afm.servers.demo_data import write_demo_corpora
from afm.tools.base import Tool, ToolContext, ToolResult
from afm.tools.web_search import WebSearchTool

SITE = "http://demo.invalid"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_demo_corpora(tmp_path_factory.mktemp("corpora"), SITE).search


def search_server(corpus, tmp, port: int) -> ServerProcess:
    env = {"WEB_SEARCH_CACHE": str(tmp / "cache.sqlite"), "AFM_METRICS_DB": str(tmp / "metrics.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "local", "AFM_SERVER_TOKEN": "",
           "WEB_SEARCH_INDEX_DIR": ""}
    return ServerProcess(["-m", "afm.servers.search_server", "--port", str(port), "--corpus", str(corpus)], port,
                         env=env)


def run_call(runner: ToolRunner, query: str, seen: set) -> tuple[str, ToolCallRecord]:
    return asyncio.run(runner.call("web_search", query, ToolContext(question="q"), seen, None))


def test_a_call_made_while_the_server_restarts_is_retried_and_loses_nothing(corpus, tmp_path):
    port = free_port()
    server = search_server(corpus, tmp_path, port)
    tool = WebSearchTool({"url": f"http://127.0.0.1:{port}/search", "retries": 0})
    # 90 s of retries leave room for a slow server start on a busy machine (the default is 30 s)
    runner = ToolRunner({"web_search": tool}, AgentConfig(tools=("web_search",), tool_infra_retry_s=90))

    def start_later() -> None:
        time.sleep(2)
        server.start()

    starter = threading.Thread(target=start_later)
    starter.start()
    try:
        text, rec = run_call(runner, "Who designed the Brassel Lighthouse?", set())
    finally:
        starter.join()
        server.stop()
    assert rec.status == "ok" and not rec.infra, rec
    assert text.startswith("Found ") and f"{SITE}/brassel-lighthouse.html" in text
    assert rec.meta["infra_retries"] >= 1  # it was down when first called


def test_a_call_still_failing_after_the_retries_is_an_infrastructure_failure(corpus, tmp_path):
    port = free_port()  # nobody listens here
    tool = WebSearchTool({"url": f"http://127.0.0.1:{port}/search", "retries": 0})
    runner = ToolRunner({"web_search": tool}, AgentConfig(tools=("web_search",), tool_infra_retry_s=1.5))
    seen: set = set()
    text, rec = run_call(runner, "capital of Veltria", seen)
    assert rec.infra and rec.status == "error" and rec.meta["reason"] == "unreachable"
    assert rec.meta["infra_retries"] == 1  # 1 s backoff fits in 1.5 s, the next 2 s does not
    assert text.startswith("[web_search unavailable]")
    # the model may ask again once the server is back: that is a real call, not a duplicate
    assert seen == set()
    with search_server(corpus, tmp_path, port):
        text, again = run_call(runner, "capital of Veltria", seen)
    assert again.status == "ok" and not again.infra and "infra_retries" not in again.meta

    # the record keeps it, and the trajectory counts it, through JSON
    traj = Trajectory(prompt_ids=[1], tool_calls=[rec, again])
    assert traj.infra_failures == 1
    d = Trajectory.from_dict(traj.to_dict()).to_dict()
    assert [c["infra"] for c in d["tool_calls"]] == [True, False] and d["counts"]["infra_failures"] == 1


def test_a_rejected_query_is_not_retried(corpus, tmp_path):
    with search_server(corpus, tmp_path, free_port()) as server:
        tool = WebSearchTool({"url": server.url + "/search", "retries": 0})
        runner = ToolRunner({"web_search": tool}, AgentConfig(tools=("web_search",)))
        _, rec = run_call(runner, "veltria " * 400, set())  # too long: HTTP 422
    assert rec.status == "error" and not rec.infra and "infra_retries" not in rec.meta
    assert rec.meta["http_status"] == 422


class SlowProgram(Tool):
    """Stands for a tool whose time is the model's own (a program running long): not a server's."""

    name = "code"

    async def call(self, body: str, ctx: ToolContext) -> ToolResult:
        await asyncio.sleep(30)
        return ToolResult("never")


def test_the_engine_timeout_is_infrastructure_only_for_a_server_tool():
    with FakeHTTP(default=("sleep", 5)) as fake:  # a search server that hangs
        tool = WebSearchTool({"url": fake.url + "/search", "retries": 0, "timeout": 60})
        cfg = AgentConfig(tools=("web_search", "code"), tool_timeout_s=0.5, tool_infra_retry_s=2.0)
        runner = ToolRunner({"web_search": tool, "code": SlowProgram()}, cfg)
        _, hung = run_call(runner, "capital of Veltria", set())
        assert hung.status == "timeout" and hung.infra and hung.meta["infra_retries"] == 1
        _, slow = asyncio.run(runner.call("code", "print(1)", ToolContext(), set(), None))
    assert slow.status == "timeout" and not slow.infra and "infra_retries" not in slow.meta
