"""Code rewards: real programs graded in the sandbox through compute_score (sync and async)."""

from __future__ import annotations

import asyncio
import json

import pytest

from afm.rewards import compute_score, compute_score_async

F = "```"
ADD = "a, b = map(int, input().split())\nprint(a + b)"
STDIN_GT = {"stdin": ["1 2\n", "3 4\n"], "expected_output": ["3\n", "7\n"], "question_id": "abc100_a"}


def sol(code: str, lang: str = "python") -> str:
    return f"<think> solve </think>\n<answer>\n{F}{lang}\n{code}\n{F}\n</answer>"


def details(res: dict) -> dict:
    return json.loads(res["details"])


def test_stdin_problems_correct_wrong_timeout_crash():
    res = compute_score("livecodebench_v5", sol(ADD), json.dumps(STDIN_GT))
    assert res["acc"] == 1 and res["score"] == 1.0 and res["method"] == "code_tests"
    assert details(res)["passed"] == 2 and details(res)["question_id"] == "abc100_a"
    res = compute_score("livecodebench_v5", sol("print(3)"), STDIN_GT)
    assert res["acc"] == 0 and details(res)["first_failure"]["kind"] == "wrong_answer"
    res = compute_score("livecodebench_v5", sol("while True:\n    pass"), STDIN_GT, code_timeout=1)
    assert res["acc"] == 0 and details(res)["status"] == "timeout"
    res = compute_score("livecodebench_v5", sol("raise SystemError('crash')"), STDIN_GT)
    assert res["acc"] == 0 and "SystemError" in details(res)["first_failure"]["stderr"]


def test_no_answer_and_no_code():
    res = compute_score("livecodebench", "<think> I give up </think>", STDIN_GT)
    assert res["acc"] == 0 and res["method"] == "no_answer"
    res = compute_score("livecodebench", "<answer>just prose</answer>", STDIN_GT)
    assert res["acc"] == 0 and res["method"] == "no_code"
    res = compute_score("livecodebench", sol("echo hi", lang="bash"), STDIN_GT)
    assert res["method"] == "no_code"


def test_last_code_block_of_the_answer_is_graded():
    answer = f"<answer>\nfirst try\n{F}python\nprint(0)\n{F}\nfinal:\n{F}py\n{ADD}\n{F}\n</answer>"
    assert compute_score("livecodebench", answer, STDIN_GT)["acc"] == 1


def test_leetcode_functional_and_humaneval_and_apps_styles():
    lc = {"functional": "assert Solution().addOne(1) == 2\nassert Solution().addOne(-1) == 0", "question_id": "1"}
    good = "class Solution:\n    def addOne(self, x: int) -> int:\n        return x + 1"
    assert compute_score("lcb_v5", sol(good), lc)["acc"] == 1
    assert compute_score("lcb_v5", sol(good.replace("x + 1", "x + 2")), lc)["acc"] == 0
    he = {"test": "def check(candidate):\n    assert candidate(2) == 4\n", "entry_point": "double",
          "import_prefix": "import math"}
    assert compute_score("codecontests", sol("def double(x):\n    return x * 2"), he)["acc"] == 1
    apps = {"inputs": [[1, 2], [5, 5]], "outputs": [3, 10], "fn_name": "add"}
    assert compute_score("codecontests", sol("def add(a, b):\n    return a + b"), apps)["acc"] == 1
    stdio = {"inputs": ["2\n", "5\n"], "outputs": ["4\n", "10\n"]}
    assert compute_score("codecontests", sol("print(int(input()) * 2)"), stdio)["acc"] == 1


