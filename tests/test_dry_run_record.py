"""Every SFT/DPO launch script's dry run, recorded: the printed command, environment, warnings and errors of each
case below must stay byte-identical to tests/records/sft_scripts/ (the guard of the launch code's redesign).

Rewrite the records after a change that is meant: ``AFM_RECORD=1 .venv/bin/python -m pytest
tests/test_dry_run_record.py`` (then read ``git diff tests/records``). The RL scripts' records are in
tests/rl/test_dry_run_record_rl.py; what is normalised is said in tests/dry_run_records.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dry_run_records import REPO, VENV, Case, check_record

SCRIPTS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "sft_scripts").glob("**/*.sh")
                 if p.name != "common.sh")
# The three old single-script names only say where the scripts moved (exit 2).
MOVED = {"sft_scripts/sft_qwen2.5_7b.sh", "sft_scripts/sft_qwen2.5_32b.sh", "sft_scripts/sft_qwen2.5_3b.sh"}
DRY = {"DRY_RUN": "1"}
OFFLOAD = str(REPO / "configs/deepspeed/ds_z3_offload_config.json")

# Every knob away from its default, relative paths taken from the working directory.
EVERY_KNOB = {
    "MODEL_PATH": "models/x", "OUTPUT_DIR": "./out", "DATASET": "web_agent_sft,mhqa_agent_sft",
    "DATASET_DIR": str(REPO / "data"), "TEMPLATE": "llama3", "LEARNING_RATE": "5e-6", "BATCH_SIZE": "2",
    "GRADIENT_ACCUMULATION": "3", "EPOCHS": "2.5", "LR_SCHEDULER": "cosine", "WARMUP_STEPS": "5",
    "WARMUP_RATIO": "0.2", "FINETUNING_TYPE": "lora", "PRECISION": "fp16", "CUTOFF_LEN": "4096", "PACKING": "yes",
    "IGNORE_OBSERVATION": "ON", "IGNORE_OBSERVATION_TOKEN": "obs", "IGNORE_OBSERVATION_CHECK": "tags",
    "PREF_BETA": "0.2", "PREF_LOSS": "ipo", "DEEPSPEED_CONFIG": OFFLOAD, "ATTN_IMPL": "fa2",
    "SAVE_STRATEGY": "steps", "SAVE_ONLY_MODEL": "off", "LOGGING_STEPS": "5", "PREPROCESSING_NUM_WORKERS": "4",
    "DDP_TIMEOUT": "600", "REPORT_TO": "swanlab,wandb", "SWANLAB_PROJECT": "p", "SWANLAB_WORKSPACE": "w",
    "SWANLAB_RUN_NAME": "r", "SWANLAB_MODE": "local", "SWANLAB_LOG_DIR": "logs", "NNODES": "2",
    "NODE_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29600", "NPROC_PER_NODE": "4",
    "JOIN_TIMEOUT": "30", "HANG_TIMEOUT": "0", "EXTRA_ARGS": "--max_samples 5 --seed 3",
    "CUDA_VISIBLE_DEVICES": "0,1,2,3", "DRY_RUN": "1",
}
# The original project's names.
ORIGINAL_NAMES = {"DATA_DATA": "mhqa_agent_sft", "TEMPALTE": "qwen2", "LEARNING_RATES": '("2e-5")',
                  "WARMUP_RATIOS": "0.05", "GRADIENT_ACCUMULATIONS": "(2)", "BATCH_SIZES": "'1'",
                  "OUTPUT_DIR_BASE": "base", "ignore_observation": "true", "ignore_observation_token": "observation",
                  "finetuning_type": "freeze", "RANK": "0", "TEMPLATE": "qwen", "DRY_RUN": "1"}
# One knob that cannot work per case: the launch stops with the message naming it.
BAD = [
    {"LEARNING_RATE": "abc"}, {"EPOCHS": "four"}, {"BATCH_SIZE": "0"}, {"GRADIENT_ACCUMULATION": "-1"},
    {"CUTOFF_LEN": "1.5"}, {"WARMUP_STEPS": "-1"}, {"WARMUP_RATIO": "1"}, {"FINETUNING_TYPE": "qlora"},
    {"PRECISION": "int8"}, {"ATTN_IMPL": "fa4"}, {"LOGGING_STEPS": "0"}, {"PREPROCESSING_NUM_WORKERS": "0"},
    {"DDP_TIMEOUT": "x"}, {"MASK_REPORT": "-1"}, {"SAVE_STRATEGY": "always"}, {"IGNORE_OBSERVATION_CHECK": "x"},
    {"IGNORE_OBSERVATION_TOKEN": "<observation>"}, {"PACKING": "maybe"}, {"IGNORE_OBSERVATION": "maybe"},
    {"SAVE_ONLY_MODEL": "maybe"}, {"NNODES": "0"}, {"NNODES": "2", "NODE_RANK": "2"}, {"MASTER_PORT": "70000"},
    {"JOIN_TIMEOUT": "0"}, {"HANG_TIMEOUT": "-1"}, {"DEEPSPEED_CONFIG": "missing.json"},
    {"DATASET_DIR": "nowhere"}, {"DATASET": "nope"}, {"DATASET": "bad name"}, {"DATASET": ","},
    {"NPROC_PER_NODE": "0"}, {"REPORT_TO": "mlflow"}, {"STAGE": "dpo"},
    {"LEARNING_RATES": "1e-5 2e-5"},
]


def cases(script: str) -> list[Case]:
    """The recorded cases of ``script``: its defaults for all; every other path once, on two scripts."""
    if script in MOVED:
        return [Case("moved", DRY), Case("help", {}, ("--help",))]
    out = [Case("defaults", DRY), Case("--dry-run argument, extra flags", {}, ("--dry-run", "--max_samples", "10"))]
    if script == "sft_scripts/web_agent/sft_qwen2.5_7b.sh":
        out += [
            Case("every knob set", EVERY_KNOB),
            Case("the original's names", ORIGINAL_NAMES),
            Case("a misspelt knob", {**DRY, "LEARNNG_RATE": "1e-5", "MODEL_PATH": "."}),
            Case("mask report", {**DRY, "MASK_REPORT": "3"}),
            Case("one process, no DeepSpeed", {**DRY, "DEEPSPEED_CONFIG": "", "IGNORE_OBSERVATION": "false",
                                                "DATASET_DIR": "ONLINE", "DATASET": "any/hub-set"}),
            Case("GPUs seen, warmup steps", {**DRY, "CUDA_VISIBLE_DEVICES": "0, 1", "ATTN_IMPL": "eager",
                                             "WARMUP_STEPS": "7", "PRECISION": "fp32", "NODE_RANK": "0"}),
            Case("several nodes without MASTER_ADDR", {**DRY, "NNODES": "3", "RANK": "2"}),
            Case("argument with whitespace", DRY, ("--run_name", "a b")),
            Case("AFM_SFT launcher words", {**DRY, "AFM_SFT": f"{VENV}/bin/afm-sft --flag"}),
            *(Case("bad " + ",".join(f"{k}={v}" for k, v in bad.items()), {**DRY, **bad}) for bad in BAD),
        ]
    if script == "sft_scripts/dpo_qwen2.5_32b.sh":
        out += [
            Case("every knob set", EVERY_KNOB),
            Case("stage knob matches", {**DRY, "STAGE": "DPO", "IGNORE_OBSERVATION": "0"}),
            Case("bad PREF_BETA", {**DRY, "PREF_BETA": "x"}),
            Case("bad PREF_LOSS", {**DRY, "PREF_LOSS": "dpo"}),
            Case("bad STAGE", {**DRY, "STAGE": "sft"}),
        ]
    return out


@pytest.mark.parametrize("script", SCRIPTS)
def test_dry_run_matches_record(script):
    check_record(script, cases(script), "AFM_VENV")
