"""The SFT/DPO launch scripts (sft_scripts/*.sh), their data and DeepSpeed configs, and environment.sh.

The scripts are run with bash in a clean environment. DRY_RUN=1 prints the resolved command, which is parsed back
into flags; a fake launcher checks what a real launch exports, logs and returns; the slow tests train the tiny
model through the scripts for real.
"""

from __future__ import annotations

import json
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "sft_scripts"
BASH = shutil.which("bash") or "/bin/bash"

# script -> (stage, default model, default dataset, default output dir under the repo, lr, warmup flag, grad accum,
# epochs, cutoff, nodes); the values are the original project's (docs/original_mapping.md, checked separately).
DEFAULTS = {
    "web_agent/sft_qwen2.5_7b.sh": ("sft", "Qwen/Qwen2.5-7B-Instruct", "web_agent_sft", "saves/AFM-WebAgent-7B-sft",
                                    "1.4e-5", ("warmup_ratio", "0.1"), "16", "4.0", "32768", "1"),
    "web_agent/sft_qwen2.5_32b.sh": ("sft", "Qwen/Qwen2.5-32B-Instruct", "web_agent_sft", "saves/AFM-WebAgent-32B-sft",
                                     "1.4e-5", ("warmup_ratio", "0.1"), "16", "4.0", "32768", "1"),
    "code_agent/sft_qwen2.5_7b.sh": ("sft", "Qwen/Qwen2.5-Coder-7B-Instruct", "code_agent_sft",
                                     "saves/AFM-CodeAgent-7B-sft", "3e-5", ("warmup_steps", "0"), "4", "2.0", "32768",
                                     "1"),
    "code_agent/sft_qwen2.5_32b.sh": ("sft", "Qwen/Qwen2.5-Coder-32B-Instruct", "code_agent_sft",
                                      "saves/AFM-CodeAgent-32B-sft", "1.4e-5", ("warmup_steps", "0"), "4", "2.0",
                                      "32768", "2"),
    "mhqa_agent/sft_qwen2.5_3b.sh": ("sft", "Qwen/Qwen2.5-3B", "mhqa_agent_sft", "saves/AFM-MHQA-Agent-3B-sft",
                                     "1e-5", ("warmup_ratio", "0.03"), "16", "4.0", "5120", "1"),
    "mhqa_agent/sft_qwen2.5_7b.sh": ("sft", "Qwen/Qwen2.5-7B", "mhqa_agent_sft", "saves/AFM-MHQA-Agent-7B-sft",
                                     "2e-5", ("warmup_ratio", "0.03"), "4", "4.0", "5120", "1"),
    "dpo_qwen2.5_32b.sh": ("dpo", "Qwen/Qwen2.5-32B-Instruct", "dpo_demo", "saves/qwen2.5_32b_dpo",
                           "1e-6", ("warmup_steps", "0"), "1", "4.0", "30000", "2"),
}


def run_script(name: str, env: dict[str, str] | None = None, args: tuple[str, ...] = (), dry_run: bool = True,
               cwd: Path | None = None, home: Path | None = None) -> subprocess.CompletedProcess:
    """Run a script with bash in a clean environment (only PATH and HOME, plus ``env``)."""
    full = {"PATH": "/usr/bin:/bin", "HOME": str(home or REPO)}
    if dry_run:
        full["DRY_RUN"] = "1"
    full.update(env or {})
    return subprocess.run([BASH, str(SCRIPTS / name), *args], env=full, cwd=cwd or REPO, capture_output=True,
                          text=True, timeout=120)


def command_args(stdout: str) -> list[str]:
    """The printed command (after '[afm] command:'), as an argv list."""
    text = stdout.split("[afm] command:\n", 1)[1]
    return shlex.split(text.replace("\\\n", " "))


