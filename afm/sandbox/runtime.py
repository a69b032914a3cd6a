"""What the jail can see: a Python interpreter, the system libraries it links against, and an allow-list of
packages mounted read-only at ``/site`` — never the host's root, home or project folders.

Packages come from the host environment that runs afm (they must match the jail interpreter's ``X.Y``). Each
allowed distribution is mounted by its top-level entries (``numpy/``, ``numpy.libs/``, ``six.py``, dist-info), and
its required dependencies are added recursively, so ``sympy`` brings ``mpmath``.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PACKAGES: tuple[str, ...] = ("numpy", "sympy", "scipy", "pandas", "networkx")
SITE = "/site"
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here; the message names what is missing and how to fix it."""


@dataclass(frozen=True)
class Mount:
    """A read-only bind mount ``src`` (host) -> ``dst`` (jail)."""

    src: str
    dst: str


@dataclass(frozen=True)
class JailRuntime:
    """The interpreter and read-only mounts of the jail, resolved once per configuration."""

    python: str
    mounts: tuple[Mount, ...]
    packages: tuple[str, ...]
    missing: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    def environ(self) -> dict[str, str]:
        return dict(self.env)


def world_traversable(path: str | os.PathLike) -> bool:
    """Whether an unprivileged uid can reach ``path`` (every ancestor o+x, the target o+r)."""
    p = Path(os.path.realpath(path))
    try:
        if not p.stat().st_mode & stat.S_IROTH:
            return False
        for parent in p.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return False
    except OSError:
        return False
    return True


@functools.cache
def python_info(python: str) -> tuple[tuple[int, int], str]:
    """``((major, minor), base_prefix)`` of an interpreter (cached; one subprocess per interpreter)."""
    out = subprocess.run([python, "-S", "-c", "import sys; print(sys.version_info[0], sys.version_info[1], "
                                               "sys.base_prefix)"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    return (int(out[0]), int(out[1])), out[2]


def find_jail_python(explicit: str | None = None) -> str:
    """The interpreter to run in the jail.

    Order: ``explicit`` / ``$AFM_SANDBOX_PYTHON``; ``/usr/bin/python3.X`` matching this interpreter's version;
    this interpreter when an unprivileged uid can reach it. Raises :class:`SandboxUnavailable` otherwise.
    """
    explicit = explicit or os.environ.get("AFM_SANDBOX_PYTHON") or None
    want = sys.version_info[:2]
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise SandboxUnavailable(f"sandbox python {explicit!r} is not an executable file")
        return explicit
    candidates = [f"/usr/bin/python{want[0]}.{want[1]}", "/usr/local/bin/python{}.{}".format(*want),
                  os.path.realpath(sys.executable)]
    for cand in candidates:
        if os.path.exists(cand) and world_traversable(cand):
            try:
                if python_info(cand)[0] == want:
                    return cand
            except (OSError, subprocess.SubprocessError):
                continue
    raise SandboxUnavailable(
        f"no Python {want[0]}.{want[1]} that the sandbox user can reach: {sys.executable} lives under a private "
        f"folder. Install python{want[0]}.{want[1]} system-wide (e.g. apt install python{want[0]}.{want[1]}) or set "
        f"AFM_SANDBOX_PYTHON (or the `python` key of the sandbox config) to a Python {want[0]}.{want[1]} under a "
        "world-readable path such as /opt or /usr/local.")


def _requirement_names(dist: md.Distribution) -> list[str]:
    names = []
    for req in dist.requires or []:
        if ";" in req and "extra" in req.split(";", 1)[1]:
            continue  # optional extras are not needed to import the package
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req)
        if m:
            names.append(m.group(1))
    return names


def _top_level_entries(dist: md.Distribution) -> set[Path]:
    base = Path(dist.locate_file("")).resolve()
    entries: set[Path] = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if not parts or parts[0] in ("..", "__pycache__") or parts[0].endswith(".pth"):
            continue
        entries.add(base / parts[0])
    return {e for e in entries if e.exists()}


def package_mounts(packages: tuple[str, ...]) -> tuple[list[Mount], list[str], list[str]]:
    """Mounts under ``/site`` for the allowed distributions and their dependencies.

    Returns ``(mounts, found, missing)``; missing packages are skipped (they simply cannot be imported).
    """
    seen: set[str] = set()
    found, missing = [], []
    mounts: dict[str, Mount] = {}
    queue = list(packages)
    while queue:
        name = queue.pop(0)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if name in packages:
                missing.append(name)
            continue
        found.append(dist.metadata["Name"])
        for entry in _top_level_entries(dist):
            mounts.setdefault(entry.name, Mount(str(entry), f"{SITE}/{entry.name}"))
        queue.extend(_requirement_names(dist))
    return sorted(mounts.values(), key=lambda m: m.dst), found, missing


def system_mounts(python: str) -> list[Mount]:
    """The interpreter's installation and the system library folders, read-only."""
    mounts = [Mount(d, d) for d in SYSTEM_DIRS if os.path.exists(d)]
    _, prefix = python_info(python)
    real_prefix = os.path.realpath(prefix)
    if not any(real_prefix == d or real_prefix.startswith(d + "/") for d in SYSTEM_DIRS):
        mounts.append(Mount(real_prefix, real_prefix))
    return mounts


def resolve_runtime(python: str | None = None, packages: tuple[str, ...] = DEFAULT_PACKAGES) -> JailRuntime:
    """Resolve the jail interpreter and mounts; raises :class:`SandboxUnavailable` with a fix when impossible."""
    jail_python = find_jail_python(python)
    version, _ = python_info(jail_python)
    pkg_mounts, found, missing = package_mounts(tuple(packages))
    if pkg_mounts and version != sys.version_info[:2]:
        raise SandboxUnavailable(f"sandbox python {jail_python} is {version[0]}.{version[1]} but the allowed "
                                 f"packages come from Python {sys.version_info[0]}.{sys.version_info[1]}")
    unreachable = [m.src for m in pkg_mounts if not world_traversable(m.src)]
    if unreachable:
        raise SandboxUnavailable(f"the sandbox user cannot read the allowed packages under "
                                 f"{os.path.dirname(unreachable[0])} (a private folder). Install afm in an "
                                 "environment under a world-readable path, or set `packages: []`.")
    env = (
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
        ("LANG", "C.UTF-8"),
        ("PYTHONPATH", SITE),
        ("PYTHONIOENCODING", "utf-8"),
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONHASHSEED", "0"),
        ("OMP_NUM_THREADS", "1"),
        ("OPENBLAS_NUM_THREADS", "1"),
        ("MKL_NUM_THREADS", "1"),
        ("MPLBACKEND", "Agg"),
    )
    return JailRuntime(jail_python, tuple(system_mounts(jail_python) + pkg_mounts), tuple(found),
                       tuple(missing), env)
