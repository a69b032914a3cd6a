#!/usr/bin/env bash
# SFT of Qwen2.5-7B (base) on multi-hop QA trajectories (wiki_search): full fine-tuning, observations masked.
# The original's AFM/train/mhqa_agent/sft/sft_qwen2.5_7b.sh, with its values (docs/original_mapping.md).
#
#   bash sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh                      # defaults below
#   DRY_RUN=1 bash sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh            # print the resolved LLaMA-Factory flags, run nothing (= --dry-run)
#   MASK_REPORT=2 bash sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh        # check masking and lengths on the data first
#   LEARNING_RATE=5e-6 EPOCHS=2 bash sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh --max_samples 1000   # knobs + extra LLaMA-Factory flags
#
# Its own values are the last two lines (the original's; docs/original_mapping.md compares them with it).
# experiments/train_dapo_mhqa_agent.sh starts from this output by default.
# Every other knob, with its default and help (afm/launch/sft.py declares them): bash sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh --help
set -euo pipefail
# shellcheck source=../common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../common.sh"
AFM_SCRIPT_DEFAULTS=(LEARNING_RATE=2e-5 WARMUP_RATIO=0.03 GRADIENT_ACCUMULATION=4 EPOCHS=4.0 CUTOFF_LEN=5120 NNODES=1)
afm_launch sft "sft_scripts/mhqa_agent/sft_qwen2.5_7b.sh" "Qwen/Qwen2.5-7B" "saves/AFM-MHQA-Agent-7B-sft" "mhqa_agent_sft" "$@"
