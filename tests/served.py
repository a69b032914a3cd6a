"""Stopping a server that evaluation/serve_model.sh started (the engines' real-server tests share it)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie is gone for our purpose (its parent, serve_model.sh's shell, has exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][:1] != "Z"


def stop_served(pid: int, what: str, timeout: float = 60.0) -> None:
    """SIGTERM the server itself (not a wrapper: its port must be free afterwards); SIGKILL and fail the test when
    it outlives ``timeout``."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.2)
    still = alive(pid)
    if still:
        os.kill(pid, signal.SIGKILL)
    assert not still, f"{what} outlived SIGTERM"