def flags(argv: list[str]) -> dict[str, str]:
    """``--key value`` pairs of an argv (every flag the scripts print carries a value)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        if argv[i].startswith("--"):
            out[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            i += 1
    return out


def printed_env(stdout: str) -> dict[str, str]:
    """The '[afm] environment:' block of a dry run."""
    if "[afm] environment:\n" not in stdout:
        return {}
    block = stdout.split("[afm] environment:\n", 1)[1].split("[afm] command:", 1)[0]
    return dict(line.strip().split("=", 1) for line in block.splitlines() if line.strip())


def dry(name: str, **env: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    proc = run_script(name, env)
    assert proc.returncode == 0, proc.stderr
    argv = command_args(proc.stdout)
    return flags(argv), printed_env(proc.stdout), argv


# ---- syntax and defaults ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*sorted(SCRIPTS.glob("**/*.sh")), REPO / "environment.sh"],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_bash_syntax(path):
    proc = subprocess.run([BASH, "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_dry_run_defaults(name):
    stage, model, dataset, output, lr, (warmup_flag, warmup), grad_accum, epochs, cutoff, nodes = DEFAULTS[name]
    f, env, argv = dry(name, CUDA_VISIBLE_DEVICES="0", MASTER_ADDR="10.0.0.1")
    assert argv[1] == "train" and argv[0].endswith("afm-sft")
    assert f["stage"] == stage
    assert f["model_name_or_path"] == model
    assert f["dataset"] == dataset
    assert f["output_dir"] == str(REPO / output)
    assert f["dataset_dir"] == str(REPO / "data")
    assert f["finetuning_type"] == "full"
    assert f["template"] == "qwen"
    assert f["learning_rate"] == lr
    assert f[warmup_flag] == warmup and len({"warmup_ratio", "warmup_steps"} & set(f)) == 1
    assert f["per_device_train_batch_size"] == "1"
    assert f["gradient_accumulation_steps"] == grad_accum
    assert f["num_train_epochs"] == epochs
    assert f["cutoff_len"] == cutoff
    assert f["flash_attn"] in ("fa2", "sdpa")
    assert f["bf16"] == "true" and "fp16" not in f
    assert f["deepspeed"] == str(REPO / "configs/deepspeed/ds_z3_config.json")
    assert f["report_to"] == "none" and "use_swanlab" not in f
    assert f["ignore_observation"] == "true"
    assert f["ignore_observation_token"] == "observation"
    assert f["ignore_observation_check"] == "observation"
    assert f["save_only_model"] == "true"
    if stage == "dpo":
        assert f["pref_beta"] == "0.1" and f["pref_loss"] == "sigmoid"
        assert "packing" not in f
    else:
        assert f["packing"] == "false"
        assert "pref_beta" not in f
    # One GPU, but DeepSpeed needs a distributed launch: torchrun with one process.
    assert env["FORCE_TORCHRUN"] == "1" and env["NPROC_PER_NODE"] == "1" and env["NNODES"] == nodes
    assert env["CUDA_VISIBLE_DEVICES"] == "0"


def test_dry_run_prints_one_flag_per_line():
    proc = run_script("web_agent/sft_qwen2.5_32b.sh", {"CUDA_VISIBLE_DEVICES": "0"})
    lines = proc.stdout.split("[afm] command:\n", 1)[1].splitlines()
    assert lines[0].endswith(" train \\")
    assert all(line.startswith("    --") for line in lines[1:])


def test_dry_run_from_another_directory(tmp_path):
    proc = run_script("dpo_qwen2.5_32b.sh", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    f = flags(command_args(proc.stdout))
    assert Path(f["deepspeed"]).is_file()
    assert Path(f["dataset_dir"], "dataset_info.json").is_file()
    assert not (tmp_path / "saves").exists()


def test_help_lists_every_knob():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", args=("--help",), dry_run=False)
    assert proc.returncode == 0
    for knob in ("MODEL_PATH", "OUTPUT_DIR", "DATASET", "DATASET_DIR", "TEMPLATE", "LEARNING_RATE", "BATCH_SIZE",
                 "GRADIENT_ACCUMULATION", "EPOCHS", "PRECISION", "CUTOFF_LEN", "CUDA_VISIBLE_DEVICES", "NNODES",
                 "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "DEEPSPEED_CONFIG", "REPORT_TO",
                 "IGNORE_OBSERVATION", "IGNORE_OBSERVATION_TOKEN", "PACKING", "PREF_BETA", "PREF_LOSS", "EXTRA_ARGS",
                 "DRY_RUN", "MASK_REPORT", "AFM_SFT"):
        assert f"\n  {knob} " in proc.stdout, knob
    defaults = proc.stdout.split("defaults of this script:\n", 1)[1].split("\n\n", 1)[0]
    assert "LEARNING_RATE            1.4e-5" in defaults and "WARMUP_RATIO             0.1" in defaults
    assert "MODEL_PATH               Qwen/Qwen2.5-7B-Instruct" in defaults


# ---- overrides -------------------------------------------------------------------------------------------------


def test_env_overrides():
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", LEARNING_RATE="5e-6", BATCH_SIZE="2", GRADIENT_ACCUMULATION="16",
                  EPOCHS="2", CUTOFF_LEN="8192", MODEL_PATH="/models/q7", OUTPUT_DIR="/runs/x", DATASET="code_agent_sft",
                  TEMPLATE="qwen3", IGNORE_OBSERVATION_TOKEN="tool_response", IGNORE_OBSERVATION_CHECK="tags",
                  PACKING="1")
    expected = {"learning_rate": "5e-6", "per_device_train_batch_size": "2", "gradient_accumulation_steps": "16",
                "num_train_epochs": "2", "cutoff_len": "8192", "model_name_or_path": "/models/q7",
                "output_dir": "/runs/x", "dataset": "code_agent_sft", "template": "qwen3",
                "ignore_observation_token": "tool_response", "ignore_observation_check": "tags", "packing": "true"}
    assert {flag: f.get(flag) for flag in expected} == expected


@pytest.mark.parametrize(("precision", "present", "absent"), [
    ("bf16", "bf16", "fp16"), ("fp16", "fp16", "bf16"), ("fp32", None, "bf16"),
])
def test_precision(precision, present, absent):
    f, _, _ = dry("mhqa_agent/sft_qwen2.5_3b.sh", PRECISION=precision)
    if present:
        assert f[present] == "true"
    assert absent not in f
    if precision == "fp32":
        assert "fp16" not in f


def test_dpo_knobs():
    f, _, _ = dry("dpo_qwen2.5_32b.sh", PREF_BETA="0.05", PREF_LOSS="ipo", DATASET="afm_dpo")
    assert (f["pref_beta"], f["pref_loss"], f["dataset"]) == ("0.05", "ipo", "afm_dpo")


def test_observation_masking_can_be_switched_off():
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", IGNORE_OBSERVATION="false")
    assert f["ignore_observation"] == "false"
    assert "ignore_observation_token" not in f


def test_deepspeed_config_choice():
    f, env, _ = dry("web_agent/sft_qwen2.5_32b.sh", CUDA_VISIBLE_DEVICES="0",
                    DEEPSPEED_CONFIG=str(REPO / "configs/deepspeed/ds_z3_offload_config.json"))
    assert f["deepspeed"].endswith("ds_z3_offload_config.json")
    f, env, _ = dry("web_agent/sft_qwen2.5_32b.sh", CUDA_VISIBLE_DEVICES="0", DEEPSPEED_CONFIG="")
    assert "deepspeed" not in f
    assert "FORCE_TORCHRUN" not in env  # one process, no DeepSpeed: plain launch


@pytest.mark.parametrize(("report_to", "expected", "swanlab"), [
    ("wandb", "wandb", False), ("tensorboard", "tensorboard", False), ("swanlab", "none", True),
    ("swanlab,wandb", "wandb", True), ("none", "none", False),
])
def test_report_to(report_to, expected, swanlab):
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", REPORT_TO=report_to)
    assert f["report_to"] == expected
    assert (f.get("use_swanlab") == "true") is swanlab


def test_swanlab_settings_are_passed_and_the_key_is_never_printed():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"REPORT_TO": "swanlab", "SWANLAB_API_KEY": "sk-secret-123",
                                            "SWANLAB_PROJECT": "afm-web", "SWANLAB_RUN_NAME": "run1"})
    assert proc.returncode == 0, proc.stderr
    f = flags(command_args(proc.stdout))
    assert f["swanlab_project"] == "afm-web" and f["swanlab_run_name"] == "run1"
    assert "swanlab_workspace" not in f and "swanlab_api_key" not in f
    assert "sk-secret-123" not in proc.stdout + proc.stderr
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", REPORT_TO="swanlab")
    assert "swanlab_project" not in f


def test_extra_args_and_script_arguments_come_last():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"EXTRA_ARGS": "--max_samples 100  --learning_rate 2e-6"},
                      args=("--seed", "7"))
    assert proc.returncode == 0, proc.stderr
    argv = command_args(proc.stdout)
    assert argv[-6:] == ["--max_samples", "100", "--learning_rate", "2e-6", "--seed", "7"]


# ---- processes, nodes, torchrun --------------------------------------------------------------------------------


def test_multi_node_sets_torchrun_env():
    _, env, _ = dry("web_agent/sft_qwen2.5_32b.sh", NNODES="2", NODE_RANK="1", MASTER_ADDR="10.0.0.1", MASTER_PORT="29600",
                    CUDA_VISIBLE_DEVICES="0,1,2,3,4,5,6,7", DEEPSPEED_CONFIG="")
    assert env["FORCE_TORCHRUN"] == "1"
    assert (env["NNODES"], env["NODE_RANK"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("2", "1", "10.0.0.1", "29600")
    assert env["NPROC_PER_NODE"] == "8"


def test_nnodes_2_alone_forces_torchrun():
    _, env, _ = dry("web_agent/sft_qwen2.5_7b.sh", NNODES="2", DEEPSPEED_CONFIG="", CUDA_VISIBLE_DEVICES="0")
    assert env["FORCE_TORCHRUN"] == "1" and env["NNODES"] == "2"


def test_processes_follow_visible_gpus():
    _, env, _ = dry("web_agent/sft_qwen2.5_7b.sh", CUDA_VISIBLE_DEVICES="2,3", DEEPSPEED_CONFIG="")
    assert env["FORCE_TORCHRUN"] == "1" and env["NPROC_PER_NODE"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    _, env, _ = dry("web_agent/sft_qwen2.5_7b.sh", CUDA_VISIBLE_DEVICES="0,1,2,3", NPROC_PER_NODE="2")
    assert env["NPROC_PER_NODE"] == "2"


def test_unset_cuda_visible_devices_is_not_invented():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh")
    assert "CUDA_VISIBLE_DEVICES" not in printed_env(proc.stdout)


# ---- bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("env", "args", "message"), [
    ({"PRECISION": "fp8"}, (), "PRECISION must be bf16, fp16 or fp32 (got 'fp8')"),
    ({"NNODES": "2", "NODE_RANK": "2"}, (), "NODE_RANK must be 0 .. NNODES-1"),
    ({"NNODES": "zero"}, (), "NNODES must be a positive integer"),
    ({"REPORT_TO": "mlflow"}, (), "REPORT_TO must be none, swanlab, wandb or tensorboard"),
    ({"DATASET": "no_such_set"}, (), "dataset 'no_such_set' is not in"),
    ({"DEEPSPEED_CONFIG": "/nonexistent/ds.json"}, (), "DEEPSPEED_CONFIG file not found"),
    ({"IGNORE_OBSERVATION": "maybe"}, (), "IGNORE_OBSERVATION must be true or false"),
    ({"IGNORE_OBSERVATION_TOKEN": "<observation>"}, (), "bare tag name"),
    ({"LEARNING_RATE": "fast"}, (), "LEARNING_RATE must be a number"),
    ({"BATCH_SIZE": "0"}, (), "BATCH_SIZE must be a positive integer"),
    ({"MASTER_PORT": "70000"}, (), "MASTER_PORT must be a port number"),
    ({"PREF_LOSS": "dpo"}, (), "PREF_LOSS must be one of"),
    ({"DATASET_DIR": "/nonexistent"}, (), "no dataset_info.json"),
    ({}, ("--output_dir", "/tmp/with space"), "contains whitespace"),
])
def test_bad_input_fails_with_a_clear_message(env, args, message):
    name = "dpo_qwen2.5_32b.sh" if "PREF_LOSS" in env else "web_agent/sft_qwen2.5_7b.sh"
    proc = run_script(name, env, args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "[afm] command:" not in proc.stdout


def test_datasets_are_looked_up_as_dataset_info_keys_not_by_text(tmp_path):
    # A name that appears in dataset_info.json only as a field ("file_name", "columns") is no dataset.
    for name in ("file_name", "columns"):
        proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"DATASET": name})
        assert proc.returncode == 2 and f"dataset '{name}' is not in" in proc.stderr
    (tmp_path / "dataset_info.json").write_text('{"a": {"file_name": "a.json"},')
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"DATASET_DIR": str(tmp_path), "DATASET": "a"})
    assert proc.returncode == 2 and "is not readable JSON" in proc.stderr


def test_the_settings_module_prints_the_exact_command_the_script_does():
    """afm/launch/sft.py is what the scripts run: called directly (also by its old name afm.sft.knobs), its dry run
    is the script's, word for word."""
    env = {"CUDA_VISIBLE_DEVICES": "0", "LEARNING_RATE": "2e-6", "AFM_SFT": "/opt/afm/bin/afm-sft"}
    script = run_script("code_agent/sft_qwen2.5_7b.sh", env)
    for name in ("afm.launch.sft", "afm.sft.knobs"):
        module = subprocess.run(
            [sys.executable, "-m", name, "--dry-run", "--stage=sft",
             "--script=sft_scripts/code_agent/sft_qwen2.5_7b.sh",
             f"--root={REPO}", f"--cwd={REPO}", "--model=Qwen/Qwen2.5-Coder-7B-Instruct",
             "--output=saves/AFM-CodeAgent-7B-sft", "--dataset=code_agent_sft", "--default=LEARNING_RATE=3e-5",
             "--default=GRADIENT_ACCUMULATION=4", "--default=EPOCHS=2.0", "--launcher=/opt/afm/bin/afm-sft"],
            env={"PATH": "/usr/bin:/bin", "HOME": str(REPO), **env}, cwd=REPO, capture_output=True, text=True,
            timeout=60)
        assert module.returncode == 0, (name, module.stderr)
        assert module.stdout == script.stdout, name
        assert flags(command_args(module.stdout))["learning_rate"] == "2e-6"  # the knob wins over the script default


