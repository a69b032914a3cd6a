"""LiveCodeBench test cases (public + private) as one JSON file per problem, as afm's code reward reads them.

    python -m afm.eval.lcb_testcases test5.jsonl data/livecodebench_testcases [--allow-pickle]

Input: LiveCodeBench's Hugging Face rows (``livecodebench/code_generation_lite``, JSON lines or parquet) with
``question_id``, ``public_test_cases`` (a JSON string: ``[{"input", "output", "testtype"}]``),
``private_test_cases`` and ``metadata`` (a JSON string; ``func_name`` for LeetCode problems). Output:
``OUT_DIR/<question_id>.json`` = ``{"question_id", "tests": [{"input", "output", "testtype"}], "fn_name"}``,
public tests first, which :mod:`afm.rewards.code` uses instead of the inline public tests when
``code_tests_dir``/``$LIVECODEBENCH_TESTCASES_DIR`` points at ``OUT_DIR``. (The original meant to write
pickled problem objects here, but its script never imported the functions it called.)

Rows in verl's RL layout (the original's ``livecodebench_v{4,5}.parquet``) are accepted too: the id is
``question_id``, else ``extra_info.index``, else the ground truth's ``question_id``; their tests are the ground
truth's public ones (``stdin``/``expected_output``, or the ``functional`` asserts of LeetCode problems, read back
into argument/result pairs). Such rows carry **no private tests**: the summary says so, and the files record
``"private_tests": 0`` so that the code reward reports them as public-only.

**Why pickle, and why it is refused by default.** In the HF release the private tests of most problems are not
JSON but ``base64(zlib(pickle.dumps(json_string)))``, so reading them means unpickling, and unpickling runs
whatever code the payload names. Such payloads are therefore refused (the row is skipped and reported) unless
the user passes ``--allow-pickle`` (``allow_pickle=True``) for a file they chose. Even then the payload goes
through an unpickler that refuses every global: a plain string, list or dict (all LiveCodeBench needs) loads,
while a payload that names any class or function, the only way pickle can run code, is rejected. Decompressed
payloads are capped at :data:`MAX_PAYLOAD_BYTES` (a zlib bomb cannot exhaust memory).
"""

from __future__ import annotations

import argparse
import ast
import base64
import binascii
import io
import json
import os
import pickle
import sys
import tempfile
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from afm.eval.records import read_records

MAX_PAYLOAD_BYTES = 1 << 30
TEST_TYPES = ("stdin", "functional")


class PickleRefused(ValueError):
    """A test-case payload is a pickle and ``allow_pickle`` was not given."""


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused: the payload names {module}.{name} (only plain data loads)")


def _inflate(text: str) -> bytes:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("neither a JSON list nor base64 data") from None
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(raw, MAX_PAYLOAD_BYTES + 1)
    except zlib.error as exc:
        raise ValueError(f"base64 data that is not zlib-compressed ({exc})") from None
    if len(data) > MAX_PAYLOAD_BYTES or inflater.unconsumed_tail:
        raise ValueError(f"compressed test cases inflate to more than {MAX_PAYLOAD_BYTES} bytes")
    return data


def decode_test_cases(value: Any, *, allow_pickle: bool = False) -> list[dict[str, str]]:
    """Tests from a list, a JSON string or LiveCodeBench's base64(zlib(pickle(JSON))) string.

    Returns ``[{"input": str, "output": str, "testtype": "stdin"|"functional"}]`` (``testtype`` defaults to
    stdin). Raises :class:`PickleRefused` for a pickle payload without ``allow_pickle``, ValueError for
    anything malformed. See the module docstring for the safety rules.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return []
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise ValueError(f"test cases are not valid JSON ({exc})") from None
        else:
            data = _inflate(text)
            if data.lstrip().startswith(b"["):
                value = json.loads(data)
            elif not allow_pickle:
                raise PickleRefused("test cases are a pickle payload (LiveCodeBench's base64 -> zlib -> "
                                    "pickle format); pass --allow-pickle (allow_pickle=True) to decode it")
            else:
                try:
                    value = _NoGlobalsUnpickler(io.BytesIO(data)).load()
                except Exception as exc:  # any failure of a refused or damaged pickle
                    raise ValueError(f"cannot unpickle the test cases: {exc}") from None
                if isinstance(value, bytes):
                    value = value.decode("utf-8")
                if isinstance(value, str):
                    value = json.loads(value)
    if not isinstance(value, list):
        raise ValueError(f"test cases must be a list, got a {type(value).__name__}")
    tests = []
    for i, test in enumerate(value):
        if not isinstance(test, Mapping) or "input" not in test or "output" not in test:
            raise ValueError(f"test {i} must be an object with 'input' and 'output', got {test!r:.100}")
        testtype = str(test.get("testtype") or "stdin")
        if testtype not in TEST_TYPES:
            raise ValueError(f"test {i} has testtype {testtype!r}; expected one of {TEST_TYPES}")
        tests.append({"input": str(test["input"]), "output": str(test["output"]), "testtype": testtype})
    return tests


def func_name(metadata: Any) -> str | None:
    """``func_name`` of a LiveCodeBench ``metadata`` field (a JSON string or a dict); None when absent."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except ValueError:
            return None
    name = metadata.get("func_name") if isinstance(metadata, Mapping) else None
    return str(name) if name else None


