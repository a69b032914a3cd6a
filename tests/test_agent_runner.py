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
        assert counts == {"done": 3, "skipped": 0, "failed": 3, "cancelled": 0, "interrupted": False}
        out = proc.stdout + proc.stderr
        for i in (1, 3, 5):  # every failure, with its key and its reason
            assert f"[q#{i}] failed: RuntimeError: engine said no to q#{i}" in out, (mode, out)
