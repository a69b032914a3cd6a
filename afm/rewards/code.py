"""Code rewards: the last code block of the answer, run against the problem's tests in the sandbox.

Ground truths (``gt.data``), all accepted as dicts or JSON strings:

* LiveCodeBench stdin problems ``{"stdin": [...], "expected_output": [...], "question_id": ...}``;
* LiveCodeBench LeetCode problems ``{"functional": "<assert code calling Solution()>", "question_id": ...}``;
* APPS/CodeContests style ``{"inputs": [...], "outputs": [...], "fn_name"?: ...}`` (stdin tests, or functional
  calls of ``fn_name`` with newline-separated JSON arguments);
* HumanEval style ``{"test": "<def check(candidate): ...>", "entry_point": "f", "import_prefix"?: ...}``.

When a processed test-case folder is configured (option ``code_tests_dir``, ``$LIVECODEBENCH_TESTCASES_DIR`` or the
original's name for it, ``$LIVECODEBENCH_DATA_PATH``; written by the evaluation's LiveCodeBench processing) and
holds ``<question_id>.json`` with ``{"tests": [{input, output, testtype}], "fn_name"?}`` (public and private
tests), those tests replace the inline public ones. A
configured folder without the file is reported in ``error`` and the inline tests are used.

``details.tests_from`` says what a result was graded on: ``file`` (a test-case file with private tests),
``file_public_only`` (a file that records ``"private_tests": 0``, as rows without private tests produce) or
``inline`` (the public tests in the row). A LiveCodeBench score on public tests alone is too kind (a program that
prints the sample outputs passes), so the first such result in a process logs a warning.

A ``sandbox_error`` (the sandbox itself failed, not the program) is an infrastructure failure, not a wrong
answer: the result has ``infra_error`` set (see :mod:`afm.rewards.score` for what callers do with it).

**What a program can and cannot do to its grade.** Stdin tests run the program alone and compare its stdout here.
Functional tests (``fn_name``) and assert-based checks (``functional``, HumanEval ``test``) go through
:mod:`afm.sandbox.grade_harness`: the checks run in a checker process that the program cannot reach, call the
program's functions by proxy, and get its return values back as plain data; the verdict is the checker's, never
the program's exit status. A program that exits (``os._exit``, ``sys.exit``, ``SystemExit``), dies, returns an object
that is not plain data (an ``__eq__`` that is always true, a ``list`` subclass), or raises ``KeyboardInterrupt``
scores 0 with ``details.status`` ``exited`` / ``non_plain`` / ``runtime_error``; replacing builtins or module functions
changes only its own process; it never sees the checks or the expected outputs. A HumanEval ``import_prefix`` runs
in the checker as trusted code (its helpers, such as ``poly``, are the checks' own). Killing every process it can
reach is a wrong answer, never a sandbox failure: the jail's server is PID 1 of the jail, which ignores its signals.

A program (or an unfenced answer) over :data:`MAX_CODE_CHARS` characters is refused unread (``method``
``answer_too_large``); one that Python cannot parse (deep nesting included) is no code.

Score 1 when every test passes (LiveCodeBench's pass@1 rule), else 0. Options: ``code_timeout`` (s per test,
default 6), ``code_memory_mb`` (default 4096), ``code_float_tol`` (default 0: numbers must be equal, as in LCB),
``code_sandbox`` (a :class:`afm.sandbox.SandboxConfig` mapping for the shared sandbox).
"""

from __future__ import annotations

import ast
import json
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from afm.rewards.errors import RewardConfigError
from afm.rewards.ground_truth import GroundTruth
from afm.sandbox import Limits, Sandbox, SandboxConfig
from afm.sandbox.grading import FUNCTIONAL_HEADER, GradeResult, agrade, agrade_asserts
from afm.trajectory import last_answer

# possessive runs: "```" then a long run of spaces without a newline backtracked quadratically (35 s at 200k)
FENCE = re.compile(r"```[ \t]*+([A-Za-z0-9_+-]*+)[ \t]*+\n(.*?)```", re.DOTALL)
TESTS_DIR_ENV = "LIVECODEBENCH_TESTCASES_DIR"
TESTS_DIR_ALIAS_ENV = "LIVECODEBENCH_DATA_PATH"  # the original project's name for the same folder
PRED_CHARS = 4000
# A program longer than this is refused unread (method ``answer_too_large``): parsing it alone can take seconds
# (ast.parse: ~1.3 s a MB here), and no contest solution is near it.
MAX_CODE_CHARS = 100_000
_UNPARSABLE = (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError)

