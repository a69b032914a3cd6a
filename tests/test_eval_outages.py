"""`afm eval run` when the world fails under it, through the real CLI: a search server killed and restarted mid-run
(nothing lost), a search server that stays down (samples failed, left out of scores, finished by a resume),
SIGTERM (exit 143, the missing samples said, and a report that says the run is incomplete), and a full disk (one
clear line, exit 1, and a resume that loses nothing)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afm.common.procs import ServerProcess, free_port
from afm.offline.openai_standin import StandIn
from afm.servers.demo_data import write_demo_corpora

REPO = Path(__file__).resolve().parents[1]
PROBE = "afm-probe"


@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_demo_corpora(tmp_path_factory.mktemp("corpora"), "http://demo.invalid").search


def search_server(corpus: Path, tmp: Path, port: int) -> ServerProcess:
    env = {"WEB_SEARCH_CACHE": str(tmp / "cache.sqlite"), "AFM_METRICS_DB": str(tmp / "metrics.sqlite"),
           "WEB_SEARCH_SERPER_API_KEY": "", "WEB_SEARCH_BACKEND": "local", "AFM_SERVER_TOKEN": "",
           "WEB_SEARCH_INDEX_DIR": ""}
    return ServerProcess(["-m", "afm.servers.search_server", "--port", str(port), "--corpus", str(corpus)], port,
                         env=env)


def eval_cmd(llm, tiny_model, run_dir: Path, benchmarks: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", benchmarks, "--run-dir", str(run_dir),
            "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
            "--quiet", *extra]


def eval_env(search_port: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GRM_BASE_URL", "LIVECODEBENCH_TESTCASES_DIR")}
    if search_port is not None:  # the web_search tool's default URL: http://$SERVER_HOST:$WEBSEARCH_PORT/search
        env.update(SERVER_HOST="127.0.0.1", WEBSEARCH_PORT=str(search_port))
    return env


def lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]


def web_items(tmp_path: Path):
    from afm.eval.datasets import load_benchmark

    return load_benchmark("demo_web", data_root=tmp_path / "nodata")


def gold(item) -> str:
    return str(item.gold[0] if isinstance(item.gold, (list, tuple)) else item.gold)


def web_model(llm, items, delay: float = 0.0) -> None:
    """A model that searches once, then answers right after real search results and "unknown" after an error
    observation (what a model does when the tool is down)."""
    rules = []
    for item in items:
        q = re.escape(item.question)
        rules += [{"match": q + rf"[\s\S]*{PROBE} [^<]*</web_search>\s*<observation>\s*(?:Found|No results)",
                   "content": f"<think> found it </think>\n<answer>{gold(item)}</answer>"},
                  {"match": q + rf"[\s\S]*{PROBE} [^<]*</web_search>\s*<observation>",
                   "content": "<think> the tool is down </think>\n<answer>unknown</answer>"},
                  {"match": q, "content": f"<think> look it up </think>\n<web_search>{PROBE} {item.qid}</web_search>",
                   "delay": delay}]
    llm.reset()
    llm.rules(*rules)


def test_search_server_killed_and_restarted_mid_run_loses_nothing(llm, tiny_model, corpus, tmp_path):
    items = web_items(tmp_path)
    web_model(llm, items, delay=0.3)
    port = free_port()
    run_dir = tmp_path / "run"
    # --tool-infra-retry 90: room for a slow restart on a busy machine (the default, 30 s, covers a few seconds)
    cmd = eval_cmd(llm, tiny_model, run_dir, "demo_web", "--n", "4", "--concurrency", "2", "--keep-trajectories",
                   "--tool-infra-retry", "90", "--no-report")
    server = search_server(corpus, tmp_path, port).start()
    proc = subprocess.Popen(cmd, cwd=REPO, env=eval_env(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        results = run_dir / "results.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
            time.sleep(0.05)
        os.killpg(server.proc.pid, signal.SIGKILL)  # the outage: no goodbye, connections reset
        server.proc.wait()
        server.stop()
        time.sleep(3)
        server = search_server(corpus, tmp_path, port).start()
        _, stderr = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == 0, stderr[-3000:]
    records = lines(run_dir)
    assert len(records) == 4 * len(items) and all(r["status"] == "ok" for r in records), stderr[-3000:]
    # no sample answered "unknown" because the search server was restarting
    assert [r["key"] for r in records if r["acc"] != 1.0] == []
    retries = [c["meta"].get("infra_retries", 0) for r in records for c in r["trajectory"]["tool_calls"]]
    assert sum(retries) >= 1 and all(not c["infra"] for r in records for c in r["trajectory"]["tool_calls"])


def test_search_server_down_fails_samples_and_a_resume_finishes_them(llm, tiny_model, corpus, tmp_path):
    from afm.eval.metrics import summarize_run

    items = web_items(tmp_path)[:3]
    web_model(llm, items)
    port = free_port()  # no server yet
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir, "demo_web", "--n", "1", "--limit", "3", "--concurrency", "3",
                   "--tool-infra-retry", "1")
    down = subprocess.run(cmd, cwd=REPO, env=eval_env(port), capture_output=True, text=True, timeout=300)
    assert down.returncode == 1, down.stderr[-3000:]
    records = lines(run_dir)
    assert len(records) == 3 and all(r["status"] == "failed" for r in records), records
    assert all(r["failure"].startswith("tool: 1 call(s) failed on infrastructure") and "web_search" in r["failure"]
               for r in records), records[0]["failure"]
    assert all(r["method"] == "not_scored" for r in records)  # not graded as wrong answers
    assert "3 of 3 samples have no result (3 failed, 0 not run)" in down.stderr
    summary = summarize_run(run_dir)
    assert summary["records"] == 0
    assert summary["overall"]["caveats"]["infra_failures"] == {"total": 3, "by_benchmark": {"demo_web": 3},
                                                                "by_kind": {"tool": 3}}
    assert "**3 samples failed on infrastructure** (tool: 3" in (run_dir / "report.md").read_text()

    with search_server(corpus, tmp_path, port):  # the server is back: the same command finishes the samples
        again = subprocess.run(cmd, cwd=REPO, env=eval_env(port), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    records = lines(run_dir)
    assert len(records) == 6 and all(r["status"] == "ok" and r["acc"] == 1.0 for r in records[3:])
    summary = summarize_run(run_dir)
    assert summary["records"] == 3 and summary["overall"]["caveats"]["infra_failures"]["total"] == 0
    assert summary["benchmarks"]["demo_web"]["avg_at_k"]["value"] == 1.0


def test_sigterm_exits_143_says_what_is_missing_and_the_report_says_incomplete(llm, tiny_model, tmp_path):
    llm.reset()
    llm.rules({"match": "", "content": "<think> t </think>\n<answer>\\boxed{0}</answer>", "delay": 0.3})
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir, "demo_math", "--n", "4", "--concurrency", "2")
    proc = subprocess.Popen(cmd, cwd=REPO, env=eval_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (results.exists() and results.read_text().count("\n") >= 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr[-3000:]
    from afm.eval.datasets import load_benchmark

    total = 4 * len(load_benchmark("demo_math", data_root=tmp_path / "nodata"))
    done = len(lines(run_dir))
    assert 2 <= done < total
    assert f"interrupted by SIGTERM: {total - done} of {total} samples have no result" in stderr, stderr[-3000:]
    assert not (run_dir / "report.md").exists()  # no report that reads as complete
    report = subprocess.run([sys.executable, "-m", "afm.cli", "eval", "report", str(run_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr[-3000:]
    headline = (run_dir / "report.md").read_text().split("- run:")[0]
    assert f"**Incomplete run: {total - done} samples not run yet** (demo_math: {total - done})" in headline


def _mount_tmpfs(path: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``path``; why not, or None when mounted."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "no mount command"
    return None if proc.returncode == 0 else f"cannot mount a tmpfs here: {proc.stderr.strip()[:200]}"


def _fill(directory: Path, leave_pages: int) -> Path:
    """Fill the filesystem of ``directory`` up, then free ``leave_pages`` pages; returns the filler file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 4096)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    size = filler.stat().st_size
    os.truncate(filler, max(0, size - leave_pages * 4096))
    return filler


