"""Runs inside the jail (standard library only; it is copied into the sandbox runtime folder, not imported).

Two modes:

``once LIMITS_JSON``  run ``/sandbox/main.py`` with the jail's fd 0 as its stdin in a forked child, enforce the
    wall limit, kill every process left behind, and write a JSON status line to the fd named in LIMITS_JSON (``status_fd``).
``serve LIMITS_JSON PRELOAD``  the warm pool server (the *zygote*): import the preload modules once, then answer
    requests arriving on fd 0, a ``SOCK_SEQPACKET`` socket from the host. A request is a small JSON header (a job
    number and limits) plus four file descriptors passed with it: the program (a memfd), its stdin (a memfd), and
    the write ends of its stdout and stderr pipes, which the host reads. The zygote forks the job, which reads its
    own program; the zygote answers with a status message (exit code, signal, times) and nothing else.

Why a zygote that never touches a job's data: every job is a fork of the warm server, so it inherits the server's
memory, including freed buffers. The zygote never reads a program, a stdin or an output (the host writes the first
two into memfds and reads the last two from pipes), and the per-job clean-up that has to look at what a job left
(file names in ``/tmp``, IPC objects) runs in a separate forked *janitor* that exits afterwards. So a job starts
from memory that never held another job's data. Between jobs every leftover process is killed, the writable
folders are emptied whatever permissions a job set, and System V IPC objects are removed; POSIX message queues are
refused to jobs (``RLIMIT_MSGQUEUE`` 0) because without ``/dev/mqueue`` they cannot be listed. A janitor that
cannot prove the jail clean reports it, and the host replaces the worker.

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
import socket
import stat
import sys
import time

WORKDIR = "/tmp"
SCRUB = ("/tmp", "/dev/shm")
FILENAME = "main.py"
ROOT_MODES = {}  # the writable folders' own modes at start, restored after every job
BASELINE = [None]  # the jail's fingerprint after start-up (see _fingerprint)


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
        # POSIX message queues live in the IPC namespace, which a pool worker keeps across jobs, and cannot be
        # listed without /dev/mqueue: a queue would carry data to the next job. A zero budget refuses them.
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
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


def _child(code, limits):
    """Become the user's program (stdin, stdout and stderr already in place); never returns."""
    import builtins
    import linecache
    import types

    os.setsid()
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


def _empty_dir(root):
    """Remove everything below ``root`` whatever modes a job left. Each folder is made listable *before* it is
    read (a job may hide files under a folder of mode 0 inside a folder of mode 0o100); the walk holds one
    descriptor and a stack of names, so folders nested deeper than any path, recursion or descriptor limit go too."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(root, flags)
    names = []  # the folders between root and fd
    try:
        while True:
            sub = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        sub = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if sub is not None:
                os.chmod(sub, 0o700, dir_fd=fd)  # no process of the job is left to swap it for a link
                child = os.open(sub, flags, dir_fd=fd)
                os.close(fd)
                fd = child
                names.append(sub)
            elif names:
                parent = os.open("..", flags, dir_fd=fd)
                os.close(fd)
                fd = parent
                os.rmdir(names.pop(), dir_fd=fd)
            else:
                return
    finally:
        os.close(fd)


# Linux syscall numbers of keyctl (by machine; keyrings are left alone elsewhere) and its commands.
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}.get(os.uname().machine)
KEYCTL_CLEAR, KEYCTL_READ = 7, 11
RINGS = (-3, -4, -5)  # the session, user and user-session keyrings: shared by every process of a worker's uid
_LIBC = []


def _libc():
    import ctypes  # imported by the zygote at start, so this costs nothing per job

    if not _LIBC:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        _LIBC.append(libc)
    return _LIBC[0]


def _sysv(kind, ident, cmd, buf):
    libc = _libc()
    if kind == "sem":
        return libc.semctl(ident, 0, cmd, buf)
    return (libc.shmctl if kind == "shm" else libc.msgctl)(ident, cmd, buf)


# (kind, *_INFO, *_STAT_ANY, offset of the in-use count in the *_INFO struct: shm_info.used_ids,
# msginfo.msgpool, seminfo.semusz). *_STAT_ANY needs no read permission, so a job's mode 0 hides nothing.
SYSV = (("shm", 14, 15, 0), ("msg", 12, 13, 0), ("sem", 19, 20, 28))


def _sysv_in_use():
    """How many System V objects of each kind exist in the jail's IPC namespace."""
    import ctypes

    counts = []
    for kind, info, _stat_any, offset in SYSV:
        buf = ctypes.create_string_buffer(512)  # larger than any of the info / *id_ds structs
        counts.append(-1 if _sysv(kind, 0, info, buf) < 0 else int.from_bytes(buf.raw[offset:offset + 4], "little"))
    return counts


