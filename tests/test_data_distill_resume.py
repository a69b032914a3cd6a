"""``afm data distill`` as a user runs it: SIGKILL midway and resume, and cost accounting against the stand-in."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from teacher_replies import (
    ANSWERER,
    PLANNER,
    VERIFIER,
    answer_reply,
    plan_reply,
    rule,
    verify_reply,
)

from afm.data import distill
from afm.offline.openai_standin import StandIn

REPO = Path(__file__).resolve().parents[1]
DIRECT = [rule(PLANNER, plan_reply(["answer: the question is simple"], plan="1. Answer directly.")),
          rule(ANSWERER, answer_reply("Paris")), rule(VERIFIER, verify_reply(4))]


@pytest.fixture(scope="module")
def llm():
    with StandIn(default_reply="(no rule matched)") as server:
        yield server


def write_questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Capital of France, variant {i}?",
                                        "answer": "Paris"}) + "\n" for i in range(n)))
    return path


def cli(llm, questions: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "afm.cli", "data", "distill", "--input", str(questions), "--output", str(out),
            "--config", str(REPO / "configs/data/teacher.yaml"), "--set", f"default.base_url={llm.base_url}",
            "--set", "default.max_retries=0", "--tools", "web_search", "--no-progress", *extra]


def lines(out: Path) -> list[str]:
    return [ln for ln in out.read_text().splitlines() if ln.strip()] if out.exists() else []


def test_sigkill_midway_then_resume_without_duplicates(llm, tmp_path):
    llm.reset()
    slow = [dict(r, delay=0.25) if r["match"] == PLANNER else r for r in DIRECT]
    llm.rules(*slow)
    questions = write_questions(tmp_path / "q.jsonl", 6)
    out = tmp_path / "runs.jsonl"
    args = cli(llm, questions, out, "--runs-per-question", "2", "--concurrency", "2")
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 40
        while len(lines(out)) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=10)
    first = lines(out)
    assert 3 <= len(first) < 12
    with out.open("a") as f:  # what a kill in the middle of a write leaves behind
        f.write('{"key": "q5#1", "run_id": "q5#1", "question_id": "q5", "quest')
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "cut" in done.stderr and "half-written" in done.stderr
    recs = [json.loads(ln) for ln in lines(out)]
    ids = Counter(r["run_id"] for r in recs)
    assert len(recs) == 12 and set(ids.values()) == {1}
    assert set(ids) == {f"q{i}#{k}" for i in range(6) for k in range(2)}
    assert all(r["status"] == "ok" and r["final_answer"] == "Paris" for r in recs)
    assert lines(out)[: len(first)] == first  # finished runs were kept as they were
    summary = json.loads((tmp_path / "runs.summary.json").read_text())
    assert summary["session"]["skipped"] == len(first) and summary["session"]["done"] == 12 - len(first)


def test_cost_accounting_matches_the_standin(llm, tmp_path):
    llm.reset()
    llm.rules(rule(ANSWERER, "no fields at all", times=1), *DIRECT)  # one format re-ask is paid for too
    questions = write_questions(tmp_path / "q.jsonl", 3)
    out = tmp_path / "runs.jsonl"
    rc = distill.main(["--input", str(questions), "--output", str(out), "--tools", "web_search", "--no-progress",
                       "--set", f"default.base_url={llm.base_url}", "--set", "default.model=m-default",
                       "--set", "roles.verifier.model=m-judge", "--price", "m-judge=1000,2000", "--concurrency", "1"])
    assert rc == 0
    requests = llm.requests()
    replies = {PLANNER: DIRECT[0]["content"], ANSWERER: DIRECT[1]["content"], VERIFIER: DIRECT[2]["content"]}
    prompt_tokens = completion_tokens = 0
    by_model: Counter[str] = Counter()
    retried = False
    for r in requests:
        msgs = r["body"]["messages"]
        prompt_tokens += len("\n".join(m["content"] for m in msgs).split())
        role = next(k for k in replies if k in msgs[0]["content"])
        reply = replies[role]
        if role == ANSWERER and not retried:
            reply, retried = "no fields at all", True
        completion_tokens += len(reply.split())
        by_model[r["body"]["model"]] += 1
    s = json.loads((tmp_path / "runs.summary.json").read_text())
    assert s["calls"] == len(requests) == 10  # 3 runs x 3 roles + 1 re-ask
    assert s["tokens"] == {"prompt": prompt_tokens, "completion": completion_tokens,
                           "total": prompt_tokens + completion_tokens}
    assert {m: u["calls"] for m, u in s["usage_by_model"].items()} == dict(by_model) == {"m-default": 7,
                                                                                          "m-judge": 3}
    assert s["usage_by_role"]["answerer@m-default"]["calls"] == 4
    judge = s["usage_by_model"]["m-judge"]
    assert s["cost_usd"]["total"] == pytest.approx(judge["prompt_tokens"] * 1e-3 + judge["completion_tokens"] * 2e-3)
    assert s["status"] == {"ok": 3} and s["double_check_scores"] == {"4": 3}


def test_shards_split_the_questions_and_join_to_one_run(llm, tmp_path):
    """--shard K/N: N invocations side by side, each with its own output, take every question once (K, K+N, ...,
    after --limit); their outputs together are the unsharded run's."""
    llm.reset()
    llm.rules(*DIRECT)
    questions = write_questions(tmp_path / "q.jsonl", 7)
    outs = [tmp_path / f"runs.{k}.jsonl" for k in range(3)]
    procs = [subprocess.Popen(cli(llm, questions, out, "--shard", f"{k}/3", "--limit", "6"), cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, out in enumerate(outs)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
    taken = [[json.loads(ln)["question_id"] for ln in lines(out)] for out in outs]
    assert [sorted(t) for t in taken] == [["q0", "q3"], ["q1", "q4"], ["q2", "q5"]]
    whole = tmp_path / "runs.jsonl"
    assert subprocess.run(cli(llm, questions, whole, "--limit", "6"), cwd=REPO, capture_output=True).returncode == 0

    def strip(value):  # the same runs but for how long each call took
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("latency_s", "wall_s")}
        return [strip(v) for v in value] if isinstance(value, list) else value

    sharded = sorted((strip(json.loads(ln)) for out in outs for ln in lines(out)), key=lambda r: r["run_id"])
    assert sharded == sorted((strip(json.loads(ln)) for ln in lines(whole)), key=lambda r: r["run_id"])


def test_bad_cli_input(tmp_path, capsys):
    assert distill.main(["--input", str(tmp_path / "none.jsonl"), "--output", str(tmp_path / "o.jsonl")]) == 2
    q = write_questions(tmp_path / "q.jsonl", 1)
    assert distill.main(["--input", str(q), "--output", str(tmp_path / "o.jsonl"), "--tools", "code",
                         "--prompt-key", "web_agent"]) == 2
    assert "not part of prompt 'web_agent'" in capsys.readouterr().err
    assert distill.main(["--input", str(q), "--output", str(tmp_path / "o.jsonl"), "--q-key", "text"]) == 2
    assert "use --q-key" in capsys.readouterr().err
    for bad in ("2/2", "1", "a/b", "0/0"):
        assert distill.main(["--input", str(q), "--output", str(tmp_path / "o.jsonl"), "--shard", bad]) == 2
        assert f"--shard {bad!r}" in capsys.readouterr().err


def _limit_file_size() -> None:
    # the kernel then refuses writes past 3000 bytes with EFBIG, as a full disk refuses them with ENOSPC
    import resource

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (3000, 3000))


def test_a_failed_write_stops_distill_with_one_line_and_a_rerun_resumes(llm, tmp_path):
    llm.reset()
    llm.rules(*DIRECT)
    questions = write_questions(tmp_path / "q.jsonl", 8)
    out = tmp_path / "runs.jsonl"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    full = subprocess.run(cli(llm, questions, out), cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env, preexec_fn=_limit_file_size)
    assert full.returncode == 1, full.stderr
    assert "Traceback" not in full.stderr and "never retrieved" not in full.stderr, full.stderr
    assert "afm data distill: stopped: cannot write" in full.stderr
    kept = lines(out)
    assert 0 < len(kept) < 8 and all(json.loads(line)["question_id"] for line in kept)  # whole records only
    again = subprocess.run(cli(llm, questions, out), cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr
    after = lines(out)
    assert after[: len(kept)] == kept
    assert sorted(json.loads(line)["question_id"] for line in after) == [f"q{i}" for i in range(8)]