# ---- a real launch, with a fake launcher -----------------------------------------------------------------------


FAKE_LAUNCHER = """#!/usr/bin/env bash
echo "fake-launcher args: $*"
echo "fake-launcher env: FORCE_TORCHRUN=${FORCE_TORCHRUN:-} NNODES=${NNODES:-} NPROC_PER_NODE=${NPROC_PER_NODE:-}"
echo "fake-launcher stderr line" >&2
exit "${FAKE_EXIT:-0}"
"""


@pytest.fixture
def fake_launcher(tmp_path) -> Path:
    path = tmp_path / "bin" / "fake-afm-sft"
    path.parent.mkdir()
    path.write_text(FAKE_LAUNCHER)
    path.chmod(0o755)
    return path


def test_launch_logs_exports_and_returns_the_status(tmp_path, fake_launcher):
    out = tmp_path / "run"
    # DEEPSPEED_CONFIG="": the fake launcher's python has no deepspeed (a real launch would refuse to start).
    env = {"AFM_SFT": str(fake_launcher), "OUTPUT_DIR": str(out), "NNODES": "2", "MASTER_ADDR": "10.0.0.1",
           "CUDA_VISIBLE_DEVICES": "0,1", "DEEPSPEED_CONFIG": ""}
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", env, dry_run=False)
    assert proc.returncode == 0, proc.stderr
    assert "fake-launcher env: FORCE_TORCHRUN=1 NNODES=2 NPROC_PER_NODE=2" in proc.stdout
    log = (out / "training.log").read_text()
    assert "[afm] command:" in log and "--stage sft" in log
    assert "fake-launcher args: train --model_name_or_path Qwen/Qwen2.5-7B-Instruct" in log
    assert "fake-launcher stderr line" in log  # stderr is logged too

    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {**env, "FAKE_EXIT": "3"}, dry_run=False)
    assert proc.returncode == 3
    assert (out / "training.log").read_text().count("[afm] =====") == 2  # appended, not overwritten


