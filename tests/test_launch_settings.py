"""The SFT/DPO settings declared once (afm/launch/sft.py): each default is written in one place, every knob is in
--help and in docs/sft_knobs.md with its default, and the name rules (the original's aliases, misspelt knobs) that
both the SFT and the RL launch apply (afm/launch/names.py). The same for the RL settings (afm/launch/rl.py)."""

from __future__ import annotations

import ast
import io
import os
import re
import sys
from pathlib import Path

import pytest

from afm.launch import rl
from afm.launch.names import apply_aliases, misspelt
from afm.launch.rl import RlSettings
from afm.launch.settings import knobs, markdown_table
from afm.launch.sft import ORIGINAL_NAMES, SftSettings, known_names, usage
from afm.launch.values import KnobError

REPO = Path(__file__).resolve().parents[1]


def declared_defaults() -> dict[str, str]:
    """Knob variable -> its default literal, for the defaults a user could type (not booleans, not empty)."""
    return {k.env: f.default for f, k in knobs(SftSettings) if isinstance(f.default, str) and f.default}


def restated_in_prose(line: str, name: str, value: str) -> bool:
    """Whether a comment line restates ``value`` as the default of knob ``name`` in prose: ``ROLLOUT_N (8)``,
    ``$KL_COEF (0.001)``, ``JOIN_TIMEOUT seconds (300)``, ``$CLIP_RATIO_C (web: 10.0, else 3.0)``, ``N_SAMPLES,
    default 16``, ``REWARD_MANAGER defaults to naive``: a header that should point at --help and docs/*_knobs.md."""
    v = re.escape(value) + r"(?![\w.])"
    return bool(re.search(rf"\b{name}\b(?:[^().;]{{0,30}}\([^()]*(?<![\w.]){v}[^()]*\)|,?\s+default:?\s+{v}"
                          rf"|\s+defaults\s+to\s+{v})", line))


def second_literals(root: Path) -> list[str]:
    """Every place under ``root`` where a knob and its declared default are written together, beyond the one
    declaration: in Python a call or dict holding both (``knob("EPOCHS", "4.0")``, ``env.get("EPOCHS", "4.0")``),
    in the shell scripts ``EPOCHS=4.0`` / ``${EPOCHS:-4.0}``, a table row ``#  EPOCHS  4.0`` or a header's prose
    (:func:`restated_in_prose`). A script's own
    values (its AFM_SCRIPT_DEFAULTS list, the original's recipe) are that script's facts, not afm's default."""
    defaults = declared_defaults()
    found = []
    # afm/launch/rl.py holds the RL recipe's own values (test_each_rl_default_is_written_once checks those)
    python = [*sorted(p for p in (root / "afm/launch").glob("*.py") if p.name != "rl.py"), root / "afm/sft/knobs.py"]
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
                if (re.search(rf"\b{name}(=|:-|:=)[\"']?{value}|^#\s+{name}\s+(script \()?{value}", line)
                        or (line.startswith("#") and restated_in_prose(line, name, default))):
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


def _did_you_mean(*pairs: tuple[str, str]) -> list[str]:
    return [f"{name} is set but is not a knob of this script; did you mean {knob}?" for name, knob in pairs]


