"""Reader of the checked tables in docs/original_mapping.md (the original project's scripts and names -> afm)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "original_mapping.md"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def read_table(name: str) -> list[dict[str, str]]:
    """Rows of the table between ``<!-- table:NAME -->`` and ``<!-- /table -->``, keyed by the header cells."""
    text = DOC.read_text()
    marker = f"<!-- table:{name} -->"
    assert marker in text, f"{marker} missing from {DOC}"
    block = text.split(marker, 1)[1].split("<!-- /table -->", 1)[0]
    lines = [line for line in block.strip().splitlines() if line.startswith("|")]
    header = _cells(lines[0])
    rows = [dict(zip(header, _cells(line), strict=True)) for line in lines[2:]]
    assert rows, f"table {name} is empty"
    return rows


def value(cell: str) -> str | None:
    """The afm value of a cell (its first word, backticks removed); None for '—'."""
    word = cell.split(" (", 1)[0].strip().strip("`")
    return None if word in ("—", "") else word


def reason_given(cell: str) -> bool:
    """A cell naming a different original value must say why."""
    if "(original:" not in cell:
        return True
    return bool(re.search(r"why: \S", cell))


def backticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def same(actual: object, expected: str) -> bool:
    """Compare a composed/printed value with the table's text: numbers as numbers, booleans case-blind, lists
    element-wise, relative paths as suffixes of the absolute ones the scripts pass."""
    if isinstance(actual, bool) or expected.lower() in ("true", "false"):
        return str(actual).lower() == expected.lower()
    if expected.startswith("[") and expected.endswith("]"):
        return [str(x) for x in actual] == [x.strip() for x in expected[1:-1].split(",")]  # type: ignore[union-attr]
    try:
        return float(actual) == float(expected)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        pass
    text = str(actual)
    return text == expected or (not expected.startswith("/") and text.endswith("/" + expected))
