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

from afm.offline.openai_standin import StandIn

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


def run_eval(llm, tiny_model, run_dir: Path, benchmarks: str, *extra: str, env: dict | None = None):
    full = {k: v for k, v in os.environ.items() if k not in ("GRM_BASE_URL", "LIVECODEBENCH_TESTCASES_DIR")}
    full.update(env or {})
    return subprocess.run(eval_cmd(llm, tiny_model, run_dir, benchmarks, *extra), capture_output=True, text=True,
                          cwd=REPO, timeout=300, env=full)


def lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def test_engine_errors_are_stored_as_failed_counted_apart_and_retried_on_resume(llm, tiny_model, tmp_path):
    from afm.eval.datasets import load_benchmark
    from afm.eval.metrics import summarize_run

    items = load_benchmark("demo_math", data_root=tmp_path / "nodata")
    down = {items[0].qid, items[1].qid}

    def answers(*broken):
        rules = []
        for item in items:
            if item.qid in broken:  # the model server is down for these prompts
                rules.append({"match": re.escape(item.question), "status": 503, "content": "engine overloaded"})
            else:
                rules.append({"match": re.escape(item.question),
                              "content": f"<think> t </think>\n<answer>\\boxed{{{item.gold}}}</answer>"})
        return rules

    llm.reset()
    llm.rules(*answers(*down))
    run_dir = tmp_path / "run"
    proc = run_eval(llm, tiny_model, run_dir, "demo_math", "--n", "1")
    assert proc.returncode == 1, proc.stderr[-3000:]  # failures make the command fail
    records = lines(run_dir)
    failed = [r for r in records if r["status"] == "failed"]
    assert {r["qid"] for r in failed} == down and len(records) == len(items)
    assert all(r["failure"].startswith("engine: ") and "503" in r["failure"] for r in failed)
    # logged although --quiet: an engine error is never silent
    assert sum(f"[demo_math/{q}#0] failed: engine: " in proc.stderr for q in down) == 2, proc.stderr[-3000:]
    # not scored as wrong answers: avg@1 is over the answered questions only, the failures are counted apart
    summary = summarize_run(run_dir)
    assert summary["benchmarks"]["demo_math"]["avg_at_k"]["value"] == 1.0
    assert summary["overall"]["caveats"]["infra_failures"] == {"total": 2, "by_benchmark": {"demo_math": 2},
                                                                "by_kind": {"engine": 2}}
    report = (run_dir / "report.md").read_text()
    assert "**2 samples failed on infrastructure** (engine: 2; demo_math: 2)" in report.split("- run:")[0]

    llm.rules(*answers())  # the server is back: the same command retries the failed samples only
    again = run_eval(llm, tiny_model, run_dir, "demo_math", "--n", "1")
    assert again.returncode == 0, again.stderr[-3000:]
    records = lines(run_dir)
    assert len(records) == len(items) + 2 and {r["qid"] for r in records[len(items):]} == down
    summary = summarize_run(run_dir)
    assert summary["records"] == len(items) and summary["duplicates"] == 0
    assert summary["overall"]["caveats"]["infra_failures"]["total"] == 0
    assert "failed on infrastructure" not in (run_dir / "report.md").read_text()


def test_judge_failures_are_infrastructure_failures(llm, tiny_model, tmp_path):
    llm.reset()
    llm.rules({"match": "Decide whether the predicted answer", "status": 400, "content": "judge refuses"},
              {"match": "", "content": "<think> t </think>\n<answer>Marrowgate</answer>"})
    run_dir = tmp_path / "run"
    proc = run_eval(llm, tiny_model, run_dir, "demo_web", "--n", "1", "--limit", "2", "--no-report",
                    env={"GRM_BASE_URL": llm.base_url, "AFM_JUDGE_CACHE": "off"})
    assert proc.returncode == 1, proc.stderr[-3000:]
    records = lines(run_dir)
    assert len(records) == 2 and all(r["status"] == "failed" for r in records)
    assert all(r["failure"].startswith("judge: ") for r in records), records[0]["failure"]
    assert "EM/F1 fallback" not in proc.stderr  # a judge was configured and reachable