@pytest.mark.parametrize(("env", "known", "expected"), [
    # 9+ characters may be 2 edits away, shorter names 1; under 5 characters, lower case or 3 edits: left alone
    ({"LEARNNG_RATE": "1", "EPOHCS": "2", "GRADIENT_ACCUMULATON": "3", "XYZZY": "1", "CUTOFF_LENGTH": "9",
      "PACKNG": "1", "Lower_case": "1", "NNODE": "1", "DATASETS": "a"}, known_names(),
     _did_you_mean(("DATASETS", "DATASET"), ("GRADIENT_ACCUMULATON", "GRADIENT_ACCUMULATION"),
                   ("LEARNNG_RATE", "LEARNING_RATE"), ("NNODE", "NNODES"), ("PACKNG", "PACKING"))),
    ({"WARMUP_RATO": "0.1", "MASTERADDR": "x", "IGNORE_OBSERVATON": "1", "TEMPLATE": "qwen"}, known_names(),
     _did_you_mean(("IGNORE_OBSERVATON", "IGNORE_OBSERVATION"), ("MASTERADDR", "MASTER_ADDR"),
                   ("WARMUP_RATO", "WARMUP_RATIO"))),
    # the RL scripts' names: knobs, the original's (ACTOR_LR) and the ignored GEN_BS are known
    ({"TRAIN_BATCHSIZE": "1", "ROLOUT_N": "2", "N": "3", "GEN_BS": "64", "MAX_TURN": "1", "ACTOR_LRR": "1",
      "STAGES": "1"}, rl.known_names(),
     _did_you_mean(("ACTOR_LRR", "ACTOR_LR"), ("MAX_TURN", "MAX_TURNS"), ("ROLOUT_N", "ROLLOUT_N"),
                   ("STAGES", "STAGE"), ("TRAIN_BATCHSIZE", "TRAIN_BATCH_SIZE"))),
])
def test_misspelt_knobs_are_named_with_the_nearest_knob(env, known, expected):
    assert misspelt(env, known) == expected


NOTE = "[afm] note: the original project's variable names are accepted as aliases of afm's knobs\n"


@pytest.mark.parametrize(("env", "notes", "added"), [
    # the grid-search array forms read as their one value; the knob wins over its original name, warned
    ({"LEARNING_RATES": '("2e-5")', "DATA_DATA": "x", "TEMPALTE": "qwen3", "TEMPLATE": "qwen"},
     NOTE + "[afm]   DATA_DATA -> DATASET=x\n[afm] warning: TEMPALTE (the original's name) is ignored: "
     "TEMPLATE=qwen is also set\n[afm]   LEARNING_RATES -> LEARNING_RATE=2e-5\n",
     {"DATASET": "x", "LEARNING_RATE": "2e-5"}),
    ({"BATCH_SIZES": "'2'", "BATCH_SIZE": "2", "ignore_observation": "false"},  # equal values: nothing to say
     NOTE + "[afm]   ignore_observation -> IGNORE_OBSERVATION=false\n", {"IGNORE_OBSERVATION": "false"}),
    ({"OUTPUT_DIR_BASE": ""}, NOTE + "[afm]   OUTPUT_DIR_BASE -> OUTPUT_DIR=\n", {"OUTPUT_DIR": ""}),
])
def test_the_original_names_apply(env, notes, added):
    out, mine = io.StringIO(), dict(env)
    apply_aliases(mine, ORIGINAL_NAMES, out=out)
    assert out.getvalue() == notes
    assert mine == {**env, **added}


def test_an_original_name_holding_several_values_is_refused():
    with pytest.raises(KnobError, match=r"GRADIENT_ACCUMULATIONS holds several values \(1 2\): one launch trains "
                       "one configuration; set GRADIENT_ACCUMULATION to one of them"):
        apply_aliases({"GRADIENT_ACCUMULATIONS": "(1 2)"}, ORIGINAL_NAMES, out=io.StringIO())


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


# ---- the scripts' own defaults (${NAME:-value}, AFM_DEFAULTS) ---------------------------------------------------------
HEADER_SCRIPTS = ("experiments/*.sh", "configs/verl/*.sh", "sft_scripts/**/*.sh", "evaluation/*.sh", "scripts/*.sh",
                  "inference/*.sh", "data/*.sh")


