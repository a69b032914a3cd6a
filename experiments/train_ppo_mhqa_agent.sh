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
# Defaults of this script (each one an environment variable):
#   ALGORITHM=ppo MODEL_PATH=saves/AFM-MHQA-Agent-7B-sft TRAIN_FILES=data/rl/mhqa_train.parquet
#   VAL_FILES=data/rl/mhqa_val.parquet ROLLOUT_N=1 TRAIN_BATCH_SIZE=512 MINI_BATCH_SIZE=256 TP=4 GPU_MEM_UTIL=0.5
#   KL_COEF=0.001 CRITIC_LR=1e-5 CRITIC_WARMUP_RATIO=0.05 CRITIC_MAX_TOKEN_LEN=100000 REWARD_MANAGER=naive
#   TOTAL_EPOCHS=15 TOTAL_TRAINING_STEPS=1005 SAVE_FREQ=20 TEST_FREQ=20 EXPERIMENT_NAME=ppo_mhqa_agent
# Every other knob is listed in experiments/common.sh and printed by: bash experiments/train_ppo_mhqa_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
export ALGORITHM=${ALGORITHM:-ppo}
afm_rl_main mhqa "experiments/train_ppo_mhqa_agent.sh" "$@"
