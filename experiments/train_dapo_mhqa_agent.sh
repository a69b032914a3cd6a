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
# This script's defaults (the task's, declared once in afm/launch/rl.py; docs/rl_knobs.md lists them) and every
# other knob, with its help: bash experiments/train_dapo_mhqa_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_rl_main mhqa "experiments/train_dapo_mhqa_agent.sh" "$@"