def _clear_sysv_ipc():
    """Remove every System V shared memory segment, message queue and semaphore set, found by index."""
    import ctypes

    buf = ctypes.create_string_buffer(512)
    for kind, info, stat_any, _offset in SYSV:
        highest = _sysv(kind, 0, info, buf)
        for index in range(max(highest, -1) + 1):
            ident = _sysv(kind, index, stat_any, buf)
            if ident >= 0:
                _sysv(kind, ident, 0, buf)  # IPC_RMID


def _keyrings():
    """Bytes of key ids in each shared keyring (0 when empty; -1 where keyctl is refused, as nsjail's seccomp
    filter does, or unknown on this machine)."""
    if SYS_KEYCTL is None:
        return [-1] * len(RINGS)
    libc = _libc()
    return [libc.syscall(SYS_KEYCTL, KEYCTL_READ, ring, None, 0) for ring in RINGS]


def _fingerprint():
    """Numbers that change when a job leaves anything behind in the jail: the writable folders' modes, link
    counts, sizes (tmpfs counts entries in a folder's size) and inodes in use, the size of their extended
    attribute lists, the System V objects in use, and the shared keyrings' sizes. Numbers only: the zygote never
    reads a name or a byte that a job wrote."""
    libc = _libc()
    marks = []
    for root in ROOT_MODES:
        st, sv = os.stat(root), os.statvfs(root)
        marks += [st.st_mode, st.st_nlink, st.st_size, sv.f_files - sv.f_ffree,
                  libc.listxattr(root.encode(), None, 0)]
    return tuple(marks + _sysv_in_use() + _keyrings())


def _janitor():
    """Forked when a job left something behind, once every job process is dead: empty the writable folders,
    restore their modes and drop their extended attributes, remove System V IPC objects, clear the shared
    keyrings. Runs in its own process so that the names and objects it has to look at never enter the zygote's
    memory."""
    ok = True
    for root, mode in ROOT_MODES.items():
        try:
            if stat.S_IMODE(os.stat(root).st_mode) != mode:
                os.chmod(root, mode)
            _empty_dir(root)
            for name in os.listxattr(root):
                os.removexattr(root, name)
        except OSError:
            ok = False
    try:
        _clear_sysv_ipc()
        if SYS_KEYCTL is not None:
            for ring in RINGS:
                _libc().syscall(SYS_KEYCTL, KEYCTL_CLEAR, ring)
    except Exception:
        ok = False
    os._exit(0 if ok else 1)


def _run_janitor():
    pid = os.fork()
    if pid == 0:
        try:
            _janitor()
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _clean_up():
    """Make the jail as it was after start-up; True when its fingerprint shows it is. Most jobs leave nothing
    behind, and then no janitor is needed."""
    if _fingerprint() == BASELINE[0]:
        return True
    return _run_janitor() and _fingerprint() == BASELINE[0]