def test_judge_fallback_and_public_lcb_tests_are_said_at_start_and_in_the_headline(llm, tiny_model, tmp_path):
    from afm.eval.datasets import load_benchmark

    code = load_benchmark("demo_code", data_root=tmp_path / "nodata")[0]
    program = "a, b = map(int, input().split())\nprint(a + b)"
    llm.reset()
    llm.rules({"match": re.escape(code.question), "content": f"<think> t </think>\n<answer>\n```py\n{program}\n```\n</answer>"},
              {"match": "", "content": "<think> t </think>\n<answer>Marrowgate</answer>"})
    run_dir = tmp_path / "run"
    proc = run_eval(llm, tiny_model, run_dir, "demo_web,demo_code", "--n", "1", "--limit", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr
    assert err.count("will be scored by EM/F1 fallback, not the judge") == 1, err[-3000:]
    assert err.count("without LiveCodeBench's private tests") == 1, err[-3000:]  # once per run
    records = {r["benchmark"]: r for r in lines(run_dir)}
    assert records["demo_code"]["tests_from"] == "inline" and records["demo_code"]["acc"] == 1.0
    assert records["demo_web"]["method"] == "em_f1_fallback"
    headline = (run_dir / "report.md").read_text().split("- run:")[0]
    assert "**Scored by EM/F1 fallback, not the judge** (demo_web 1/1 samples)" in headline
    assert "**LiveCodeBench graded without private tests** (demo_code 1/1 samples on public tests only)" in headline


def test_start_warnings_name_an_unreachable_judge_and_stay_quiet_when_all_is_set(llm, tmp_path):
    import socket

    from afm.eval.datasets import get_benchmark
    from afm.eval.run import start_warnings

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    specs = {b: get_benchmark(b) for b in ("demo_web", "demo_code", "demo_math")}
    warnings = start_warnings(specs, {"GRM_BASE_URL": dead})
    assert len(warnings) == 2
    assert warnings[0].startswith(f"the judge at {dead} is not reachable")
    assert "demo_web will be scored by EM/F1 fallback, not the judge" in warnings[0]
    assert "demo_code will be graded on the public tests" in warnings[1]
    assert start_warnings(specs, {"GRM_BASE_URL": llm.base_url, "LIVECODEBENCH_TESTCASES_DIR": str(tmp_path)}) == []
    assert start_warnings({"demo_math": specs["demo_math"]}, {}) == []  # nothing judged, no LiveCodeBench


@pytest.fixture(scope="module")
def llama(tiny_model):
    """The stand-in answering as llama.cpp's llama-server (``GET /props``, native ``/completion``)."""
    with StandIn(tokenizer=str(tiny_model), dialect="llamacpp") as server:
        yield server


def _engine_said(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[eval] engine: ")]


def _engine_recorded(run_dir: Path) -> tuple[dict, dict, list[str]]:
    """(config.json, summary.json's config, the report's engine lines) of a finished run."""
    config = json.loads((run_dir / "config.json").read_text())
    summary = json.loads(next(run_dir.rglob("summary.json")).read_text())
    report = [line for line in (run_dir / "report.md").read_text().splitlines() if line.startswith("- engine")]
    return config, summary["run"]["config"], report


def test_the_engine_auto_found_is_said_recorded_and_reported(llama, tiny_model, tmp_path):
    """``--engine auto`` (the default) asks the server: what it found is said once, and is the run's engine in
    config.json, summary.json and the report; the flag is kept apart."""
    llama.reset()
    llama.rules({"match": "", "content": "<think> t </think>\n<answer>\\boxed{0}</answer>"})
    run_dir = tmp_path / "run"
    proc = subprocess.run(eval_cmd(llama, tiny_model, run_dir, "demo_math", "--n", "2", "--limit", "2"),
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = _engine_said(proc.stdout)
    assert len(said) == 1 and said[0].startswith("[eval] engine: llamacpp (") and "--engine auto" in said[0]
    config, summary_config, report = _engine_recorded(run_dir)
    assert config["engine"] == summary_config["engine"] == "llamacpp" and config["engine_flag"] == "auto"
    assert report == ["- engine: `llamacpp` (found by `--engine auto`)"], report


def test_the_hf_backend_is_engine_hf(tiny_model, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", "demo_math", "--run-dir", str(run_dir),
           "--backend", "hf", "--model", str(tiny_model), "--limit", "1", "--n", "1", "--max-turns", "1",
           "--max-tokens-per-turn", "4", "--quiet"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = _engine_said(proc.stdout)
    assert len(said) == 1 and said[0].startswith("[eval] engine: hf ("), proc.stdout
    config, summary_config, report = _engine_recorded(run_dir)
    assert config["engine"] == summary_config["engine"] == "hf" and config.get("engine_flag") is None
    assert report == ["- engine: `hf`"], report
