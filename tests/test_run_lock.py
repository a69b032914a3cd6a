"""One writer per run folder (issue 39): ``afm eval run``, ``afm infer`` and ``afm data distill`` lock their output.

Two runs on one folder used to both exit 0 with most samples written twice. Now the second stops at once with one
line naming the first (exit 2); a lock left by a killed run is taken over without ``--force``; SIGTERM releases it;
readers (``afm eval report``) take no lock; one process may run one command after another on the same output.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from teacher_replies import ANSWERER, PLANNER, VERIFIER, answer_reply, plan_reply, rule, verify_reply

from afm.common.run_lock import (
    FOLDER_LOCK,
    RunLock,
    RunLocked,
    command_line,
    lock_file,
    read_owner,
    take_or_say,
)
from afm.offline.openai_standin import StandIn

REPO = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()
ANSWER = "<think> t </think>\n<answer>\\boxed{0}</answer>"


def refusal(prog: str, target: Path, flag: str) -> re.Pattern[str]:
    """The one line a refused second writer prints; groups: pid, host, start time, command."""
    return re.compile(rf"{re.escape(prog)}: {re.escape(str(target))} is being written by pid (\d+) on host (\S+) "
                      rf"since (\S+) \(({re.escape(prog)} .*)\); wait for it or use another {re.escape(flag)}")


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {n} lines (exit {proc.poll()})")


# ---- the lock itself ----------------------------------------------------------------------------------------------

def make_lock(target: Path, folder: bool = True) -> RunLock:
    return RunLock(target, folder=folder, command="afm eval run --run-dir x", flag="--run-dir", prog="afm eval run")


def test_the_lock_file_names_its_owner_and_goes_with_the_folder_it_made(tmp_path):
    run = tmp_path / "runs" / "eval"
    with make_lock(run) as lock:
        assert lock.held and lock.path == run / FOLDER_LOCK
        owner = read_owner(run / FOLDER_LOCK)
        assert owner is not None and (owner.pid, owner.host, owner.command) == (os.getpid(), HOST,
                                                                                "afm eval run --run-dir x")
        assert abs(datetime.fromisoformat(owner.started).timestamp() - time.time()) < 60
    assert not lock.held and not (tmp_path / "runs").exists()  # a run that wrote nothing leaves nothing
    with make_lock(run):
        (run / "results.jsonl").write_text("{}\n")
    assert sorted(p.name for p in run.iterdir()) == ["results.jsonl"]  # what the run wrote stays; the lock goes


def test_a_file_output_is_locked_beside_it(tmp_path):
    out = tmp_path / "traj.jsonl"
    assert lock_file(out, folder=False) == tmp_path / "traj.jsonl.lock"
    with make_lock(out, folder=False):
        assert (tmp_path / "traj.jsonl.lock").exists() and not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_one_process_takes_it_again_after_release_but_not_twice_at_once(tmp_path):
    first, second = make_lock(tmp_path / "run"), make_lock(tmp_path / "run")
    first.acquire()
    with pytest.raises(RunLocked) as refused:
        second.acquire()
    assert f"pid {os.getpid()} (this process) on host {HOST}" in str(refused.value)
    first.release()
    first.release()  # idempotent
    with second:  # sequential reuse in one process (the quickstart runs afm eval run several times)
        assert second.held
    with first:  # and the same object again
        assert read_owner(first.path).pid == os.getpid()


HOLDER = """
import sys, time
from afm.common.run_lock import RunLock
lock = RunLock(sys.argv[1], folder=True, command="afm eval run --benchmarks demo_math --run-dir " + sys.argv[1],
               flag="--run-dir", prog="afm eval run").acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_another_process_is_named_in_one_line_and_its_stale_lock_is_taken_over(tmp_path, capsys):
    run = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert holder.stdout.readline().strip() == "held"
        started = read_owner(run / FOLDER_LOCK).started
        with pytest.raises(RunLocked) as refused:
            make_lock(run).acquire()
        assert str(refused.value) == (f"{run} is being written by pid {holder.pid} on host {HOST} since {started} "
                                      f"(afm eval run --benchmarks demo_math --run-dir {run}); wait for it or use "
                                      "another --run-dir")
        assert take_or_say(make_lock(run)) == 2
        assert capsys.readouterr().err == f"afm eval run: {refused.value}\n"
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the lock file stays
        holder.wait()
    assert read_owner(run / FOLDER_LOCK).pid == holder.pid  # stale: the kernel dropped the flock with the process
    with make_lock(run):  # taken over without --force, and without a word (same host)
        assert read_owner(run / FOLDER_LOCK).pid == os.getpid()
    assert capsys.readouterr().err == ""