logger = logging.getLogger(__name__)
_public_only_warned = False
_sandboxes: dict[str, Sandbox] = {}  # keyed by the effective config: code_sandbox options apply on every call
_sandbox_lock = threading.Lock()


def extract_code(answer: str) -> str | None:
    """The last fenced Python (or unlabelled) block of ``answer``; the raw answer when it parses as Python."""
    blocks = [(lang.lower(), body) for lang, body in FENCE.findall(answer)]
    py = [b for lang, b in blocks if lang in ("", "py", "python", "python3")]
    if py:
        return py[-1].strip("\n")
    if blocks:
        return None  # only blocks in other languages
    text = answer.strip()
    if text and "\n" in text and len(text) <= MAX_CODE_CHARS:
        try:
            ast.parse(text)
            return text
        except _UNPARSABLE:  # deep nesting raises RecursionError or MemoryError, not SyntaxError
            return None
    return None


def shared_sandbox(config: dict[str, Any] | None = None) -> Sandbox:
    """The pooled sandbox of this process for code rewards with this ``code_sandbox`` config (created on first use)."""
    cfg = {"mode": "pool", "preload": [], "limits": {"wall_s": 30, "memory_mb": 4096, "output_bytes": 10_000_000}}
    cfg.update(config or {})
    key = json.dumps(cfg, sort_keys=True, default=str)
    with _sandbox_lock:
        if key not in _sandboxes:
            _sandboxes[key] = Sandbox(SandboxConfig.from_mapping(cfg))
        return _sandboxes[key]