def write_test_file(out_dir: str | Path, question_id: str, tests: list[dict[str, str]],
                    fn_name: str | None, private_tests: int | None = None) -> Path:
    """Write ``OUT_DIR/<question_id>.json`` atomically; returns its path.

    ``private_tests``: how many of ``tests`` are private (recorded so that graders can tell public-only files).
    """
    if not question_id or "/" in question_id or question_id.startswith("."):
        raise ValueError(f"question_id {question_id!r} cannot be a file name")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{question_id}.json"
    fd, tmp = tempfile.mkstemp(prefix=f".{question_id}.", suffix=".tmp", dir=out)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        record: dict[str, Any] = {"question_id": question_id, "tests": tests, "fn_name": fn_name}
        if private_tests is not None:
            record["private_tests"] = private_tests
        json.dump(record, fh, ensure_ascii=False)
    os.replace(tmp, path)
    return path


def _mapping(value: Any) -> dict[str, Any]:
    """A dict field that may arrive as a dict or a JSON string (verl rows store both)."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip().startswith("{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return {}
        return decoded if isinstance(decoded, dict) else {}
    return {}


def _ground_truth(row: Mapping[str, Any]) -> dict[str, Any]:
    reward = _mapping(row.get("reward_model"))
    return _mapping(reward.get("ground_truth", row.get("ground_truth")))


def row_question_id(row: Mapping[str, Any]) -> str:
    """The problem id of a LiveCodeBench row: ``question_id``, ``extra_info.index`` or the ground truth's."""
    for value in (row.get("question_id"), _mapping(row.get("extra_info")).get("index"),
                  _ground_truth(row).get("question_id")):
        if value is not None and str(value).strip():
            return str(value).strip()
    return ""


def _literal_json(node: ast.expr) -> str:
    return json.dumps(ast.literal_eval(node))


def functional_asserts_to_tests(code: str) -> list[dict[str, str]]:
    """``result = Solution().f(args)`` / ``assert result == expected`` pairs as functional tests.

    This is how the RL rows store LeetCode problems' public tests; ValueError when the code has another shape.
    """
    try:
        body = ast.parse(code).body
    except SyntaxError as exc:
        raise ValueError(f"functional tests are not Python ({exc.msg})") from None
    tests, args = [], None
    for stmt in body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)
                and not stmt.value.keywords):
            args = [_literal_json(a) for a in stmt.value.args]
        elif (isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Compare) and args is not None
              and len(stmt.test.ops) == 1 and isinstance(stmt.test.ops[0], ast.Eq)):
            tests.append({"input": "\n".join(args), "output": _literal_json(stmt.test.comparators[0]),
                          "testtype": "functional"})
            args = None
        else:
            raise ValueError(f"functional tests: unexpected statement {ast.unparse(stmt)[:80]!r}")
    if not tests:
        raise ValueError("functional tests: no 'assert result == expected' found")
    return tests


def _row_tests(row: Mapping[str, Any], allow_pickle: bool) -> tuple[list[dict[str, str]], list[dict[str, str]], str | None]:
    """(public, private, fn_name) of a Hugging Face row or of a verl RL row (public tests only)."""
    if "public_test_cases" in row or "private_test_cases" in row:
        return (decode_test_cases(row.get("public_test_cases")),
                decode_test_cases(row.get("private_test_cases"), allow_pickle=allow_pickle),
                func_name(row.get("metadata")))
    gt = _ground_truth(row)
    fn = func_name(_mapping(row.get("extra_info")).get("metadata") or row.get("metadata"))
    if "stdin" in gt:
        ins, outs = gt.get("stdin") or [], gt.get("expected_output") or []
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise ValueError("ground truth stdin and expected_output must be lists of equal length")
        return [{"input": str(i), "output": str(o), "testtype": "stdin"} for i, o in zip(ins, outs, strict=True)], [], fn
    if "functional" in gt:
        return functional_asserts_to_tests(str(gt["functional"])), [], fn
    return [], [], fn