def test_a_stale_lock_of_another_host_is_taken_over_with_a_warning(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / FOLDER_LOCK).write_text(json.dumps({"pid": 4242, "host": "gpu-node-7", "started": "2026-01-02T03:04:05",
                                               "command": "afm eval run --run-dir shared/run"}))
    with make_lock(run):
        assert read_owner(run / FOLDER_LOCK).host == HOST
    warning = one_line(capsys.readouterr().err)
    assert warning.startswith("afm eval run: warning: ") and "pid 4242 on host gpu-node-7" in warning
    assert "NFS" in warning and "taking it over" in warning


def test_a_garbled_lock_file_is_taken_over(tmp_path):
    out = tmp_path / "runs.jsonl"
    lock_file(out, folder=False).write_text('{"pid": 12')  # a crash in the middle of writing it
    with make_lock(out, folder=False):
        assert read_owner(lock_file(out, folder=False)).pid == os.getpid()


def test_command_line_is_the_cli_and_its_arguments():
    assert command_line("afm eval run", ["--run-dir", "my runs/x"]) == "afm eval run --run-dir 'my runs/x'"


# ---- afm eval run ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm(tiny_model):
    with StandIn(tokenizer=str(tiny_model)) as server:
        yield server


def eval_cmd(llm, tiny_model, run_dir: Path, *extra: str) -> list[str]:
    # demo_math: 5 questions x 3 samples = 15 samples, answered in one turn each
    return [sys.executable, "-m", "afm.cli", "eval", "run", "--benchmarks", "demo_math", "--run-dir", str(run_dir),
            "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
            "--n", "3", "--temperature", "1.0", "--concurrency", "2", "--quiet", "--no-report", *extra]


def slow_model(llm, delay: float, reset: bool = True) -> None:
    """Every answer after ``delay`` s: a writer slow enough to be caught writing (``0``: let it finish)."""
    if reset:
        llm.reset()
    llm.rules({"match": "", "content": ANSWER, "delay": delay})


def keys_of(results: Path) -> Counter[str]:
    return Counter(json.loads(line)["key"] for line in results.read_text().splitlines())


def test_two_eval_runs_at_once_one_writes_the_other_exits_2(llm, tiny_model, tmp_path):
    # 15 samples, 2 at a time: the writer would run 24 s, and is sped up as soon as the refused one is done (a slow
    # answer costs nothing on a quiet machine and leaves a loaded one time to start the second process)
    slow_model(llm, 3.0)
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir)
    procs = [subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        deadline = time.monotonic() + 300
        while all(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        first_done = next(p for p in procs if p.poll() is not None)
        writer = next(p for p in procs if p is not first_done)
        # the refused one is done while the writer still runs: it stopped at once, it did not wait or write
        assert first_done.returncode == 2 and writer.poll() is None, first_done.stderr.read()[-3000:]
        slow_model(llm, 0, reset=False)
        _, err = first_done.communicate()
        _, writer_err = writer.communicate(timeout=300)
    finally:
        for p in procs:
            p.kill()
    assert writer.returncode == 0, writer_err[-3000:]
    match = refusal("afm eval run", run_dir, "--run-dir").fullmatch(one_line(err))
    assert match and int(match[1]) == writer.pid and match[2] == HOST and "--run-dir" in match[4]
    keys = keys_of(run_dir / "results.jsonl")
    assert len(keys) == 15 and set(keys.values()) == {1}  # each sample exactly once
    assert len([r for r in llm.requests() if r["path"] == "/v1/completions"]) == 15  # the refused one asked nothing
    assert not (run_dir / FOLDER_LOCK).exists()


def test_a_second_run_while_one_writes_is_refused_and_a_report_may_read(llm, tiny_model, tmp_path):
    slow_model(llm, 3.0)  # the writer runs 20 s after its first results, until the others are done
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir)
    writer = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(run_dir / "results.jsonl", 2, writer)
        second = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
        report = subprocess.run([sys.executable, "-m", "afm.cli", "eval", "report", str(run_dir)],
                                capture_output=True, text=True, cwd=REPO, timeout=120)
        assert writer.poll() is None  # both answered while the writer was writing
        slow_model(llm, 0, reset=False)
        _, writer_err = writer.communicate(timeout=300)
    finally:
        writer.kill()
    assert second.returncode == 2
    match = refusal("afm eval run", run_dir, "--run-dir").fullmatch(one_line(second.stderr))
    assert match and int(match[1]) == writer.pid, second.stderr
    assert report.returncode == 0 and "being written" not in report.stderr, report.stderr[-3000:]
    assert writer.returncode == 0, writer_err[-3000:]
    keys = keys_of(run_dir / "results.jsonl")
    assert len(keys) == 15 and set(keys.values()) == {1}


def test_a_run_killed_with_sigkill_leaves_its_lock_and_a_rerun_resumes_without_force(llm, tiny_model, tmp_path):
    slow_model(llm, 0.25)
    run_dir = tmp_path / "run"
    cmd = eval_cmd(llm, tiny_model, run_dir)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for_lines(run_dir / "results.jsonl", 3, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    owner = read_owner(run_dir / FOLDER_LOCK)
    assert owner is not None and owner.pid == proc.pid and owner.command.startswith("afm eval run --benchmarks")
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "being written" not in done.stderr and "warning" not in done.stderr
    keys = keys_of(run_dir / "results.jsonl")
    assert len(keys) == 15 and set(keys.values()) == {1}
    assert not (run_dir / FOLDER_LOCK).exists()


def test_sigterm_releases_the_lock(llm, tiny_model, tmp_path):
    slow_model(llm, 0.3)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(eval_cmd(llm, tiny_model, run_dir), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(run_dir / "results.jsonl", 2, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert not (run_dir / FOLDER_LOCK).exists()
    with make_lock(run_dir):  # free at once
        pass


# ---- afm infer and afm data distill ---------------------------------------------------------------------------------

def write_questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"Capital of France, variant {i}?",
                                        "answer": "Paris"}) + "\n" for i in range(n)))
    return path


