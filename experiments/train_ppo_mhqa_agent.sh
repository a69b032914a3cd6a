#!/usr/bin/env bash
# PPO for the multi-hop QA agent: the original project's MHQA recipe (AFM/train/mhqa_agent/rl/train_ppo_mhqa_agent.sh)
# on verl 0.9.1. GAE advantages with a critic (lr 1e-5, warmup ratio 0.05) started from the same SFT model, KL loss
# 0.001 (low_var_kl), one rollout per prompt, 512 prompts per step, mini-batch 256, lr 1e-6 (warmup ratio 0.285),
# prompt 2k + response 8k, <=8 turns, wiki_search, exact-match reward. Same as
#   ALGORITHM=ppo bash experiments/train_dapo_mhqa_agent.sh
# (train_dapo_mhqa_agent.sh is the DAPO variant with 5 rollouts per prompt). Expects 2 nodes x 8 GPUs for the 7B.
#
#   bash experiments/train_ppo_mhqa_agent.sh --dry-run          # print the verl command (every Hydra override), run nothing
#   bash experiments/train_ppo_mhqa_agent.sh                    # train (logs to $CKPT_DIR/train.log)
#   NNODES=2 bash experiments/train_ppo_mhqa_agent.sh           # on the Ray head, after experiments/ray_cluster.sh
#
# This script's defaults (the task's, declared once in afm/launch/rl.py; docs/rl_knobs.md lists them) and every
# other knob, with its help: bash experiments/train_ppo_mhqa_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export ALGORITHM=${ALGORITHM:-ppo}
afm_rl_main mhqa "experiments/train_ppo_mhqa_agent.sh" "$@"
