#!/usr/bin/env bash
# SFT of Qwen2.5-Coder-7B-Instruct on code-agent trajectories (sandboxed code tool): full fine-tuning, observations masked.
# The original's AFM/train/code_agent/sft/sft_qwen2.5_7b.sh, with its values (docs/original_mapping.md).
#
#   bash sft_scripts/code_agent/sft_qwen2.5_7b.sh                      # defaults below
#   DRY_RUN=1 bash sft_scripts/code_agent/sft_qwen2.5_7b.sh            # print the resolved LLaMA-Factory flags, run nothing (= --dry-run)
#   MASK_REPORT=2 bash sft_scripts/code_agent/sft_qwen2.5_7b.sh        # check masking and lengths on the data first
#   LEARNING_RATE=5e-6 EPOCHS=2 bash sft_scripts/code_agent/sft_qwen2.5_7b.sh --max_samples 1000   # knobs + extra LLaMA-Factory flags
#
# Its own values are the last two lines (the original's; docs/original_mapping.md compares them with it).
# experiments/train_dapo_code_agent.sh starts from the 32B output; for this 7B model: MODEL_PATH=saves/AFM-CodeAgent-7B-sft.
# Every other knob, with its default and help (afm/launch/sft.py declares them): bash sft_scripts/code_agent/sft_qwen2.5_7b.sh --help
set -euo pipefail
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
AFM_SCRIPT_DEFAULTS=(LEARNING_RATE=3e-5 WARMUP_RATIO=0 GRADIENT_ACCUMULATION=4 EPOCHS=2.0 CUTOFF_LEN=32768 NNODES=1)
afm_launch sft "sft_scripts/code_agent/sft_qwen2.5_7b.sh" "Qwen/Qwen2.5-Coder-7B-Instruct" "saves/AFM-CodeAgent-7B-sft" "code_agent_sft" "$@"
