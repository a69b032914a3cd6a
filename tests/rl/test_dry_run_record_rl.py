"""Every RL launch script's dry run (experiments/train_*_agent.sh), recorded: the printed verl command, warnings and
errors of each case below must stay byte-identical to tests/records/experiments/ (the guard of the launch code's
redesign). Run in the RL environment (`.venv-rl`): its interpreter is the one the printed command names.

Rewrite the records after a change that is meant: ``AFM_RECORD=1 .venv-rl/bin/python -m pytest
tests/rl/test_dry_run_record_rl.py`` (then read ``git diff tests/records``). The SFT/DPO scripts' records are in
tests/test_dry_run_record.py; what is normalised is said in tests/dry_run_records.py. Dropped here too: the warnings
that a default data file or starting model (under data/rl, saves, runs) is missing, which depend on what this
checkout holds.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dry_run_records import REPO, Case, check_record

SCRIPTS = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "experiments").glob("train_*_agent.sh"))
# The defaults name data/rl/*.parquet and saves/*: present or not depending on the checkout.
CHECKOUT_LINES = (re.compile(r"^\[afm\] warning: (data file not found|MODEL_PATH not found): "
                             r"<repo>/(data/rl|saves|runs)/.*$\n?", re.M),)
ORIGINAL_NAMES = {"ACTOR_LR": "2e-6", "TRAIN_BS": "32", "PPO_MINI_BS": "16", "N": "4", "GEN_TP": "2",
                  "BASE_MODEL": "/models/base", "TRAIN_DATASETS": "/d/train.parquet", "VAL_DATASETS": "/d/val.parquet",
                  "EPOCHS": "3", "STEPS": "7", "PPO_MICRO_BSZ_PER_GPU": "1", "LOG_PROB_MICRO_BSZ_PER_GPU": "4",
                  "max_prompt_length": "1024", "max_response_length": "4096", "use_dynamic_bsz": "true",
                  "GEN_BS": "64"}
SOME_KNOBS = {"MODEL_PATH": "org/policy", "TRAIN_FILES": "t.parquet", "VAL_FILES": "", "NNODES": "2",
              "GPUS_PER_NODE": "4", "ROLLOUT_ENGINE": "sglang", "TP": "2", "ROLLOUT_N": "16", "LR": "3e-6",
              "LOGGER": "console,swanlab", "SWANLAB_MODE": "local", "CKPT_DIR": "ck", "RESUME_MODE": "disable",
              "REWARD_MANAGER": "rate_limited", "REWARD_MAX_RPM": "60", "ATTN_IMPL": "eager",
              "EXTRA_ARGS": "trainer.total_epochs=1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def cases(script: str) -> list[Case]:
    """The recorded cases of ``script``: its defaults for all; the other paths once, on two scripts."""
    out = [Case("defaults", {}, ("--dry-run",)), Case("DRY_RUN=1, extra overrides", {"DRY_RUN": "1"},
                                                      ("trainer.total_epochs=2",))]
    if script == "experiments/train_dapo_code_agent.sh":
        out += [Case("the original's names", ORIGINAL_NAMES, ("--dry-run",)),
                Case("stage 2", {"STAGE": "2"}, ("--dry-run",)),
                Case("--local", {}, ("--local", "--dry-run")),
                Case("bad ROLLOUT_N", {"ROLLOUT_N": "0"}, ("--dry-run",)),
                Case("bad LR", {"LR": "fast"}, ("--dry-run",))]
    if script == "experiments/train_dapo_web_agent.sh":
        out += [Case("several knobs", SOME_KNOBS, ("--dry-run",)),
                Case("hf engine on the CPU", {"ROLLOUT_ENGINE": "hf", "DEVICE": "cpu", "GPUS_PER_NODE": "1",
                                              "MODEL_PATH": "org/tiny"}, ("--dry-run",))]
    return out


@pytest.mark.parametrize("script", SCRIPTS)
def test_dry_run_matches_record(script):
    check_record(script, cases(script), "AFM_RL_VENV", CHECKOUT_LINES)
