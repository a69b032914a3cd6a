"""A ``--local`` DAPO run killed once step 1's checkpoint is complete, then the same command again (which resumes
at step 2): what tests/rl/test_local_trainer.py and tests/rl/test_vllm_rollout.py both check."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments" / "train_dapo_code_agent.sh"


def killed_then_resumed(env: dict[str, str], work: Path, stop_ray: Callable[[], None],
                        timeout: float = 600) -> tuple[Path, Path]:
    """``(log of the killed run, log of the resumed run)``; the resumed run must exit 0."""
    marker = Path(env["CKPT_DIR"]) / "latest_checkpointed_iteration.txt"
    logs = (work / "run1.log", work / "run2.log")
    stop_ray()
    proc = subprocess.Popen(["bash", str(SCRIPT), "--local"], cwd=REPO, env=env, stdout=logs[0].open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if marker.exists() and marker.read_text().strip() == "1":
                break
            time.sleep(0.5)
        assert marker.exists(), f"no checkpoint after step 1:\n{logs[0].read_text(errors='replace')[-5000:]}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, Ray included
        proc.wait(timeout=60)
        stop_ray()
    proc = subprocess.Popen(["bash", str(SCRIPT), "--local"], cwd=REPO, env=env, stdout=logs[1].open("w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        stop_ray()
    assert rc == 0, logs[1].read_text(errors="replace")[-5000:]
    return logs
