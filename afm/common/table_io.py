"""Reading the row files users hand to every command (questions, answers, samples): JSONL, JSON and parquet.

One reader, so every command accepts the same files and reports a bad one the same way: a missing file, an
unsupported suffix, or a malformed JSON line (with its line number) raise a clear error. A leaf module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUFFIXES = (".jsonl", ".json", ".parquet")


def iter_rows(path: str | Path) -> Iterator[tuple[str, Any]]:
    """``(location, row)`` for every row: ``name:line`` (JSONL), ``name[i]`` (JSON list or ``{"data": [...]}``),
    ``name#i`` (parquet). Rows are yielded as parsed, objects or not; callers decide what a bad row is."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input file not found: {p}")
    suffix = p.suffix.lower()
    if suffix == ".jsonl":
        with open(p, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    yield f"{p.name}:{n}", json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
    elif suffix == ".json":
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise ValueError(f'{p}: expected a JSON list of objects (or {{"data": [...]}})')
        for n, row in enumerate(data):
            yield f"{p.name}[{n}]", row
    elif suffix == ".parquet":
        import pyarrow.parquet as pq

        for n, row in enumerate(pq.read_table(p).to_pylist()):
            yield f"{p.name}#{n}", row
    else:
        raise ValueError(f"{p}: unsupported input type {suffix!r}; use {', '.join(SUFFIXES)}")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a file, each of which must be an object."""
    rows = []
    for where, row in iter_rows(path):
        if not isinstance(row, dict):
            raise ValueError(f"{where}: row is a {type(row).__name__}, expected an object")
        rows.append(row)
    return rows


def iter_objects(path: str | Path, bad: list[int], required: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """The JSON objects of an append-only results file, in order; a line a crash cut short, a non-object, or an
    object missing one of ``required`` (or holding None there) is skipped and counted in ``bad[0]`` (the file is
    kept as written: a resumed run appends after it)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                bad[0] += 1
                continue
            if not isinstance(rec, dict) or any(rec.get(key) is None for key in required):
                bad[0] += 1
                continue
            yield rec
