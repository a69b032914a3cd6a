"""`afm infer`: prompts by key, n samples, summary, and resume after SIGKILL without loss or duplication."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from afm.common.procs import free_port
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


# ---- the tokenizer of a served model, and the engine a run found (issue 40) -----------------------------------

def _without_tokenizer(cmd: list[str], model: str) -> list[str]:
    """``cmd`` without ``--tokenizer X``, asking for the served model ``model``."""
    i = cmd.index("--tokenizer")
    cmd = cmd[:i] + cmd[i + 2:]
    cmd[cmd.index("--model") + 1] = model
    return cmd


def test_the_tokenizer_serve_model_sh_recorded_is_the_default(llm, tiny_model, tmp_path):
    """No --tokenizer: the one evaluation/serve_model.sh recorded for the served name, as the scripts read it."""
    llm.reset()
    llm.rules({"match": "", "content": "<think> t </think>\n<answer>A</answer>"})
    name = f"served-{tmp_path.name}"
    record = REPO / "runs" / "serve" / f"{name}.model_path"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(f"{tiny_model}\n")
    try:
        cmd = _without_tokenizer(infer_cmd(llm, tiny_model, write_questions(tmp_path / "q.jsonl", 1),
                                           tmp_path / "t.jsonl"), name)
        run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    finally:
        record.unlink()
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"tokenizer: {tiny_model} (recorded for {name} in {record})" in run.stdout


@pytest.mark.parametrize("command", [["infer", "--input", "q.jsonl", "--output", "out.jsonl"],
                                     ["eval", "run", "--benchmarks", "demo_math", "--run-dir", "run"]],
                         ids=["infer", "eval-run"])
def test_no_tokenizer_anywhere_is_one_line_at_once(command, tmp_path):
    """A served GGUF's name is no tokenizer: one line saying to pass --tokenizer, without asking the hub (whose
    retries took 57 s offline)."""
    work = tmp_path / "cwd"
    work.mkdir()
    (work / "q.jsonl").write_text('{"question": "2+2?"}\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}  # a user's shell
    env.update(HF_HOME=str(tmp_path / "hf-home"), PYTHONPATH=str(REPO))  # nothing in the hub's cache
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "afm.cli", *command, "--model", f"gemma-{tmp_path.name}",
                           "--base-url", "http://127.0.0.1:9/v1"], capture_output=True, text=True, cwd=work,
                          env=env, timeout=300)
    elapsed = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert "pass --tokenizer <hf folder>" in lines[0] and "afm model prepare" in lines[0], lines[0]
    assert elapsed < 25, f"{elapsed:.0f} s: the hub was asked"
    assert sorted(p.name for p in work.iterdir()) == ["q.jsonl"]


@pytest.fixture(scope="module")
def llama(tiny_model):
    """The stand-in answering as llama.cpp's llama-server (``GET /props``, native ``/completion``)."""
    with StandIn(tokenizer=str(tiny_model), dialect="llamacpp") as server:
        yield server


@pytest.mark.parametrize(("engine", "found"), [("auto", "llamacpp"), ("llamacpp", "llamacpp")])
def test_the_engine_is_said_once_and_in_the_summary(llama, tiny_model, tmp_path, engine, found):
    llama.reset()
    llama.rules({"match": "", "content": "<think> t </think>\n<answer>A</answer>"})
    q = write_questions(tmp_path / "q.jsonl", 3)
    cmd = infer_cmd(llama, tiny_model, q, tmp_path / "t.jsonl", "--engine", engine)
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    said = [line for line in run.stdout.splitlines() if line.startswith("[infer] engine: ")]
    assert len(said) == 1 and said[0].startswith(f"[infer] engine: {found} ("), run.stdout
    assert ("--engine auto" in said[0]) == (engine == "auto")
    assert f"\nengine: {found}\n" in f"\n{run.stdout}"  # the summary's line


