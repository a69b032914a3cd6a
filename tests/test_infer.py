"""`afm infer`: prompts by key, n samples, summary, and resume after SIGKILL without loss or duplication."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afm.offline.openai_standin import StandIn

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


def infer_cmd(llm, tiny_model, questions: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "afm.cli", "infer", "--input", str(questions), "--output", str(out),
            "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
            "--prompt", "code_agent", "--n", "2", "--concurrency", "2", "--quiet", *extra]


def write_questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)})
                            + "\n" for i in range(n)))
    return path


def test_infer_writes_trajectories_and_summary(llm, tiny_model, tmp_path):
    llm.reset()
    fence = "```"
    # the second turn is recognised by our own first call followed by its observation
    llm.rules({"match": r"print\(2 \+ 2\)\n```\n</code>\n\n<observation>",
               "content": "<think> it printed </think>\n<answer>4</answer>"},
              {"match": "", "content": f"<think> use code </think>\n<code>\n{fence}py\nprint(2 + 2)\n{fence}\n</code>"})
    q = write_questions(tmp_path / "q.jsonl", 2)
    out = tmp_path / "traj.jsonl"
    run = subprocess.run(infer_cmd(llm, tiny_model, q, out), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["key"] for r in records) == ["q0#0", "q0#1", "q1#0", "q1#1"]
    for r in records:
        assert r["finish_reason"] == "answer" and r["answer"] == "4" and r["gold"] in ("0", "2")
        assert r["tool_calls"][0]["name"] == "code" and r["tool_calls"][0]["status"] == "ok"
        assert r["meta"]["prompt_key"] == "code_agent" and r["meta"]["prompt_version"]
        assert [s["kind"] for s in r["segments"]] == ["model", "observation", "model"]
    # the prompt was built from the code_agent system prompt embedded in the user turn
    first = llm.requests()[0]["body"]["prompt"]
    assert isinstance(first, list) and all(isinstance(i, int) for i in first)
    assert "finish reasons: answer=4" in run.stdout and "calls per tool: code=4" in run.stdout


def start_slow_infer(llm, tiny_model, tmp_path, questions: int, wait_lines: int, **popen):
    """``afm infer`` against a model that answers in 0.3 s, once ``wait_lines`` records are on disk."""
    llm.reset()
    llm.rules({"match": "", "content": "<think> t </think>\n<answer>A</answer>", "delay": 0.3})
    q = write_questions(tmp_path / "q.jsonl", questions)
    out = tmp_path / "traj.jsonl"
    proc = subprocess.Popen(infer_cmd(llm, tiny_model, q, out), cwd=REPO, **popen)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and out.read_text().count("\n") >= wait_lines):
        time.sleep(0.05)
    return proc, q, out


def test_infer_resumes_after_sigkill(llm, tiny_model, tmp_path):
    proc, q, out = start_slow_infer(llm, tiny_model, tmp_path, 6, 3, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = out.read_text().splitlines()
    assert 3 <= len(before) < 12
    with open(out, "a") as f:  # what a kill in the middle of a write leaves behind
        f.write('{"key": "q5#1", "finish_reas')
    run = subprocess.run(infer_cmd(llm, tiny_model, q, out), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    after = out.read_text().splitlines()
    keys = [json.loads(line)["key"] for line in after]
    assert sorted(keys) == sorted(f"q{i}#{k}" for i in range(6) for k in range(2))  # no loss, no duplicates
    assert after[: len(before)] == before  # finished records are never rewritten
    assert '"done": ' + str(12 - len(before)) in run.stdout


def test_infer_stops_gracefully_on_sigint(llm, tiny_model, tmp_path):
    proc, _, out = start_slow_infer(llm, tiny_model, tmp_path, 8, 2, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr[-2000:]  # interrupted is not done: `afm infer && next` stops here
    run = json.loads(stdout.strip().splitlines()[-1])
    lines = out.read_text().splitlines()
    # every one of the 16 tasks is accounted for once: finished (on disk) or cancelled, none failed
    assert run == {"done": len(lines), "skipped": 0, "failed": 0, "cancelled": 16 - len(lines), "interrupted": True,
                   "signal": "SIGINT"}
    assert 2 <= len(lines) < 16 and all(json.loads(line)["finish_reason"] == "answer" for line in lines)
    assert f"interrupted by SIGINT: {16 - len(lines)} of 16 trajectories have no result" in stderr


def test_engine_errors_are_failures_and_a_resume_retries_them(llm, tiny_model, tmp_path):
    llm.reset()
    llm.rules({"match": "", "status": 500, "content": "engine down"})
    q = write_questions(tmp_path / "q.jsonl", 2)
    out = tmp_path / "traj.jsonl"
    down = subprocess.run(infer_cmd(llm, tiny_model, q, out), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert down.returncode == 1, down.stderr[-2000:]
    assert json.loads(down.stdout.strip().splitlines()[-1])["failed"] == 4
    assert "trajectories: 0 (with an answer: 0; failed, retried by a rerun: 4)" in down.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 and all(r["status"] == "failed" for r in records)
    assert all(r["failure"].startswith("engine: ") and "500" in r["failure"] for r in records), records[0]["failure"]
    assert "4 of 4 trajectories have no result (4 failed, 0 not run)" in down.stderr

    llm.reset()  # the engine is back: the same command runs the failed ones again, and only those
    llm.rules({"match": "", "content": "<think> t </think>\n<answer>A</answer>"})
    again = subprocess.run(infer_cmd(llm, tiny_model, q, out), capture_output=True, text=True, cwd=REPO, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    run = json.loads(again.stdout.strip().splitlines()[-1])
    assert run["done"] == 4 and run["failed"] == 0 and run["skipped"] == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 8 and all(r["status"] == "ok" and r["finish_reason"] == "answer" for r in records[4:])
    assert "trajectories: 4 (with an answer: 4)" in again.stdout and "finish reasons: answer=4" in again.stdout