@pytest.mark.parametrize("name", ["web_agent/sft_qwen2.5_7b.sh", "dpo_qwen2.5_32b.sh"])
def test_the_dry_run_argument_prints_and_starts_nothing(tmp_path, fake_launcher, name):
    """`--dry-run` is DRY_RUN=1 (as in the RL scripts): before, it was handed on to LLaMA-Factory and trained."""
    out = tmp_path / "out"
    env = {"AFM_SFT": str(fake_launcher), "OUTPUT_DIR": str(out), "CUDA_VISIBLE_DEVICES": "0", "DEEPSPEED_CONFIG": ""}
    proc = run_script(name, env, args=("--dry-run",), dry_run=False)
    assert proc.returncode == 0, proc.stderr
    assert "[afm] command:" in proc.stdout and "--dry-run" not in command_args(proc.stdout)
    assert "fake-launcher args" not in proc.stdout and not out.exists()  # nothing started, no log written
    # other arguments still reach LLaMA-Factory, in their order
    proc = run_script(name, env, args=("--max_samples", "8", "--dry-run"), dry_run=False)
    assert flags(command_args(proc.stdout))["max_samples"] == "8" and not out.exists()


def test_other_node_ranks_log_to_their_own_file(tmp_path, fake_launcher):
    out = tmp_path / "run"
    env = {"AFM_SFT": str(fake_launcher), "OUTPUT_DIR": str(out), "NNODES": "2", "NODE_RANK": "1",
           "MASTER_ADDR": "10.0.0.1", "DEEPSPEED_CONFIG": ""}
    assert run_script("web_agent/sft_qwen2.5_7b.sh", env, dry_run=False).returncode == 0
    assert (out / "training.node1.log").is_file() and not (out / "training.log").exists()