def test_a_second_afm_infer_on_one_output_exits_2(llm, tiny_model, tmp_path):
    slow_model(llm, 4.0)  # 20 s left after the first results, until the second run is done
    questions, out = write_questions(tmp_path / "q.jsonl", 6), tmp_path / "traj.jsonl"
    cmd = [sys.executable, "-m", "afm.cli", "infer", "--input", str(questions), "--output", str(out),
           "--backend", "openai", "--base-url", llm.base_url, "--model", "standin", "--tokenizer", str(tiny_model),
           "--prompt", "code_agent", "--n", "2", "--concurrency", "2", "--quiet"]
    writer = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(out, 2, writer)
        second = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
        assert writer.poll() is None
        slow_model(llm, 0, reset=False)
        _, writer_err = writer.communicate(timeout=300)
    finally:
        writer.kill()
    assert second.returncode == 2
    match = refusal("afm infer", out, "--output").fullmatch(one_line(second.stderr))
    assert match and int(match[1]) == writer.pid, second.stderr
    assert writer.returncode == 0, writer_err[-3000:]
    keys = keys_of(out)
    assert len(keys) == 12 and set(keys.values()) == {1}
    assert not lock_file(out, folder=False).exists()


@pytest.fixture(scope="module")
def teacher():
    with StandIn(default_reply="(no rule matched)") as server:
        yield server


def teacher_rules(teacher, delay: float = 0.0) -> None:
    """The direct teacher of test_data_distill_resume, its planner answering after ``delay`` s."""
    teacher.rules(rule(PLANNER, plan_reply(["answer: the question is simple"], plan="1. Answer directly."),
                       delay=delay),
                  rule(ANSWERER, answer_reply("Paris")), rule(VERIFIER, verify_reply(4)))


def distill_args(teacher, questions: Path, out: Path) -> list[str]:
    return ["--input", str(questions), "--output", str(out), "--config", str(REPO / "configs/data/teacher.yaml"),
            "--set", f"default.base_url={teacher.base_url}", "--set", "default.max_retries=0", "--tools",
            "web_search", "--no-progress", "--runs-per-question", "2", "--concurrency", "2"]


def test_a_second_afm_data_distill_on_one_output_exits_2(teacher, tmp_path):
    teacher.reset()
    teacher_rules(teacher, delay=1.5)
    questions, out = write_questions(tmp_path / "q.jsonl", 6), tmp_path / "runs.jsonl"
    cmd = [sys.executable, "-m", "afm.cli", "data", "distill", *distill_args(teacher, questions, out)]
    writer = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_lines(out, 2, writer)
        second = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=120)
        assert writer.poll() is None
        teacher_rules(teacher)
        _, writer_err = writer.communicate(timeout=300)
    finally:
        writer.kill()
    assert second.returncode == 2
    match = refusal("afm data distill", out, "--output").fullmatch(one_line(second.stderr))
    assert match and int(match[1]) == writer.pid, second.stderr
    assert writer.returncode == 0, writer_err[-3000:]
    keys = keys_of(out)
    assert len(keys) == 12 and set(keys.values()) == {1}
    assert not lock_file(out, folder=False).exists()


def test_one_process_distills_into_one_output_twice_in_a_row(teacher, tmp_path):
    from afm.data import distill

    teacher.reset()
    teacher_rules(teacher)
    questions, out = write_questions(tmp_path / "q.jsonl", 2), tmp_path / "runs.jsonl"
    assert distill.main(distill_args(teacher, questions, out)) == 0
    assert not lock_file(out, folder=False).exists()  # released on return: the quickstart's next stage may write
    assert distill.main(distill_args(teacher, questions, out)) == 0  # the second call resumes: nothing left to run
    assert len(keys_of(out)) == 4
    assert json.loads((tmp_path / "runs.summary.json").read_text())["session"]["skipped"] == 4
