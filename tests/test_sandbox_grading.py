"""Grading programs against tests in the sandbox (stdio, functional, asserts)."""

from __future__ import annotations

import asyncio

import pytest

from afm.sandbox import Limits, Sandbox
from afm.sandbox.grading import agrade, agrade_asserts, outputs_match

LIM = Limits(wall_s=2.0, memory_mb=512)
ADD = "a, b = map(int, input().split())\nprint(a + b)"
TESTS = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10"}, {"input": "-1 1", "output": "0"}]


@pytest.fixture(scope="module")
def sb():
    with Sandbox(mode="pool", concurrency=2, limits=LIM) as box:
        yield box


def grade(sb, *args, **kw):
    return asyncio.run(agrade(sb, *args, **kw))


def test_outputs_match_like_livecodebench():
    assert outputs_match("3\n\n", "3")
    assert outputs_match(" 1.0  2\n", "1 2.00")
    assert outputs_match("0.5", "0.50")
    assert not outputs_match("0.333333", "0.3333333")
    assert outputs_match("0.333333", "0.3333333", float_tol=1e-5)
    assert not outputs_match("YES", "NO")
    assert not outputs_match("1\n2", "1")


def test_stdio_correct_wrong_timeout_crash(sb):
    r = grade(sb, ADD, TESTS)
    assert r.passed and r.n_passed == 3 and r.status == "passed"
    r = grade(sb, "a, b = map(int, input().split())\nprint(a * b)", TESTS)
    assert not r.passed and r.status == "wrong_answer"
    assert [o.status for o in r.outcomes] == ["wrong_answer", "skipped", "skipped"]
    assert r.outcomes[0].got.strip() == "2" and r.outcomes[0].expected.strip() == "3"
    r = grade(sb, ADD + "\nwhile True: pass", TESTS, limits=Limits(wall_s=1.0))
    assert r.status == "timeout"
    r = grade(sb, "raise RuntimeError('no')", TESTS)
    assert r.status == "runtime_error" and "RuntimeError" in r.outcomes[0].message
    r = grade(sb, "x = [0] * (10 ** 10)", TESTS)
    assert r.status == "memory"
    r = grade(sb, "a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)", TESTS,
              stop_on_first_failure=False)
    assert r.n_passed == 2 and [o.status for o in r.outcomes] == ["passed", "wrong_answer", "passed"]


def test_functional_leetcode_style(sb):
    solution = ("class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
                "        seen = {}\n        for i, x in enumerate(nums):\n"
                "            if target - x in seen:\n                return (seen[target - x], i)\n"
                "            seen[x] = i\n")
    tests = [{"input": "[2,7,11,15]\n9", "output": "[0, 1]"}, {"input": "[3,2,4]\n6", "output": "[1,2]"}]
    r = grade(sb, solution, tests, fn_name="twoSum")
    assert r.passed, r.outcomes
    r = grade(sb, solution.replace("return (seen[target - x], i)", "return [i, i]"), tests, fn_name="twoSum")
    assert r.status == "wrong_answer"
    r = grade(sb, "def area(r):\n    return 3.14159 * r * r", [{"input": "1", "output": "3.1416"}],
              fn_name="area", float_tol=1e-4)
    assert r.passed
    r = grade(sb, "class Solution:\n    pass", tests, fn_name="twoSum")
    assert r.status == "runtime_error"


def test_asserts(sb):
    r = asyncio.run(agrade_asserts(sb, "def f(x):\n    return x + 1", ["assert f(1) == 2", "assert f(2) == 3"]))
    assert r.passed
    r = asyncio.run(agrade_asserts(sb, "def f(x):\n    return x + 1", "assert f(1) == 2\nassert f(2) == 4"))
    assert not r.passed and r.status == "wrong_answer"
    r = asyncio.run(agrade_asserts(sb, "def f(x):\n    while True: pass", "f(1)", limits=Limits(wall_s=1.0)))
    assert r.status == "timeout"


def test_total_budget_and_bad_tests(sb):
    slow = "import time\ntime.sleep(0.4)\nprint(3)"
    r = grade(sb, slow, [{"input": "", "output": "3"}] * 5, total_timeout_s=0.5, stop_on_first_failure=False)
    assert r.status == "timeout" and 1 <= r.n_passed < 5
    with pytest.raises(ValueError, match="no tests"):
        grade(sb, ADD, [])
    with pytest.raises(ValueError, match="'input'"):
        grade(sb, ADD, [{"stdin": "1 2"}])
