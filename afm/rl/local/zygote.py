"""A worker zygote for a one-node Ray run: Ray's worker processes forked from one process that has already imported
torch, tensordict and transformers, instead of each importing them itself.

verl starts its actors one after another (the task runner, the FSDP worker group, the rollout server, the agent-loop
and reward workers, the transfer queue's storage) and each new Ray worker process imports verl first: ~5-7 s of a
core each, mostly torch, ``torch._dynamo`` (through tensordict) and transformers, on the launch's critical path
(benchmarks/RESULTS.md, 2026-11-29). Ray's own preload does not help: prestarted workers are never used by actors
with their own runtime env, which verl's are. This module is the other way: the launcher (afm/rl/knobs.py ``run``)
starts ``python -m afm.rl.local.zygote --address NAME`` beside verl's driver, the job's runtime env sets Ray's
``py_executable`` to :mod:`afm.rl.local.zygote_client`, and each worker Ray starts asks the zygote for a fork of
itself that then runs Ray's ``default_worker.py`` with the worker's arguments, environment, working directory and
standard streams. Ray is not imported here: the child imports Ray and verl's own modules with its own environment.

What keeps a fork equal to a fresh process:
* the child takes the worker's whole environment, cwd, stdin/stdout/stderr and argv, joins its own process group (as
  Ray's workers do), and sets torch's thread count from ``OMP_NUM_THREADS`` (libgomp read it at the zygote's import);
* a variable the preloaded modules read at import (OpenMP's, MKL's, Hugging Face's, torch's, Python's) that differs
  between the zygote and the worker refuses the fork: the client then starts the worker as Ray would have;
* the child dies with its client (the process Ray started and watches), and the client exits with the child's code;
* only processes of the zygote's own user are served (the socket's peer credentials): a fork runs what it is asked.

On a cluster each node's workers are started by its own raylet, from ``ray start``: experiments/ray_cluster.sh starts
one zygote a node (``--detach``: it outlives the script, ``ray_cluster.sh stop`` ends it) and puts its address in the
environment ``ray start`` runs with, which the raylet's workers inherit; the launcher sets the client as Ray's
``py_executable`` (``WORKER_ZYGOTE``; ``auto``: DEVICE=cpu), and a node without a zygote starts its workers as usual.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence

# What every verl worker imports before its own modules (python -X importtime, verl 0.9.1): torch, torch._dynamo
# (through tensordict), transformers; torch._inductor's lowering (through vLLM, which verl's checkpoint engines import
# when it is installed); datasets and pandas (verl's RL dataset). vLLM itself is not here: it sets variables at import.
PRELOAD = ("torch", "torch._dynamo", "torch.distributed.fsdp", "torch._inductor.lowering", "tensordict",
           "transformers", "transformers.modeling_utils", "datasets", "pandas")
# Modules that must stay out of the zygote: they read the worker's own environment (Ray's node, job and port
# variables) at import, so each child imports them itself.
NOT_PRELOADED = ("ray", "verl")
# Variables the preloaded modules (or the interpreter) read once, at start or import: a worker whose value differs
# cannot be a fork. The thread counts are not here: the child sets torch's from its own OMP_NUM_THREADS.
IMPORT_TIME_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_",
                        "TORCH", "PYTORCH_", "LD_", "PYTHON")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
ADDRESS_VARIABLE = "AFM_WORKER_ZYGOTE"
MAX_REQUEST = 1 << 20


def import_time_difference(mine: Mapping[str, str], theirs: Mapping[str, str],
                           after: Mapping[str, str] | None = None) -> str | None:
    """The first variable read at import whose value differs between the zygote's environment (``mine``, as the
    preloaded modules found it) and a worker's, or None when a fork of the zygote is the process the worker would
    have been. ``after``: the zygote's environment after its imports; a variable an import set there (torch's
    inductor names its cache folder: TORCHINDUCTOR_CACHE_DIR) may also have that value in the worker's, which a
    process that imported the same modules first (verl's driver, the raylet's parent on one node) passes on."""
    after = mine if after is None else after
    names = {k for k in (*mine, *after, *theirs) if k.startswith(IMPORT_TIME_PREFIXES) and k not in THREAD_VARIABLES}
    for name in sorted(names):
        if theirs.get(name) not in (mine.get(name), after.get(name)):
            return name
    return None


def abstract_address(name: str) -> str:
    """The Linux abstract socket for ``name``: no file to clean up, gone with the zygote."""
    return "\0" + name


def _set_parent_death_signal() -> None:
    """The zygote ends with the launcher that started it, even one killed with SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def peer_uid(conn: socket.socket) -> int:
    """The user id of the process at the other end of a Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    """One request: a 4-byte length, then that much JSON (argv, env, cwd, client_pid), with the client's standard
    streams as passed file descriptors."""
    head, fds, _, _ = socket.recv_fds(conn, 4, 3)
    if len(head) < 4:
        raise ConnectionError("short request")
    size = int.from_bytes(head, "big")
    if size > MAX_REQUEST:
        raise ConnectionError(f"request of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("request cut short")
        body += chunk
    return json.loads(body), fds


def _reply(conn: socket.socket, **fields) -> None:
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(fields) + "\n").encode())


class Zygote:
    """The server: accepts requests on an abstract Unix socket, forks a child per worker, reports each child's exit
    to its client."""

    def __init__(self, address: str, preload: Sequence[str], log=sys.stderr) -> None:
        self.log = log
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # listening before the imports: a worker that asks early waits for them instead of importing them itself
        self.listener.bind(abstract_address(address))
        self.listener.listen(64)
        began = time.monotonic()
        self.env = dict(os.environ)  # what the imports below read
        for name in preload:
            __import__(name)
        leaked = [m for m in NOT_PRELOADED if m in sys.modules]
        if leaked:
            raise RuntimeError(f"preloading {', '.join(preload)} imported {', '.join(leaked)}, which each worker "
                               "must import with its own environment")
        self.env_after = dict(os.environ)
        self.threads = self.env.get("OMP_NUM_THREADS")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (the client's connection, pid)
        self.forks = 0
        self._say(f"preloaded {', '.join(preload)} in {time.monotonic() - began:.1f} s")

    def _say(self, line: str) -> None:
        print(f"[afm] worker zygote (pid {os.getpid()}): {line}", file=self.log, flush=True)

    def serve_forever(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._reap(key.fd)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            # an abstract socket is open to every local user: a fork runs what the request names, as this user
            uid = peer_uid(conn)
            if uid != os.getuid():
                _reply(conn, refused=f"a request from user id {uid}, not {os.getuid()}")
                conn.close()
                return
            conn.settimeout(30)  # a client that connects and says nothing must not stop the others
            request, fds = read_request(conn)
            conn.settimeout(None)
            differs = import_time_difference(self.env, request["env"], self.env_after)
            if differs is not None or len(fds) != 3:
                reason = f"{differs} differs from the zygote's" if differs else "the standard streams did not arrive"
                _reply(conn, refused=reason)
                conn.close()
                return
            pid = os.fork()
            if pid == 0:
                self._become_worker(conn, request, fds)  # never returns
            pidfd = os.pidfd_open(pid)
        except (OSError, ValueError, KeyError, ConnectionError) as e:
            _reply(conn, refused=f"bad request: {e}")
            conn.close()
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.forks += 1
        self.children[pidfd] = (conn, pid)
        self.selector.register(pidfd, selectors.EVENT_READ, None)
        _reply(conn, pid=pid)

    def _reap(self, pidfd: int) -> None:
        conn, pid = self.children.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _reply(conn, exit=os.waitstatus_to_exitcode(status))
        conn.close()

    def _become_worker(self, conn: socket.socket, request: dict, fds: list[int]) -> None:
        """In the child: become the process Ray asked for, run Ray's worker script, exit with its code."""
        code = 1
        try:
            os.setpgid(0, 0)  # Ray's workers lead their own process group
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the zygote's handler is not the worker's
            self.selector.close()
            self.listener.close()
            for pidfd, (other, _) in self.children.items():
                os.close(pidfd)
                other.close()
            conn.close()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            threads = request["env"].get("OMP_NUM_THREADS")
            if threads != self.threads and threads and threads.isdigit() and int(threads) > 0:
                import torch

                torch.set_num_threads(int(threads))
            _die_with(int(request["client_pid"]))
            argv = list(request["argv"])
            script = argv[0]
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            import runpy

            try:
                runpy.run_path(script, run_name="__main__")
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # the child must never return into the zygote's loop
            import traceback

            traceback.print_exc()
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def _die_with(pid: int) -> None:
    """A thread that kills this worker's process group when ``pid`` (the client Ray started and watches) is gone: a
    worker Ray killed through its client must not live on, nor what it started (vLLM's engine core): they are not
    the client's descendants, which is where a cleanup by process tree (afm.common.ray_scope) looks."""
    import select
    import threading

    pidfd = os.pidfd_open(pid)

    def watch() -> None:
        select.select([pidfd], [], [])
        os.killpg(0, signal.SIGKILL)  # this worker leads its group (setpgid above)

    threading.Thread(target=watch, name="afm-zygote-client-watch", daemon=True).start()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m afm.rl.local.zygote", description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", required=True, help="the abstract Unix socket's name (AFM_WORKER_ZYGOTE)")
    parser.add_argument("--preload", default=",".join(PRELOAD), help="modules to import before forking")
    parser.add_argument("--detach", action="store_true",
                        help="outlive the process that started it (a Ray node's zygote, started by ray_cluster.sh)")
    parser.add_argument("--log", help="append this process's output to this file (a detached zygote has no terminal)")
    args = parser.parse_args(argv)
    if args.log:
        # onto the zygote's own stdout and stderr: a fork replaces both with its worker's streams
        fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if not args.detach:
        _set_parent_death_signal()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    preload = [m for m in args.preload.split(",") if m]
    try:
        zygote = Zygote(args.address, preload)
    except (OSError, ImportError, RuntimeError) as e:
        print(f"[afm] worker zygote: {e}; Ray's workers start as usual", file=sys.stderr, flush=True)
        return 1
    try:
        zygote.serve_forever()
    finally:
        zygote._say(f"{zygote.forks} workers forked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