@dataclass
class ProcessReport:
    """What :func:`process_rows` did: files written, tests counted, rows skipped with their reasons."""

    out_dir: str
    written: int = 0
    public_tests: int = 0
    private_tests: int = 0
    without_private: list[str] = field(default_factory=list)  # question ids graded on public tests only
    skipped: list[tuple[int, str, str]] = field(default_factory=list)  # (row number, question_id, reason)

    def summary(self) -> str:
        """A few lines for people: counts, then the skipped rows grouped by reason."""
        lines = [f"wrote {self.written} test-case files to {self.out_dir} ({self.public_tests} public, "
                 f"{self.private_tests} private tests); {len(self.skipped)} rows skipped"]
        if self.without_private:
            lines.append(f"{len(self.without_private)} problems have no private tests, so they will be graded on "
                         f"their public tests only: {', '.join(self.without_private[:10])}"
                         + (" ..." if len(self.without_private) > 10 else "")
                         + " (private tests come from LiveCodeBench's own rows, livecodebench/code_generation_lite)")
        for reason, n in Counter(r.split(":")[0] for _, _, r in self.skipped).most_common():
            rows = [f"{row} ({qid})" for row, qid, r in self.skipped if r.split(":")[0] == reason][:5]
            lines.append(f"  skipped {n}: {reason} (rows {', '.join(rows)})")
        return "\n".join(lines)


def process_rows(rows: Iterable[Mapping[str, Any]], out_dir: str | Path, *,
                 allow_pickle: bool = False) -> ProcessReport:
    """Write one test-case file per LiveCodeBench row (see the module docstring); a bad row is skipped."""
    report = ProcessReport(str(out_dir))
    seen: set[str] = set()
    for n, row in enumerate(rows, 1):
        qid = row_question_id(row)
        if not qid:
            report.skipped.append((n, "", "no question_id (nor extra_info.index, nor one in the ground truth)"))
            continue
        if qid in seen:
            report.skipped.append((n, qid, "duplicate question_id"))
            continue
        try:
            public, private, fn = _row_tests(row, allow_pickle)
        except PickleRefused:
            report.skipped.append((n, qid, "pickle payload refused (pass --allow-pickle)"))
            continue
        except ValueError as exc:
            report.skipped.append((n, qid, f"bad test cases: {exc}"))
            continue
        tests = public + private
        if not tests:
            report.skipped.append((n, qid, "no tests"))
            continue
        if any(t["testtype"] == "functional" for t in tests) and not fn:
            report.skipped.append((n, qid, "functional tests without metadata.func_name"))
            continue
        try:
            write_test_file(out_dir, qid, tests, fn, private_tests=len(private))
        except ValueError as exc:
            report.skipped.append((n, qid, f"bad question_id: {exc}"))
            continue
        seen.add(qid)
        report.written += 1
        report.public_tests += len(public)
        report.private_tests += len(private)
        if not private:
            report.without_private.append(qid)
    return report


def process_file(path: str | Path, out_dir: str | Path, *, allow_pickle: bool = False) -> ProcessReport:
    """:func:`process_rows` over a JSON lines, JSON or parquet file of LiveCodeBench rows."""
    return process_rows(read_records(path), out_dir, allow_pickle=allow_pickle)


def main(argv: list[str] | None = None) -> int:
    """CLI: process INPUT into OUT_DIR and print the report; exit 1 when no file was written."""
    p = argparse.ArgumentParser(prog="python -m afm.eval.lcb_testcases", description=__doc__.splitlines()[0])
    p.add_argument("input", help="LiveCodeBench rows (.jsonl, .json or .parquet)")
    p.add_argument("out_dir", help="folder for <question_id>.json files (e.g. data/livecodebench_testcases)")
    p.add_argument("--allow-pickle", action="store_true",
                   help="decode pickled private tests (only for a file you trust; see the module docstring)")
    args = p.parse_args(argv)
    try:
        report = process_file(args.input, args.out_dir, allow_pickle=args.allow_pickle)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(report.summary())
    return 0 if report.written else 1


if __name__ == "__main__":
    sys.exit(main())
