"""The suite's own collection rules: `gpu` tests skip with a reason without CUDA, tests/rl says why it is skipped
without verl, and every test_*.py file holds tests (helpers live in files pytest does not collect)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

GPU_TESTS = '''
import pytest


@pytest.mark.gpu
def test_needs_cuda():
    import torch

    assert torch.cuda.is_available()


def test_plain():
    assert 1 + 1 == 2
'''


def _pytest(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO)]), **env}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *args],
                          capture_output=True, text=True, cwd=cwd, env=full_env, timeout=300)


def _outcomes(stdout: str) -> dict[str, int]:
    last = stdout.strip().splitlines()[-1]
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|skipped|failed|error)", last)}


def test_gpu_marker_skips_with_a_reason_without_cuda(tmp_path):
    import torch

    (tmp_path / "test_gpu_marker.py").write_text(GPU_TESTS)
    # tests/conftest.py loaded as a plugin: its hooks apply to a file outside tests/
    hidden = _pytest(["-p", "conftest", "test_gpu_marker.py"], tmp_path, CUDA_VISIBLE_DEVICES="")
    assert _outcomes(hidden.stdout) == {"passed": 1, "skipped": 1}, hidden.stdout + hidden.stderr
    assert "SKIPPED [1] test_gpu_marker.py:5: needs a CUDA device: none visible to torch" in hidden.stdout
    # as this machine is: the gpu test runs (and passes) exactly when torch sees a device
    here = _pytest(["-p", "conftest", "test_gpu_marker.py"], tmp_path)
    expected = {"passed": 2} if torch.cuda.is_available() else {"passed": 1, "skipped": 1}
    assert _outcomes(here.stdout) == expected, here.stdout + here.stderr


def test_rl_tests_without_verl_are_reported_as_skipped():
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here, so tests/rl is collected for real")
    files = sorted(p.name for p in (TESTS / "rl").glob("test_*.py"))
    proc = _pytest(["tests/rl", "-q"], REPO)
    assert proc.returncode == 5, proc.stdout + proc.stderr  # pytest's "no tests collected": skips only, no error
    assert _outcomes(proc.stdout) == {"skipped": len(files)}, proc.stdout
    for name in files:
        assert f"{name}: verl is not installed in this environment: the RL tests run in .venv-rl" in proc.stdout


def test_every_test_module_holds_tests():
    """A test_*.py file without tests is a helper that pytest collects (and imports) for nothing."""
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        names = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        assert any(name.startswith("test") for name in names), f"{path.relative_to(REPO)} defines no test"
