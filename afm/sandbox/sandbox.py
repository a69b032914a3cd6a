"""The public sandbox: one object that runs untrusted Python synchronously or from asyncio.

>>> with Sandbox() as sb:                       # doctest: +SKIP
...     sb.run("print(6 * 7)").stdout
'42\\n'

``mode="oneshot"`` starts a fresh jail per execution; ``mode="pool"`` keeps ``concurrency`` warm jails that fork
a clean child per execution (no interpreter or import start-up per call). The async API (:meth:`arun`) runs the
blocking work in a thread pool of ``concurrency`` threads, so any number of executions may be awaited at once
while at most ``concurrency`` run, and the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from afm.sandbox.backends import Backend, make_backend
from afm.sandbox.executor import WorkRoot, run_once
from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.pool import Pool
from afm.sandbox.runtime import DEFAULT_PACKAGES, JailRuntime, resolve_runtime


@dataclass
class SandboxConfig:
    """Settings of a :class:`Sandbox` (also the ``sandbox:`` section of the code tool's YAML)."""

    backend: str = "auto"  # auto | nsjail | bwrap
    mode: str = "oneshot"  # oneshot | pool
    limits: Limits = field(default_factory=Limits)
    concurrency: int = 0  # 0 = 2 x CPU cores
    python: str | None = None  # interpreter inside the jail (default: a system python matching this one)
    packages: tuple[str, ...] = DEFAULT_PACKAGES  # importable in the jail (plus their dependencies)
    preload: tuple[str, ...] = ("numpy",)  # pool mode: imported once by each warm server
    nsjail_path: str | None = None
    cgroups: bool | None = None  # None = use cgroup v1 limits when the host allows
    seccomp: bool = True
    work_root: str | None = None
    recycle_after: int = 1000

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> SandboxConfig:
        data = dict(data or {})
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown sandbox setting(s) {sorted(unknown)}; known: {sorted(known)}")
        if "limits" in data:
            data["limits"] = Limits.from_mapping(data["limits"])
        for key in ("packages", "preload"):
            if key in data and data[key] is not None:
                data[key] = tuple(data[key])
        return cls(**data)

    @classmethod
    def from_yaml(cls, path: str | Path) -> SandboxConfig:
        return cls.from_mapping(yaml.safe_load(Path(path).read_text()) or {})


class Sandbox:
    """Runs programs in isolated jails; see the module docstring. Thread-safe; close it when done."""

    def __init__(self, config: SandboxConfig | None = None, **overrides: Any) -> None:
        cfg = config or SandboxConfig()
        if overrides:
            cfg = SandboxConfig(**{**cfg.__dict__, **overrides})
        if cfg.mode not in ("oneshot", "pool"):
            raise ValueError(f"sandbox mode must be oneshot or pool, got {cfg.mode!r}")
        self.config = cfg
        self.concurrency = cfg.concurrency or 2 * (os.cpu_count() or 1)
        self.backend: Backend = make_backend(cfg.backend, nsjail_path=cfg.nsjail_path, cgroups=cfg.cgroups,
                                             seccomp=cfg.seccomp)
        self.runtime: JailRuntime = resolve_runtime(cfg.python, tuple(cfg.packages))
        self.work = WorkRoot(cfg.work_root)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.pool: Pool | None = None
        if cfg.mode == "pool":
            self.pool = Pool(self.backend, self.runtime, self.work, cfg.limits, self.concurrency,
                             preload=tuple(cfg.preload), recycle_after=cfg.recycle_after)

    def run(self, code: str | bytes, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
        """Run ``code`` with ``stdin``; blocks the calling thread (use :meth:`arun` in async code)."""
        limits = limits or self.config.limits
        code_b = code.encode() if isinstance(code, str) else code
        stdin_b = stdin.encode() if isinstance(stdin, str) else stdin
        with self._slots:
            if self.pool is not None:
                return self.pool.run(code_b, stdin_b, limits)
            return run_once(self.backend, self.runtime, self.work, code_b, stdin_b, limits)

    async def arun(self, code: str | bytes, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
        """Async :meth:`run`: awaits a worker thread, never blocking the event loop."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.concurrency, thread_name_prefix="afm-sandbox")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.run, code, stdin, limits)

    def describe(self) -> dict[str, Any]:
        return {**self.backend.describe(), "mode": self.config.mode, "concurrency": self.concurrency,
                "python": self.runtime.python, "packages": list(self.runtime.packages),
                "missing_packages": list(self.runtime.missing),
                "preloaded": self.pool.workers[0].preloaded if self.pool else []}

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


_default: Sandbox | None = None
_default_lock = threading.Lock()


def default_sandbox() -> Sandbox:
    """A process-wide one-shot sandbox with default settings, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Sandbox()
        return _default


def run(code: str | bytes, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
    """Run ``code`` in the default sandbox (see :class:`Sandbox` for pools and custom settings)."""
    return default_sandbox().run(code, stdin, limits)


async def arun(code: str | bytes, stdin: str | bytes = "", limits: Limits | None = None) -> ExecResult:
    """Async :func:`run` on the default sandbox."""
    return await default_sandbox().arun(code, stdin, limits)
