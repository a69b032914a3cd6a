"""run_tasks: counts add up to the total, and failure reasons are reported with and without a progress bar."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SCRIPT = """
import asyncio, json, sys
from afm.agent.runner import JsonlStore, RolloutTask, run_tasks

async def run_one(task):
    if task.sample % 2:
        raise RuntimeError(f"engine said no to {task.key}")
    return {"key": task.key}

async def main():
    store = JsonlStore(sys.argv[1])
    try:
        tasks = [RolloutTask(f"q#{i}", "q", i) for i in range(6)]
        return await run_tasks(tasks, run_one, store, concurrency=2, progress=sys.argv[2] == "bar")
    finally:
        store.close()

print(json.dumps(asyncio.run(main())))
"""


def run(tmp_path: Path, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / f"{mode}.jsonl"), mode], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_failures_are_reported_even_without_a_progress_bar(tmp_path):
    for mode in ("quiet", "bar"):
        proc = run(tmp_path, mode)
        assert proc.returncode == 0, proc.stderr
        counts = json.loads(proc.stdout.splitlines()[-1])
        assert counts == {"done": 3, "skipped": 0, "failed": 3, "cancelled": 0, "interrupted": False, "signal": None}
        out = proc.stdout + proc.stderr
        for i in (1, 3, 5):  # every failure, with its key and its reason
            assert f"[q#{i}] failed: RuntimeError: engine said no to q#{i}" in out, (mode, out)


FULL_SCRIPT = """
import asyncio, json, resource, signal, sys
from afm.agent.runner import JsonlStore, RolloutTask, StoreWriteError, run_tasks

if sys.argv[2] == "limited":  # the file may not grow past 2000 bytes: writes beyond fail with EFBIG
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

async def run_one(task):
    await asyncio.sleep(0.01)
    return {"key": task.key, "pad": "x" * 300}

async def main():
    store = JsonlStore(sys.argv[1])
    try:
        tasks = [RolloutTask(f"q#{i}", "q", i) for i in range(20)]
        return await run_tasks(tasks, run_one, store, concurrency=3, progress=False)
    finally:
        store.close()

try:
    print(json.dumps(asyncio.run(main())))
except StoreWriteError as exc:
    print(f"stopped: {exc}", file=sys.stderr)
    sys.exit(1)
"""


def test_a_failed_write_stops_the_run_cuts_the_half_line_and_a_rerun_loses_nothing(tmp_path):
    """A file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the kernel refuse writes past 2000 bytes with EFBIG,
    on every machine; tests/test_eval_outages.py does the same with a real full disk where it may mount a tmpfs."""
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-c", FULL_SCRIPT, str(out)]
    full = subprocess.run([*cmd, "limited"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert full.returncode == 1, full.stderr
    assert full.stderr.strip() == f"stopped: cannot write {out}: File too large", full.stderr
    text = out.read_text()
    assert text.endswith("\n") and 0 < len(text) <= 2000  # whole records only, the partial one was cut
    before = text.splitlines()
    again = subprocess.run([*cmd, "free"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    after = out.read_text().splitlines()
    keys = [json.loads(line)["key"] for line in after]
    assert after[: len(before)] == before and sorted(keys) == sorted(f"q#{i}" for i in range(20))
    assert json.loads(again.stdout)["done"] == 20 - len(before)


def test_the_callers_signal_handlers_come_back_after_a_run(tmp_path):
    """run_tasks takes SIGINT/SIGTERM for the run and gives back what it found: asyncio's removal alone leaves
    SIGTERM at SIG_DFL, so after the quickstart's in-process `afm eval run` a SIGTERM killed it outright, leaving its
    SFT run and a demo server behind (found 2026-11-27; the CLI's handler stops them)."""
    import asyncio
    import signal

    from afm.agent.runner import JsonlStore, RolloutTask, run_tasks

    def mine(signum, frame):  # pragma: no cover - never called
        raise SystemExit(128 + signum)

    async def run_one(task):
        return {"key": task.key}

    old = signal.signal(signal.SIGTERM, mine)
    sigint = signal.getsignal(signal.SIGINT)  # Python's default, or SIG_IGN in a background job (scripts/test.sh)
    try:
        store = JsonlStore(tmp_path / "out.jsonl")
        try:
            counts = asyncio.run(run_tasks([RolloutTask("q#0", "q")], run_one, store, progress=False))
        finally:
            store.close()
        assert counts["done"] == 1
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, old)
