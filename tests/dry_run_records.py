"""Recorded dry runs of the launch scripts: each case runs one script with bash in a clean environment, and the
normalised stdout, stderr and exit status of all of a script's cases are compared with its file under
tests/records/. A redesign of the launch code must leave every record byte-identical.

``AFM_RECORD=1`` rewrites the records instead of comparing (then review ``git diff tests/records``).

What is normalised, because it belongs to the machine and not to the script: the repository path (``<repo>``),
the virtual environment that runs the test (``<venv>``), the case's working directory (``<cwd>``), the GPUs (a stub
``nvidia-smi`` that lists none comes first on PATH) and the warning that the optional ``deepspeed`` package is not
installed (dropped: it depends on the extras installed, not on the knobs).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "tests" / "records"
# The test's own environment: the scripts find their interpreter (and afm-sft) through AFM_VENV / AFM_RL_VENV.
VENV = Path(sys.prefix)
_MACHINE_LINES = (re.compile(r"^\[afm\] warning: DeepSpeed ZeRO-3 is configured \(DEEPSPEED_CONFIG\) but the "
                             r"deepspeed package is not installed in .*$\n?", re.M),)


@dataclass(frozen=True)
class Case:
    """One run of a script: its name in the record, the knobs set and the script's arguments."""

    name: str
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()


def normalise(text: str, cwd: Path, drop: Sequence[re.Pattern[str]] = ()) -> str:
    """``text`` with the machine's paths replaced by placeholders, then the machine-dependent lines (and those
    ``drop`` matches) removed."""
    # The longest path first: the venv and the cwd may lie under the repository, or the other way round.
    for path, mark in sorted(((str(VENV), "<venv>"), (str(REPO), "<repo>"), (str(cwd), "<cwd>")),
                             key=lambda item: -len(item[0])):
        text = text.replace(path, mark)
    for pattern in (*_MACHINE_LINES, *drop):
        text = pattern.sub("", text)
    return text


def run_case(script: str, case: Case, venv_var: str, drop: Sequence[re.Pattern[str]] = ()) -> str:
    """The record block of one case: the command line, exit status, stdout and stderr, normalised."""
    with tempfile.TemporaryDirectory(prefix="afm-record-") as tmp:
        cwd = Path(tmp).resolve()
        stub = cwd / ".bin"
        stub.mkdir()
        # No GPU on any machine: an nvidia-smi that lists none.
        (stub / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
        (stub / "nvidia-smi").chmod(0o755)
        env = {"PATH": f"{stub}:/usr/bin:/bin", "HOME": str(cwd), "LC_ALL": "C", venv_var: str(VENV), **case.env}
        proc = subprocess.run(["bash", str(REPO / script), *case.args], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=120)
        line = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in case.env.items()), "bash", script,
                         *map(shlex.quote, case.args)])
        block = (f"===== {case.name}\n$ {line}\n----- exit {proc.returncode}\n----- stdout\n{proc.stdout}"
                 f"{'' if proc.stdout.endswith(chr(10)) or not proc.stdout else chr(10)}----- stderr\n{proc.stderr}"
                 f"{'' if proc.stderr.endswith(chr(10)) or not proc.stderr else chr(10)}")
        return normalise(block, cwd, drop)


def record_path(script: str) -> Path:
    """tests/records/<script without .sh>.txt"""
    return RECORDS / (script.removesuffix(".sh") + ".txt")


def check_record(script: str, cases: list[Case], venv_var: str, drop: Sequence[re.Pattern[str]] = ()) -> None:
    """Compare the script's cases with its record (``AFM_RECORD=1``: write the record instead); ``venv_var``
    names the variable through which the script finds its interpreter, ``drop`` more machine-dependent lines."""
    names = [case.name for case in cases]
    assert len(set(names)) == len(names), f"duplicate case names in {script}"
    text = "".join(run_case(script, case, venv_var, drop) for case in cases)
    path = record_path(script)
    if os.environ.get("AFM_RECORD") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no record {path.relative_to(REPO)}: run with AFM_RECORD=1 to write it"
    recorded = path.read_text(encoding="utf-8")
    if text != recorded:
        diff = "".join(difflib.unified_diff(recorded.splitlines(True), text.splitlines(True),
                                            str(path.relative_to(REPO)), "this run", n=2))
        raise AssertionError(f"the dry run of {script} differs from its record (AFM_RECORD=1 rewrites it when the "
                             f"change is meant):\n{diff}")
