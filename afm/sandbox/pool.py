"""Pre-forked interpreter pool: warm jailed servers that fork a fresh child per execution.

Each worker is one long-lived jail running ``jail_runner.py serve``; it imports the preload modules once, then
for every request forks a child that runs the program. Nothing survives an execution: the child's memory goes
with it, the server kills every leftover process in the jail and wipes ``/tmp`` and ``/dev/shm``. Workers serve one
execution at a time, are restarted when they die or misbehave, and are recycled after ``recycle_after`` runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from afm.sandbox.backends import UIDS, Backend, LaunchSpec
from afm.sandbox.executor import SETUP_GRACE_S, WorkRoot, classify, decode
from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.runtime import JailRuntime


class WorkerDied(RuntimeError):
    """The pool server stopped answering (killed by the OOM killer, crashed, or timed out)."""


class PoolWorker:
    """One warm jail; not thread-safe (the pool hands each worker to one caller at a time)."""

    def __init__(self, backend: Backend, runtime: JailRuntime, work: WorkRoot, limits: Limits,
                 preload: tuple[str, ...], index: int) -> None:
        self.backend, self.runtime, self.work, self.limits = backend, runtime, work, limits
        self.preload, self.index = preload, index
        self.proc: subprocess.Popen | None = None
        self.uid: int | None = None
        self.runs = 0
        self.preloaded: list[str] = []
        self.log_path = os.path.join(work.path, f"pool-{os.getpid()}-{index}.log")

    def start(self, timeout: float = 60.0) -> None:
        self.uid = UIDS.acquire()
        spec = LaunchSpec(self.runtime, self.limits, self.work.runner, "serve", self.uid, preload=self.preload,
                          log_path=self.log_path)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.backend.argv(spec), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=log, start_new_session=True, **self.backend.popen_kwargs(spec))
        self.runs = 0
        hello, _ = self._read_frame(time.monotonic() + timeout)
        self.preloaded = list(hello.get("preloaded", []))

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
            self.proc = None
        if self.uid is not None:
            UIDS.release(self.uid)
            self.uid = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while got < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sel.select(remaining):
                    raise WorkerDied("pool server did not answer in time")
                chunk = os.read(fd, n - got)
                if not chunk:
                    raise WorkerDied(f"pool server exited (code {self.proc.poll()})")
                chunks.append(chunk)
                got += len(chunk)
        return b"".join(chunks)

    def _read_frame(self, deadline: float) -> tuple[dict[str, Any], bytes]:
        (n,) = struct.unpack(">I", self._read_exact(4, deadline))
        header = json.loads(self._read_exact(n, deadline))
        body = self._read_exact(header.get("stdout_len", 0) + header.get("stderr_len", 0), deadline)
        return header, body

    def execute(self, code: bytes, stdin: bytes, limits: Limits) -> tuple[dict[str, Any], bytes, bytes]:
        """Send one request and wait for the answer; raises :class:`WorkerDied` when the server is gone."""
        assert self.proc is not None and self.proc.stdin is not None
        lim = {"wall_s": limits.wall_s, "cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
               "file_size_mb": limits.file_size_mb, "open_files": limits.open_files,
               "processes": limits.processes, "output_bytes": limits.output_bytes}
        header = json.dumps({"code_len": len(code), "stdin_len": len(stdin), "limits": lim}).encode()
        try:
            self.proc.stdin.write(struct.pack(">I", len(header)) + header + code + stdin)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerDied(f"pool server is gone: {exc}") from exc
        answer, body = self._read_frame(time.monotonic() + limits.wall_s + SETUP_GRACE_S)
        self.runs += 1
        n_out = answer["stdout_len"]
        return answer, body[:n_out], body[n_out:]


class Pool:
    """``size`` warm workers; :meth:`run` borrows an idle one (blocking until one is free)."""

    def __init__(self, backend: Backend, runtime: JailRuntime, work: WorkRoot, limits: Limits, size: int,
                 preload: tuple[str, ...] = (), recycle_after: int = 1000) -> None:
        self.backend, self.runtime, self.work, self.limits = backend, runtime, work, limits
        self.preload, self.recycle_after = preload, recycle_after
        self.workers = [PoolWorker(backend, runtime, work, limits, preload, i) for i in range(size)]
        self.idle: queue.Queue[PoolWorker] = queue.Queue()
        self.restarts = 0
        self._closed = False
        errors: list[BaseException] = []

        def boot(w: PoolWorker) -> None:
            try:
                w.start()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=boot, args=(w,)) for w in self.workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            log = Path(self.workers[0].log_path).read_text(errors="replace")[-2000:]
            self.close()
            raise RuntimeError(f"sandbox pool failed to start: {errors[0]}\n{log}")
        for w in self.workers:
            self.idle.put(w)

    def run(self, code: bytes, stdin: bytes, limits: Limits) -> ExecResult:
        if self._closed:
            raise RuntimeError("sandbox pool is closed")
        # The jail's own limits were fixed when the worker started: a request may only tighten them.
        limits = limits.with_(**{name: min(getattr(limits, name), getattr(self.limits, name))
                                 for name in ("memory_mb", "processes", "file_size_mb", "open_files", "tmpfs_mb")})
        t0 = time.monotonic()
        worker = self.idle.get()
        try:
            try:
                answer, out, err = worker.execute(code, stdin, limits)
            except WorkerDied as exc:
                died_running = worker.proc is not None and worker.proc.poll() is not None
                returncode = worker.proc.poll() if worker.proc is not None else None
                self._restart(worker)
                host_timeout = not died_running
                status = classify(report=None, returncode=returncode, stderr=b"", over_cap=False,
                                  host_timeout=host_timeout, limits=limits,
                                  cgroups=bool(getattr(self.backend, "cgroups", False)))
                return ExecResult(status, None, "", f"{exc}" if status == "sandbox_error" else "",
                                  time.monotonic() - t0, backend=f"{self.backend.name}-pool")
            if worker.runs >= self.recycle_after:
                self._restart(worker)
        finally:
            self.idle.put(worker)
        status = classify(report=answer, returncode=answer.get("exit_code"), stderr=err,
                          over_cap=bool(answer.get("output_limit")), host_timeout=False, limits=limits,
                          cgroups=bool(getattr(self.backend, "cgroups", False)))
        return ExecResult(status, answer.get("exit_code"), decode(out), decode(err), time.monotonic() - t0,
                          cpu_s=float(answer.get("cpu_s", 0.0)), signal=answer.get("signal"),
                          truncated=bool(answer.get("output_limit")), backend=f"{self.backend.name}-pool",
                          meta={"program_wall_s": answer.get("wall_s"), "worker": worker.index})

    def _restart(self, worker: PoolWorker) -> None:
        worker.stop()
        self.restarts += 1
        worker.start()

    def close(self) -> None:
        self._closed = True
        for w in self.workers:
            w.stop()
            if os.path.exists(w.log_path):
                os.unlink(w.log_path)
