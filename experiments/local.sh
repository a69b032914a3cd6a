# shellcheck shell=bash
# experiments/local.sh: verl's real trainer without vLLM/SGLang (sourced by experiments/common.sh).
#
#   ROLLOUT_ENGINE=hf   the rollout is afm's transformers server (afm/rl/local): one model copy per trainer rank,
#                       batched token-in-token-out, weights pushed after every step. For a GPU box without vLLM or
#                       SGLang, and for the CPU. TP is 1 (one replica per rank).
#   DEVICE=cpu          train on the CPU: verl's FSDP2 engine over gloo on afm's `cpu` platform (VERL_PLATFORM=cpu),
#                       float32, SDPA attention, no offload, one logical "GPU" per trainer rank for Ray.
#   --local             the laptop profile: DEVICE=cpu, ROLLOUT_ENGINE=hf, 4 prompts x 4 rollouts, 128-token
#                       responses, 4 steps, checkpoints (with a Hugging Face copy) every 2 steps, LR 1e-4 for the
#                       toy policy and 1e-6 (the original's) for a pretrained MODEL_PATH. The code script
#                       defaults to the toy code task and its tiny policy (python -m afm.rl.local.toy, built once
#                       under runs/rl_local/); the web/MHQA scripts need MODEL_PATH and TRAIN_FILES. The real
#                       afm_agent loop, tools, compute_score and DAPO. Every knob can still be set.
#
# Where things run: multi-GPU nodes → vLLM/SGLang (the default); one GPU without them → ROLLOUT_ENGINE=hf;
# no GPU → --local (or DEVICE=cpu ROLLOUT_ENGINE=hf with your own model and data).
# The overrides of the hf engine and the CPU device, the toy task's build and SAVE_HF_MODEL are afm/rl/knobs.py's
# (engine_overrides, prepare_local); this file holds the --local profile's defaults.

# afm_rl_local_profile TASK: the --local defaults (only knobs the caller did not set).
afm_rl_local_profile() {
  local task=$1
  # The toy task is a code task; web/MHQA runs bring their own small policy and parquet (and their tool servers).
  if [[ $task != code && ( -z ${MODEL_PATH:-} || -z ${TRAIN_FILES:-} ) ]]; then
    afm_die "--local for the $task agent needs MODEL_PATH and TRAIN_FILES (a small policy that calls its tools, and" \
      "an RL parquet) and its tool servers running (server/start_servers.sh); the built-in toy task is" \
      "experiments/train_dapo_code_agent.sh --local"
  fi
  : "${DEVICE:=cpu}" "${ROLLOUT_ENGINE:=hf}"
  # 1e-4 suits the toy policy, trained from scratch; a pretrained MODEL_PATH collapses at that rate (Gemma 3 270M:
  # entropy 3.09 -> 0.90 in 2 steps) and gets the original recipe's ACTOR_LR, 1e-6
  local lr=1e-4
  [[ -n ${MODEL_PATH:-} ]] && lr=1e-6
  local work=${AFM_LOCAL_DIR:-$AFM_ROOT/runs/rl_local/$task}
  : "${TRAIN_FILES:=$work/toy_train.parquet}" "${VAL_FILES=}" "${MODEL_PATH:=$work/toy_policy}"
  : "${TRAIN_BATCH_SIZE:=4}" "${MINI_BATCH_SIZE:=4}" "${ROLLOUT_N:=4}" "${USE_DYNAMIC_BSZ:=false}"
  # one micro-batch per mini-batch on each trainer rank: verl needs a rank's samples of a step (the batch divided by
  # NNODES x GPUS_PER_NODE ranks) to divide into micro-batches
  local world=$((${NNODES:-1} * ${GPUS_PER_NODE:-1}))
  ((world > 0)) || afm_die "NNODES and GPUS_PER_NODE must be positive (got '${NNODES:-}' and '${GPUS_PER_NODE:-}')"
  : "${MICRO_BATCH_SIZE:=$((MINI_BATCH_SIZE * ROLLOUT_N / world))}"
  : "${LOGPROB_MICRO_BATCH_SIZE:=$((TRAIN_BATCH_SIZE * ROLLOUT_N / world))}"
  : "${MAX_PROMPT_LENGTH:=160}" "${MAX_RESPONSE_LENGTH:=128}" "${MAX_TURNS:=3}" "${MAX_OBS_CHARS:=512}"
  : "${LR:=$lr}" "${WARMUP_STEPS:=0}" "${TOTAL_EPOCHS:=100}" "${TOTAL_TRAINING_STEPS=4}" "${SAVE_FREQ:=2}"
  : "${TEST_FREQ:=-1}" "${LOGGER:=console}" "${EXPERIMENT_NAME:=local_$task}"
  : "${CKPT_DIR:=$work/checkpoints}" "${AGENT_NUM_WORKERS:=1}" "${REWARD_NUM_WORKERS:=1}"
  : "${MAX_INFLIGHT_GEN_BATCHES:=1}" "${SAVE_HF_MODEL:=true}"
  # shellcheck disable=SC2034  # passed on by afm_rl_main (experiments/common.sh)
  AFM_LOCAL_WORKDIR=$work
}
