"""Run one program in a fresh jail (one-shot mode) and classify what happened."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from afm.sandbox.backends import UIDS, Backend, LaunchSpec
from afm.sandbox.limits import ExecResult, Limits, Status
from afm.sandbox.runtime import JailRuntime

SETUP_GRACE_S = 10.0  # time the jail may take to start on top of the program's wall limit
_MEMORY_ERROR = re.compile(r"^(?:\w+\.)*\w*MemoryError\b", re.MULTILINE)


def decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def classify(*, report: dict[str, Any] | None, returncode: int | None, stderr: bytes, over_cap: bool,
             host_timeout: bool, limits: Limits, cgroups: bool) -> Status:
    """Map the runner's report (or its absence) to an :data:`Status`."""
    if over_cap:
        return "output_limit"
    if report is None:
        if host_timeout:
            return "timeout"
        if returncode == 128 + signal.SIGKILL and cgroups:
            return "memory"  # the cgroup OOM killer took the whole jail
        return "sandbox_error"
    if report.get("timed_out"):
        return "timeout"
    sig = report.get("signal")
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and report.get("cpu_s", 0) >= limits.cpu_seconds - 0.05):
        return "timeout"
    if sig == signal.SIGKILL and cgroups:
        return "memory"
    code = report.get("exit_code")
    if code == 0:
        return "ok"
    tail = stderr[-2000:].decode("utf-8", "replace")
    if _MEMORY_ERROR.search(tail):
        return "memory"
    return "error"


class WorkRoot:
    """A world-traversable folder holding the jail runner and per-execution folders."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.path.join(tempfile.gettempdir(), f"afm-sandbox-{os.getuid()}")
        os.makedirs(self.path, exist_ok=True)
        os.chmod(self.path, 0o711)  # jails may traverse it, nobody may list it
        self.runner = self._install("jail_runner.py")
        self.harness = self._install("grade_harness.py")  # mounted read-only beside the runner (grading)

    def _install(self, name: str) -> str:
        """A copy of this package's ``name`` in the work root, named by its content (read-only in the jails)."""
        data = (Path(__file__).parent / name).read_bytes()
        stem = name.removesuffix(".py")
        path = os.path.join(self.path, f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}.py")
        if not os.path.exists(path):
            tmp = path + f".{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        return path

    def new_dir(self) -> str:
        d = tempfile.mkdtemp(prefix="x-", dir=self.path)
        os.chmod(d, 0o755)
        return d


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o644)


def run_once(backend: Backend, runtime: JailRuntime, work: WorkRoot, code: str | bytes, stdin: str | bytes,
             limits: Limits) -> ExecResult:
    """Run ``code`` in a new jail and wait for it (blocking; call from a worker thread in async code)."""
    t0 = time.monotonic()
    host_dir = work.new_dir()
    log_path = host_dir + ".log"
    uid = UIDS.acquire()
    status_r, status_w = os.pipe()
    stdin_fd = -1
    proc = None
    try:
        _write(os.path.join(host_dir, "main.py"), code.encode() if isinstance(code, str) else code)
        # stdin is the jail's fd 0, an in-memory file: no path in the jail leads to it, so a program that closed
        # or replaced its stdin (as the grading harness's candidate does) cannot read it again.
        stdin_fd = _memfd_with(stdin.encode() if isinstance(stdin, str) else stdin)
        spec = LaunchSpec(runtime, limits, work.runner, "once", uid, host_dir=host_dir, status_fd=status_w,
                          harness=work.harness,
                          log_path=log_path)
        try:
            proc = subprocess.Popen(backend.argv(spec), stdin=stdin_fd, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, pass_fds=(status_w,), start_new_session=True,
                                    **backend.popen_kwargs(spec))
        except OSError as exc:
            return ExecResult("sandbox_error", None, "", f"could not start {backend.name}: {exc}",
                              time.monotonic() - t0, backend=backend.name)
        os.close(status_w)
        status_w = -1
        out, err, over_cap, host_timeout = _collect(proc, limits, deadline=t0 + limits.wall_s + SETUP_GRACE_S)
        if over_cap or host_timeout:
            _kill(proc)
        try:
            returncode = proc.wait(timeout=SETUP_GRACE_S)
        except subprocess.TimeoutExpired:
            _kill(proc)
            returncode = proc.wait()
        report = _read_report(status_r)
        status = classify(report=report, returncode=returncode, stderr=err, over_cap=over_cap,
                          host_timeout=host_timeout, limits=limits, cgroups=bool(getattr(backend, "cgroups", False)))
        stderr = decode(err)
        if status == "sandbox_error":
            log = Path(log_path).read_text(errors="replace") if os.path.exists(log_path) else ""
            stderr = (f"sandbox failure ({backend.name} exit {returncode}): " + log.strip()[-2000:] + "\n"
                      + stderr).strip()
        report = report or {}
        return ExecResult(status, report.get("exit_code", returncode), decode(out), stderr,
                          wall_s=time.monotonic() - t0, cpu_s=float(report.get("cpu_s", 0.0)),
                          signal=report.get("signal"), truncated=over_cap, backend=backend.name,
                          meta={"program_wall_s": report.get("wall_s")})
    finally:
        if proc is not None and proc.poll() is None:
            _kill(proc)
            proc.wait()
        for fd in (status_r, status_w, stdin_fd):
            if fd >= 0:
                os.close(fd)
        UIDS.release(uid)
        shutil.rmtree(host_dir, ignore_errors=True)
        if os.path.exists(log_path):
            os.unlink(log_path)


def _memfd_with(data: bytes) -> int:
    """An in-memory file holding ``data``, positioned at its start (the jail's stdin)."""
    fd = os.memfd_create("afm-stdin", os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill(proc: subprocess.Popen) -> None:
    # The jail launcher dies; PDEATHSIG takes the jail with it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _collect(proc: subprocess.Popen, limits: Limits, deadline: float) -> tuple[bytes, bytes, bool, bool]:
    """Read stdout/stderr until EOF, the output cap, or the deadline."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    over_cap = host_timeout = False
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                host_timeout = True
                break
            for key, _ in sel.select(min(remaining, 1.0)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                bufs[key.fd] += chunk
            if len(bufs[out_fd]) + len(bufs[err_fd]) > limits.output_bytes:
                over_cap = True
                break
    finally:
        sel.close()
    out, err = bytes(bufs[out_fd]), bytes(bufs[err_fd])
    if over_cap:
        out = out[:limits.output_bytes]
        err = err[:max(0, limits.output_bytes - len(out))]
    return out, err, over_cap, host_timeout


def _read_report(fd: int) -> dict[str, Any] | None:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return None
    try:
        return json.loads(data.decode())
    except (ValueError, UnicodeDecodeError):
        return None
