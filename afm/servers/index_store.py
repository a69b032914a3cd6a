"""Crash-safe index folders: build in a temporary sibling, write the manifest last, swap in with a rename.

Several uvicorn workers may start at once: :func:`index_lock` (an ``flock`` on ``<index_dir>.lock``) lets one of
them build while the others wait and then load what it built. A folder without ``manifest.json`` is never loaded,
so a build killed halfway leaves nothing that looks complete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


@contextlib.contextmanager
def index_lock(index_dir: str | os.PathLike) -> Iterator[None]:
    """Exclusive inter-process lock for building or checking ``index_dir``."""
    path = Path(index_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def read_manifest(index_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The manifest of a complete index folder, or ``None``."""
    try:
        return json.loads((Path(index_dir) / MANIFEST).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_manifest(folder: str | os.PathLike, manifest: dict[str, Any]) -> None:
    """Write ``manifest.json`` atomically (temporary file + rename)."""
    folder = Path(folder)
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    os.replace(tmp, folder / MANIFEST)


def staging_dir(index_dir: str | os.PathLike) -> Path:
    """A fresh empty folder next to ``index_dir`` to build into."""
    target = Path(index_dir)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-", dir=target.parent))
    staged.chmod(0o755)  # mkdtemp makes it private; an index is read by whoever runs the servers
    return staged


def publish(staged: str | os.PathLike, index_dir: str | os.PathLike) -> None:
    """Replace ``index_dir`` by the finished ``staged`` folder (the old one is removed after the swap)."""
    target = Path(index_dir)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.replace(target, old)
    os.replace(staged, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