def header_restatements(root: Path) -> list[str]:
    """Every line of a script's header (its leading comment block, which --help prints) that restates a default the
    script's code writes (``${NAME:-value}``, ``${NAME:=value}``, a word of its ``AFM_DEFAULTS`` or of a per-mode
    ``AFM_DEFAULTS_<mode>``): ``NAME value`` as a table row or one of several on a line (``#   N_SAMPLES 1
    TEMPERATURE 1.0``, ``TOP_P 0.9, TOP_K 20``), ``NAME=value``, or prose (:func:`restated_in_prose`). --help
    prints the AFM_DEFAULTS arrays itself."""
    found = []
    for path in sorted({p for pattern in HEADER_SCRIPTS for p in root.glob(pattern)}):
        text = path.read_text(encoding="utf-8")
        declared: dict[str, set[str]] = {}
        for line in text.splitlines():
            if not line.lstrip().startswith("#"):
                for m in re.finditer(r"\$\{([A-Z][A-Z0-9_]*):[-=]([^}$\"']+)\}", line):
                    declared.setdefault(m.group(1), set()).add(m.group(2))
        for words in re.findall(r"(?:^|(?<=\) ))AFM_DEFAULTS(?:_\w+)?=\(([^)]*)\)", text, re.M):
            for word in words.replace('"', "").split():
                declared.setdefault(word.partition("=")[0], set()).add(word.partition("=")[2])
        for number, line in enumerate(text.splitlines()[1:], 2):
            if not line.startswith("#"):
                break
            if "bash " in line:
                continue  # a usage example: what a user types
            found += [f"{path.relative_to(root)}:{number}: {name}={value}" for name, values in declared.items()
                      for value in values
                      if re.search(rf"(?<![\w$]){name}(\s+|=){re.escape(value)}(?![\w.])", line)
                      or restated_in_prose(line, name, value)]
    return found


def test_script_headers_restate_no_default_of_their_own(tmp_path):
    assert header_restatements(REPO) == []
    (tmp_path / "evaluation").mkdir()
    (tmp_path / "evaluation/serve.sh").write_text(
        '#!/usr/bin/env bash\n# Serves on PORT (10000).\n#   TP 1  PORT 10000\n#   PORT=9 bash evaluation/serve.sh\n'
        '#   N_SAMPLES 32 (web) | 8 (code);  TEMPERATURE 1.0, TOP_K 20\n#   TOP_KK 20  A=1.0  NTEMPERATURE 1.0\n'
        'AFM_DEFAULTS=(PORT=10000\n  TEMPERATURE=1.0)\nAFM_DEFAULTS_code=(N_SAMPLES=8) AFM_DEFAULTS_web=(N_SAMPLES=32)\n'
        'TP="${TP:-1}"\n'
        'TOP_K="${TOP_K:-20}"\n', encoding="utf-8")
    assert sorted(header_restatements(tmp_path)) == [
        "evaluation/serve.sh:2: PORT=10000", "evaluation/serve.sh:3: PORT=10000", "evaluation/serve.sh:3: TP=1",
        "evaluation/serve.sh:5: N_SAMPLES=32",
        "evaluation/serve.sh:5: TEMPERATURE=1.0", "evaluation/serve.sh:5: TOP_K=20"]


# ---- the RL settings (afm/launch/rl.py) ----------------------------------------------------------------------------
def rl_declared() -> dict[str, set[str]]:
    """RL knob variable -> every value afm declares for it: the field's default and the values of the per-task and
    profile layers (TASKS, CODE_STAGES, PPO, LOCAL, CPU, HF_ENGINE), each written once in afm/launch/rl.py."""
    out: dict[str, set[str]] = {}
    for f, k in knobs(RlSettings):
        if isinstance(f.default, str) and f.default:
            out.setdefault(k.env, set()).add(f.default)
    for layer in (*rl.TASKS.values(), *rl.CODE_STAGES.values(), rl.PPO, rl.LOCAL, rl.CPU, rl.HF_ENGINE):
        for name, value in layer.items():
            if value and "{" not in value:
                out.setdefault(name, set()).add(value)
    return out


