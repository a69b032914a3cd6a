"""A launch's command: printed as bash would print it (a copy-pasteable block) and run with its output logged
(``cmd 2>&1 | tee -a log``). Standard library only, shared by the launchers."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence


def script_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of a launcher module that a launch script runs (``afm_run_module``): ``doc``'s first line as its
    description and the arguments every script passes: its name, the repository and the caller's directory."""
    p = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0] if doc else None)
    p.add_argument("--script", required=True, help="the script's name, for messages")
    p.add_argument("--root", required=True, help="the repository")
    p.add_argument("--cwd", default=os.getcwd(), help="where the script was started (relative knobs it was given)")
    return p


def bash_quote(word: str) -> str:
    """``word`` as bash's ``printf %q`` writes it (C locale), so the printed command is the one bash would print."""
    if word == "":
        return "''"
    if any(not (32 <= ord(c) < 127) for c in word):
        out = []
        for byte in word.encode():
            char = chr(byte)
            escapes = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r",
                       "\x1b": "\\E", "'": "\\'", "\\": "\\\\"}
            out.append(escapes.get(char) or (char if 32 <= byte < 127 else f"\\{byte:03o}"))
        return "$'" + "".join(out) + "'"
    out = []
    for i, char in enumerate(word):
        special = char in " \t\n'\"\\|&;()<>!{}*[?]^$`,"
        leading = (char == "#" and i == 0) or (char == "~" and (i == 0 or word[i - 1] in "=:"))
        out.append("\\" + char if special or leading else char)
    return "".join(out)


def format_command(argv: Sequence[str]) -> str:
    """A command one ``--flag value`` per line, shell-quoted, as a copy-pasteable block."""
    out = ""
    for arg in argv:
        if out and arg.startswith("--"):
            out += " \\\n    "
        elif out:
            out += " "
        out += bash_quote(arg)
    return out


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