def test_missing_launcher_is_reported(tmp_path):
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"AFM_SFT": "no-such-afm-sft", "OUTPUT_DIR": str(tmp_path / "o")},
                      dry_run=False)
    assert proc.returncode != 0
    assert "'no-such-afm-sft' not found" in proc.stderr


def test_mask_report_mode_dry_run():
    proc = run_script("dpo_qwen2.5_32b.sh", {"MASK_REPORT": "2"})
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.split("\n", 1)[1].replace("\\\n", " "))
    assert argv[1:4] == ["mask-report", "--show", "2"]
    f = flags(argv[2:])
    assert f["stage"] == "dpo" and f["ignore_observation"] == "true"
    for train_only in ("deepspeed", "bf16", "report_to"):
        assert train_only not in f


# ---- data and DeepSpeed configs --------------------------------------------------------------------------------


def test_dataset_info():
    from afm.demo_content.samples import DATASET_INFO

    info = json.loads((REPO / "data" / "dataset_info.json").read_text())
    for name, entry in info.items():
        cols = entry["columns"]
        assert entry.get("formatting", "alpaca") == "alpaca", name
        assert cols["prompt"] == "instruction" and cols["query"] == "input", name
        if entry.get("ranking"):
            assert cols["chosen"] == "chosen" and cols["rejected"] == "rejected", name
            assert "response" not in cols, name
        else:
            assert cols["response"] == "output", name
    assert {n for n, e in info.items() if e.get("ranking")} >= {"dpo_demo", "afm_dpo", "afm_demo_dpo"}
    for name, entry in DATASET_INFO.items():
        assert info[name] == entry
    for _stage, _model, dataset, *_ in DEFAULTS.values():
        assert dataset in info
    assert info["dpo_demo"]["ranking"] is True


def test_demo_data_writer_keeps_the_shipped_entries(tmp_path):
    from afm.demo_content.samples import write_demo_data

    shutil.copy(REPO / "data" / "dataset_info.json", tmp_path / "dataset_info.json")
    write_demo_data(tmp_path, n_sft=2, n_dpo=2, broken=0)
    info = json.loads((tmp_path / "dataset_info.json").read_text())
    assert {"web_agent_sft", "mhqa_agent_sft", "code_agent_sft", "dpo_demo", "afm_dpo"} <= set(info)


@pytest.mark.parametrize("name", ["ds_z3_config.json", "ds_z3_offload_config.json"])
def test_deepspeed_configs(name):
    cfg = json.loads((REPO / "configs" / "deepspeed" / name).read_text())
    zero = cfg["zero_optimization"]
    assert zero["stage"] == 3
    assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    assert zero["overlap_comm"] is True and zero["contiguous_gradients"] is True
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        assert cfg[key] == "auto"
    assert cfg["bf16"]["enabled"] == "auto" and cfg["fp16"]["enabled"] == "auto"
    offload = name == "ds_z3_offload_config.json"
    for part in ("offload_optimizer", "offload_param"):
        assert (zero.get(part, {}).get("device") == "cpu") is offload


# ---- environment.sh --------------------------------------------------------------------------------------------


