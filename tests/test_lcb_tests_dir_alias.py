"""The original project's LIVECODEBENCH_DATA_PATH works as the LiveCodeBench test-case folder (afm's name is
LIVECODEBENCH_TESTCASES_DIR): in environment.sh and where the code reward reads it (real grading in the sandbox)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from afm.rewards import compute_score

REPO = Path(__file__).resolve().parents[1]
BASH = shutil.which("bash") or "/bin/bash"
F = "```"
STDIN_GT = {"stdin": ["1 2\n", "3 4\n"], "expected_output": ["3\n", "7\n"], "question_id": "abc100_a"}
# Passes the two public tests above, fails the private one written below.
CHEAT = "a, b = map(int, input().split())\nprint({3: 3, 7: 7}.get(a + b, 0))"


def _answer(code: str) -> str:
    return f"<think> solve </think>\n<answer>\n{F}python\n{code}\n{F}\n</answer>"


def _tests_folder(path: Path) -> Path:
    path.mkdir()
    (path / "abc100_a.json").write_text(json.dumps({"tests": [
        {"input": "1 2\n", "output": "3\n", "testtype": "stdin"},
        {"input": "100 200\n", "output": "300\n", "testtype": "stdin"}]}))
    return path


def test_the_code_reward_reads_the_original_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("LIVECODEBENCH_TESTCASES_DIR", raising=False)
    monkeypatch.setenv("LIVECODEBENCH_DATA_PATH", str(_tests_folder(tmp_path / "lcb")))
    res = compute_score("livecodebench_v5", _answer(CHEAT), STDIN_GT)
    assert res["acc"] == 0 and json.loads(res["details"])["tests_from"] == "file"
    # afm's own name wins when both are set
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("LIVECODEBENCH_TESTCASES_DIR", str(tmp_path / "empty"))
    res = compute_score("livecodebench_v5", _answer(CHEAT), STDIN_GT)
    assert res["acc"] == 1 and str(tmp_path / "empty") in res["error"]


def _sourced(env: dict[str, str]) -> str:
    script = 'set -u; source environment.sh; echo "$LIVECODEBENCH_TESTCASES_DIR"'
    proc = subprocess.run([BASH, "-c", script], env={"PATH": "/usr/bin:/bin", "HOME": "/home/u", **env}, cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout.strip()


def test_environment_sh_maps_the_original_variable():
    assert _sourced({}) == ""
    assert _sourced({"LIVECODEBENCH_DATA_PATH": "/data/lcb"}) == "/data/lcb"
    assert _sourced({"LIVECODEBENCH_DATA_PATH": "/data/lcb", "LIVECODEBENCH_TESTCASES_DIR": "/afm/lcb"}) == "/afm/lcb"
