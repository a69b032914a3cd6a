#!/usr/bin/env bash
# DAPO for the code agent (sandboxed code tool, unit-test reward): 256 prompts x 8 rollouts, mini-batch 32,
# lr 1e-6, <=8 tool calls, clip 0.2/0.28. Two-stage length schedule (the paper grows the budget from 16k to 32k):
#   stage 1 (the default): prompt 4k + response 16k; train until the reward plateaus;
#   stage 2 (STAGE=2): prompt 4k + response 28k (32k context), starting from the stage-1 policy:
#     python -m verl.model_merger merge --backend fsdp \
#       --local_dir checkpoints/afm_rl/dapo_code_agent/global_step_N/actor --target_dir saves/code_rl_stage1
#     STAGE=2 MODEL_PATH=saves/code_rl_stage1 bash experiments/train_dapo_code_agent.sh
# Expects 8 nodes x 8 H100/H200 for the 32B model. The code tool and code rewards run in afm's sandbox (nsjail or
# bubblewrap) on every node.
#
#   bash experiments/train_dapo_code_agent.sh --dry-run          # print the verl command (every Hydra override), run nothing
#   bash experiments/train_dapo_code_agent.sh                    # train (logs to $CKPT_DIR/train.log)
#   ROLLOUT_ENGINE=sglang LOGGER=console,wandb bash experiments/train_dapo_code_agent.sh trainer.total_epochs=1
#   NNODES=8 bash experiments/train_dapo_code_agent.sh           # on the Ray head, after experiments/ray_cluster.sh
#   RESUME_MODE=auto bash experiments/train_dapo_code_agent.sh   # (default) continue from the newest checkpoint
#   bash experiments/train_dapo_code_agent.sh --local            # no GPU: toy task, tiny policy, verl on the CPU (~1.5 min)
#   ROLLOUT_ENGINE=hf GPUS_PER_NODE=1 bash experiments/train_dapo_code_agent.sh   # one GPU, no vLLM/SGLang
#
# This script's defaults (the task's, declared once in afm/launch/rl.py; docs/rl_knobs.md lists them) and every
# other knob, with its help: bash experiments/train_dapo_code_agent.sh --help
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_rl_main code "experiments/train_dapo_code_agent.sh" "$@"
