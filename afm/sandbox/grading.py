"""Grade programs against tests in the sandbox: stdin/stdout tests, LeetCode-style functional tests, asserts.

Output comparison follows LiveCodeBench: lines are compared after stripping surrounding whitespace and dropping
trailing empty lines; when a line differs, it still matches if it has the same tokens where numeric tokens are
compared as numbers (``1.0`` equals ``1``, ``0.50`` equals ``0.5``). ``float_tol > 0`` additionally accepts
numbers within that absolute-or-relative tolerance (for contest problems with real-valued answers).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.sandbox import Sandbox

TestStatus = Literal["passed", "wrong_answer", "timeout", "runtime_error", "memory", "output_limit",
                     "sandbox_error", "skipped"]
RESULT_MARKER = "__AFM_RESULT__"
# LiveCodeBench prepends these to functional (LeetCode-style) solutions.
FUNCTIONAL_HEADER = (
    "from typing import *\nfrom collections import *\nfrom functools import *\nfrom itertools import *\n"
    "from heapq import *\nfrom bisect import *\nimport math, string, re, random, sys, copy, operator\n"
)


@dataclass
class TestCase:
    """One test: ``input`` is stdin (stdio) or newline-separated JSON arguments (functional)."""

    input: str
    output: str = ""

    @classmethod
    def coerce(cls, item: TestCase | dict[str, Any]) -> TestCase:
        if isinstance(item, TestCase):
            return item
        if not isinstance(item, dict) or "input" not in item:
            raise ValueError(f"a test must be a dict with 'input' (and 'output'), got {item!r:.200}")
        return cls(str(item["input"]), str(item.get("output", "")))


@dataclass
class TestOutcome:
    index: int
    status: TestStatus
    wall_s: float = 0.0
    message: str = ""
    got: str = ""
    expected: str = ""


@dataclass
class GradeResult:
    """``passed`` is True only when every test passed; ``status`` is the first failure's status or ``passed``."""

    passed: bool
    n_passed: int
    n_tests: int
    status: TestStatus
    outcomes: list[TestOutcome] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def pass_rate(self) -> float:
        return self.n_passed / self.n_tests if self.n_tests else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(tok: str) -> Decimal | None:
    try:
        value = Decimal(tok)
    except (InvalidOperation, ValueError):
        return None
    return value if value.is_finite() else None


def _tokens_match(a: str, b: str, float_tol: float) -> bool:
    ta, tb = a.split(), b.split()
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb, strict=True):
        if x == y:
            continue
        nx, ny = _number(x), _number(y)
        if nx is None or ny is None:
            return False
        if nx == ny:
            continue
        if float_tol > 0 and math.isclose(float(nx), float(ny), rel_tol=float_tol, abs_tol=float_tol):
            continue
        return False
    return True


def outputs_match(got: str, expected: str, float_tol: float = 0.0) -> bool:
    """Compare program output with the expected output (see the module docstring)."""
    g = [line.strip() for line in got.strip().splitlines()]
    e = [line.strip() for line in expected.strip().splitlines()]
    if len(g) != len(e):
        return False
    return all(x == y or _tokens_match(x, y, float_tol) for x, y in zip(g, e, strict=True))


def _values_match(got: Any, expected: Any, float_tol: float) -> bool:
    if isinstance(got, bool) or isinstance(expected, bool):
        return got == expected
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)):
        return got == expected or (float_tol > 0 and math.isclose(got, expected, rel_tol=float_tol,
                                                                   abs_tol=float_tol))
    if isinstance(got, list) and isinstance(expected, list):
        return len(got) == len(expected) and all(_values_match(a, b, float_tol)
                                                 for a, b in zip(got, expected, strict=True))
    if isinstance(got, dict) and isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_values_match(got[k], expected[k], float_tol) for k in got)
    return got == expected


def _failure_status(res: ExecResult) -> TestStatus:
    return {"timeout": "timeout", "memory": "memory", "output_limit": "output_limit",
            "sandbox_error": "sandbox_error"}.get(res.status, "runtime_error")  # type: ignore[return-value]


def _head(text: str, n: int = 500) -> str:
    return text if len(text) <= n else text[:n] + "…"