def test_private_tests_from_the_processed_folder(tmp_path):
    (tmp_path / "abc100_a.json").write_text(json.dumps({"tests": [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "100 200\n", "output": "300\n", "testtype": "stdin"}]}))
    cheat = "a, b = map(int, input().split())\nprint({3: 3, 7: 7}.get(a + b, 0))"  # passes only the public tests
    assert compute_score("livecodebench_v5", sol(cheat), STDIN_GT)["acc"] == 1
    res = compute_score("livecodebench_v5", sol(cheat), STDIN_GT, code_tests_dir=str(tmp_path))
    assert res["acc"] == 0 and details(res)["tests_from"] == "file"
    res = compute_score("livecodebench_v5", sol(ADD), STDIN_GT, code_tests_dir=str(tmp_path))
    assert res["acc"] == 1 and details(res)["total"] == 2
    missing = dict(STDIN_GT, question_id="zzz999")
    res = compute_score("livecodebench_v5", sol(ADD), missing, code_tests_dir=str(tmp_path))
    assert res["acc"] == 1 and "no test-case file" in res["error"]


def test_bad_code_ground_truths_name_the_source():
    with pytest.raises(ValueError, match="livecodebench_v5: "):
        compute_score("livecodebench_v5", sol(ADD), {"stdin": ["1 2"], "expected_output": []})
    with pytest.raises(ValueError, match="codecontests: "):
        compute_score("codecontests", sol(ADD), {"unknown": 1})


def test_async_form_scores_many_at_once():
    async def go() -> list[dict]:
        return await asyncio.gather(*[compute_score_async("livecodebench_v5", sol(ADD if i % 2 else "print(1)"),
                                                          STDIN_GT) for i in range(8)])

    results = asyncio.run(go())
    assert [r["acc"] for r in results] == [0, 1] * 4


def test_every_code_data_source_is_scored():
    from afm.rewards import known_data_sources

    names = known_data_sources("code", aliases=True)
    assert len(names) >= 10
    for name in names:
        assert compute_score(name, sol(ADD), STDIN_GT)["acc"] == 1, name


def test_livecodebench_on_public_tests_only_warns_once_and_says_so(tmp_path, monkeypatch, caplog):
    import logging

    from afm.rewards import code as code_reward

    monkeypatch.delenv("LIVECODEBENCH_TESTCASES_DIR", raising=False)
    monkeypatch.setattr(code_reward, "_public_only_warned", False)  # a fresh process: nothing warned yet
    with caplog.at_level(logging.WARNING, logger="afm.rewards.code"):
        results = [compute_score("livecodebench_v5", sol(ADD), STDIN_GT) for _ in range(3)]
        compute_score("codecontests", sol(ADD), STDIN_GT)  # full tests in the row: nothing to warn about
    assert [details(r)["tests_from"] for r in results] == ["inline"] * 3
    warnings = [r for r in caplog.records if "without LiveCodeBench's private tests" in r.getMessage()]
    assert len(warnings) == 1 and "livecodebench_v5" in warnings[0].getMessage()
    (tmp_path / "abc100_a.json").write_text(json.dumps({"tests": [{"input": "1 2\n", "output": "3\n"}],
                                                         "private_tests": 0}))
    res = compute_score("livecodebench_v5", sol(ADD), STDIN_GT, code_tests_dir=str(tmp_path))
    assert details(res)["tests_from"] == "file_public_only"


def test_a_broken_sandbox_is_an_infrastructure_failure_not_a_wrong_answer(tmp_path):
    res = compute_score("livecodebench_v5", sol(ADD), STDIN_GT, code_sandbox=broken_sandbox(tmp_path))
    assert res["acc"] == 0 and res["infra_error"] == 1.0, res
    assert details(res)["status"] == "sandbox_error" and res["error"].startswith("sandbox failure")
    good = compute_score("livecodebench_v5", sol("print(0)"), STDIN_GT)
    assert good["infra_error"] == 0.0  # a wrong program is a wrong answer


def broken_sandbox(tmp_path) -> dict:
    """A sandbox whose interpreter passes the start-up probe but cannot be mounted in the jail: every run
    ends in sandbox_error, as when the sandbox breaks under a running job."""
    import os
    import sys

    fake = tmp_path / "broken-python" / "python3"
    fake.parent.mkdir(exist_ok=True)
    real = os.path.realpath(sys.executable)
    fake.write_text(f'#!/bin/sh\ncase "$*" in *sys.version_info*) exec {real} "$@";; esac\nexit 3\n')
    fake.chmod(0o755)
    return {"python": str(fake), "mode": "oneshot"}
