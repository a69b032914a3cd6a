"""What the SFT and RL launchers (:mod:`afm.sft.knobs`, :mod:`afm.rl.knobs`) share: how knobs read (numbers,
booleans and lists as users type them in bash, and the error that names a knob whose value cannot work) and the
logged launch (``cmd 2>&1 | tee -a log``). Standard library only: the launchers run it with whatever interpreter the
script found."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

_NUMBER = re.compile(r"^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$")
_INT = re.compile(r"^-?[0-9]+$")
_UINT = re.compile(r"^[0-9]+$")


class KnobError(ValueError):
    """A knob whose value cannot work; the message names it and says what it takes."""


def is_number(value: str) -> bool:
    """A plain decimal number such as 1e-6, 0.1 or .5 (no sign)."""
    return bool(_NUMBER.match(value))


def is_int(value: str) -> bool:
    """A whole number, possibly negative."""
    return bool(_INT.match(value))


def is_uint(value: str) -> bool:
    """A whole number >= 0."""
    return bool(_UINT.match(value))


def is_posint(value: str) -> bool:
    """A whole number > 0."""
    return is_uint(value) and int(value) > 0


def parse_bool(name: str, value: str) -> bool:
    """True/False from the spellings people type (1/0, yes/no, on/off, any case); KnobError naming ``name``."""
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise KnobError(f"{name} must be true or false (got '{value}')")


def split_list(value: str) -> list[str]:
    """A comma-separated value split as bash's ``IFS=, read -a`` does: one trailing empty item is dropped."""
    if not value:
        return []
    items = value.split(",")
    return items[:-1] if items[-1] == "" else items


def run_logged(command: Sequence[str], *, env: Mapping[str, str], cwd: str, log_path: str, summary: str) -> int:
    """Run ``command`` with its output to the terminal and appended to ``log_path`` (after a dated header and
    ``summary``), as the scripts' ``2>&1 | tee -a`` did; the exit status as the shell reports it (128 + N for a
    child killed by signal N)."""
    header = f"[afm] ===== {time.strftime('%Y-%m-%d %H:%M:%S')} on {os.uname().nodename} =====\n{summary}\n"
    out = sys.stdout.buffer
    with open(log_path, "ab") as log:
        for sink in (log, out):
            sink.write(header.encode())
            sink.flush()
        out.write(f"[afm] log: {log_path}\n".encode())
        out.flush()
        proc = subprocess.Popen(list(command), env=dict(env), cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):
            for sink in (out, log):
                sink.write(chunk)
                sink.flush()
        return shell_status(proc.wait())


def shell_status(code: int) -> int:
    """A child's exit status as the shell reports it (128 + N for a child killed by signal N)."""
    return 128 - code if code < 0 else code