def _sourced(env: dict[str, str], names: list[str]) -> dict[str, str]:
    script = "set -u; source environment.sh; " + "; ".join(f'echo "{n}=${{{n}-<unset>}}"' for n in names)
    proc = subprocess.run([BASH, "-c", script], env={"PATH": "/usr/bin:/bin", "HOME": "/home/u", **env}, cwd=REPO,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


def test_environment_defaults_and_no_secrets():
    text = (REPO / "environment.sh").read_text()
    names = sorted({line.split("=", 1)[0].removeprefix("export ").strip()
                    for line in text.splitlines() if line.startswith("export ")})
    for required in ("WEB_SEARCH_SERPER_API_KEY", "JINA_API_KEY", "SERVER_HOST", "WEBSEARCH_PORT", "CRAWL_PAGE_PORT",
                     "WIKI_RAG_PORT", "SUMMARY_OPENAI_API_BASE_URL", "SUMMARY_OPENAI_API_KEY", "SUMMARY_MODEL",
                     "GRM_BASE_URL", "GRM_API_KEY", "GRM_MODEL_NAME", "NSJAIL_PATH", "SWANLAB_PROJECT",
                     "WANDB_PROJECT", "HF_HOME", "AFM_VENV", "AFM_MODEL_PATH"):
        assert required in names, required
    values = _sourced({}, [*names, "SWANLAB_API_KEY", "WANDB_API_KEY", "HF_TOKEN"])
    for name, value in values.items():
        if name.endswith(("_KEY", "_TOKEN")):
            assert value in ("", "<unset>"), name
    assert values["SERVER_HOST"] == "127.0.0.1"
    assert (values["WEBSEARCH_PORT"], values["CRAWL_PAGE_PORT"], values["WIKI_RAG_PORT"]) == ("9001", "9000", "8000")
    assert values["HF_HOME"] == "/home/u/.cache/huggingface"


def test_environment_keeps_values_already_set():
    values = _sourced({"SERVER_HOST": "10.1.2.3", "JINA_API_KEY": "jina-x", "WANDB_API_KEY": "w-key"},
                      ["SERVER_HOST", "JINA_API_KEY", "WANDB_API_KEY", "WIKI_RAG_SERVER_URL"])
    assert values["SERVER_HOST"] == "10.1.2.3"
    assert values["JINA_API_KEY"] == "jina-x" and values["WANDB_API_KEY"] == "w-key"
    assert values["WIKI_RAG_SERVER_URL"] == "http://10.1.2.3:8000/retrieve"


def test_environment_refuses_to_be_executed():
    proc = subprocess.run([BASH, str(REPO / "environment.sh")], capture_output=True, text=True)
    assert proc.returncode != 0 and "source environment.sh" in proc.stderr


# ---- real runs on the tiny model -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tiny_env(tiny_model: Path, demo_data: Path, out: Path, dataset: str) -> dict[str, str]:
    return {
        "AFM_SFT": f"{sys.executable} -m afm.sft.cli", "MODEL_PATH": str(tiny_model), "DATASET_DIR": str(demo_data),
        "DATASET": dataset, "OUTPUT_DIR": str(out), "PRECISION": "fp32", "DEEPSPEED_CONFIG": "",
        "CUTOFF_LEN": "1024", "PREPROCESSING_NUM_WORKERS": "1", "GRADIENT_ACCUMULATION": "1", "EPOCHS": "1",
        "CUDA_VISIBLE_DEVICES": "", "MASTER_PORT": str(_free_port()), "EXTRA_ARGS": "--max_steps 2", "NNODES": "1",
        "SAVE_STRATEGY": "no",
    }


@pytest.mark.slow
def test_sft_script_trains_the_tiny_model(tiny_model, demo_data, tmp_path):
    out = tmp_path / "sft"
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", _tiny_env(tiny_model, demo_data, out, "afm_demo_sft"), dry_run=False,
                      home=tmp_path)
    log = (out / "training.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert (out / "model.safetensors").is_file()
    report = json.loads((out / "afm_mask_report_train.json").read_text())
    assert report["drops"] == {"unclosed_observation": 2}
    assert 0 < report["tokens_masked"] < report["tokens_target"]
    assert "[afm] observation masking" in log


@pytest.mark.slow
def test_dpo_script_trains_with_torchrun(tiny_model, demo_data, tmp_path):
    out = tmp_path / "dpo"
    env = {**_tiny_env(tiny_model, demo_data, out, "afm_demo_dpo"), "NPROC_PER_NODE": "2"}
    proc = run_script("dpo_qwen2.5_32b.sh", env, dry_run=False, home=tmp_path)
    log = (out / "training.log").read_text()
    assert proc.returncode == 0, log[-3000:]
    assert "world size: 2" in log  # two torchrun workers, each with the overlay applied
    assert (out / "model.safetensors").is_file()
    assert json.loads((out / "afm_mask_report_train.json").read_text())["tokens_masked"] > 0


@pytest.mark.slow
def test_mask_report_mode_runs(tiny_model, demo_data, tmp_path):
    env = {**_tiny_env(tiny_model, demo_data, tmp_path / "mr", "afm_demo_sft"), "MASK_REPORT": "1",
           "PRECISION": "bf16"}  # precision is a training flag: the report must not trip over bf16 on CPU
    proc = run_script("mhqa_agent/sft_qwen2.5_3b.sh", env, dry_run=False, home=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "samples   seen 26  kept 24  dropped 2" in proc.stdout
    assert "⟦<observation>" in proc.stdout


# ---- the original project's names, multi-node rank, warmup, attention, DeepSpeed --------------------------------


ORIGINAL_SFT_NAMES = {  # original name -> (value, afm flag it must reach)
    "DATA_DATA": ("code_agent_sft", "dataset"),
    "TEMPALTE": ("qwen3", "template"),
    "LEARNING_RATES": ('("2e-5")', "learning_rate"),
    "WARMUP_RATIOS": ("0.05", "warmup_ratio"),
    "GRADIENT_ACCUMULATIONS": ("(2)", "gradient_accumulation_steps"),
    "BATCH_SIZES": ("2", "per_device_train_batch_size"),
}


@pytest.mark.parametrize("name", sorted(ORIGINAL_SFT_NAMES))
def test_original_variable_names_are_honoured(name):
    value, flag = ORIGINAL_SFT_NAMES[name]
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {name: value, "CUDA_VISIBLE_DEVICES": "0"})
    assert proc.returncode == 0, proc.stderr
    f = flags(command_args(proc.stdout))
    assert f[flag] == value.strip("()\"")
    assert "original project's variable names are accepted as aliases" in proc.stderr
    assert f"{name} -> " in proc.stderr


def test_an_original_grid_of_several_values_is_refused():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"LEARNING_RATES": '("1e-5" "2e-5")'})
    assert proc.returncode == 2 and "LEARNING_RATES holds several values" in proc.stderr