def functional_driver(fn_name: str) -> str:
    """Code appended to a solution: read JSON arguments from stdin, call ``Solution().fn`` (or ``fn``), print."""
    return (
        "\n\n# --- afm functional test driver ---\n"
        "import json as _afm_json, sys as _afm_sys\n"
        "_afm_args = [_afm_json.loads(_l) for _l in _afm_sys.stdin.read().split('\\n') if _l.strip()]\n"
        f"_afm_target = getattr(Solution(), {fn_name!r}) if 'Solution' in globals() else {fn_name}\n"
        "_afm_out = _afm_target(*_afm_args)\n"
        "def _afm_plain(v):\n"
        "    if isinstance(v, (tuple, set, frozenset)): return [_afm_plain(x) for x in v]\n"
        "    if isinstance(v, list): return [_afm_plain(x) for x in v]\n"
        "    if isinstance(v, dict): return {str(k): _afm_plain(x) for k, x in v.items()}\n"
        "    return v\n"
        f"print({RESULT_MARKER!r} + _afm_json.dumps(_afm_plain(_afm_out)))\n"
    )


async def agrade(sandbox: Sandbox, program: str, tests: Sequence[TestCase | dict[str, Any]], *,
                 fn_name: str | None = None, limits: Limits | None = None, total_timeout_s: float | None = None,
                 stop_on_first_failure: bool = True, float_tol: float = 0.0) -> GradeResult:
    """Run ``program`` on every test (stdio when ``fn_name`` is None, functional otherwise)."""
    cases = [TestCase.coerce(t) for t in tests]
    if not cases:
        raise ValueError("no tests to grade against")
    code = program if fn_name is None else FUNCTIONAL_HEADER + program + functional_driver(fn_name)
    t0 = time.monotonic()
    outcomes: list[TestOutcome] = []
    failed = False
    for i, case in enumerate(cases):
        if failed and stop_on_first_failure:
            outcomes.append(TestOutcome(i, "skipped"))
            continue
        if total_timeout_s is not None and time.monotonic() - t0 >= total_timeout_s:
            outcomes.append(TestOutcome(i, "timeout", message="total time budget exhausted"))
            failed = True
            continue
        res = await sandbox.arun(code, case.input, limits)
        outcome = _judge(i, res, case, fn_name, float_tol)
        outcomes.append(outcome)
        failed = failed or outcome.status != "passed"
    n_passed = sum(o.status == "passed" for o in outcomes)
    first_bad = next((o.status for o in outcomes if o.status not in ("passed", "skipped")), "passed")
    return GradeResult(n_passed == len(cases), n_passed, len(cases), first_bad, outcomes,
                       time.monotonic() - t0)


def _judge(i: int, res: ExecResult, case: TestCase, fn_name: str | None, float_tol: float) -> TestOutcome:
    if res.status != "ok":
        return TestOutcome(i, _failure_status(res), res.wall_s, _head(res.stderr.strip()[-500:]),
                           _head(res.stdout), _head(case.output))
    if fn_name is None:
        ok = outputs_match(res.stdout, case.output, float_tol)
        return TestOutcome(i, "passed" if ok else "wrong_answer", res.wall_s, "", _head(res.stdout),
                           _head(case.output))
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(RESULT_MARKER)]
    if not lines:
        return TestOutcome(i, "runtime_error", res.wall_s, "the function returned no result", _head(res.stdout),
                           _head(case.output))
    got_text = lines[-1][len(RESULT_MARKER):]
    try:
        got, expected = json.loads(got_text), json.loads(case.output)
    except ValueError:
        ok = got_text.strip() == case.output.strip()
    else:
        ok = _values_match(got, expected, float_tol)
    return TestOutcome(i, "passed" if ok else "wrong_answer", res.wall_s, "", _head(got_text), _head(case.output))


async def agrade_asserts(sandbox: Sandbox, program: str, asserts: str | Sequence[str], *,
                         limits: Limits | None = None) -> GradeResult:
    """Run ``program`` followed by assert-based checks; passes when the process exits 0."""
    checks = asserts if isinstance(asserts, str) else "\n".join(asserts)
    res = await sandbox.arun(program + "\n\n" + checks + "\n", "", limits)
    status: TestStatus = "passed" if res.status == "ok" else _failure_status(res)
    if res.status == "error" and "AssertionError" in res.stderr:
        status = "wrong_answer"
    outcome = TestOutcome(0, status, res.wall_s, _head(res.stderr.strip()[-500:]), _head(res.stdout))
    return GradeResult(status == "passed", int(status == "passed"), 1, status, [outcome], res.wall_s)
