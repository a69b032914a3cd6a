#!/usr/bin/env bash
# SFT of Qwen2.5-7B-Instruct on web-agent Chain-of-Agents trajectories (full fine-tuning, observations masked).
#
#   bash sft_scripts/sft_qwen2.5_7b.sh                                # defaults below
#   DRY_RUN=1 bash sft_scripts/sft_qwen2.5_7b.sh                      # print the resolved command, run nothing
#   MASK_REPORT=2 bash sft_scripts/sft_qwen2.5_7b.sh                  # check masking and lengths on the data first
#   LEARNING_RATE=5e-6 EPOCHS=2 bash sft_scripts/sft_qwen2.5_7b.sh --max_samples 1000   # knobs + extra LLaMA-Factory flags
#   NNODES=2 NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> bash sft_scripts/sft_qwen2.5_7b.sh   # on each node
#
# Defaults of this script (each one an environment variable):
#   MODEL_PATH=Qwen/Qwen2.5-7B-Instruct  OUTPUT_DIR=saves/qwen2.5_7b_sft (under the repo)
#   DATASET=web_agent_sft  (stage sft)
# Other agents: DATASET=mhqa_agent_sft, or DATASET=code_agent_sft MODEL_PATH=Qwen/Qwen2.5-Coder-7B-Instruct.
# Every other knob and its default (LEARNING_RATE=1e-6, BATCH_SIZE=1, GRADIENT_ACCUMULATION=8, EPOCHS=4.0,
# PRECISION=bf16, CUTOFF_LEN=32768, DeepSpeed ZeRO-3, IGNORE_OBSERVATION=true, CUDA_VISIBLE_DEVICES, NNODES, ...)
# is listed in sft_scripts/common.sh and printed by: bash sft_scripts/sft_qwen2.5_7b.sh --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_launch sft "sft_scripts/sft_qwen2.5_7b.sh" "Qwen/Qwen2.5-7B-Instruct" "saves/qwen2.5_7b_sft" "web_agent_sft" "$@"