def test_afm_name_wins_over_the_original_name():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"LEARNING_RATE": "3e-6", "LEARNING_RATES": "9e-6"})
    assert flags(command_args(proc.stdout))["learning_rate"] == "3e-6"
    assert "LEARNING_RATES (the original's name) is ignored" in proc.stderr


def test_a_misspelt_knob_is_reported():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"LEARNNG_RATE": "3e-6", "GRADIENT_ACUMULATION": "2"})
    assert proc.returncode == 0
    assert "LEARNNG_RATE is set but is not a knob of this script; did you mean LEARNING_RATE?" in proc.stderr
    assert "GRADIENT_ACUMULATION is set but is not a knob of this script; did you mean GRADIENT_ACCUMULATION?" in proc.stderr
    assert "is not a knob" not in run_script("web_agent/sft_qwen2.5_7b.sh", {"HOSTNAME": "x"}).stderr


def test_node_rank_defaults_to_rank():
    _, env, _ = dry("web_agent/sft_qwen2.5_7b.sh", RANK="1", NNODES="2", MASTER_ADDR="10.0.0.1")
    assert env["NODE_RANK"] == "1"
    _, env, _ = dry("web_agent/sft_qwen2.5_7b.sh", RANK="1", NODE_RANK="0", NNODES="2", MASTER_ADDR="10.0.0.1")
    assert env["NODE_RANK"] == "0"


def test_warmup_steps_win_over_the_ratio():
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", WARMUP_STEPS="5")
    assert f["warmup_steps"] == "5" and "warmup_ratio" not in f
    f, _, _ = dry("code_agent/sft_qwen2.5_7b.sh", WARMUP_RATIO="0.2")
    assert f["warmup_ratio"] == "0.2" and "warmup_steps" not in f
    assert "WARMUP_RATIO must be a fraction" in run_script("web_agent/sft_qwen2.5_7b.sh", {"WARMUP_RATIO": "2"}).stderr


def test_attention_choice_is_printed():
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"CUDA_VISIBLE_DEVICES": ""})
    assert flags(command_args(proc.stdout))["flash_attn"] == "sdpa"
    assert "[afm] attention: sdpa (no GPU visible)" in proc.stdout
    f, _, _ = dry("web_agent/sft_qwen2.5_7b.sh", ATTN_IMPL="eager")
    assert f["flash_attn"] == "disabled"
    assert "ATTN_IMPL must be" in run_script("web_agent/sft_qwen2.5_7b.sh", {"ATTN_IMPL": "flash"}).stderr


def test_missing_deepspeed_is_reported(tmp_path):
    # The launcher's python (the shared .venv) has no deepspeed: the dry run warns, a real launch refuses.
    pytest.importorskip("llamafactory")
    import importlib.util
    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    proc = run_script("web_agent/sft_qwen2.5_32b.sh")
    assert proc.returncode == 0
    assert "deepspeed package is not installed" in proc.stderr and ".[deepspeed]" in proc.stderr
    proc = run_script("web_agent/sft_qwen2.5_32b.sh", {"OUTPUT_DIR": str(tmp_path / "o")}, dry_run=False)
    assert proc.returncode == 2 and "deepspeed package is not installed" in proc.stderr
    assert not (tmp_path / "o").exists()
    assert "deepspeed" not in run_script("web_agent/sft_qwen2.5_32b.sh", {"DEEPSPEED_CONFIG": ""}).stderr


@pytest.mark.parametrize("size", ["3b", "7b", "32b"])
def test_the_old_single_scripts_point_to_the_per_agent_ones(size):
    proc = run_script(f"sft_qwen2.5_{size}.sh")
    assert proc.returncode == 2 and "[afm] command:" not in proc.stdout
    named = [line.split()[-1] for line in proc.stderr.splitlines() if line.startswith("  bash ")]
    assert named and all((REPO / p).is_file() for p in named)
    assert run_script(f"sft_qwen2.5_{size}.sh", args=("--help",)).returncode == 0


def test_sft_outputs_are_where_the_rl_scripts_start():
    from afm.launch.rl import TASKS  # the RL tasks' starting policies, declared once

    for script, task in (("web_agent/sft_qwen2.5_32b.sh", "web"), ("code_agent/sft_qwen2.5_32b.sh", "code"),
                         ("mhqa_agent/sft_qwen2.5_7b.sh", "mhqa")):
        assert TASKS[task]["MODEL_PATH"] == DEFAULTS[script][3], script


# ---- docs/original_mapping.md: the tables are what the scripts do ----------------------------------------------

import re  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from mapping_table import backticked, read_table, reason_given, same  # noqa: E402
from mapping_table import value as cell_value  # noqa: E402

COLUMN_SCRIPTS = {"web 7b": "web_agent/sft_qwen2.5_7b.sh", "web 32b": "web_agent/sft_qwen2.5_32b.sh",
                  "code 7b": "code_agent/sft_qwen2.5_7b.sh", "code 32b": "code_agent/sft_qwen2.5_32b.sh",
                  "mhqa 3b": "mhqa_agent/sft_qwen2.5_3b.sh", "mhqa 7b": "mhqa_agent/sft_qwen2.5_7b.sh",
                  "dpo 32b": "dpo_qwen2.5_32b.sh"}


