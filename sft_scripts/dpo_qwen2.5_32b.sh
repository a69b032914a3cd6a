#!/usr/bin/env bash
# DPO of Qwen2.5-32B-Instruct on chosen/rejected Chain-of-Agents trajectories; observations masked in both.
#
#   bash sft_scripts/dpo_qwen2.5_32b.sh                                # defaults below
#   DRY_RUN=1 bash sft_scripts/dpo_qwen2.5_32b.sh                      # print the resolved command, run nothing
#   MASK_REPORT=2 bash sft_scripts/dpo_qwen2.5_32b.sh                  # check masking and lengths on the data first
#   LEARNING_RATE=5e-6 EPOCHS=2 bash sft_scripts/dpo_qwen2.5_32b.sh --max_samples 1000   # knobs + extra LLaMA-Factory flags
#   NNODES=2 NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> bash sft_scripts/dpo_qwen2.5_32b.sh   # on each node
#
# Defaults of this script (each one an environment variable):
#   MODEL_PATH=Qwen/Qwen2.5-32B-Instruct  OUTPUT_DIR=saves/qwen2.5_32b_dpo (under the repo)
#   DATASET=dpo_demo  (stage dpo)
# Start from your SFT model: MODEL_PATH=<repo>/saves/qwen2.5_32b_sft. DPO keeps a frozen reference model,
# so it needs about twice the memory of SFT: plan for NNODES=2 or the offload DeepSpeed config.
# DPO knobs: PREF_BETA=0.1, PREF_LOSS=sigmoid.
# Every other knob and its default (LEARNING_RATE=1e-6, BATCH_SIZE=1, GRADIENT_ACCUMULATION=8, EPOCHS=4.0,
# PRECISION=bf16, CUTOFF_LEN=32768, DeepSpeed ZeRO-3, IGNORE_OBSERVATION=true, CUDA_VISIBLE_DEVICES, NNODES, ...)
# is listed in sft_scripts/common.sh and printed by: bash sft_scripts/dpo_qwen2.5_32b.sh --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_launch dpo "sft_scripts/dpo_qwen2.5_32b.sh" "Qwen/Qwen2.5-32B-Instruct" "saves/qwen2.5_32b_dpo" "dpo_demo" "$@"
