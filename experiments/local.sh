# shellcheck shell=bash
# experiments/local.sh: verl's real trainer without vLLM/SGLang (sourced by experiments/common.sh).
#
#   ROLLOUT_ENGINE=hf   the rollout is afm's transformers server (afm/rl/local): one model copy per trainer rank,
#                       batched token-in-token-out, weights pushed after every step. For a GPU box without vLLM or
#                       SGLang, and for the CPU. TP is 1 (one replica per rank).
#   DEVICE=cpu          train on the CPU: verl's FSDP2 engine over gloo on afm's `cpu` platform (VERL_PLATFORM=cpu),
#                       float32, SDPA attention, no offload, one logical "GPU" per trainer rank for Ray.
#   --local             the laptop profile: DEVICE=cpu, ROLLOUT_ENGINE=hf, 4 prompts x 4 rollouts, 128-token
#                       responses, 4 steps, checkpoints (with a Hugging Face copy) every 2 steps. The code script
#                       defaults to the toy code task and its tiny policy (python -m afm.rl.local.toy, built once
#                       under runs/rl_local/); the web/MHQA scripts need MODEL_PATH and TRAIN_FILES. The real
#                       afm_agent loop, tools, compute_score and DAPO. Every knob can still be set.
#
# Where things run: multi-GPU nodes → vLLM/SGLang (the default); one GPU without them → ROLLOUT_ENGINE=hf;
# no GPU → --local (or DEVICE=cpu ROLLOUT_ENGINE=hf with your own model and data).

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
  local work=${AFM_LOCAL_DIR:-$AFM_ROOT/runs/rl_local/$task}
  : "${TRAIN_FILES:=$work/toy_train.parquet}" "${VAL_FILES=}" "${MODEL_PATH:=$work/toy_policy}"
  : "${TRAIN_BATCH_SIZE:=4}" "${MINI_BATCH_SIZE:=4}" "${ROLLOUT_N:=4}" "${USE_DYNAMIC_BSZ:=false}"
  # one micro-batch per mini-batch: verl needs the samples of a step to divide into micro-batches
  : "${MICRO_BATCH_SIZE:=$((MINI_BATCH_SIZE * ROLLOUT_N))}" "${LOGPROB_MICRO_BATCH_SIZE:=$((TRAIN_BATCH_SIZE * ROLLOUT_N))}"
  : "${MAX_PROMPT_LENGTH:=160}" "${MAX_RESPONSE_LENGTH:=128}" "${MAX_TURNS:=3}" "${MAX_OBS_CHARS:=512}"
  : "${LR:=1e-4}" "${WARMUP_STEPS:=0}" "${TOTAL_EPOCHS:=100}" "${TOTAL_TRAINING_STEPS=4}" "${SAVE_FREQ:=2}"
  : "${TEST_FREQ:=-1}" "${LOGGER:=console}" "${EXPERIMENT_NAME:=local_$task}"
  : "${CKPT_DIR:=$work/checkpoints}" "${AGENT_NUM_WORKERS:=1}" "${REWARD_NUM_WORKERS:=1}"
  : "${MAX_INFLIGHT_GEN_BATCHES:=1}" "${SAVE_HF_MODEL:=true}"
  AFM_LOCAL_WORKDIR=$work
}

# afm_rl_local_prepare: build the toy parquet and policy when the profile's defaults point at them.
afm_rl_local_prepare() {
  local python=$1
  [[ -n ${AFM_LOCAL_WORKDIR:-} ]] || return 0
  if [[ $TRAIN_FILES == "$AFM_LOCAL_WORKDIR/toy_train.parquet" || $MODEL_PATH == "$AFM_LOCAL_WORKDIR/toy_policy" ]]; then
    if [[ ! -f $AFM_LOCAL_WORKDIR/toy_train.parquet || ! -f $AFM_LOCAL_WORKDIR/toy_policy/afm_toy_policy.json ]]; then
      echo "[afm] --local: building the toy task and policy in $AFM_LOCAL_WORKDIR"
      "$python" -m afm.rl.local.toy "$AFM_LOCAL_WORKDIR" > /dev/null || afm_die "could not build the toy task"
    fi
  fi
}

# afm_rl_engine_overrides ENGINE DEVICE: Hydra overrides of the rollout engine and the device, one per line.
afm_rl_engine_overrides() {
  local engine=$1 device=$2
  if [[ $engine == hf ]]; then
    printf '%s\n' "actor_rollout_ref.rollout.tensor_model_parallel_size=1"
  fi
  if [[ $device == cpu ]]; then
    printf '%s\n' \
      "trainer.device=cpu" \
      "actor_rollout_ref.actor.strategy=fsdp2" \
      "actor_rollout_ref.ref.strategy=fsdp2" \
      "actor_rollout_ref.model.use_remove_padding=False" \
      "actor_rollout_ref.model.enable_gradient_checkpointing=False" \
      "++actor_rollout_ref.model.override_config.attn_implementation=sdpa" \
      "actor_rollout_ref.actor.use_torch_compile=False" \
      "actor_rollout_ref.actor.fsdp_config.param_offload=False" \
      "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False" \
      "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32" \
      "++actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32" \
      "++actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32" \
      "++actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32" \
      "actor_rollout_ref.rollout.free_cache_engine=False" \
      "data.dataloader_num_workers=0" \
      "++ray_kwargs.ray_init.num_gpus=$GPUS_PER_NODE_EFFECTIVE" \
      "++ray_kwargs.ray_init.num_cpus=$((4 + 2 * GPUS_PER_NODE_EFFECTIVE))" \
      "++transfer_queue.backend.SimpleStorage.num_data_storage_units=1"
  fi
}

# afm_rl_checkpoint_overrides: with SAVE_HF_MODEL=true every checkpoint also holds the actor as a Hugging Face
# model (global_step_N/actor/huggingface), ready for afm eval / afm infer without verl's model merger.
afm_rl_checkpoint_overrides() {
  local save_hf
  save_hf=$(afm_bool SAVE_HF_MODEL "${SAVE_HF_MODEL:-false}")
  if [[ $save_hf == true ]]; then
    printf '%s\n' "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]" \
      "actor_rollout_ref.actor.checkpoint.load_contents=[model,optimizer,extra]"
  fi
}

# afm_rl_device_env DEVICE: export what every process of a CPU run needs (Ray workers inherit it).
afm_rl_device_env() {
  local device=$1
  # The replay buffer's fixed 2 s poll (afm/rl/local/patches.py) is replaced for every engine.
  export AFM_VERL_POLL_S=${AFM_VERL_POLL_S:-0.02}
  if [[ $device == cpu ]]; then
    export VERL_PLATFORM=cpu OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TOKENIZERS_PARALLELISM=false
  fi
}
