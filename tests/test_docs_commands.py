"""Every command the README and docs/*.md show in a bash/sh/shell block is real (docs/development.md).

Commands are taken from the fenced blocks, backslash continuations joined, split at ``&&``, ``||``, ``;`` and
``|``, and their leading ``NAME=value`` words kept as the environment. Then, never running anything long:

* ``afm ...`` and ``python -m afm.<module> ...``: the flags shown are parsed, in this process, by the parser the
  command itself builds (its ``parse_args`` is stopped right after parsing), so a renamed or removed flag fails;
* ``afm-sft train|mask-report ...``: every ``--key`` / ``key=value`` shown must be a field of LLaMA-Factory's
  argument dataclasses or of afm's overlay (``AfmDataArguments``), or one of mask-report's own flags;
* ``bash <script>`` of a launch, data, inference or evaluation script: run with ``DRY_RUN=1`` and the variables and
  arguments shown (each prints its command and runs nothing), must exit 0;
* ``bash <script>`` of any other repo script (install, test, quickstart, servers, Ray): ``--help`` must exit 0 and
  name every positional word the command shows (``start``, ``head``, ...); ``scripts/quickstart.sh``'s flags are
  parsed by ``afm quickstart``'s parser;
* ``python <file>.py``: the file exists.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(?:bash|sh|shell)[ \t]*\n(.*?)^```", re.M | re.S)
ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
SCRIPT_DIRS = ("scripts/", "experiments/", "sft_scripts/", "evaluation/", "inference/", "server/", "data/")
# Scripts whose dry run prints the command and runs nothing (DRY_RUN=1, one rule: scripts/knobs.sh).
DRY_RUN_SCRIPTS = re.compile(r"^(sft_scripts/.+\.sh|experiments/train_\w+\.sh|evaluation/(eval_\w+|serve_model)\.sh"
                             r"|inference/inference\.sh|data/\w+\.sh|scripts/(build_llamacpp|install_vllm)\.sh)$")
PYTHONS = {"python", "python3", ".venv/bin/python", ".venv-rl/bin/python", "$PY"}


@dataclasses.dataclass
class Command:
    where: str
    env: dict[str, str]
    argv: list[str]

    def __str__(self) -> str:
        words = [f"{k}={v}" for k, v in self.env.items()] + self.argv
        return f"{self.where}: {shlex.join(words)}"


def _commands() -> list[Command]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for block in BLOCK.finditer(text):
            line_no = text[: block.start()].count("\n") + 2
            body = re.sub(r"\\\n", " ", block.group(1))
            for line in body.splitlines():
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                lexer.commentchars = "#"
                try:
                    words = list(lexer)
                except ValueError as e:  # an unclosed quote
                    raise AssertionError(f"{path.name}:{line_no}: cannot split {line!r}: {e}") from e
                simple: list[str] = []
                for word in [*words, ";"]:
                    if word in ("&&", "||", ";", "|", "&"):
                        if simple:
                            env = {}
                            while simple and ENV_WORD.match(simple[0]):
                                name, _, value = simple.pop(0).partition("=")
                                env[name] = value
                            if simple:
                                found.append(Command(f"{path.relative_to(REPO)}:{line_no}", env, simple))
                        simple = []
                    else:
                        simple.append(word)
    return found


def _kind(c: Command) -> str | None:
    head = c.argv[0]
    if head == "afm":
        return "afm"
    if head == "afm-sft":
        return "afm-sft"
    if head in PYTHONS and len(c.argv) > 2 and c.argv[1] == "-m" and c.argv[2].split(".")[0] == "afm":
        return "module"
    if head in PYTHONS and len(c.argv) > 1 and c.argv[1].endswith(".py"):
        return "file"
    if head == "bash" and len(c.argv) > 1 and c.argv[1].startswith(SCRIPT_DIRS):
        return "script"
    return None


COMMANDS = [c for c in _commands() if _kind(c)]


def test_the_docs_show_commands() -> None:
    kinds = {_kind(c) for c in COMMANDS}
    assert {"afm", "afm-sft", "module", "script"} <= kinds, kinds
    assert len(COMMANDS) > 60


# ---- afm and python -m afm.*: parsed by the command's own parser ---------------------------------------------------
class _Parsed(Exception):
    pass


def _parse_in_process(entry, argv: list[str]) -> str | None:
    """None when ``entry(argv)`` parses its arguments (or prints its help), else what went wrong."""
    real = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        real(self, args, namespace)
        raise _Parsed

    out, err = io.StringIO(), io.StringIO()
    # exact flag names only: argparse would take --benchmark for --benchmarks, and a renamed flag would still pass
    with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop), \
            mock.patch.object(argparse.ArgumentParser, "_get_option_tuples", lambda self, option: []), \
            contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = entry(argv)
        except _Parsed:
            return None
        except SystemExit as e:
            return None if e.code in (0, None) else f"exit {e.code}: {err.getvalue().strip()[-600:]}"
    if rc == 0 and ("--help" in argv or "-h" in argv):
        return None
    return f"returned {rc} without parsing its arguments: {err.getvalue().strip()[-600:]}"


def _check_afm(c: Command) -> str | None:
    from afm.cli import main

    return _parse_in_process(main, c.argv[1:])


def _check_module(c: Command) -> str | None:
    module = importlib.import_module(c.argv[2])
    if not hasattr(module, "main"):
        return f"{c.argv[2]} has no main()"
    return _parse_in_process(module.main, c.argv[3:])


def _llamafactory_fields() -> set[str]:
    pytest.importorskip("llamafactory", reason="LLaMA-Factory (the sft extra) is not installed")
    from llamafactory.hparams.parser import _TRAIN_ARGS

    from afm.sft.overlay import AfmDataArguments

    names = {f.name for f in dataclasses.fields(AfmDataArguments)}
    for cls in _TRAIN_ARGS:
        names |= {f.name for f in dataclasses.fields(cls)}
    return names


def _check_afm_sft(c: Command, fields: set[str]) -> str | None:
    args = c.argv[1:]
    if not args or args[0] in ("-h", "--help"):
        return None
    sub, rest = args[0], args[1:]
    if sub not in ("train", "mask-report"):
        return f"unknown afm-sft command {sub!r}"
    allowed = fields | ({"show", "json"} if sub == "mask-report" else set())
    bad = []
    for word in rest:
        if word.startswith("--"):
            name = word[2:].partition("=")[0]
        elif "=" in word and not word.endswith((".yaml", ".yml", ".json")):
            name = word.partition("=")[0]
        else:
            continue
        if name not in allowed:
            bad.append(name)
    return f"not LLaMA-Factory or afm arguments: {bad}" if bad else None


def test_afm_commands_parse() -> None:
    problems = []
    for c in COMMANDS:
        kind = _kind(c)
        if kind == "afm":
            problem = _check_afm(c)
        elif kind == "module":
            problem = _check_module(c)
        else:
            continue
        if problem:
            problems.append(f"{c}\n    {problem}")
    assert not problems, "\n".join(problems)


def test_afm_sft_commands_name_real_arguments() -> None:
    commands = [c for c in COMMANDS if _kind(c) == "afm-sft"]
    assert commands
    fields = _llamafactory_fields()
    assert "ignore_observation" in fields and "cutoff_len" in fields
    problems = [f"{c}\n    {p}" for c in commands if (p := _check_afm_sft(c, fields))]
    assert not problems, "\n".join(problems)


def test_python_files_exist() -> None:
    missing = [str(c) for c in COMMANDS if _kind(c) == "file" and not (REPO / c.argv[1]).is_file()]
    assert not missing, "\n".join(missing)


# ---- repo scripts: dry run, or --help ----------------------------------------------------------------------------
def _script_env(c: Command) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DRY_RUN"}
    if not (REPO / ".venv-rl" / "bin" / "python").exists():
        env["AFM_RL_VENV"] = sys.prefix  # the RL launcher's dry run needs afm, not verl
    env.update(c.env)
    return env


HELP_ONLY_UNCHECKED = ("scripts/quickstart.sh", "scripts/test.sh", "scripts/test_loaded.sh")  # args go elsewhere


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    try:
        r = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return -1, "", "did not finish in 120 s"
    return r.returncode, r.stdout, r.stderr


def _dry_run(c: Command, scratch: Path) -> str | None:
    env = _script_env(c)
    env["DRY_RUN"] = "1"
    if c.argv[1].startswith("data/") and "OUT_DIR" not in c.env:
        env["OUT_DIR"] = str(scratch / "out")  # prepare_rl.sh demo writes its demo inputs even in a dry run
    if c.argv[1] == "evaluation/serve_model.sh" and "DEVICE" not in c.env and c.env.get("ENGINE") != "llamacpp":
        env["DEVICE"] = "gpu"  # the docs' vLLM commands are for GPU nodes (TP=4): dry-run them as on one
    if c.argv[1] == "evaluation/serve_model.sh" and "VLLM_PYTHON" not in c.env:
        env["VLLM_PYTHON"] = "true"  # skip looking for a python that imports vllm (5-15 s): the dry run only prints
    rc, out, err = _run(c.argv, env)
    return None if rc == 0 else f"exit {rc}: {(out + err).strip()[-800:]}"


def _help(script: str) -> tuple[int, str, str]:
    return _run(["bash", script, "--help"], _script_env(Command("", {}, [])))


def test_script_commands_dry_run_or_help(tmp_path: Path) -> None:
    """Each distinct dry run once, each help-only script's --help once; all in parallel."""
    commands = [c for c in COMMANDS if _kind(c) == "script"]
    problems = [f"{c}\n    no such script" for c in commands if not (REPO / c.argv[1]).is_file()]
    commands = [c for c in commands if (REPO / c.argv[1]).is_file()]
    dry = {str(c).partition(": ")[2]: c for c in commands if DRY_RUN_SCRIPTS.match(c.argv[1])}
    helps = sorted({c.argv[1] for c in commands if not DRY_RUN_SCRIPTS.match(c.argv[1])})
    assert dry and helps
    with ThreadPoolExecutor(max_workers=4) as pool:
        dry_results = dict(zip(dry, pool.map(lambda c: _dry_run(c, tmp_path), dry.values()), strict=True))
        help_results = dict(zip(helps, pool.map(_help, helps), strict=True))
    for c in commands:
        script = c.argv[1]
        if script in help_results:
            rc, out, err = help_results[script]
            if rc != 0:
                problems.append(f"{c}\n    --help: exit {rc}: {(out + err).strip()[-800:]}")
            elif script not in HELP_ONLY_UNCHECKED:
                words = set(re.findall(r"[\w.-]+", out))
                missing = [w for w in c.argv[2:] if not w.startswith("-") and w not in words]
                if missing:
                    problems.append(f"{c}\n    --help does not name {missing}")
        elif problem := dry_results[str(c).partition(": ")[2]]:
            problems.append(f"{c}\n    {problem}")
    assert not problems, "\n".join(problems)


def test_quickstart_script_flags_parse() -> None:
    """``bash scripts/quickstart.sh FLAGS`` passes FLAGS to ``afm quickstart``: its parser must know them."""
    from afm.cli import main

    commands = [c for c in COMMANDS if _kind(c) == "script" and c.argv[1] == "scripts/quickstart.sh"]
    assert commands
    problems = [f"{c}\n    {p}" for c in commands if (p := _parse_in_process(main, ["quickstart", *c.argv[2:]]))]
    assert not problems, "\n".join(problems)