def test_a_prepared_gguf_served_by_serve_model_sh_needs_no_tokenizer_flag(tiny_model, tmp_path):
    """The newcomer's path: serve the GGUF of a folder `afm model prepare` wrote (its tokenizer in hf/ beside it)
    with ENGINE=llamacpp and nothing else, then `afm infer --model <served name>`. llama-server is played by the
    stand-in speaking its dialect (the real one: tests/test_llamacpp_engine.py)."""
    prepared = tmp_path / "prepared"
    shutil.copytree(tiny_model, prepared / "hf")
    gguf = prepared / f"gemma-{tmp_path.name}.gguf"  # never read: the stand-in serves the tiny model
    gguf.write_bytes(b"GGUF")
    fake = tmp_path / "llama-server"
    fake.write_text("#!/usr/bin/env bash\n"  # llama-server's command line, answered by the stand-in
                    "while [[ $# -gt 0 ]]; do case $1 in --port) port=$2;; --alias) alias=$2;; esac; shift; done\n"
                    f'exec "{sys.executable}" -m afm.offline.openai_standin --port "$port" --model "$alias" '
                    f'--dialect llamacpp --tokenizer "{tiny_model}"\n')
    fake.chmod(0o755)
    port = free_port()
    env = {**os.environ, "ENGINE": "llamacpp", "MODEL_PATH": str(gguf), "PORT": str(port), "LLAMA_SERVER": str(fake),
           "LOG": str(tmp_path / "serve.log"), "PYTHONPATH": str(REPO)}
    served = subprocess.run(["bash", str(REPO / "evaluation/serve_model.sh")], env=env, capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert served.returncode == 0, served.stdout + served.stderr
    pid = int(re.search(r"pid (\d+)", served.stdout).group(1))
    name = gguf.stem
    record = REPO / "runs" / "serve" / f"{name}.model_path"
    try:
        assert record.read_text().strip() == str(prepared / "hf")
        q = write_questions(tmp_path / "q.jsonl", 1)
        run = subprocess.run([sys.executable, "-m", "afm.cli", "infer", "--input", str(q), "--output",
                              str(tmp_path / "t.jsonl"), "--base-url", f"http://127.0.0.1:{port}/v1", "--model", name,
                              "--max-turns", "1", "--max-tokens-per-turn", "8", "--quiet"],
                             capture_output=True, text=True, cwd=tmp_path, timeout=300)
    finally:
        os.kill(pid, signal.SIGTERM)
        record.unlink(missing_ok=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert f"[infer] tokenizer: {prepared / 'hf'} (recorded for {name} in {record})" in run.stdout
    assert "[infer] engine: llamacpp (found by --engine auto" in run.stdout


def test_hf_samples_of_a_seed_do_not_depend_on_the_batching(tiny_model, tmp_path):
    """``--backend hf --seed``: each request draws from its own generator (sample k: seed + k, and its prompt), so
    one request at a time and eight in a batch give the same trajectories, id for id. The quickstart's RL selection
    is such a run: before, which questions it kept changed with the machine's load."""
    q = write_questions(tmp_path / "q.jsonl", 3)

    def sample(batch_size: int) -> dict[str, list[int]]:
        out = tmp_path / f"batch{batch_size}.jsonl"
        run = subprocess.run([sys.executable, "-m", "afm.cli", "infer", "--input", str(q), "--output", str(out),
                              "--backend", "hf", "--model", str(tiny_model), "--prompt", "code_agent", "--n", "3",
                              "--seed", "5", "--temperature", "1.0", "--max-turns", "1", "--max-tokens-per-turn", "12",
                              "--batch-size", str(batch_size), "--concurrency", "8", "--quiet"],
                             capture_output=True, text=True, cwd=REPO, timeout=300)
        assert run.returncode == 0, run.stderr[-2000:]
        records = [json.loads(line) for line in out.read_text().splitlines()]
        return {r["key"]: [i for s in r["segments"] if s["kind"] == "model" for i in s["ids"]] for r in records}

    one, eight = sample(1), sample(8)
    assert len(one) == 9 and one == eight
    assert len({tuple(v) for v in one.values()}) == 9  # samples of one question differ
