"""The SFT/DPO settings declared once (afm/launch/sft.py): each default is written in one place, every knob is in
--help and in docs/sft_knobs.md with its default, and the name rules (the original's aliases, misspelt knobs) answer as the bash ones that the
RL scripts still use (scripts/knobs.sh)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
from pathlib import Path

import pytest

from afm.launch.names import apply_aliases, misspelt
from afm.launch.settings import knobs, markdown_table
from afm.launch.sft import ORIGINAL_NAMES, SftSettings, known_names, usage
from afm.launch.values import KnobError

REPO = Path(__file__).resolve().parents[1]


def declared_defaults() -> dict[str, str]:
    """Knob variable -> its default literal, for the defaults a user could type (not booleans, not empty)."""
    return {k.env: f.default for f, k in knobs(SftSettings) if isinstance(f.default, str) and f.default}


def second_literals(root: Path) -> list[str]:
    """Every place under ``root`` where a knob and its declared default are written together, beyond the one
    declaration: in Python a call or dict holding both (``knob("EPOCHS", "4.0")``, ``env.get("EPOCHS", "4.0")``),
    in the shell scripts ``EPOCHS=4.0`` / ``${EPOCHS:-4.0}`` or a table row ``#  EPOCHS  4.0``. A script's own
    values (its AFM_SCRIPT_DEFAULTS list, the original's recipe) are that script's facts, not afm's default."""
    defaults = declared_defaults()
    found = []
    python = [*sorted((root / "afm/launch").glob("*.py")), root / "afm/sft/knobs.py"]
    for path in (p for p in python if p.is_file()):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            elif isinstance(node, ast.Dict):
                words = [k.value for k in (*node.keys, *node.values) if isinstance(k, ast.Constant)
                         and isinstance(k.value, str)]
            else:
                continue
            found += [f"{path.relative_to(root)}:{node.lineno}: {name} {defaults[name]}" for name in words
                      if name in defaults and defaults[name] in words]
    scripts = [*sorted((root / "sft_scripts").glob("**/*.sh")), root / "scripts/knobs.sh"]
    for path in scripts:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("AFM_SCRIPT_DEFAULTS=(") or re.match(r"#\s.*\bbash sft_scripts/", line):
                continue  # a script's own values, or a usage example (what a user types)
            for name, default in defaults.items():
                value = re.escape(default) + r"(?![\w.])"
                if re.search(rf"\b{name}(=|:-|:=)[\"']?{value}|^#\s+{name}\s+(script \()?{value}", line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    declarations = [f for f in found if f.startswith("afm/launch/sft.py:")]
    # The declaration itself is the one allowed per knob.
    for name, default in defaults.items():
        mine = [f for f in declarations if f.endswith(f": {name} {default}")]
        if len(mine) == 1:
            found.remove(mine[0])
    return found


def test_each_default_is_written_once():
    assert len(declared_defaults()) >= 25  # the scan sees the settings
    assert second_literals(REPO) == []


def test_every_declared_default_is_found_where_it_is_declared():
    """The scan finds each declaration (so an empty answer above means no second literal, not a blind scan)."""
    text = (REPO / "afm/launch/sft.py").read_text(encoding="utf-8")
    for name, default in declared_defaults().items():
        assert re.search(rf'knob\(\s*"{name}", ("{re.escape(default)}"|DEFAULT_)', text), name


def test_help_lists_every_knob_with_its_default():
    text = usage("sft_scripts/x.sh", {"MODEL_PATH": "m"}).split("shows how to call it directly.\n", 1)[1]
    for f, k in knobs(SftSettings):
        if k.help is None:
            continue
        row = next((line for line in text.splitlines() if line.startswith(f"  {k.env} ")), None)
        assert row is not None, k.env
        shown = k.shown.format(f.default) if k.shown else str(f.default).lower()
        assert row.split(None, 1)[1].startswith(shown), (k.env, row)
    for old, new in ORIGINAL_NAMES.items():
        assert f"{old} ({new})" in text


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", f'source "{REPO}/scripts/knobs.sh"; {script}'], env={"PATH": "/usr/bin:/bin",
                          "LC_ALL": "C", **env}, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("env", [
    {"LEARNNG_RATE": "1", "EPOHCS": "2", "GRADIENT_ACCUMULATON": "3", "XYZZY": "1", "CUTOFF_LENGTH": "9",
     "PACKNG": "1", "Lower_case": "1", "NNODE": "1", "DATASETS": "a"},
    {"WARMUP_RATO": "0.1", "MASTERADDR": "x", "IGNORE_OBSERVATON": "1", "TEMPLATE": "qwen"},
])
def test_misspelt_knobs_warn_as_the_bash_check_does(env):
    known = known_names()
    bash = _bash(f"afm_warn_unknown_knobs {' '.join(known)}", env)
    expected = [line.removeprefix("[afm] warning: ") for line in bash.stderr.splitlines()]
    assert expected  # the cases hold misspellings
    names = _bash("compgen -e", env).stdout.split()  # what bash sees exported
    assert misspelt(names, known) == expected


@pytest.mark.parametrize("env", [
    {"LEARNING_RATES": '("2e-5")', "DATA_DATA": "x", "TEMPALTE": "qwen3", "TEMPLATE": "qwen"},
    {"BATCH_SIZES": "'2'", "BATCH_SIZE": "2", "ignore_observation": "false"},
    {"GRADIENT_ACCUMULATIONS": "(1 2)"},
    {"OUTPUT_DIR_BASE": ""},
])
def test_the_original_names_apply_as_the_bash_aliases_do(env):
    pairs = " ".join(f"afm_alias {new} {old};" for old, new in ORIGINAL_NAMES.items())
    names = " ".join(sorted({*ORIGINAL_NAMES.values(), *ORIGINAL_NAMES}))
    bash = _bash(f'{pairs} for n in {names}; do [[ -n ${{!n+set}} ]] && echo "$n=${{!n}}"; done; true', env)
    lines = []

    class Out:
        @staticmethod
        def write(text: str) -> None:
            lines.append(text)

        @staticmethod
        def flush() -> None:
            pass

    mine = dict(env)
    try:
        apply_aliases(mine, ORIGINAL_NAMES, out=Out())  # type: ignore[arg-type]
    except KnobError as exc:
        assert bash.returncode == 2 and bash.stderr == "".join(lines) + f"[afm] error: {exc}\n"
        return
    assert bash.returncode == 0, bash.stderr
    assert bash.stderr == "".join(lines)
    assert bash.stdout.split() == [f"{n}={mine[n]}" for n in sorted(mine)]


def test_the_docs_table_is_generated_from_the_settings():
    """docs/sft_knobs.md's table is markdown_table(SftSettings); AFM_RECORD=1 rewrites it."""
    doc = REPO / "docs/sft_knobs.md"
    start, end = "<!-- generated:sft-knobs -->\n", "<!-- /generated -->"
    text = doc.read_text(encoding="utf-8")
    head, rest = text.split(start, 1)
    block, tail = rest.split(end, 1)
    expected = markdown_table(SftSettings)
    if os.environ.get("AFM_RECORD") == "1":
        doc.write_text(head + start + expected + end + tail, encoding="utf-8")
        return
    assert block == expected, "docs/sft_knobs.md is out of date: AFM_RECORD=1 pytest tests/test_launch_settings.py"
