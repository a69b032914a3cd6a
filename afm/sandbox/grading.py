"""Grade programs against tests in the sandbox: stdin/stdout tests, LeetCode-style functional tests, asserts.

Output comparison follows LiveCodeBench: lines are compared after stripping surrounding whitespace and dropping
trailing empty lines; when a line differs, it still matches if it has the same tokens where numeric tokens are
compared as numbers (``1.0`` equals ``1``, ``0.50`` equals ``0.5``). ``float_tol > 0`` additionally accepts
numbers within that absolute-or-relative tolerance (for contest problems with real-valued answers).

Stdin/stdout tests run the program once per test and compare its output here. Functional tests and assert checks
run through :mod:`afm.sandbox.grade_harness` in one execution: a checker process calls the program's functions in a
separate process it cannot reach and gets plain data back; functional results are compared here (the expected
outputs never enter the jail), assert checks are decided by the checker. Statuses beyond LiveCodeBench's:
``exited`` (the program ended its process or raised ``SystemExit``/``KeyboardInterrupt`` instead of answering),
``non_plain`` (it answered with a value that is not plain data), ``unsupported_test`` (the checks pass it a value
that cannot be sent, such as a function). Functional tests share one process, as in LiveCodeBench's own harness
(module-level state persists across tests; each test gets a fresh ``Solution()``), each within the per-test limit.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

from afm.sandbox.backends import HARNESS_IN_JAIL
from afm.sandbox.grade_harness import PROTOCOL, VERDICT_KEY
from afm.sandbox.limits import ExecResult, Limits
from afm.sandbox.sandbox import Sandbox

TestStatus = Literal["passed", "wrong_answer", "timeout", "runtime_error", "memory", "output_limit",
                     "sandbox_error", "skipped", "exited", "non_plain", "unsupported_test"]
HARNESS_SLACK_S = 2.0  # the jail's wall limit beyond the checker's own deadline, so the checker reports a timeout
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


async def agrade(sandbox: Sandbox, program: str, tests: Sequence[TestCase | dict[str, Any]], *,
                 fn_name: str | None = None, limits: Limits | None = None, total_timeout_s: float | None = None,
                 stop_on_first_failure: bool = True, float_tol: float = 0.0) -> GradeResult:
    """Run ``program`` on every test: stdio when ``fn_name`` is None (one execution per test, output compared
    here), else functional through the grading harness (one execution; the candidate's return values come back
    as plain data and are compared here, so the expected outputs never enter the jail)."""
    cases = [TestCase.coerce(t) for t in tests]
    if not cases:
        raise ValueError("no tests to grade against")
    if fn_name is not None:
        return await _agrade_calls(sandbox, program, cases, fn_name, limits, total_timeout_s, float_tol)
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
        res = await sandbox.arun(program, case.input, limits)
        outcome = _judge_stdio(i, res, case, float_tol)
        outcomes.append(outcome)
        failed = failed or outcome.status != "passed"
    return _result(outcomes, len(cases), time.monotonic() - t0)


def _result(outcomes: list[TestOutcome], n: int, wall_s: float) -> GradeResult:
    n_passed = sum(o.status == "passed" for o in outcomes)
    first_bad = next((o.status for o in outcomes if o.status not in ("passed", "skipped")), "passed")
    return GradeResult(n_passed == n and first_bad == "passed", n_passed, n, first_bad, outcomes, wall_s)


def _judge_stdio(i: int, res: ExecResult, case: TestCase, float_tol: float) -> TestOutcome:
    if res.status != "ok":
        return TestOutcome(i, _failure_status(res), res.wall_s, _head(res.stderr.strip()[-500:]),
                           _head(res.stdout), _head(case.output))
    ok = outputs_match(res.stdout, case.output, float_tol)
    return TestOutcome(i, "passed" if ok else "wrong_answer", res.wall_s, "", _head(res.stdout), _head(case.output))


async def _run_harness(sandbox: Sandbox, candidate: str, payload: dict[str, Any],
                       wall_s: float, limits: Limits | None) -> tuple[dict[str, Any] | None, ExecResult]:
    """One harness execution: the checker's verdict (None when it printed none) and the execution's result."""
    base = limits or sandbox.config.limits
    run_limits = base.with_(wall_s=wall_s + HARNESS_SLACK_S, cpu_s=wall_s + HARNESS_SLACK_S)
    code = _HARNESS_CALL.format(path=HARNESS_IN_JAIL, candidate=repr(candidate), wall=repr(float(wall_s)))
    res = await sandbox.arun(code, json.dumps(payload, ensure_ascii=False), run_limits)
    return _verdict(res), res


def _verdict(res: ExecResult) -> dict[str, Any] | None:
    """The checker's verdict line: the last line of stdout, which only the checker can write."""
    if res.status != "ok":
        return None
    lines = res.stdout.rstrip("\n").rsplit("\n", 1)
    try:
        verdict = json.loads(lines[-1])
    except ValueError:
        return None
    if not isinstance(verdict, dict) or verdict.get(VERDICT_KEY) != PROTOCOL:
        return None
    return verdict