def rl_second_literals(root: Path) -> list[str]:
    """Every place under ``root`` where an RL knob is written with one of its declared values outside the one
    declaration in afm/launch/rl.py: in Python a call holding both (``k.get("LR", "1e-6")``) or a dict entry
    (``{"TP": "8"}``), in the RL shell files ``TP=8`` / ``${TP:=8}`` / ``${TP:-8}``, a table row ``#   TP   8`` or a
    header's prose (:func:`restated_in_prose`: ``ROLLOUT_N (default 8)``).
    A usage example (a comment line that runs ``bash ...`` or continues one) is what a user types, not a default;
    the SFT settings' own declarations (``knob()`` in afm/launch/sft.py) are another recipe's."""
    declared = rl_declared()
    found = []
    python = [p for p in [*sorted((root / "afm/launch").glob("*.py")), root / "afm/rl/knobs.py"] if p.is_file()]
    for path in python:
        mine = path.name == "rl.py" and path.parent.name == "launch"  # the declarations: the layer dicts
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pairs: list[tuple[str, str]] = []
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") != "knob":
                words = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                pairs = [(name, value) for name in words for value in words if name in declared]
            elif isinstance(node, ast.Dict) and not mine:
                pairs = [(k.value, v.value) for k, v in zip(node.keys, node.values, strict=True)
                         if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)]
            found += [f"{path.relative_to(root)}:{node.lineno}: {name} {value}" for name, value in pairs
                      if value in declared.get(name, ())]
    scripts = [*sorted((root / "experiments").glob("*.sh")), *sorted((root / "configs/verl").glob("*.sh")),
               root / "scripts/knobs.sh"]
    for path in (p for p in scripts if p.is_file()):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.startswith("#") and ("bash " in line or line.endswith("\\")):
                continue
            # In a comment, NAME=value is a restated default when the line lists values (two or more of them);
            # one alone is how a sentence names an option (ROLLOUT_ENGINE=hf).
            listed = not line.startswith("#") or len(re.findall(r"\b[A-Z][A-Z0-9_]*=", line)) >= 2
            for name, values in declared.items():
                for value in values:
                    value_re = re.escape(value) + r"(?![\w.])"
                    if (re.search(rf"\b{name}(:-|:=)[\"']?{value_re}|^#\s+{name}\s+{value_re}", line)
                            or (listed and re.search(rf"\b{name}=[\"']?{value_re}", line))
                            or (line.startswith("#") and restated_in_prose(line, name, value))):
                        found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_each_rl_default_is_written_once():
    assert sum(map(len, rl_declared().values())) >= 100  # the scan sees the settings and the layers
    assert rl_second_literals(REPO) == []


def test_the_rl_scan_finds_a_second_literal(tmp_path):
    """A task default written again in a launch file (as experiments/common.sh once held them all) is found."""
    for folder in ("afm/launch", "afm/rl", "experiments", "configs/verl", "scripts"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "experiments/common.sh").write_text(': "${ROLLOUT_N:=8}" "${TP:=8}"\n#   LR        1e-6\n',
                                                    encoding="utf-8")
    (tmp_path / "afm/rl/knobs.py").write_text('lr = k.get("LR", "1e-6")\nx = {"MAX_TURNS": "25"}\n', encoding="utf-8")
    # header prose as configs/verl/ppo.sh and experiments/ray_cluster.sh held it; a pointer is no copy
    (tmp_path / "configs/verl/ppo.sh").write_text("#   critic.optim.lr=$CRITIC_LR (1e-5), warmup\n"
                                                  "# waits JOIN_TIMEOUT seconds (300) for the nodes\n"
                                                  "# GPUS_PER_NODE (the RL scripts' default)\n", encoding="utf-8")
    found = rl_second_literals(tmp_path)
    assert [line.split(": ", 1)[0] for line in found] == ["afm/rl/knobs.py:1", "afm/rl/knobs.py:2",
                                                          "experiments/common.sh:1", "experiments/common.sh:1",
                                                          "experiments/common.sh:2", "configs/verl/ppo.sh:1",
                                                          "configs/verl/ppo.sh:2"]


@pytest.mark.parametrize(("line", "name", "value", "restated"), [
    ("# the RL group: ROLLOUT_N (default 8)", "ROLLOUT_N", "8", True),
    ("# sampled avg@16 (N_SAMPLES, default 16)", "N_SAMPLES", "16", True),
    ("#   dual clip  actor.clip_ratio_c=$CLIP_RATIO_C (web: 10.0, else 3.0)", "CLIP_RATIO_C", "3.0", True),
    ("#   reward  REWARD_MANAGER defaults to naive (no shaping)", "REWARD_MANAGER", "naive", True),
    ("# ROLLOUT_N (default 16)", "ROLLOUT_N", "1", False),  # another number
    ("# TP (tensor parallel); 8 GPUs", "TP", "8", False),  # the value outside the knob's parentheses
    ("# LEARNING_RATE (see --help; docs/sft_knobs.md)", "LEARNING_RATE", "1e-5", False),
])
def test_header_prose_that_restates_a_default_is_found(line, name, value, restated):
    assert restated_in_prose(line, name, value) is restated


