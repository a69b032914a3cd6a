"""Runs inside the jail (standard library only; it is copied into the sandbox runtime folder, not imported).

Two modes:

``once LIMITS_JSON``  run ``/sandbox/main.py`` with stdin from ``/sandbox/stdin`` in a forked child, enforce the
    wall limit, kill every process left behind, and write a JSON status line to the fd named in LIMITS_JSON (``status_fd``).
``serve LIMITS_JSON PRELOAD``  the warm pool server: import the preload modules once, then answer framed
    requests on stdin/stdout. Each request runs in a fresh forked child (no state survives an execution: the
    child's memory dies with it, leftover processes are killed, the writable folders are wiped).

Why a forked child even in ``once`` mode: the jail's first process is PID 1 of its PID namespace, and PID 1
ignores signals it has no handler for, which would change the semantics of user programs (``os.kill(os.getpid(),
SIGTERM)`` would do nothing). The runner stays PID 1 and reaps; the program runs as an ordinary process.
"""

import contextlib
import json
import os
import resource
import select
import signal
import struct
import sys
import time

WORKDIR = "/tmp"
SCRUB = ("/tmp", "/dev/shm")
FILENAME = "main.py"
PROTO_FDS = []


def _set_limits(limits):
    mib = 1024 * 1024
    cpu = int(limits["cpu_seconds"])
    pairs = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (limits["memory_mb"] * mib,) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_size_mb"] * mib,) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
        (resource.RLIMIT_NPROC, (limits["processes"],) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ]
    for which, value in pairs:
        try:
            _soft, hard = resource.getrlimit(which)
            new_hard = value[1] if hard == resource.RLIM_INFINITY else min(value[1], hard)
            resource.setrlimit(which, (min(value[0], new_hard), new_hard))
        except (ValueError, OSError):
            pass  # a limit the jail already set lower stays in force


def _print_exception(exc):
    import traceback

    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None  # hide the runner's frame
    traceback.print_exception(type(exc), exc, tb)


