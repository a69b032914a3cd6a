#!/usr/bin/env bash
# DPO of Qwen2.5-32B-Instruct on chosen/rejected Chain-of-Agents trajectories; observations masked in both.
#
#   bash sft_scripts/dpo_qwen2.5_32b.sh                                # defaults below
#   DRY_RUN=1 bash sft_scripts/dpo_qwen2.5_32b.sh                      # print the resolved command, run nothing (= --dry-run)
#   MASK_REPORT=2 bash sft_scripts/dpo_qwen2.5_32b.sh                  # check masking and lengths on the data first
#   LEARNING_RATE=5e-6 EPOCHS=2 bash sft_scripts/dpo_qwen2.5_32b.sh --max_samples 1000   # knobs + extra LLaMA-Factory flags
#   NODE_RANK=<0|1> MASTER_ADDR=<node 0 address> bash sft_scripts/dpo_qwen2.5_32b.sh   # on each of the 2 nodes
#   NNODES=1 bash sft_scripts/dpo_qwen2.5_32b.sh                       # one node (with the offload DeepSpeed config)
#
# Its own values are the last two lines (the original's recipe). Start from your SFT model:
# MODEL_PATH=saves/AFM-WebAgent-32B-sft (say). DPO keeps a frozen reference model, so it needs about twice the memory
# of SFT: two nodes, as the original, or the offload DeepSpeed config.
# Every other knob (the DPO ones: PREF_BETA, PREF_LOSS), with its default and help (afm/launch/sft.py declares
# them): bash sft_scripts/dpo_qwen2.5_32b.sh --help
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
# The original's DPO recipe (first commit only; STAGE=dpo with ZeRO-3 sat in its sft_qwen2.5_32b.sh, the two file
# names being swapped): lr 1e-6, grad accum 1, 4 epochs, cutoff 30000, 2 nodes.
AFM_SCRIPT_DEFAULTS=(LEARNING_RATE=1e-6 GRADIENT_ACCUMULATION=1 EPOCHS=4.0 CUTOFF_LEN=30000 NNODES=2)
afm_launch dpo "sft_scripts/dpo_qwen2.5_32b.sh" "Qwen/Qwen2.5-32B-Instruct" "saves/qwen2.5_32b_dpo" "dpo_demo" "$@"
