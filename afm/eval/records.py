"""Benchmark files as lists of records: JSON (a list or ``{"data": [...]}``), JSON lines, parquet, CSV.

Every problem with a file raises a ValueError that starts with the file name and says where it is (``line L``
for JSON syntax, ``row N`` for a record, counted from 1), so a bad download or a hand-edited file is easy to
fix. Writes go to a temporary file in the same folder that is renamed into place, so a killed writer never
leaves a half-written benchmark behind.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FORMATS = (".json", ".jsonl", ".parquet", ".csv")


def _read_jsonl(path: Path, text: str) -> list[Any]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {lineno}: invalid JSON ({exc.msg} at column {exc.colno})") \
                from None
    return rows


def _read_json(path: Path, text: str) -> list[Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and text.lstrip().startswith("{"):
            return _read_jsonl(path, text)  # JSON lines in a .json file (what datasets' to_json writes)
        raise ValueError(f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if isinstance(data, dict):
        if isinstance(data.get("data"), list):
            return data["data"]
        raise ValueError(f"{path}: expected a list of records or {{\"data\": [...]}}, got an object with "
                         f"keys {sorted(data)[:10]}")
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of records, got a JSON {type(data).__name__}")
    return data


def _read_parquet(path: Path) -> list[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(f"{path}: reading parquet needs pyarrow (pip install 'afm[eval]')") from exc
    try:
        return pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises ArrowInvalid/OSError subclasses for damaged files
        raise ValueError(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})") from None


def _read_csv(path: Path, text: str) -> list[Any]:
    return [dict(row) for row in csv.DictReader(text.splitlines())]


def read_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """All records of a benchmark file (format from the suffix, see the module docstring).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: unknown suffix, unreadable content, no records, or a record that is not an object.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{p}: unsupported file type {suffix!r}; expected one of {', '.join(FORMATS)}")
    if suffix == ".parquet":
        rows = _read_parquet(p)
    else:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{p}: not UTF-8 text (byte {exc.start})") from None
        if not text.strip():
            raise ValueError(f"{p}: empty file")
        rows = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}[suffix](p, text)
    if not rows:
        raise ValueError(f"{p}: no records")
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise ValueError(f"{p}: row {i}: expected an object with named fields, "
                             f"got a {type(row).__name__}")
    return rows


def write_records(rows: Iterable[Mapping[str, Any]], path: str | os.PathLike) -> Path:
    """Write ``rows`` to ``path`` in the format of its suffix (atomically); returns the path.

    ``.json`` is an indented list (like the original's shipped benchmarks), ``.jsonl`` one object per line,
    ``.parquet`` a pyarrow table, ``.csv`` a header plus one line per row.
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{p}: unsupported file type {suffix!r}; expected one of {', '.join(FORMATS)}")
    data = [dict(r) for r in rows]
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    os.close(fd)
    try:
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(data), tmp)
        else:
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                if suffix == ".json":
                    json.dump(data, fh, ensure_ascii=False, indent=1)
                elif suffix == ".jsonl":
                    for row in data:
                        fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                else:
                    fields = list(dict.fromkeys(k for row in data for k in row))
                    writer = csv.DictWriter(fh, fieldnames=fields)
                    writer.writeheader()
                    writer.writerows(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
