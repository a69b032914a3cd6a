"""`afm eval run` end to end: demo benchmarks through the engine and the rewards, exact avg@k, resume, report."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afm.testing.openai_standin import StandIn

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


def eval_cmd(llm, tiny_model, run_dir: Path, benchmarks: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", benchmarks, "--run-dir", str(run_dir),
            "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
            "--concurrency", "4", "--quiet", *extra]


def test_demo_math_scores_and_report(llm, tiny_model, tmp_path):
    from afm.eval.datasets import load_benchmark

    items = load_benchmark("demo_math", data_root=tmp_path / "nodata")
    assert len(items) >= 3
    llm.reset()
    rules = []
    right = set()
    for i, item in enumerate(items):
        gold = str(item.gold if not isinstance(item.gold, (list, tuple)) else item.gold[0])
        gold = re.sub(r"^\\boxed\{(.*)\}$", r"\1", gold.strip())
        answer = gold if i % 2 == 0 else gold + "1"  # every other question answered wrongly
        if i % 2 == 0:
            right.add(item.qid)
        rules.append({"match": re.escape(item.question), "content": f"<think> done </think>\n<answer>\\boxed{{{answer}}}</answer>"})
    llm.rules(*rules)
    run_dir = tmp_path / "run"
    proc = subprocess.run(eval_cmd(llm, tiny_model, run_dir, "demo_math", "--n", "2"), capture_output=True,
                          text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 * len(items) and len({r["key"] for r in records}) == len(records)
    for r in records:
        assert r["acc"] == (1.0 if r["qid"] in right else 0.0), r
        assert r["finish_reason"] == "answer" and r["method"] == "math_verify"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["benchmarks"] == ["demo_math"] and config["settings"]["demo_math"]["n"] == 2
    report = run_dir / "report.md"
    assert report.exists() and "demo_math" in report.read_text()
    pngs = list(run_dir.rglob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 1000 for p in pngs)
    summary = json.loads(next(run_dir.rglob("summary.json")).read_text())
    assert json.dumps(summary).count("demo_math") >= 1
    expected = len(right) / len(items)
    assert f"{expected:.3f}"[:4] in report.read_text() or f"{100 * expected:.1f}" in report.read_text()


def test_eval_resumes_after_sigkill(llm, tiny_model, tmp_path):
    llm.reset()
    llm.rules({"match": "", "content": "<think> t </think>\n<answer>\\boxed{0}</answer>", "delay": 0.25})
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir, "demo_math", "--n", "3", "--no-report")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 3):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = results.read_text().splitlines()
    with open(results, "a") as f:
        f.write('{"key": "demo_math/x#0", "acc": ')
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    after = results.read_text().splitlines()
    keys = [json.loads(line)["key"] for line in after]
    assert len(keys) == len(set(keys)) and after[: len(before)] == before
    from afm.eval.datasets import load_benchmark

    assert len(keys) == 3 * len(load_benchmark("demo_math", data_root=tmp_path / "nodata"))


def test_resume_refuses_another_model(llm, tiny_model, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"model": "other", "backend": "openai", "prompt_style": "user",
                                                     "benchmarks": ["demo_math"]}))
    proc = subprocess.run(eval_cmd(llm, tiny_model, run_dir, "demo_math", "--no-report"), capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode != 0 and "different settings" in proc.stderr
