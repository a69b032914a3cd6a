# shellcheck shell=bash
# experiments/common.sh: the DAPO/PPO launcher shared by train_dapo_{web,code,mhqa}_agent.sh and
# train_ppo_mhqa_agent.sh (sourced, not run).
#
# Multi-turn agentic RL on verl 0.9.1 (`python -m verl.trainer.main_ppo`, V1 trainer, FSDP actor, vLLM/SGLang
# async rollout) with the afm_agent loop, afm's tools and afm's reward entry. Every knob is an environment
# variable, declared once with its default, help and check in afm/launch/rl.py (RlSettings), where the per-task
# defaults (web, code and its STAGE=2, mhqa), ALGORITHM=ppo's and the --local profile's are data too;
# `bash <script> --help` prints them all with the script's values, docs/rl_knobs.md lists them. Arguments given to
# a script are appended as extra Hydra overrides (the last value of a key wins), e.g.
# `bash experiments/train_dapo_web_agent.sh trainer.total_epochs=1`.
#
# This file only sources environment.sh and runs afm/rl/knobs.py with the RL environment's python; that one process
# reads the arguments (--dry-run, --local, --help), applies the original project's names (ACTOR_LR, TRAIN_BS, N,
# ...) and the misspelling check, the defaults, checks every knob, builds the verl command (the DAPO/PPO recipe of
# configs/verl/dapo.sh and ppo.sh included) and runs (or, with --dry-run / DRY_RUN=1, prints) it.
#
# Keys (GRM_*, SERPER, SWANLAB/WANDB ...) come from environment.sh, which is sourced here; they reach the Ray
# workers through the environment of the process that started Ray, so on a multi-node cluster source it before
# `ray start` on every node (experiments/ray_cluster.sh does). Nothing here prints a key.

AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$AFM_ROOT/scripts/knobs.sh"

# afm_rl_main TASK SCRIPT_NAME [--dry-run] [--local] [--help] [hydra overrides ...]
afm_rl_main() {
  local task=$1 script=$2
  shift 2
  # The misspelling check looks at what the caller exported, not at what environment.sh adds.
  local caller_names
  caller_names=$(compgen -e | tr '\n' ' ')
  # environment.sh only sets what is unset (keys, server addresses); it never overrides a value given here.
  if [[ -f $AFM_ROOT/environment.sh ]]; then
    # shellcheck source=../environment.sh
    source "$AFM_ROOT/environment.sh"
  fi
  # The launcher runs with the RL environment's python (not PYTHON, the trainer's, which it is given).
  afm_run_module "$(afm_python "$AFM_ROOT" AFM_RL_VENV .venv-rl "")" "$AFM_ROOT" afm.rl.knobs "--task=$task" \
    "--script=$script" "--root=$AFM_ROOT" "--cwd=$PWD" "--python=$(afm_python "$AFM_ROOT" AFM_RL_VENV .venv-rl)" \
    "--caller-names=$caller_names" -- "$@"
}