def test_a_full_disk_stops_the_run_with_one_line_and_a_resume_loses_nothing(llm, tiny_model, tmp_path):
    """A real full disk (a small tmpfs: ENOSPC from the kernel), not a simulated error; skipped where this user
    may not mount one."""
    disk = tmp_path / "disk"
    why = _mount_tmpfs(disk, "256k")
    if why:
        pytest.skip(why)
    try:
        llm.reset()
        llm.rules({"match": "", "content": "<think> t </think>\n<answer>\\boxed{0}</answer>"})
        run_dir = disk / "run"
        run_dir.mkdir()
        filler = _fill(disk, leave_pages=2)  # one page for config.json, one for a few results
        cmd = eval_cmd(llm, tiny_model, run_dir, "demo_math", "--n", "6", "--concurrency", "2")
        full = subprocess.run(cmd, cwd=REPO, env=eval_env(), capture_output=True, text=True, timeout=300)
        assert full.returncode == 1, full.stderr[-3000:]
        said = [line for line in full.stderr.splitlines() if "No space left on device" in line]
        assert len(said) == 1 and said[0].startswith("afm eval run: stopped: cannot write "), full.stderr[-3000:]
        assert "Traceback" not in full.stderr and "never retrieved" not in full.stderr, full.stderr[-3000:]
        text = (run_dir / "results.jsonl").read_text()
        assert text == "" or text.endswith("\n")  # no half-written record left behind
        before = text.splitlines()
        from afm.eval.datasets import load_benchmark

        total = 6 * len(load_benchmark("demo_math", data_root=tmp_path / "nodata"))
        assert len(before) < total  # it stopped, rather than generating on while storing nothing

        filler.unlink()  # space is freed: the same command finishes the run
        again = subprocess.run([*cmd, "--no-report"], cwd=REPO, env=eval_env(), capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        after = (run_dir / "results.jsonl").read_text().splitlines()
        keys = [json.loads(line)["key"] for line in after]
        assert after[: len(before)] == before and len(keys) == len(set(keys)) == total
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)