def _no_verdict(res: ExecResult) -> tuple[TestStatus, str]:
    """Status and message of a harness execution that printed no verdict (the checker was killed or overran)."""
    if res.status == "ok":
        return "runtime_error", "the grading harness printed no verdict" + (f": {_head(res.stderr[-500:])}"
                                                                          if res.stderr.strip() else "")
    message = _head(res.stderr.strip()[-500:])
    if res.status == "error":
        how = f"signal {res.signal}" if res.signal else f"exit status {res.exit_code}"
        message = f"the grading harness ended without a verdict ({how}); " + message
    return _failure_status(res), message


_VERDICT_STATUSES = {"passed", "wrong_answer", "timeout", "runtime_error", "memory", "exited", "non_plain",
                     "unsupported_test"}


def _status(verdict: dict[str, Any]) -> TestStatus:
    status = verdict.get("status")
    return status if status in _VERDICT_STATUSES else "runtime_error"  # type: ignore[return-value]


async def _agrade_calls(sandbox: Sandbox, program: str, cases: list[TestCase], fn_name: str,
                        limits: Limits | None, total_timeout_s: float | None, float_tol: float) -> GradeResult:
    per_test = (limits or sandbox.config.limits).wall_s
    total = total_timeout_s if total_timeout_s is not None else (per_test + 1) * len(cases) + 5
    payload = {"mode": "calls", "fn_name": fn_name, "per_test_s": per_test, "tests": [c.input for c in cases]}
    verdict, res = await _run_harness(sandbox, FUNCTIONAL_HEADER + program, payload, total, limits)
    if verdict is None:
        status, message = _no_verdict(res)
        outcomes = [TestOutcome(0, status, res.wall_s, message, _head(res.stdout))]
        outcomes += [TestOutcome(i, "skipped") for i in range(1, len(cases))]
        return _result(outcomes, len(cases), res.wall_s)
    results = verdict.get("results") if isinstance(verdict.get("results"), list) else []
    outcomes = []
    for i, case in enumerate(cases):
        if i < len(results):
            got = results[i] if isinstance(results[i], dict) else {}
            if got.get("status") == "ok":
                outcomes.append(_compare(i, got.get("value"), case, float_tol, res.wall_s))
            else:
                outcomes.append(TestOutcome(i, "runtime_error", res.wall_s, _head(str(got.get("message", ""))),
                                            "", _head(case.output)))
        elif i == len(results):  # the test during which the harness stopped: its verdict says why
            status = _status(verdict)
            outcomes.append(TestOutcome(i, "runtime_error" if status == "passed" else status, res.wall_s,
                                        _head(str(verdict.get("message", "")))))
        else:
            outcomes.append(TestOutcome(i, "skipped"))
    return _result(outcomes, len(cases), res.wall_s)


def _compare(i: int, got: Any, case: TestCase, float_tol: float, wall_s: float) -> TestOutcome:
    got_text = json.dumps(got, ensure_ascii=False)
    try:
        expected = json.loads(case.output)
    except ValueError:
        ok = isinstance(got, str) and got.strip() == case.output.strip()
    else:
        ok = _values_match(got, expected, float_tol)
    return TestOutcome(i, "passed" if ok else "wrong_answer", wall_s, "", _head(got_text), _head(case.output))


async def agrade_asserts(sandbox: Sandbox, program: str, asserts: str | Sequence[str], *,
                         limits: Limits | None = None, prelude: str = "", entry_point: str | None = None) -> GradeResult:
    """Run assert-based checks against ``program`` through the grading harness: the checks run in a process of
    their own that the program cannot reach, calling the program's functions and classes by proxy
    (:mod:`afm.sandbox.grade_harness`). ``prelude`` is trusted code the checks may use (an import header,
    HumanEval's ``import_prefix``); ``entry_point`` appends ``check(<entry_point>)`` (HumanEval)."""
    checks = asserts if isinstance(asserts, str) else "\n".join(asserts)
    wall = (limits or sandbox.config.limits).wall_s
    payload = {"mode": "asserts", "checks": checks, "prelude": prelude, "entry_point": entry_point}
    verdict, res = await _run_harness(sandbox, program, payload, wall, limits)
    if verdict is None:
        status, message = _no_verdict(res)
    else:
        status, message = _status(verdict), _head(str(verdict.get("message", ""))[-1500:], 1500)
    outcome = TestOutcome(0, status, res.wall_s, message, "")
    return GradeResult(status == "passed", int(status == "passed"), 1, status, [outcome], res.wall_s)


# The job's program: the harness the pool server imported once (a one-shot jail loads it from its mount).
_HARNESS_CALL = """import sys
harness = sys.modules.get("afm_grade_harness")
if harness is None:
    import importlib.util
    spec = importlib.util.spec_from_file_location("afm_grade_harness", {path!r})
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
harness.main({candidate}, {wall})
"""
