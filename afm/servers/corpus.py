"""JSONL corpora for the retrieval servers: random access by byte offsets, record text, change detection.

A corpus is a JSONL file, one record per line: ``{id, title, url, text}`` for the search server's local backend,
``{id, contents}`` (Search-R1: ``contents = '"Title"\\ntext'``) for the wiki server. Indexes keep only the byte
range of each usable line (16 bytes per record) and read records back with ``os.pread``, so a corpus of many GB is
never held in memory and lookups are thread-safe.

Change detection is cheap on the common path: an index manifest stores the corpus size, mtime and SHA-256; equal
size and mtime mean "unchanged"; otherwise the file is hashed and compared, so a copy or ``touch`` does not force a
rebuild but an edit does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


def record_text(rec: dict[str, Any]) -> str:
    """The text a retriever indexes: ``contents`` (wiki), else ``title`` + ``text`` (search corpus)."""
    contents = rec.get("contents")
    if isinstance(contents, str) and contents.strip():
        return contents
    parts = [rec.get(k) for k in ("title", "text")]
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip())


def wiki_document(rec: dict[str, Any], index: int) -> dict[str, Any]:
    """A record in Search-R1's document shape: ``id`` (string) and ``contents`` (``'"Title"\\ntext'``)."""
    doc = dict(rec)
    doc["id"] = str(rec.get("id", index))
    if not isinstance(doc.get("contents"), str):
        title = rec.get("title") or ""
        doc["contents"] = f'"{title}"\n{rec.get("text") or ""}' if title else str(rec.get("text") or "")
    return doc


@dataclass
class ScanReport:
    """What a corpus scan kept and skipped (skipped lines are counted, with their first line numbers)."""

    n_records: int = 0
    n_skipped: int = 0
    skipped_lines: list[int] = field(default_factory=list)
    reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, lineno: int, reason: str) -> None:
        self.n_skipped += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if len(self.skipped_lines) < 20:
            self.skipped_lines.append(lineno)


class CorpusScan:
    """One pass over a JSONL corpus collecting byte ranges and texts of usable records."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.report = ScanReport()

    def __iter__(self) -> Iterator[tuple[int, int, dict[str, Any], str]]:
        offset = 0
        with self.path.open("rb") as f:
            for lineno, raw in enumerate(f, start=1):
                start, offset = offset, offset + len(raw)
                line = raw.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError):
                    self.report.skip(lineno, "invalid JSON")
                    continue
                if not isinstance(rec, dict):
                    self.report.skip(lineno, "not a JSON object")
                    continue
                text = record_text(rec)
                if not text.strip():
                    self.report.skip(lineno, "no text (needs 'contents', or 'title'/'text')")
                    continue
                self.report.n_records += 1
                yield start, start + len(raw), rec, text


class CorpusReader:
    """Random access to the usable records of a JSONL corpus through their byte ranges."""

    def __init__(self, path: str | os.PathLike, ranges: np.ndarray) -> None:
        self.path = Path(path)
        self.ranges = ranges
        self._fd = os.open(self.path, os.O_RDONLY)

    def __len__(self) -> int:
        return int(self.ranges.shape[0])

    def get(self, i: int) -> dict[str, Any]:
        """Record ``i`` (0-based, in index order) as a dict."""
        start, end = (int(x) for x in self.ranges[i])
        return json.loads(os.pread(self._fd, end - start, start))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def corpus_identity(path: str | os.PathLike, sha256: str | None = None) -> dict[str, Any]:
    """Absolute path, size, mtime and SHA-256 of a corpus file (stored in index manifests)."""
    p = Path(path).resolve()
    st = p.stat()
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256 or sha256_file(p)}


def same_corpus(stored: dict[str, Any], path: str | os.PathLike) -> bool:
    """Whether ``path`` holds the corpus described by ``stored`` (hashes only when size or mtime differ)."""
    p = Path(path).resolve()
    try:
        st = p.stat()
    except OSError:
        return False
    if st.st_size != stored.get("size"):
        return False
    if st.st_mtime_ns == stored.get("mtime_ns"):
        return True
    return sha256_file(p) == stored.get("sha256")