def _child(code, stdin_path, limits):
    """Become the user's program; never returns."""
    import builtins
    import linecache
    import types

    os.setsid()
    fd = os.open(stdin_path, os.O_RDONLY) if os.path.exists(stdin_path) else os.open(os.devnull, os.O_RDONLY)
    if fd != 0:
        os.dup2(fd, 0)
        os.close(fd)
    os.chdir(WORKDIR)
    _set_limits(limits)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    src = code.decode("utf-8", "replace")
    linecache.cache[FILENAME] = (len(src), None, src.splitlines(True), FILENAME)
    main = types.ModuleType("__main__")
    main.__file__ = FILENAME
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [FILENAME]
    sys.path[0] = WORKDIR
    status = 0
    try:
        exec(compile(code, FILENAME, "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException as exc:
        _print_exception(exc)
        status = 1
    _finish(status)


def _exit_status(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    with contextlib.suppress(Exception):
        print(exc.code, file=sys.stderr)
    return 1


def _finish(status):
    """What interpreter exit does for a program (threads joined, atexit hooks, stdio flushed), minus tearing
    down every module of the runner, which costs tens of milliseconds with numpy preloaded."""
    import atexit
    import threading

    with contextlib.suppress(BaseException):
        threading._shutdown()  # joins non-daemon threads like normal interpreter exit
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(status)


def _kill_others():
    """Kill every other process in the jail (from PID 1 this reaches all of them), then reap."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(-1, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.001)


def _decode_status(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return 128 + sig, sig
    return os.WEXITSTATUS(status), None


def _scrub():
    import shutil

    for root in SCRUB:
        if not os.path.isdir(root):
            continue
        for name in os.listdir(root):
            path = os.path.join(root, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    for dirpath, dirnames, _ in os.walk(path):
                        for d in dirnames:  # a program may leave directories without permissions
                            with contextlib.suppress(OSError):
                                os.chmod(os.path.join(dirpath, d), 0o700)
                    os.chmod(path, 0o700)
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
            except OSError:
                pass


def run_once(limits):
    wall = float(limits["wall_s"])
    with open("/sandbox/main.py", "rb") as f:
        code = f.read()
    t0 = time.monotonic()
    status_fd = int(limits["status_fd"])
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)
        _child(code, "/sandbox/stdin", limits)
    os.close(0)
    os.close(1)  # only the program writes to the captured stdout/stderr
    timed_out = []

    def on_alarm(signum, frame):
        timed_out.append(True)
        os.kill(-1, signal.SIGKILL)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, wall)
    _, status, usage = os.wait4(pid, 0)
    signal.setitimer(signal.ITIMER_REAL, 0)
    elapsed = time.monotonic() - t0
    _kill_others()
    exit_code, sig = _decode_status(status)
    report = {"exit_code": exit_code, "signal": sig, "timed_out": bool(timed_out),
              "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": elapsed}
    os.write(status_fd, (json.dumps(report) + "\n").encode())
    os.close(status_fd)
    os._exit(0)


def _read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _write_frame(fd, header, *payloads):
    data = json.dumps(header).encode()
    buf = struct.pack(">I", len(data)) + data + b"".join(payloads)
    view = memoryview(buf)
    while view:
        view = view[os.write(fd, view):]


def _serve_one(proto_out, code, stdin, limits):
    stdin_path = "/dev/shm/.afm-stdin" if os.path.isdir("/dev/shm") else "/tmp/.afm-stdin"
    with open(stdin_path, "wb") as f:
        f.write(stdin)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    wall = float(limits["wall_s"])
    cap = int(limits["output_bytes"])
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.close(out_w)
        os.close(err_w)
        for fd in PROTO_FDS:
            os.close(fd)
        _child(code, stdin_path, limits)
    os.close(out_w)
    os.close(err_w)
    bufs = {out_r: bytearray(), err_r: bytearray()}
    pipes = [out_r, err_r]
    pidfd = os.pidfd_open(pid)
    timed_out = over = False
    status = usage = None
    deadline = t0 + wall
    grace = None  # after the program exits, leftover descendants may hold the pipes: wait only briefly
    while pipes or status is None:
        now = time.monotonic()
        if status is None and now >= deadline:
            timed_out = True
            break
        if grace is not None and now >= grace:
            break
        limit = (grace if grace is not None else deadline) - now
        watch = pipes + ([pidfd] if status is None else [])
        ready, _, _ = select.select(watch, [], [], max(0.0, limit))
        for fd in ready:
            if fd == pidfd:
                _, status, usage = os.wait4(pid, 0)
                grace = time.monotonic() + 0.05
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                pipes.remove(fd)
            else:
                bufs[fd] += chunk
        if len(bufs[out_r]) + len(bufs[err_r]) > cap:
            over = True
            break
    os.close(pidfd)
    elapsed = time.monotonic() - t0
    if status is None:
        os.kill(-1, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    _kill_others()
    for fd in (out_r, err_r):
        os.close(fd)
    _scrub()
    exit_code, sig = _decode_status(status)
    out, err = bytes(bufs[out_r]), bytes(bufs[err_r])
    if over:
        keep_out = min(len(out), cap)
        out, err = out[:keep_out], err[:cap - keep_out]
    header = {"exit_code": exit_code, "signal": sig, "timed_out": timed_out, "output_limit": over,
              "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": elapsed,
              "stdout_len": len(out), "stderr_len": len(err)}
    _write_frame(proto_out, header, out, err)


def serve(limits, preload):
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    PROTO_FDS.extend([proto_in, proto_out])
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints of the server must never corrupt the protocol stream
    os.close(null)
    loaded = []
    for name in [p for p in preload.split(",") if p]:
        try:
            __import__(name)
            loaded.append(name)
        except Exception:
            pass
    _scrub()
    _write_frame(proto_out, {"ready": True, "pid": os.getpid(), "preloaded": loaded})
    while True:
        try:
            (n,) = struct.unpack(">I", _read_exact(proto_in, 4))
            header = json.loads(_read_exact(proto_in, n))
            code = _read_exact(proto_in, header["code_len"])
            stdin = _read_exact(proto_in, header["stdin_len"])
        except EOFError:
            os._exit(0)
        merged = dict(limits)
        merged.update(header.get("limits") or {})
        _serve_one(proto_out, code, stdin, merged)


if __name__ == "__main__":
    _mode, _limits = sys.argv[1], json.loads(sys.argv[2])
    if _mode == "once":
        run_once(_limits)
    else:
        serve(_limits, sys.argv[3] if len(sys.argv) > 3 else "")
