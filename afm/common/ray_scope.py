"""A local Ray cluster that belongs to one run: its own ``RAY_TMPDIR``, stopped without touching any other.

``ray stop --force`` ends every Ray node of the machine: another user's job, a second quickstart, a two-node cluster
started with ``experiments/ray_cluster.sh``. A ``--local`` run (verl's ``ray.init`` starts a head of its own) is
given a private ``RAY_TMPDIR`` instead; every process Ray starts for it (GCS, raylet, dashboard, log monitor) names
that folder on its command line, and its workers are their descendants (they rename themselves ``ray::...``), so
those processes are the run's and nothing else is.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path


def private_ray_tmpdir(prefix: str = "afm-ray-") -> Path:
    """A fresh folder for one run's ``RAY_TMPDIR``, short and under /tmp: Ray's unix sockets live below it, and an
    AF_UNIX path holds at most 107 bytes (a run folder deep in a checkout would not fit)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def processes_of(folder: str | Path) -> list[int]:
    """Pids of the processes that name ``folder`` on their command line (as a whole path: ``/tmp/afm-ray-1`` does
    not match ``/tmp/afm-ray-12``), and all their descendants."""
    pattern = re.compile(re.escape(str(folder).rstrip("/")) + r"(/|\s|$)")
    me = os.getpid()
    todo = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me and pattern.search(_cmdline(int(p)))]
    seen: list[int] = []
    while todo:
        pid = todo.pop()
        if pid in seen or pid == me:
            continue
        seen.append(pid)
        todo += _children(pid)
    return seen


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has ended; only its parent's wait is missing


def stop_ray_in(folder: str | Path, grace_s: float = 10.0, remove: bool = True) -> int:
    """End the Ray processes of the run whose ``RAY_TMPDIR`` is ``folder`` (TERM, then KILL after ``grace_s``) and
    remove the folder; returns how many processes were signalled. Other Ray clusters keep running."""
    pids = processes_of(folder)
    count = len(pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):  # ended already
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        pids = [p for p in pids if _alive(p)]
        if not pids:
            break
    if remove:
        shutil.rmtree(folder, ignore_errors=True)
    return count
