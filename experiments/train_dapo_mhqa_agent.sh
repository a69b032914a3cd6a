#!/usr/bin/env bash
# DAPO for the multi-hop QA agent in the Search-R1 setting: NQ + HotpotQA training questions, wiki_search
# over the Wikipedia retrieval server (server/start_servers.sh, WIKI_RAG_SERVER_URL), exact-match reward.
# 512 prompts x 5 rollouts, mini-batch 256, lr 1e-6 (warmup ratio 0.285), prompt 2k + response 8k, <=8 turns.
# Expects 2 nodes x 8 GPUs for the 7B model (one node works with smaller batches). The original trained this agent
# with PPO (GAE, a critic, KL 0.001, n=1): experiments/train_ppo_mhqa_agent.sh, or ALGORITHM=ppo here.
#
#   bash experiments/train_dapo_mhqa_agent.sh --dry-run          # print the verl command (every Hydra override), run nothing
#   bash experiments/train_dapo_mhqa_agent.sh                    # train (logs to $CKPT_DIR/train.log)
#   ROLLOUT_ENGINE=sglang LOGGER=console,wandb bash experiments/train_dapo_mhqa_agent.sh trainer.total_epochs=1
#   NNODES=8 bash experiments/train_dapo_mhqa_agent.sh           # on the Ray head, after experiments/ray_cluster.sh
#   ROLLOUT_ENGINE=hf GPUS_PER_NODE=1 bash experiments/train_dapo_mhqa_agent.sh   # one GPU, no vLLM/SGLang (afm/rl/local)
#   RESUME_MODE=auto bash experiments/train_dapo_mhqa_agent.sh   # (default) continue from the newest checkpoint
#
# Defaults of this script (each one an environment variable):
#   MODEL_PATH=saves/AFM-MHQA-Agent-7B-sft  TRAIN_FILES=data/rl/mhqa_train.parquet  VAL_FILES=data/rl/mhqa_val.parquet
#   TP=4 GPU_MEM_UTIL=0.5 ROLLOUT_N=5 TRAIN_BATCH_SIZE=512 MINI_BATCH_SIZE=256 USE_DYNAMIC_BSZ=false
#   MAX_PROMPT_LENGTH=2048 MAX_RESPONSE_LENGTH=8192 MAX_TURNS=8 WARMUP_RATIO=0.285
#   TOTAL_EPOCHS=15 TOTAL_TRAINING_STEPS=1005 SAVE_FREQ=20 TEST_FREQ=20 REWARD_FN=compute_score
# Every other knob (NNODES, GPUS_PER_NODE, ROLLOUT_ENGINE, LR, LOGGER, CKPT_DIR, RESUME_MODE, REWARD_MANAGER, ...)
# is listed in experiments/common.sh and printed by: bash experiments/train_dapo_mhqa_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_rl_main mhqa "experiments/train_dapo_mhqa_agent.sh" "$@"
