"""Tests of the verl overlay: they run in the RL environment (`.venv-rl`, extra `rl`), which scripts/test.sh builds
and runs them in. In an environment without verl each file is reported as skipped, with the reason, instead of
being imported (its module-level verl imports would fail collection)."""

from __future__ import annotations

import importlib.util

import pytest

VERL_MISSING = importlib.util.find_spec("verl") is None
SKIP_REASON = ("verl is not installed in this environment: the RL tests run in .venv-rl "
               "(bash scripts/test.sh tests/rl, or .venv-rl/bin/python -m pytest tests/rl)")


class _SkippedFile(pytest.File):
    """A test file collected without importing it: its collection reports one skip with the reason."""

    def collect(self):
        raise pytest.skip.Exception(f"{self.path.name}: {SKIP_REASON}")


def pytest_pycollect_makemodule(module_path, parent):
    # firstresult: without verl, a test file becomes a _SkippedFile instead of a Module that would import it.
    if VERL_MISSING:
        return _SkippedFile.from_parent(parent, path=module_path)
    return None