def _reaches(cell: str) -> tuple[str, str]:
    """('flag', name) or ('env', NAME) from a 'reaches' cell."""
    m = re.search(r"env `?([A-Z_]+)", cell)
    if m:
        return "env", m.group(1)
    m = re.search(r"--([a-z0-9_]+)", cell)
    assert m, cell
    return "flag", m.group(1)


def test_sft_defaults_match_the_mapping_table():
    rows = read_table("sft-defaults")
    assert set(rows[0]) - {"knob (reaches)"} == set(COLUMN_SCRIPTS)
    seen = set()
    for column, script in COLUMN_SCRIPTS.items():
        f, env, _ = dry(script, CUDA_VISIBLE_DEVICES="0", MASTER_ADDR="10.0.0.1")
        for row in rows:
            cell = row[column]
            knob = backticked(row["knob (reaches)"])[0]
            kind, name = _reaches(row["knob (reaches)"])
            assert reason_given(cell), (script, knob, cell)
            expected = cell_value(cell)
            if expected is None:
                continue
            seen.add(knob)
            if knob == "WARMUP_RATIO" and float(expected) == 0:
                assert "warmup_ratio" not in f and f["warmup_steps"] == "0", script
                continue
            actual = env.get(name) if kind == "env" else f.get(name)
            assert actual is not None and same(actual, expected), (script, knob, actual, expected)
    assert {"MODEL_PATH", "OUTPUT_DIR", "DATASET", "LEARNING_RATE", "WARMUP_RATIO", "GRADIENT_ACCUMULATION",
            "EPOCHS", "CUTOFF_LEN", "NNODES"} <= seen


def test_every_sft_flag_is_in_the_mapping():
    """A flag the scripts pass is a row of the SFT defaults table (compared with the original there) or listed as
    having no original value: a new knob cannot differ from the original without a word."""
    text = (REPO / "docs/original_mapping.md").read_text()
    block = text.split("<!-- list:sft-not-compared -->", 1)[1].split("<!-- /list -->", 1)[0]
    listed = {word[2:] for line in block.splitlines() for word in backticked(line.split(": ", 1)[0])}
    table = {name for row in read_table("sft-defaults") for kind, name in [_reaches(row["knob (reaches)"])]
             if kind == "flag"}
    assert not table & listed  # one place per flag
    for script in COLUMN_SCRIPTS.values():
        f, _, _ = dry(script, CUDA_VISIBLE_DEVICES="0", MASTER_ADDR="10.0.0.1")
        assert not set(f) - table - listed, (script, sorted(set(f) - table - listed))


def test_every_original_sft_variable_is_honoured():
    rows = read_table("sft-variables")
    checked = 0
    for row in rows:
        example = cell_value(row["example"])
        if example is None:
            continue
        kind, name = _reaches(row["reaches"])
        expected = example.strip('()"')
        for original in backticked(row["original variable"]):
            base = {"CUDA_VISIBLE_DEVICES": "0", "MASTER_ADDR": "10.0.0.1", "REPORT_TO": "swanlab",
                    "SWANLAB_MODE": "local"}
            if original in ("NODE_RANK", "RANK"):
                base["NNODES"] = "2"
            proc = run_script("web_agent/sft_qwen2.5_7b.sh", {**base, original: example})
            assert proc.returncode == 0, (original, proc.stderr)
            f, env = flags(command_args(proc.stdout)), printed_env(proc.stdout)
            if original == "PRECISION":
                assert f.get(expected) == "true", original
            else:
                actual = env.get(name) if kind == "env" else f.get(name)
                assert actual == expected, (original, actual, expected)
            if "alias" in row["how"]:
                assert f"{original} -> " in proc.stderr, original
            checked += 1
    assert checked >= 20
    # STAGE: fixed by the script; a contradicting value is refused
    assert "trains stage sft" in run_script("web_agent/sft_qwen2.5_7b.sh", {"STAGE": "dpo"}).stderr
    assert run_script("dpo_qwen2.5_32b.sh", {"STAGE": "dpo"}).returncode == 0


def test_relative_paths_are_taken_from_the_current_directory(tmp_path):
    (tmp_path / "model").mkdir()
    shutil.copytree(REPO / "data", tmp_path / "mydata", ignore=shutil.ignore_patterns("*.parquet", "rl", "raw"))
    proc = run_script("web_agent/sft_qwen2.5_7b.sh", {"OUTPUT_DIR": "out", "MODEL_PATH": "model",
                                                      "DATASET_DIR": "mydata"}, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    f = flags(command_args(proc.stdout))
    assert f["output_dir"] == str(tmp_path / "out") and f["model_name_or_path"] == str(tmp_path / "model")
    assert f["dataset_dir"] == str(tmp_path / "mydata")
    # a relative MODEL_PATH that is no folder here is a hub id
    assert flags(command_args(run_script("web_agent/sft_qwen2.5_7b.sh", {"MODEL_PATH": "Qwen/Qwen2.5-7B"},
                                         cwd=tmp_path).stdout))["model_name_or_path"] == "Qwen/Qwen2.5-7B"
