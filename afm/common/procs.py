"""Start real server processes on 127.0.0.1 and wait until they answer (the demo site, tests, benchmarks,
quickstart)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO, Self


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_pid(pid: int, grace_s: float = 30.0) -> None:
    """SIGTERM ``pid`` (a server started detached, e.g. by evaluation/serve_model.sh), SIGKILL after ``grace_s``."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End ``proc``, started with ``start_new_session=True``, and everything in its process group: SIGTERM, SIGKILL
    after ``grace_s``; nothing when it has ended."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_http(url: str, timeout: float = 30.0, proc: subprocess.Popen | None = None,
              headers: dict[str, str] | None = None) -> None:
    """Poll ``url`` until it answers 2xx; fail early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before answering {url}")
        try:
            req = urllib.request.Request(url, headers=headers or {})
            with urllib.request.urlopen(req, timeout=2) as resp:
                if 200 <= resp.status < 300:
                    return
        except Exception as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f}s (last error: {last})")


class ServerProcess:
    """A server subprocess with its log file; use as a context manager.

    ``argv`` is run with the current interpreter when it starts with ``-m``; ``health`` is the path polled
    after start (``None`` = do not wait).
    """

    def __init__(self, argv: list[str], port: int, *, health: str | None = "/health",
                 env: dict[str, str] | None = None, log_path: str | Path | None = None,
                 startup_timeout: float = 60.0, cwd: str | Path | None = None) -> None:
        self.argv = [sys.executable, *argv] if argv and argv[0] == "-m" else list(argv)
        self.port = port
        self.health = health
        self.env = {**os.environ, **(env or {})}
        self.log_path = Path(log_path) if log_path else Path(tempfile.mkstemp(prefix="afm-server-", suffix=".log")[1])
        self.startup_timeout = startup_timeout
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=self.cwd, start_new_session=True)
        if self.health is not None:
            try:
                wait_http(self.url + self.health, self.startup_timeout, self.proc)
            except Exception as exc:
                self.stop()
                raise RuntimeError(f"{exc}\n--- server log ---\n{self.log()}") from exc
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group (uvicorn workers included), SIGKILL after ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
            except ProcessLookupError:
                pass
        if self._log:
            self._log.close()
        self.proc = None

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class OwnsServer:
    """Base of a helper that owns one :class:`ServerProcess` (``self.server``, set by its ``__init__``): start,
    stop and a ``with`` block over it."""

    server: ServerProcess

    def start(self) -> Self:
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
