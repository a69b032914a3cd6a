"""Pre-forked interpreter pool: warm jailed zygotes that fork a fresh child per execution.

Each worker is one long-lived jail running ``jail_runner.py serve``; it imports the preload modules once, then for
every request forks a child that runs the program. The zygote never holds a job's data: the host writes the
program and its stdin into memfds and reads stdout/stderr from pipes, passing only the descriptors (``SCM_RIGHTS``
over a ``SOCK_SEQPACKET`` socket) with a small header of limits. After each job the zygote kills every leftover
process and a forked janitor empties ``/tmp`` and ``/dev/shm`` and removes System V IPC objects; when it cannot
prove the jail clean the worker is replaced. Workers serve one execution at a time, are restarted when they die or
misbehave, and are recycled after ``recycle_after`` runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from afm.sandbox.backends import UIDS, Backend, LaunchSpec
from afm.sandbox.executor import SETUP_GRACE_S, WorkRoot, classify, decode
from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.runtime import JailRuntime

DRAIN_S = 1.0  # after the status, every writer of the output pipes is dead: EOF is near


class WorkerDied(RuntimeError):
    """The pool server stopped answering (killed by the OOM killer, crashed, or timed out)."""


def _memfd(name: str, data: bytes) -> int:
    """A sealed-off in-memory file holding ``data``, positioned at its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class PoolWorker:
    """One warm jail; not thread-safe (the pool hands each worker to one caller at a time)."""

    def __init__(self, backend: Backend, runtime: JailRuntime, work: WorkRoot, limits: Limits,
                 preload: tuple[str, ...], index: int) -> None:
        self.backend, self.runtime, self.work, self.limits = backend, runtime, work, limits
        self.preload, self.index = preload, index
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.uid: int | None = None
        self.runs = 0
        self.jobs = 0
        self.tainted = False  # the last job left something the janitor could not remove
        self.preloaded: list[str] = []
        self.log_path = os.path.join(work.path, f"pool-{os.getpid()}-{index}.log")

    def start(self, timeout: float = 60.0) -> None:
        self.uid = UIDS.acquire()
        spec = LaunchSpec(self.runtime, self.limits, self.work.runner, "serve", self.uid, preload=self.preload,
                          harness=self.work.harness,
                          log_path=self.log_path)
        host_end, jail_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self.backend.argv(spec), stdin=jail_end.fileno(), stdout=log,
                                             stderr=log, start_new_session=True, **self.backend.popen_kwargs(spec))
        except BaseException:
            host_end.close()
            raise
        finally:
            jail_end.close()
        self.sock = host_end
        self.runs = 0
        self.tainted = False
        hello = self._recv(time.monotonic() + timeout)
        self.preloaded = list(hello.get("preloaded", []))

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.uid is not None:
            UIDS.release(self.uid)
            self.uid = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _died(self, why: str) -> WorkerDied:
        code = self.proc.poll() if self.proc is not None else None
        return WorkerDied(why if code is None else f"pool server exited (code {code})")

    def _recv(self, deadline: float) -> dict[str, Any]:
        """One message from the zygote, or :class:`WorkerDied` when it is gone or silent past ``deadline``."""
        assert self.sock is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sel.select(remaining):
                raise self._died("pool server did not answer in time")
        try:
            msg = self.sock.recv(65536)
        except OSError as exc:
            raise self._died(f"pool server is gone: {exc}") from exc
        if not msg:
            raise self._died("pool server closed the connection")
        return json.loads(msg)

    def execute(self, code: bytes, stdin: bytes, limits: Limits) -> tuple[dict[str, Any], bytes, bytes, bool]:
        """Run one job: ``(status, stdout, stderr, over the output cap)``; raises :class:`WorkerDied` when the
        server is gone."""
        assert self.sock is not None
        self.jobs += 1
        lim = {"wall_s": limits.wall_s, "cpu_seconds": limits.cpu_seconds, "memory_mb": limits.memory_mb,
               "file_size_mb": limits.file_size_mb, "open_files": limits.open_files,
               "processes": limits.processes}
        header = json.dumps({"op": "run", "job": self.jobs, "limits": lim}).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        passed = [_memfd("afm-code", code), _memfd("afm-stdin", stdin), out_w, err_w]
        try:
            socket.send_fds(self.sock, [header], passed)
        except OSError as exc:
            for fd in (out_r, err_r):
                os.close(fd)
            raise self._died(f"pool server is gone: {exc}") from exc
        finally:
            for fd in passed:
                os.close(fd)
        try:
            answer, out, err, over = self._collect(out_r, err_r, limits)
        finally:
            for fd in (out_r, err_r):
                os.close(fd)
        self.runs += 1
        self.tainted = not answer.get("clean", False)
        return answer, out, err, over

    def _collect(self, out_r: int, err_r: int, limits: Limits) -> tuple[dict[str, Any], bytes, bytes, bool]:
        """Read the job's output (up to the cap, then ask the zygote to kill it) until its status arrives and
        both pipes are closed."""
        assert self.sock is not None
        cap = limits.output_bytes
        bufs = {out_r: bytearray(), err_r: bytearray()}
        deadline = time.monotonic() + limits.wall_s + SETUP_GRACE_S
        answer: dict[str, Any] | None = None
        over = False
        with selectors.DefaultSelector() as sel:
            for fd in bufs:
                sel.register(fd, selectors.EVENT_READ)
            sel.register(self.sock, selectors.EVENT_READ)
            while answer is None or len(sel.get_map()) > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if answer is not None:
                        break  # a pipe still open after the drain time: keep what was read
                    raise self._died("pool server did not answer in time")
                for key, _ in sel.select(remaining):
                    if key.fileobj is self.sock:
                        sel.unregister(self.sock)
                        answer = self._recv(deadline)
                        if answer.get("job") != self.jobs:
                            raise self._died(f"pool server answered job {answer.get('job')}, not {self.jobs}")
                        deadline = min(deadline, time.monotonic() + DRAIN_S)
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fd)
                        continue
                    bufs[key.fd] += chunk
                    if not over and len(bufs[out_r]) + len(bufs[err_r]) > cap:
                        over = True
                        for fd in bufs:
                            sel.unregister(fd)
                        with contextlib.suppress(OSError):
                            self.sock.send(json.dumps({"op": "kill", "job": self.jobs}).encode())
                if answer is not None and over:
                    break
        out, err = bytes(bufs[out_r]), bytes(bufs[err_r])
        if over:
            out = out[:cap]
            err = err[:max(0, cap - len(out))]
        return answer, out, err, over


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
                answer, out, err, over = worker.execute(code, stdin, limits)
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
            if worker.tainted or worker.runs >= self.recycle_after:
                self._restart(worker)
        finally:
            self.idle.put(worker)
        status = classify(report=answer, returncode=answer.get("exit_code"), stderr=err, over_cap=over,
                          host_timeout=False, limits=limits, cgroups=bool(getattr(self.backend, "cgroups", False)))
        return ExecResult(status, answer.get("exit_code"), decode(out), decode(err), time.monotonic() - t0,
                          cpu_s=float(answer.get("cpu_s", 0.0)), signal=answer.get("signal"),
                          truncated=over, backend=f"{self.backend.name}-pool",
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