def run_once(limits):
    wall = float(limits["wall_s"])
    with open("/sandbox/main.py", "rb") as f:
        code = f.read()
    t0 = time.monotonic()
    status_fd = int(limits["status_fd"])
    pid = os.fork()
    if pid == 0:
        os.close(status_fd)  # the program's stdin is fd 0 as the host passed it (an in-memory file)
        _child(code, limits)
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


def _start_job(fds, limits):
    """Fork the job: it reads its program from the code memfd and gets the stdin memfd and the output pipes as fds
    0, 1 and 2; every other descriptor of the zygote (the control socket above all) is closed first."""
    code_fd, stdin_fd, out_fd, err_fd = fds
    pid = os.fork()
    if pid:
        return pid
    try:
        chunks = []
        while True:
            chunk = os.read(code_fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        code = b"".join(chunks)
        for src, dst in ((stdin_fd, 0), (out_fd, 1), (err_fd, 2)):
            os.dup2(src, dst)
        os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except BaseException:
        os._exit(70)
    _child(code, limits)


def _serve_job(ctl, job, fds, limits):
    """Run one job to its end (exit, wall limit, or a kill from the host); return the status message."""
    wall = float(limits["wall_s"])
    t0 = time.monotonic()
    try:
        pid = _start_job(fds, limits)
    finally:
        for fd in fds:
            os.close(fd)  # the host holds the pipes' read ends: EOF comes when the job's processes are gone
    pidfd = os.pidfd_open(pid)
    timed_out = killed = False
    status = usage = None
    deadline = t0 + wall
    while status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([pidfd, ctl], [], [], remaining)
        if ctl in ready:
            msg = ctl.recv(4096)
            if not msg:
                os._exit(0)  # the host is gone
            order = json.loads(msg)
            if order.get("op") == "kill" and order.get("job") == job:
                killed = True  # the output went over its cap: the host stopped reading
                break
        if pidfd in ready:
            _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    elapsed = time.monotonic() - t0
    if status is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        _, status, usage = os.wait4(pid, 0)
    _kill_others()
    clean = _clean_up()
    exit_code, sig = _decode_status(status)
    return {"job": job, "exit_code": exit_code, "signal": sig, "timed_out": timed_out, "killed": killed,
            "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": elapsed, "clean": clean}


HARNESS = "/afm/afm_grade_harness.py"


def _load_harness():
    """Import the grading harness once (jobs that grade code find it in ``sys.modules``: no 30 KB compile each)."""
    if not os.path.exists(HARNESS):
        return
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("afm_grade_harness", HARNESS)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["afm_grade_harness"] = module
        module.warm()
    except Exception:
        pass  # a job loads it itself


def serve(limits, preload):
    ctl = socket.socket(fileno=os.dup(0))
    for root in SCRUB:
        if os.path.isdir(root):
            ROOT_MODES[root] = stat.S_IMODE(os.stat(root).st_mode)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(2, 1)  # stray prints of the zygote go to the jail log
    os.close(null)
    _libc()  # ctypes, imported once here instead of once per job

    loaded = []
    for name in [p for p in preload.split(",") if p]:
        try:
            __import__(name)
            loaded.append(name)
        except Exception:
            pass
    _load_harness()
    clean = _run_janitor()  # whatever importing the preload modules left behind
    BASELINE[0] = _fingerprint()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()  # a job must not inherit (and print) the zygote's buffered output
    ctl.send(json.dumps({"ready": True, "pid": os.getpid(), "preloaded": loaded, "clean": clean}).encode())
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ctl, 65536, 4)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        order = json.loads(msg)
        if order.get("op") != "run" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue  # a kill for a job that already ended
        merged = dict(limits)
        merged.update(order.get("limits") or {})
        ctl.send(json.dumps(_serve_job(ctl, order["job"], fds, merged)).encode())


if __name__ == "__main__":
    _mode, _limits = sys.argv[1], json.loads(sys.argv[2])
    if _mode == "once":
        run_once(_limits)
    else:
        serve(_limits, sys.argv[3] if len(sys.argv) > 3 else "")
