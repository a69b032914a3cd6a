#!/usr/bin/env bash
# DAPO for the web agent (web_search + crawl_page, LLM-judge reward): 64 prompts x 8 rollouts, lr 1e-6,
# prompt 2k + response 30k (32k context), <=25 turns, clip 0.2/0.28 (dual clip 10), overlong buffer 3840.
# Expects 8 nodes x 8 H100/H200 for the 32B model (the paper's run: 60 steps); a 7B fits on one node with TP=4.
# Needs the search and crawl servers (server/start_servers.sh) reachable from every node, and GRM_* for the judge.
#
#   bash experiments/train_dapo_web_agent.sh --dry-run          # print the verl command (every Hydra override), run nothing
#   bash experiments/train_dapo_web_agent.sh                    # train (logs to $CKPT_DIR/train.log)
#   ROLLOUT_ENGINE=sglang LOGGER=console,wandb bash experiments/train_dapo_web_agent.sh trainer.total_epochs=1
#   NNODES=8 bash experiments/train_dapo_web_agent.sh           # on the Ray head, after experiments/ray_cluster.sh
#   ROLLOUT_ENGINE=hf GPUS_PER_NODE=1 bash experiments/train_dapo_web_agent.sh   # one GPU, no vLLM/SGLang (afm/rl/local)
#   RESUME_MODE=auto bash experiments/train_dapo_web_agent.sh   # (default) continue from the newest checkpoint
#
# This script's defaults (the task's, declared once in afm/launch/rl.py; docs/rl_knobs.md lists them) and every
# other knob, with its help: bash experiments/train_dapo_web_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_rl_main web "experiments/train_dapo_web_agent.sh" "$@"