def test_rl_help_lists_every_knob_with_the_scripts_values():
    for task, algorithm, script in (("web", "", "w.sh"), ("mhqa", "ppo", "p.sh"), ("code", "", "c.sh")):
        text = rl.usage(script, task, {"ALGORITHM": algorithm} if algorithm else {})
        values = rl.script_defaults(task, algorithm)
        for _, k in knobs(RlSettings):
            row = next((line for line in text.splitlines() if line.startswith(f"  {k.env} ")), None)
            assert row is not None, k.env
            if k.env in values:
                assert row.split(None, 2)[1] == values[k.env], (task, k.env, row)
        for old, new in rl.ORIGINAL_NAMES.items():
            assert f"{old} ({new})" in " ".join(text.split())
    assert "ROLLOUT_N               1 " in rl.usage("p.sh", "mhqa", {"ALGORITHM": "ppo"})


def test_rl_settings_apply_the_layers_in_order():
    """The caller's value wins over --local, which wins over the task, which wins over the declared default; an
    empty VAL_FILES stays empty (no validation) while an empty TP takes the task's."""
    env = {"ROLLOUT_N": "3", "VAL_FILES": "", "TP": "", "STAGE": "2"}
    settings, given = rl.resolve(env, "code", local=False, work="", caller_names=[])
    assert (settings.rollout_n, settings.val_files, settings.tp) == ("3", "", rl.default("TP"))
    assert settings.max_response_length == rl.CODE_STAGES["2"]["MAX_RESPONSE_LENGTH"] and not given
    local, _ = rl.resolve({"MODEL_PATH": "org/m"}, "code", local=True, work="/w", caller_names=[])
    assert (local.device, local.rollout_engine, local.tp, local.lr) == ("cpu", "hf", "1", rl.default("LR"))
    assert local.rollout_n == rl.LOCAL["ROLLOUT_N"] and local.train_files == "/w/toy_train.parquet"
    ppo, _ = rl.resolve({"ALGORITHM": "ppo"}, "mhqa", local=False, work="", caller_names=[])
    assert (ppo.rollout_n, ppo.experiment_name, ppo.reward_manager) == ("1", "ppo_mhqa_agent", "naive")
    with pytest.raises(KnobError, match="STAGE must be 1"):
        rl.resolve({"STAGE": "3"}, "code", local=False, work="", caller_names=[])


def test_the_rl_docs_tables_are_generated_from_the_settings():
    """docs/rl_knobs.md's tables are markdown_table(RlSettings) and task_table(); AFM_RECORD=1 rewrites them."""
    doc = REPO / "docs/rl_knobs.md"
    text = doc.read_text(encoding="utf-8")
    for marker, expected in (("rl-knobs", markdown_table(RlSettings)), ("rl-tasks", rl.task_table())):
        start, end = f"<!-- generated:{marker} -->\n", "<!-- /generated -->"
        head, rest = text.split(start, 1)
        block, tail = rest.split(end, 1)
        if os.environ.get("AFM_RECORD") == "1":
            text = head + start + expected + end + tail
            continue
        assert block == expected, "docs/rl_knobs.md is out of date: AFM_RECORD=1 pytest tests/test_launch_settings.py"
    if os.environ.get("AFM_RECORD") == "1":
        doc.write_text(text, encoding="utf-8")


def test_the_rl_launch_finds_its_packages_without_importing_them(tmp_path):
    """The launch checks that verl and afm (and vLLM) are there before starting verl, in milliseconds: importing verl
    to check cost ~5 s of a core at every launch (RESULTS.md, 2026-11-29). A package that is there but fails to import
    is verl's driver's to report, with its traceback."""
    from afm.rl.knobs import missing_modules

    (tmp_path / "afm_broken_pkg").mkdir()
    (tmp_path / "afm_broken_pkg" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    assert missing_modules(sys.executable, ["json", "afm_broken_pkg", "afm_no_such_pkg"], env) == ["afm_no_such_pkg"]
    assert missing_modules(str(tmp_path / "no-python"), ["json", "afm"], env) == ["json", "afm"]