def _listish(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return [value]
    return list(value) if isinstance(value, (list, tuple)) else [value]


def tests_dir(options: dict[str, Any] | None = None) -> str | None:
    """The processed test-case folder: option ``code_tests_dir``, else ``$LIVECODEBENCH_TESTCASES_DIR``, else the
    original's ``$LIVECODEBENCH_DATA_PATH`` (its environment.sh set that one); None when none is set."""
    return ((options or {}).get("code_tests_dir") or os.environ.get(TESTS_DIR_ENV)
            or os.environ.get(TESTS_DIR_ALIAS_ENV) or None)


def _tests_file(data: dict[str, Any], options: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    directory = tests_dir(options)
    qid = data.get("question_id")
    if not directory or qid is None:
        return None, ""
    path = Path(directory) / f"{qid}.json"
    if not path.exists():
        return None, f"no test-case file {path}; graded on the inline tests only"
    return json.loads(path.read_text()), ""


async def score(solution_str: str, gt: GroundTruth, *, data_source: str, extra_info: dict[str, Any] | None = None,
                **options: Any) -> dict[str, Any]:
    """Grade a code answer (see the module docstring); ``acc`` is 1 only when all tests pass."""
    data = dict(gt.data or {})
    if "target" in data and len(data) == 1 and isinstance(data["target"], list):
        data = {"inputs": [t.get("input") for t in data["target"]], "outputs": [t.get("output")
                                                                                  for t in data["target"]]}
    answer = last_answer(solution_str)
    if answer is None:
        return {"acc": 0, "score": 0.0, "pred": "", "method": "no_answer", "error": "", "details": {}}
    if len(answer) > MAX_CODE_CHARS * 2:
        return _too_large(len(answer), "answer")
    code = extract_code(answer)
    if code is not None and len(code) > MAX_CODE_CHARS:
        return _too_large(len(code), "program")
    if code is None:
        return {"acc": 0, "score": 0.0, "pred": answer[:PRED_CHARS], "method": "no_code", "error": "",
                "details": {"reason": "no python code block in the answer"}}
    timeout = float(options.get("code_timeout", 6.0))
    limits = Limits(wall_s=timeout, memory_mb=int(options.get("code_memory_mb", 4096)), output_bytes=10_000_000)
    float_tol = float(options.get("code_float_tol", 0.0))
    sb = shared_sandbox(options.get("code_sandbox"))
    file_data, error = _tests_file(data, options)
    tests_from = tests_source(file_data)
    if tests_from != "file" and is_livecodebench(data_source):
        _warn_public_only(data_source, tests_from)
    result = await _grade(sb, code, file_data or data, data_source, limits, float_tol)
    acc = int(result.passed)
    first = next((o for o in result.outcomes if o.status not in ("passed", "skipped")), None)
    details = {"passed": result.n_passed, "total": result.n_tests, "status": result.status,
               "question_id": data.get("question_id"), "tests_from": tests_from,
               "first_failure": None if first is None else {"kind": first.status, "test": first.index,
                                                            "stderr": first.message[-500:]}}
    infra = result.status == "sandbox_error"
    why = f"sandbox failure: {first.message[-300:]}" if infra and first is not None else "sandbox failure"
    return {"acc": acc, "score": float(acc), "pred": code[:PRED_CHARS], "method": "code_tests",
            "error": "; ".join(e for e in (error, why if infra else "") if e), "infra_error": infra,
            "details": details}


def _too_large(size: int, what: str) -> dict[str, Any]:
    return {"acc": 0, "score": 0.0, "pred": "", "method": "answer_too_large",
            "error": f"the {what} has {size} characters; code answers are capped at {MAX_CODE_CHARS}",
            "details": {"reason": "answer_too_large", "chars": size, "limit": MAX_CODE_CHARS}}


def is_livecodebench(data_source: str) -> bool:
    """Whether ``data_source`` names a LiveCodeBench set (whose private tests live outside the rows)."""
    return "livecodebench" in data_source.lower() or data_source.lower().startswith("lcb")


def tests_source(file_data: dict[str, Any] | None) -> str:
    """``file``, ``file_public_only`` or ``inline``: what a code result was graded on (module docstring)."""
    if file_data is None:
        return "inline"
    return "file_public_only" if file_data.get("private_tests") == 0 else "file"


def mark_public_only_warned() -> None:
    """Say that this process already warned about public-only grading (the evaluator warns at its start)."""
    global _public_only_warned
    _public_only_warned = True


def _warn_public_only(data_source: str, tests_from: str) -> None:
    global _public_only_warned
    if _public_only_warned:
        return
    _public_only_warned = True
    where = ("test-case files without private tests" if tests_from == "file_public_only"
             else f"the row's public tests (no test-case folder: set {TESTS_DIR_ENV} or code_tests_dir)")
    logger.warning("%s is graded on %s only, without LiveCodeBench's private tests: a program that prints the "
                   "sample outputs scores 100%%. Results record details.tests_from; see afm.eval.lcb_testcases.",
                   data_source, where)


async def _grade(sb: Sandbox, code: str, data: dict[str, Any], data_source: str, limits: Limits,
                 float_tol: float) -> GradeResult:
    n_budget = 1
    if "tests" in data:  # processed test-case file
        tests = list(data["tests"])
        fn = data.get("fn_name") or (data.get("metadata") or {}).get("func_name")
        functional = any(t.get("testtype") == "functional" for t in tests)
        n_budget = len(tests)
        return await agrade(sb, code, tests, fn_name=fn if functional else None, limits=limits,
                            total_timeout_s=_budget(limits, n_budget), float_tol=float_tol)
    if "stdin" in data or "expected_output" in data:
        ins, outs = _listish(data.get("stdin", [])), _listish(data.get("expected_output", []))
        if len(ins) != len(outs) or not ins:
            raise RewardConfigError(f"{data_source}: stdin and expected_output must be non-empty lists of equal length")
        tests = [{"input": str(i), "output": str(o)} for i, o in zip(ins, outs, strict=True)]
        return await agrade(sb, code, tests, limits=limits, total_timeout_s=_budget(limits, len(tests)),
                            float_tol=float_tol)
    if "functional" in data:
        return await agrade_asserts(sb, FUNCTIONAL_HEADER + code, str(data["functional"]), limits=limits,
                                    prelude=FUNCTIONAL_HEADER)
    if "inputs" in data and "outputs" in data:
        ins, outs = _listish(data["inputs"]), _listish(data["outputs"])
        if len(ins) != len(outs) or not ins:
            raise RewardConfigError(f"{data_source}: inputs and outputs must be non-empty lists of equal length")
        fn = data.get("fn_name")
        if fn:
            tests = [{"input": i if isinstance(i, str) else "\n".join(json.dumps(a) for a in i),
                      "output": o if isinstance(o, str) else json.dumps(o)} for i, o in zip(ins, outs, strict=True)]
        else:
            tests = [{"input": str(i), "output": str(o)} for i, o in zip(ins, outs, strict=True)]
        return await agrade(sb, code, tests, fn_name=fn, limits=limits, total_timeout_s=_budget(limits, len(tests)),
                            float_tol=float_tol)
    if "test" in data:
        prefix = str(data.get("import_prefix") or "")
        program = (prefix + "\n" + code).strip("\n")
        return await agrade_asserts(sb, program, str(data["test"]), limits=limits, prelude=prefix,
                                    entry_point=str(data["entry_point"]) if data.get("entry_point") else None)
    raise RewardConfigError(f"{data_source}: code ground truth needs stdin/expected_output, functional, inputs/outputs or "
                     f"test; got keys {sorted(data)}")


def _budget(limits: Limits, n: int) -> float:
    """LiveCodeBench's global budget: (timeout + 1) per test + 5 s, at most 300 s."""
    return min((limits.wall_s + 1) * n + 5, 300.0)
