"""The one reader of user row files: JSONL, JSON and parquet, with clear errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from afm.common.table_io import iter_rows, read_rows


def test_three_formats_give_the_same_rows_with_locations(tmp_path):
    rows = [{"id": 1, "question": "a?"}, {"id": 2, "question": "b?"}]
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    (tmp_path / "q.json").write_text(json.dumps({"data": rows}))
    pd.DataFrame(rows).to_parquet(tmp_path / "q.parquet")
    for name, first in (("q.jsonl", "q.jsonl:1"), ("q.json", "q.json[0]"), ("q.parquet", "q.parquet#0")):
        assert read_rows(tmp_path / name) == rows
        assert next(iter_rows(tmp_path / name))[0] == first


def test_bad_files_are_named_with_the_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        read_rows(tmp_path / "bad.jsonl")
    (tmp_path / "list.jsonl").write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"list.jsonl:2: row is a list, expected an object"):
        read_rows(tmp_path / "list.jsonl")
    (tmp_path / "obj.json").write_text('{"rows": []}')
    with pytest.raises(ValueError, match="expected a JSON list"):
        read_rows(tmp_path / "obj.json")
    (tmp_path / "q.csv").write_text("a\n1\n")
    with pytest.raises(ValueError, match=r"unsupported input type '\.csv'"):
        read_rows(tmp_path / "q.csv")
    with pytest.raises(FileNotFoundError, match="input file not found"):
        read_rows(tmp_path / "missing.jsonl")
