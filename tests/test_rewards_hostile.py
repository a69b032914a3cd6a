"""Hostile policy text: every scorer, in every format mode, answers with a full result within its deadline.

In RL the policy writes the text that afm's graders parse, so one adversarial answer must neither stall nor crash
a training step (issue 39). The first tests reproduce what an outside tester found on main (a run of unclosed
``\\boxed{`` and a long digit string with a unit were read in quadratic time before Math-Verify's deadline applied;
a deeply nested ``<code>`` body raised RecursionError out of ``compute_score``). The rest feed adversarial and random
strings to one data source per scorer kind (and a cheap one to every registered source), as the answer, inside a
``<code>`` call and as the whole text.

The code scorer's sandbox is replaced by a fake that reports a sandbox failure: only the extraction paths are the
graders' business here, and hostile programs are the sandbox's (tests/test_sandbox*.py).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm.rewards import RESULT_KEYS, compute_score, compute_score_async, register_scorer, unregister_scorer
from afm.rewards.errors import RewardConfigError
from afm.rewards.format import FORMAT_MODES, format_problems
from afm.rewards.math import MAX_ANSWER_CHARS as MATH_MAX_CHARS
from afm.rewards.math_forms import read_answer
from afm.rewards.registry import get_scorer, known_data_sources
from afm.rewards.score import InfrastructureError
from afm.tools.code import NO_CODE_HINT, parse_code_body
from afm.trajectory import format_observation, last_answer

HAS_MATH_VERIFY = importlib.util.find_spec("math_verify") is not None
PER_CALL_S = 15.0  # the bound on one compute_score call; most take milliseconds, math ones up to its deadline
MATH_TIMEOUT = 2.0  # math_timeout of these tests: the worker's deadline (plus the verifier's 2 s grace)
SOURCES = {"qa": "nq", "math": "MATH500", "judge": "gaia", "code": "livecodebench"}
GOLDS: dict[str, Any] = {"qa": ["1"], "math": "1", "judge": ["1"], "code": {"inputs": ["1"], "outputs": ["1"]}}
OPTIONS = {"infra_fail_limit": 0, "math_timeout": MATH_TIMEOUT}  # the fake sandbox fails on purpose: no streak


def as_answer(hostile: str) -> str:
    return f"<think>thinking</think>\n<answer>{hostile}</answer>"


def as_code_call(hostile: str) -> str:
    return f"<think>thinking</think>\n<code>{hostile}</code>{format_observation('out')}<answer>1</answer>"


def as_is(hostile: str) -> str:
    return hostile


WRAPPERS: dict[str, Callable[[str], str]] = {"answer": as_answer, "code_call": as_code_call, "bare": as_is}


def hostile_strings() -> dict[str, str]:
    """Adversarial answers by name: deep nesting, unclosed runs, long numbers, broken tags, odd characters."""
    digits = "1" * 100_000
    return {
        "parens": "(" * 5000 + ")" * 5000,
        "brackets": "[" * 3000 + "]" * 3000,
        "braces": "{" * 3000 + "}" * 3000,
        "unary_minus": "-" * 5000 + "1",
        "not_chain": "not " * 3000 + "1",
        "lambda_chain": "lambda:" * 3000 + "1",
        "frac_nest": "\\frac{" * 2000 + "1" + "}{2}" * 2000,
        "frac_open": "\\frac{1}{" * 3000,
        "boxed_open": "\\boxed{" * 4000,
        "boxed_nest": "\\boxed{" * 2000 + "1" + "}" * 2000,
        "digits": digits,
        "digits_unit": digits + " cm",
        "digits_text_unit": digits + "\\text{ cm}^2",
        "digits_base": digits + "_{5}",
        "digits_underscore": digits + "_",
        "huge_base": "12_{" + "7" * 10_000 + "}",
        "spaced_groups": "123 " * 20_000 + "x",
        "thin_groups": "1\\,234" * 10_000,
        "e_spaces": "1e" + " " * 50_000 + "x",
        "repeat_long": "0.\\overline{" + "3" * 20_000 + "}",
        "dots_long": "0." + "1" * 20_000 + "\\dot{3}",
        "text_spaces": "\\text{" + " " * 50_000 + "x",
        "power_spaces": "1\\text{cm}^" + " " * 20_000 + "x",
        "degree_spaces": "45^" + " " * 20_000 + "x",
        "dollar_spaces": "$" + " " * 20_000 + "x",
        "tower_caret": "9^{9^{9^{9}}}",
        "tower_python": "9**9**9",
        "tower_ten": "10^{10^{10^{10}}}",
        "factorial": "100000!",
        "nuls": "\x00" * 5000 + "1",
        "placeholder": "1 \x0099\x00",
        "surrogates": "\ud800" + "1" + "\udfff",
        "long_line": "a" * 1_000_000,
        "pipes": "a|" * 50_000,
        "fences": "```py\n" * 10_000,
        "fence_blocks": "```py\nprint(1)\n```\n" * 2000,
        "bare_fences": "```\n" * 20_000,
        "fence_spaces": "```" + " " * 50_000 + "x",
        "unclosed_answer": "<answer>" + "x" * 1000,
        "think_opens": "<think>" * 10_000,
        "closing_tags": "</think>" * 10_000,
        "answer_opens": "<answer>" * 10_000 + "1",
        "code_opens": "<code>" * 10_000,
        "capitals": "R" * 50_000,
        "subscripts": "R_{1}" * 10_000,
        "inequalities": "x<" * 10_000 + "1",
        "whitespace": " \t\n" * 100_000,
    }


def near_cap(text: str) -> str:
    """``text`` cut to just under the math answer cap, so that the worker really reads it."""
    return text[: MATH_MAX_CHARS - 100]


@pytest.fixture(autouse=True)
def no_judge_no_sandbox(monkeypatch):
    """No judge configured (the EM/F1 fallback) and a code sandbox that always fails as infrastructure."""
    monkeypatch.delenv("GRM_BASE_URL", raising=False)
    monkeypatch.setenv("AFM_JUDGE_CACHE", "off")
    from afm.rewards import code as code_module
    from afm.sandbox.grading import GradeResult, TestOutcome

    async def failed_sandbox(*args: Any, **kwargs: Any) -> GradeResult:
        return GradeResult(False, 0, 1, "sandbox_error", [TestOutcome(0, "sandbox_error", message="fake sandbox")])

    monkeypatch.setattr(code_module, "shared_sandbox", lambda config=None: None, raising=False)
    monkeypatch.setattr(code_module, "_grade", failed_sandbox, raising=False)


def check_result(result: dict[str, Any], elapsed: float, kind: str, what: str) -> None:
    assert set(RESULT_KEYS) <= set(result), (what, sorted(result))
    assert elapsed < PER_CALL_S, (what, elapsed)
    assert isinstance(result["score"], float) and isinstance(result["acc"], float), what
    json.loads(result["details"])
    if kind != "code":  # afm/rewards/code.py's extraction is not part of this fix; the guard catches it
        assert result["method"] != "grader_error", (what, result["error"])


def timed_score(kind: str, text: str, mode: str, what: str) -> float:
    start = time.monotonic()
    result = compute_score(SOURCES[kind], text, GOLDS[kind], format_mode=mode, **OPTIONS)
    elapsed = time.monotonic() - start
    check_result(result, elapsed, kind, what)
    return elapsed


def kinds() -> list[str]:
    return [k for k in SOURCES if k != "math" or HAS_MATH_VERIFY]


# -- the reported stalls and crash ---------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_unclosed_boxed_run_reads_in_linear_time():
    start = time.monotonic()
    read_answer("\\boxed{" * 4000)  # was 33 s on the tester's machine (quadratic _boxed_spans)
    read_answer("\\boxed{" * 40_000)
    assert time.monotonic() - start < 2.0


@pytest.mark.timeout(60)
def test_long_digit_string_with_unit_reads_in_linear_time():
    start = time.monotonic()
    answer = read_answer("1" * 100_000 + " cm")  # was 100 s (backtracking base and unit patterns)
    assert answer.unit == "cm"
    read_answer("1" * 100_000 + "_{5}")
    assert time.monotonic() - start < 2.0


@pytest.mark.timeout(60)
@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="needs math-verify")
@pytest.mark.parametrize("answer", ["\\boxed{" * 4000, "1" * 100_000 + " cm", near_cap("\\boxed{" * 4000),
                                    near_cap("1" * 100_000) + " cm"])
def test_math_score_of_the_reported_stalls_is_quick(answer):
    start = time.monotonic()
    result = compute_score("MATH500", as_answer(answer), "1", math_timeout=MATH_TIMEOUT)
    assert time.monotonic() - start < MATH_TIMEOUT + 6  # the deadline, its grace and a worker restart at most
    assert result["acc"] == 0.0


@pytest.mark.parametrize("body", ["(" * 2000 + ")" * 2000, "-" * 5000 + "1", "[" * 3000 + "]" * 3000,
                                  "not " * 3000 + "1", "+" * 100_000 + "1"])
@pytest.mark.parametrize("source", ["nq", "gaia"])
def test_deep_nesting_in_a_code_call_is_a_format_problem(source, body):
    result = compute_score(source, as_code_call(body), ["1"])
    assert result["acc"] == 1.0 and result["method"] != "grader_error"
    assert "bad_code_tag" in result["format_problems"].split(",")
    assert [p.code for p in format_problems(as_code_call(body))] == ["bad_code_tag"]


@pytest.mark.parametrize("body", ["-" * 5000 + "1", "(" * 2000 + ")" * 2000, "not " * 3000 + "1",
                                  "```\n" + "-" * 5000 + "1\n```"])
def test_parse_code_body_reports_deep_nesting_as_no_code(body):
    code, stdin, problem = parse_code_body(body)
    assert code is None and stdin == "" and problem == NO_CODE_HINT


# -- compute_score never raises on a policy's text -----------------------------------------------------------------
@pytest.fixture
def scratch_sources():
    names: list[str] = []
    yield names
    for name in names:
        unregister_scorer(name)


def test_a_scorer_exception_is_a_grader_error(scratch_sources):
    def broken(solution_str, gt, **kw):
        raise RecursionError("maximum recursion depth exceeded " + "x" * 2000)

    scratch_sources.append("hostile_broken")
    register_scorer("hostile_broken", broken, kind="qa")
    for result in (compute_score("hostile_broken", as_answer("1"), "1", overlong_buffer_len=10, max_resp_len=20,
                                 response_length=20),
                   asyncio.run(compute_score_async("hostile_broken", as_answer("1"), "1", overlong_buffer_len=10,
                                                   max_resp_len=20, response_length=20))):
        assert result["method"] == "grader_error" and result["acc"] == 0.0
        assert result["score"] == -1.0 == result["overlong_penalty"]  # score 0 plus the usual overlong penalty
        assert result["error"].startswith("RecursionError: maximum recursion depth") and len(result["error"]) <= 500
        assert result["infra_error"] == 0.0
        assert set(RESULT_KEYS) <= set(result)


def test_config_and_infrastructure_errors_still_raise(scratch_sources):
    def bad_config(solution_str, gt, **kw):
        raise RewardConfigError("hostile_config: the gold is malformed")

    def infra_down(solution_str, gt, **kw):
        return {"acc": 0.0, "error": "judge down", "infra_error": True}

    scratch_sources.extend(["hostile_config", "hostile_infra"])
    register_scorer("hostile_config", bad_config, kind="qa")
    register_scorer("hostile_infra", infra_down, kind="qa")
    with pytest.raises(RewardConfigError, match="malformed"):
        compute_score("hostile_config", as_answer("1"), "1")
    with pytest.raises(RewardConfigError, match="malformed"):
        asyncio.run(compute_score_async("hostile_config", as_answer("1"), "1"))
    compute_score("hostile_infra", as_answer("1"), "1", infra_fail_limit=2)
    with pytest.raises(InfrastructureError):
        compute_score("hostile_infra", as_answer("1"), "1", infra_fail_limit=2)
    compute_score("nq", as_answer("1"), "1")  # resets the streak for the tests after this one
    # and the caller's own mistakes are config errors too
    with pytest.raises(RewardConfigError, match="unknown data_source"):
        compute_score("no_such_source", as_answer("1"), "1")
    with pytest.raises(RewardConfigError, match="format_mode"):
        compute_score("nq", as_answer("1"), "1", format_mode="sum")
    with pytest.raises(RewardConfigError, match="format_tags"):
        compute_score("nq", as_answer("1"), "1", format_tags="think,answer,no_such_tag")
    with pytest.raises(RewardConfigError, match="no gold answer"):
        compute_score("nq", as_answer("1"), {"question": "q"})
    with pytest.raises(RewardConfigError, match="qa_mode"):
        compute_score("nq", as_answer("1"), "1", qa_mode="exam")
    with pytest.raises(RewardConfigError, match="unknown judge option"):
        compute_score("gaia", as_answer("1"), "1", judge_colour="red")


def test_a_failing_format_check_is_a_grader_error(monkeypatch):
    import afm.rewards.score as score_module

    def explode(*args: Any, **kwargs: Any) -> list:
        raise MemoryError("format check out of memory")

    monkeypatch.setattr(score_module, "format_problems", explode)
    result = compute_score("nq", as_answer("1"), "1")
    assert (result["method"], result["acc"], result["score"], result["format_ok"]) == ("grader_error", 0.0, 0.0, 0.0)
    assert result["error"] == "MemoryError: format check out of memory" and result["infra_error"] == 0.0


@pytest.mark.parametrize("kind", ["qa", "judge", "math", "code"])
def test_an_answer_over_the_cap_is_not_parsed(kind):
    if kind == "math" and not HAS_MATH_VERIFY:
        pytest.skip("needs math-verify")
    result = compute_score(SOURCES[kind], as_answer("1" * 300_000), GOLDS[kind], **OPTIONS)
    assert (result["acc"], result["method"]) == (0.0, "answer_too_large")
    assert "answer_too_large" in result["error"] and result["infra_error"] == 0.0
    assert len(result["pred"]) <= 4000


def test_a_trajectory_over_the_cap_is_not_parsed():
    from afm.rewards.score import MAX_SOLUTION_CHARS

    result = compute_score("nq", as_answer("1") + " " * MAX_SOLUTION_CHARS, "1")
    assert (result["acc"], result["method"], result["format_ok"]) == (0.0, "answer_too_large", 0.0)


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="needs math-verify")
def test_deep_math_nesting_is_too_large_and_a_deadline_is_a_grader_timeout():
    from afm.rewards.math import MAX_NESTING

    deep = compute_score("MATH500", as_answer("(" * (MAX_NESTING + 1) + "1" + ")" * (MAX_NESTING + 1)), "1")
    assert (deep["acc"], deep["method"]) == (0.0, "answer_too_large")
    fine = compute_score("MATH500", as_answer("(" * 20 + "1" + ")" * 20), "1")
    assert fine["acc"] == 1.0
    slow = compute_score("MATH500", as_answer("\\boxed{10^{10^{10}}}"), "1", math_timeout=1)
    assert (slow["acc"], slow["method"]) == (0.0, "grader_timeout") and "timed out" in slow["error"]


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="needs math-verify")
def test_the_workers_deadline_covers_afms_own_reading():
    # read_answer runs in the worker: a stall there is cut by the worker's SIGALRM deadline, not the caller's time
    program = (
        "import signal, time\n"
        "import afm.rewards._math_worker as w\n"
        "signal.signal(signal.SIGALRM, w._on_alarm)\n"
        "w.read_answer = lambda text: time.sleep(30)\n"
        "start = time.monotonic()\n"
        "reply = w.handle({'golds': ['1'], 'pred': '2', 'timeout': 0.5})\n"
        "assert reply['timed_out'] and not reply['correct'], reply\n"
        "assert time.monotonic() - start < 5\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


# -- every scorer kind, every format mode, every hostile string ----------------------------------------------------
@pytest.mark.timeout(600)
@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("kind", ["qa", "judge", "math", "code"])
def test_hostile_strings_in_every_format_mode(kind, wrapper):
    if kind == "math" and not HAS_MATH_VERIFY:
        pytest.skip("needs math-verify")
    cases = hostile_strings()
    if kind == "math" and wrapper == "answer":  # under the cap too, so that the worker really reads them
        cases.update({f"{name}_near_cap": near_cap(text) for name, text in hostile_strings().items()
                      if len(text) > MATH_MAX_CHARS})
    elapsed = []
    for i, (name, hostile) in enumerate(sorted(cases.items())):
        # the modes rotate over the strings (each string once), and the nastiest strings meet all three
        modes = FORMAT_MODES if name in ("parens", "unary_minus", "boxed_open", "digits_unit") else (
            FORMAT_MODES[i % len(FORMAT_MODES)],)
        for mode in modes:
            elapsed.append(timed_score(kind, WRAPPERS[wrapper](hostile), mode, f"{kind}/{wrapper}/{name}/{mode}"))
    assert sum(elapsed) < 240, sorted(elapsed)[-5:]


@pytest.mark.timeout(600)
def test_every_registered_source_survives_a_nested_code_call_and_a_deep_answer():
    text = as_code_call("-" * 5000 + "1")[: -len("<answer>1</answer>")] + as_answer("(" * 5000 + ")" * 5000)
    start = time.monotonic()
    for name in known_data_sources():
        kind = get_scorer(name).kind
        if kind == "math" and not HAS_MATH_VERIFY:
            continue
        for mode in FORMAT_MODES:
            t0 = time.monotonic()
            result = compute_score(name, text, GOLDS[kind], format_mode=mode, **OPTIONS)
            check_result(result, time.monotonic() - t0, kind, f"{name}/{mode}")
            assert "bad_code_tag" in result["format_problems"]
    assert time.monotonic() - start < 120


@pytest.mark.timeout(300)
def test_hostile_strings_through_the_async_entry_point():
    async def main() -> list[tuple[str, dict[str, Any], float]]:
        async def one(kind: str, name: str, text: str) -> tuple[str, dict[str, Any], float]:
            start = time.monotonic()
            result = await compute_score_async(SOURCES[kind], text, GOLDS[kind], format_mode="multiply", **OPTIONS)
            return f"{kind}/{name}", result, time.monotonic() - start

        picks = ("parens", "unary_minus", "boxed_open", "digits_unit", "surrogates", "nuls", "answer_opens")
        cases = hostile_strings()
        return await asyncio.gather(*(one(kind, name, wrap(cases[name])) for kind in kinds() for name in picks
                                      for wrap in (as_answer, as_code_call)))

    start = time.monotonic()
    for what, result, elapsed in asyncio.run(main()):
        check_result(result, elapsed, what.split("/")[0], what)
    assert time.monotonic() - start < 120


def test_trajectory_helpers_on_a_megabyte():
    # the format check, last_answer and tool-call parsing are linear: a megabyte of each shape takes well under 1 s.
    # All of it runs in this process, so its CPU time is the measure: on a busy machine the wall time grows with the
    # load (21.7 s for the last call beside 4 busy loops, 2.3 s idle), the CPU time does not.
    for name, text in hostile_strings().items():
        big = (text * (1_000_000 // max(1, len(text)) + 1))[:1_000_000]
        start = time.process_time()
        format_problems(as_code_call(big))
        last_answer(as_answer(big))
        assert time.process_time() - start < 3.0, name
    # the worst shape found: a megabyte (the trajectory cap) of stray closing tags, one segment and problem each
    start = time.process_time()
    result = compute_score("nq", "</think>" * 125_000, "1", format_mode="multiply")
    assert result["format_ok"] == 0.0 and time.process_time() - start < PER_CALL_S


@pytest.mark.timeout(120)
def test_math_forms_stay_linear_on_every_hostile_shape():
    for name, text in hostile_strings().items():
        start = time.monotonic()
        read_answer(text[:200_000])
        assert time.monotonic() - start < 2.0, name


# -- random strings -----------------------------------------------------------------------------------------------
TOKENS = ["(", ")", "[", "]", "{", "}", "\\boxed{", "\\frac{", "\\text{", "\\mbox{ ", "\\overline{", "\\dot{", "_",
          "_{", "^", "^{", "1", "9", "0.", ".", " ", "  ", "\\,", "\\!", "~", "e", "E-", "cm", " cm", "square ", "$",
          "\\$", "|", ",", "<answer>", "</answer>", "<think>", "</think>", "<code>", "</code>", "<observation>",
          "</observation>", "```", "```py\n", "\n", "\x00", "\ud800", "R", "x", "<", "\\le", "°", "-", "**", "\\left(",
          "\\right)", "\\sqrt{", "\\infty", "\\{", "\\}", "=", "i", "\\mathrm{i}"]
soups = st.lists(st.sampled_from(TOKENS), max_size=300).map("".join)


@settings(max_examples=150, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(soup=soups | st.text(max_size=2000), wrapper=st.sampled_from(sorted(WRAPPERS)),
       mode=st.sampled_from(FORMAT_MODES), kind=st.sampled_from(["qa", "judge", "code"]))
def test_random_text_never_breaks_a_grader(soup, wrapper, mode, kind):
    timed_score(kind, WRAPPERS[wrapper](soup), mode, f"{kind}/{wrapper}/{mode}/{soup[:80]!r}")


@pytest.mark.skipif(not HAS_MATH_VERIFY, reason="needs math-verify")
@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(soup=soups, mode=st.sampled_from(FORMAT_MODES))
def test_random_math_soup_answers_within_the_deadline(soup, mode):
    timed_score("math", as_answer(soup), mode, f"math/{mode}/{soup[:80]!r}")
    read_answer(soup)  # afm's own reading, in this process too: any exception fails the test
