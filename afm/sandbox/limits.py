"""Resource limits of one execution and the result it produces."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "sandbox_error"]


@dataclass(frozen=True)
class Limits:
    """Per-execution limits. ``cpu_s=None`` means the same as ``wall_s``.

    ``memory_mb`` is the address-space limit of the program (and, where cgroups are available, the cgroup memory
    limit of the jail); ``processes`` caps processes and threads; ``output_bytes`` caps stdout + stderr together;
    ``tmpfs_mb`` is the size of the private writable workspace.
    """

    wall_s: float = 10.0
    cpu_s: float | None = None
    memory_mb: int = 1024
    processes: int = 64
    file_size_mb: int = 64
    open_files: int = 256
    output_bytes: int = 1_000_000
    tmpfs_mb: int = 128

    def __post_init__(self) -> None:
        for name in ("wall_s", "memory_mb", "processes", "file_size_mb", "open_files", "output_bytes", "tmpfs_mb"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"Limits.cpu_s must be > 0 or None, got {self.cpu_s!r}")

    @property
    def cpu_seconds(self) -> int:
        """Whole CPU seconds for RLIMIT_CPU (rounded up, at least 1)."""
        return max(1, math.ceil(self.cpu_s if self.cpu_s is not None else self.wall_s))

    def with_(self, **changes: Any) -> Limits:
        """A copy with some fields changed."""
        return replace(self, **changes)

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None, base: Limits | None = None) -> Limits:
        """Build from a dict (YAML); unknown keys are an error so typos do not pass silently."""
        base = base or cls()
        data = dict(data or {})
        unknown = set(data) - set(asdict(base))
        if unknown:
            raise ValueError(f"unknown sandbox limit(s) {sorted(unknown)}; known: {sorted(asdict(base))}")
        return replace(base, **data)


@dataclass
class ExecResult:
    """What happened to one execution.

    ``status``: ``ok`` (exit 0), ``error`` (non-zero exit or crash), ``timeout`` (wall or CPU limit),
    ``memory`` (memory limit), ``output_limit`` (stdout+stderr over the cap; the output kept is the head),
    ``sandbox_error`` (the sandbox itself failed; ``stderr`` says why — never the program's fault).
    ``signal`` is set when the program was killed by a signal.
    """

    status: Status
    exit_code: int | None
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float = 0.0
    signal: int | None = None
    truncated: bool = False
    backend: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
