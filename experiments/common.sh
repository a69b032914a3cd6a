# shellcheck shell=bash
# experiments/common.sh: the DAPO launcher shared by train_dapo_{web,code,mhqa}_agent.sh (sourced, not run).
#
# Multi-turn agentic RL on verl 0.9.1 (`python -m verl.trainer.main_ppo`, V1 trainer, FSDP actor, vLLM/SGLang
# async rollout) with the afm_agent loop, afm's tools and afm's reward entry. The DAPO overrides are in
# configs/verl/dapo.sh. Every knob is an environment variable; "task" means the per-script default (printed by
# --help and at the top of each script). Arguments given to a script are appended as extra Hydra overrides
# (the last value of a key wins), e.g. `bash experiments/train_dapo_web_agent.sh trainer.total_epochs=1`.
# This file applies the aliases, environment.sh and the defaults below; afm/rl/knobs.py checks every knob, builds
# the verl command and runs (or, with --dry-run, prints) it: `python -m afm.rl.knobs --help`.
#
#   ALGORITHM               dapo        dapo (configs/verl/dapo.sh) | ppo (the original's MHQA recipe: GAE, a
#                                       critic, KL 0.001, n=1; configs/verl/ppo.sh; train_ppo_mhqa_agent.sh)
#   MODEL_PATH              task        HF id or folder of the starting policy: the output of the matching SFT
#                                       script (web saves/AFM-WebAgent-32B-sft, code saves/AFM-CodeAgent-32B-sft,
#                                       mhqa saves/AFM-MHQA-Agent-7B-sft); AFM_MODEL_PATH is not read here. Set
#                                       in the environment (e.g. left over from an SFT run, where it is the base
#                                       model), it replaces that default for the actor (and the ppo critic): a
#                                       warning says so
#   TRAIN_FILES             task        RL parquet(s) from `afm data rl` / data/prepare_rl.sh, comma-separated
#   VAL_FILES               task        validation parquet(s), comma-separated; "" = no validation
#   (paths you give - MODEL_PATH, TRAIN_FILES, VAL_FILES, CKPT_DIR, SAVE_MODEL_FOLDER, TOOL_CONFIG,
#    AGENT_LOOP_CONFIG, VAL_DATA_DIR, ROLLOUT_DATA_DIR, RESUME_FROM_PATH - are taken from the current directory
#    when relative; the defaults are under the repo)
#   NNODES                  1           nodes in the Ray cluster (start it with experiments/ray_cluster.sh)
#   GPUS_PER_NODE           8           GPUs used on each node
#   JOIN_TIMEOUT            300         (NNODES > 1) seconds to wait for NNODES Ray nodes with GPUS_PER_NODE GPUs
#                                       and this afm/verl; then one line says which node is missing or different
#   ROLLOUT_ENGINE          vllm        vllm | sglang (verl's async server; install the engine in the env) | hf (afm's
#                                       transformers server, no vLLM needed: one GPU, or the CPU; experiments/local.sh)
#   DEVICE                  gpu         gpu | cpu (verl's FSDP trainer on the CPU through afm's `cpu` platform)
#   TRAINER_MODE            sync        sync | colocate_async (one-step off-policy: the next batch generates while
#                                       the actor updates; trainer and rollout share the GPUs) | separate_async
#                                       (rollout on its own GPUs; needs an nccl/nixl/mooncake checkpoint engine)
#   TP                      task        rollout tensor-parallel size (web 8, code 4, mhqa 4; hf: 1)
#   GPU_MEM_UTIL            task        rollout gpu_memory_utilization (web 0.3, code/mhqa 0.5)
#   ROLLOUT_N               task        rollouts per prompt (the GRPO group; web/code 8, mhqa 5; ppo 1)
#   TRAIN_BATCH_SIZE        task        prompts per step (web 64, code 256, mhqa 512)
#   MINI_BATCH_SIZE         task        prompts per actor update (web 64, code 32, mhqa 256)
#   MICRO_BATCH_SIZE        2           ppo_micro_batch_size_per_gpu
#   LOGPROB_MICRO_BATCH_SIZE task       log_prob_micro_batch_size_per_gpu (web 8, code/mhqa 16)
#   USE_DYNAMIC_BSZ         task        pack by tokens instead of micro batches (web true)
#   PPO_MAX_TOKEN_LEN       prompt+resp ppo_max_token_len_per_gpu (with USE_DYNAMIC_BSZ)
#   SP_SIZE                 1           Ulysses sequence parallel size of the actor
#   PARAM_OFFLOAD           true        FSDP parameter offload to CPU
#   OPTIMIZER_OFFLOAD       true        FSDP optimizer offload to CPU
#   LR                      1e-6        actor learning rate
#   WARMUP_STEPS            task        lr warmup steps (web 3, code 10); -1 = use WARMUP_RATIO
#   WARMUP_RATIO            0.0         lr warmup as a fraction of the steps (mhqa 0.285)
#   WEIGHT_DECAY            task        AdamW weight decay (web 0.1, else 0.01)
#   MAX_PROMPT_LENGTH       task        data.max_prompt_length (web/mhqa 2048, code 4096)
#   MAX_RESPONSE_LENGTH     task        tokens after the prompt, observations included (web 30720, code 16384
#                                       in stage 1 / 28672 in stage 2, mhqa 8192)
#   TEMPERATURE             1.0         rollout sampling temperature
#   TOP_P                   1.0         rollout top_p (the original's RL used 1.0; its web inference used 0.9)
#   MAX_TURNS               task        multi_turn.max_assistant_turns (web 25, code 8, mhqa 8)
#   MAX_TOOL_CALLS          MAX_TURNS   multi_turn.max_user_turns (tool responses per trajectory)
#   MAX_OBS_CHARS           task        multi_turn.max_tool_response_length: characters kept of one observation
#                                       (web 8192, code 2048, mhqa 4096). The original set no cap (its verl fork
#                                       had none; its code tool kept 512x3 = 1536 characters per output). verl 0.9.1
#                                       always cuts (default 256), so afm sets a cap that the original's
#                                       observations fit: ten search results or a page summary run a few thousand
#                                       characters, a crawl that fell back to raw text (8,000) is kept whole; code
#                                       keeps the tool's 1536 per stream for stdout and stderr together; mhqa fits
#                                       3 passages x a few queries. Larger values cost response tokens.
#   AGENT_LOOP              afm_agent   rollout.agent.default_agent_loop (rows' agent_name column wins)
#   AGENT_LOOP_CONFIG       configs/verl/agent_loops.yaml   where afm_agent is declared
#   TOOL_CONFIG             configs/verl/tools/<task>.yaml  verl tool yaml of the task
#   AGENT_NUM_WORKERS       8           agent-loop worker actors (verl places them round-robin over the nodes; each
#                                       calls the tool servers at its node's SERVER_HOST)
#   VAL_N                   1           validation samples per prompt
#   VAL_TEMPERATURE         0           validation temperature (greedy, as the original: verl's val_kwargs)
#   VAL_TOP_P               1.0         validation top_p
#   VAL_DO_SAMPLE           false       true = sampled validation (e.g. VAL_DO_SAMPLE=true VAL_TEMPERATURE=0.6
#                                       VAL_TOP_P=0.95 VAL_N=16: the paper's avg@16)
#   VAL_BEFORE_TRAIN        true        validate once before the first step
#   TEST_FREQ               task        validate every N steps (-1 = never)
#   SAVE_FREQ               task        checkpoint every N steps (-1 = never; one is also saved at the end)
#   TOTAL_EPOCHS            task        epochs over TRAIN_FILES
#   TOTAL_TRAINING_STEPS    task        stop after N steps ("" = run all epochs)
#   PROJECT_NAME            afm_rl      tracker project
#   EXPERIMENT_NAME         task        run name (also the checkpoint folder)
#   LOGGER                  console,tensorboard   comma-separated: console, wandb, swanlab, tensorboard, mlflow,
#                                       file, clearml, trackio (wandb/swanlab read WANDB_API_KEY/SWANLAB_API_KEY
#                                       from environment.sh; swanlab also SWANLAB_MODE (cloud | local: offline, no
#                                       account) and SWANLAB_LOG_DIR, default $CKPT_DIR/swanlog; pip install
#                                       -e .[swanlab])
#   CKPT_DIR                checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME   trainer.default_local_dir (Hydra logs in CKPT_DIR/hydra/)
#   SAVE_MODEL_FOLDER       ""          the original's name: CKPT_DIR=$SAVE_MODEL_FOLDER/$EXPERIMENT_NAME when
#                                       CKPT_DIR is unset (a note says so; with CKPT_DIR set it is ignored, warned)
#   RESUME_MODE             auto        auto (latest checkpoint in CKPT_DIR, else start) | disable | resume_path
#   RESUME_FROM_PATH        ""          .../global_step_N folder (with RESUME_MODE=resume_path)
#   MAX_CKPT_TO_KEEP        ""          keep only the newest N actor checkpoints ("" = all)
#   SAVE_HF_MODEL           false       also save each checkpoint's actor as a Hugging Face model (--local: true)
#   VAL_DATA_DIR            $CKPT_DIR/validation   JSONL dumps of validation generations ("" = off)
#   ROLLOUT_DATA_DIR        ""          JSONL dumps of every training rollout ("" = off; large)
#   REWARD_MANAGER          dapo        dapo (overlong shaping) | rate_limited (judge API quotas) | naive
#   REWARD_FN               task        compute_score | compute_score_async (web: async, awaits the LLM judge)
#   REWARD_NUM_WORKERS      8           reward-loop worker actors
#   FORMAT_MODE             score_only  CoA format rule in the reward: score_only | multiply | penalty
#   INFRA_FAIL_LIMIT        8           stop the step after N infrastructure failures in a row (dead sandbox or
#                                       judge) in a reward worker, instead of training on 0 rewards; 0 = never
#   OVERLONG_BUFFER         true        (dapo) linear penalty over the last OVERLONG_BUFFER_LEN response tokens
#   OVERLONG_BUFFER_LEN     resp/8      (dapo) buffer length; resp/8 is the original's 7L/8 threshold
#   OVERLONG_PENALTY_FACTOR 1.0         (dapo) penalty at the full response length
#   REWARD_MAX_CONCURRENT   64          (rate_limited) reward calls in flight
#   REWARD_MAX_RPM          ""          (rate_limited) requests per minute ("" = unlimited)
#   REWARD_MAX_TPM          ""          (rate_limited) tokens per minute ("" = unlimited)
#   REWARD_TOKENS_PER_REQUEST 2000      (rate_limited) token estimate per judge call, for REWARD_MAX_TPM
#   REWARD_TIMEOUT          300         (rate_limited) seconds before a reward call scores 0
#   FILTER_GROUPS           true        DAPO dynamic sampling (drop groups whose FILTER_METRIC is constant)
#   FILTER_METRIC           acc         acc | score | reward
#   MAX_INFLIGHT_GEN_BATCHES 2          prompt batches generating at once while refilling filtered groups
#   MAX_NUM_GEN_BATCHES     10          DAPO paper's cap: a step that filters this many batches of groups stops the
#                                       run with an error (afm's patch; verl 0.9.1 ignores it); 0 = refill forever,
#                                       the original's value (docs/original_mapping.md says why afm differs)
#   CLIP_RATIO_LOW/HIGH     0.2/0.28    clip-higher
#   CLIP_RATIO_C            task        dual-clip constant (web 10.0, else 3.0)
#   LOSS_AGG_MODE           token-mean
#   KL_COEF                 0.001       (ppo) actor KL loss coefficient (low_var_kl)
#   CRITIC_LR               1e-5        (ppo) critic learning rate
#   CRITIC_WARMUP_RATIO     0.05        (ppo) critic lr warmup ratio
#   CRITIC_MAX_TOKEN_LEN    100000      (ppo) critic ppo_max_token_len_per_gpu (dynamic batch)
#   ATTN_IMPL               auto        auto: flash_attention_2 when this machine sees a GPU and PYTHON imports
#                                       flash_attn, else sdpa (printed); or flash_attention_2 | sdpa | eager
#   PYTHON                  $AFM_RL_VENV/bin/python (.venv-rl) if present, else python3   interpreter with verl and afm
#   RAY_ADDRESS             (auto when NNODES > 1)   Ray cluster to join (verl's ray.init reads it)
#   EXTRA_ARGS              ""          more Hydra overrides, split on whitespace (script arguments follow)
#   DRY_RUN                 0           1 (or the --dry-run argument): print the command, run nothing
#   --local                             the laptop profile (CPU, hf rollout, toy code task, tiny policy, 4 steps):
#                                       see experiments/local.sh
#
# The original project's names are accepted as aliases (a note says so): ACTOR_LR (LR), TRAIN_BS (TRAIN_BATCH_SIZE),
# PPO_MINI_BS (MINI_BATCH_SIZE), N (ROLLOUT_N), GEN_TP (TP), BASE_MODEL (MODEL_PATH), TRAIN_DATASETS (TRAIN_FILES),
# VAL_DATASETS (VAL_FILES), EPOCHS (TOTAL_EPOCHS), STEPS (TOTAL_TRAINING_STEPS), PPO_MICRO_BSZ_PER_GPU
# (MICRO_BATCH_SIZE), LOG_PROB_MICRO_BSZ_PER_GPU (LOGPROB_MICRO_BATCH_SIZE), max_prompt_length, max_response_length,
# use_dynamic_bsz (their upper-case knobs). GEN_BS has no counterpart (verl 0.9.1
# refills filtered groups itself) and is ignored with a warning; an exported variable spelt like a knob but not
# one (TRAIN_BATCHSIZE, ROLOUT_N) gets a warning.
#
# Keys (GRM_*, SERPER, SWANLAB/WANDB ...) come from environment.sh, which is sourced here; they reach the Ray
# workers through the environment of the process that started Ray, so on a multi-node cluster source it before
# `ray start` on every node (experiments/ray_cluster.sh does). Nothing here prints a key.

AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$AFM_ROOT/scripts/knobs.sh"
# shellcheck source=local.sh
source "$AFM_ROOT/experiments/local.sh"

afm_usage() {
  local script=$1 task=$2
  echo "usage: [VAR=value ...] bash $script [--dry-run] [--local] [hydra.key=value ...]"
  echo
  echo "defaults of this script (task '$task', ALGORITHM=${ALGORITHM:-dapo}):"
  afm_rl_algorithm_defaults "$task"
  afm_rl_task_defaults "$task"
  local v
  for v in "${AFM_TASK_VARS[@]}"; do
    printf '  %-24s %s\n' "$v" "${!v}"
  done
  echo
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'
}

# Task defaults: set each knob of AFM_TASK_VARS that the caller did not set. Paper settings (Chain-of-Agents,
# arXiv 2508.13167, and the original's train_dapo_*_agent.sh; see README "RL").
AFM_TASK_VARS=(MODEL_PATH TRAIN_FILES VAL_FILES TP GPU_MEM_UTIL ROLLOUT_N TRAIN_BATCH_SIZE MINI_BATCH_SIZE
  LOGPROB_MICRO_BATCH_SIZE USE_DYNAMIC_BSZ WARMUP_STEPS WARMUP_RATIO WEIGHT_DECAY MAX_PROMPT_LENGTH
  MAX_RESPONSE_LENGTH MAX_TURNS MAX_OBS_CHARS CLIP_RATIO_C TEST_FREQ SAVE_FREQ TOTAL_EPOCHS TOTAL_TRAINING_STEPS EXPERIMENT_NAME
  REWARD_FN)
afm_rl_task_defaults() {
  local task=$1
  case "$task" in
    web)
      : "${MODEL_PATH:=saves/AFM-WebAgent-32B-sft}"
      : "${TRAIN_FILES:=data/rl/web_train.parquet}"
      : "${VAL_FILES=data/rl/web_val.parquet}"
      : "${TP:=8}" "${GPU_MEM_UTIL:=0.3}" "${ROLLOUT_N:=8}"
      : "${TRAIN_BATCH_SIZE:=64}" "${MINI_BATCH_SIZE:=64}" "${LOGPROB_MICRO_BATCH_SIZE:=8}"
      : "${USE_DYNAMIC_BSZ:=true}" "${WARMUP_STEPS:=3}" "${WARMUP_RATIO:=0.0}" "${WEIGHT_DECAY:=0.1}"
      : "${MAX_PROMPT_LENGTH:=2048}" "${MAX_RESPONSE_LENGTH:=30720}" "${MAX_TURNS:=25}" "${CLIP_RATIO_C:=10.0}"
      : "${MAX_OBS_CHARS:=8192}"
      : "${TEST_FREQ:=10}" "${SAVE_FREQ:=5}" "${TOTAL_EPOCHS:=2}" "${TOTAL_TRAINING_STEPS=60}"
      : "${EXPERIMENT_NAME:=dapo_web_agent}" "${REWARD_FN:=compute_score_async}"
      ;;
    code)
      # Two-stage length schedule: STAGE=1 trains with 16k-token responses (prompt+response 20k), STAGE=2
      # continues from the stage-1 policy with 28k (prompt+response 32k).
      local stage=${STAGE:-1}
      case "$stage" in
        1) : "${MAX_RESPONSE_LENGTH:=16384}" "${EXPERIMENT_NAME:=dapo_code_agent}" ;;
        2) : "${MAX_RESPONSE_LENGTH:=28672}" "${EXPERIMENT_NAME:=dapo_code_agent_stage2}" ;;
        *) afm_die "STAGE must be 1 (16k responses) or 2 (32k context) (got '$stage')" ;;
      esac
      : "${MODEL_PATH:=saves/AFM-CodeAgent-32B-sft}"
      : "${TRAIN_FILES:=data/rl/code_train.parquet}"
      : "${VAL_FILES=data/rl/code_val.parquet}"
      : "${TP:=4}" "${GPU_MEM_UTIL:=0.5}" "${ROLLOUT_N:=8}"
      : "${TRAIN_BATCH_SIZE:=256}" "${MINI_BATCH_SIZE:=32}" "${LOGPROB_MICRO_BATCH_SIZE:=16}"
      : "${USE_DYNAMIC_BSZ:=false}" "${WARMUP_STEPS:=10}" "${WARMUP_RATIO:=0.0}" "${WEIGHT_DECAY:=0.01}"
      : "${MAX_PROMPT_LENGTH:=4096}" "${MAX_TURNS:=8}" "${CLIP_RATIO_C:=3.0}" "${MAX_OBS_CHARS:=2048}"
      : "${TEST_FREQ:=10}" "${SAVE_FREQ:=5}" "${TOTAL_EPOCHS:=100}" "${TOTAL_TRAINING_STEPS=2000}"
      : "${REWARD_FN:=compute_score}"
      ;;
    mhqa)
      # Search-R1 setting: NQ + HotpotQA training questions, wiki_search over a 2018 Wikipedia dump, EM reward.
      : "${MODEL_PATH:=saves/AFM-MHQA-Agent-7B-sft}"
      : "${TRAIN_FILES:=data/rl/mhqa_train.parquet}"
      : "${VAL_FILES=data/rl/mhqa_val.parquet}"
      : "${TP:=4}" "${GPU_MEM_UTIL:=0.5}" "${ROLLOUT_N:=5}"
      : "${TRAIN_BATCH_SIZE:=512}" "${MINI_BATCH_SIZE:=256}" "${LOGPROB_MICRO_BATCH_SIZE:=16}"
      : "${USE_DYNAMIC_BSZ:=false}" "${WARMUP_STEPS:=-1}" "${WARMUP_RATIO:=0.285}" "${WEIGHT_DECAY:=0.01}"
      : "${MAX_PROMPT_LENGTH:=2048}" "${MAX_RESPONSE_LENGTH:=8192}" "${MAX_TURNS:=8}" "${CLIP_RATIO_C:=3.0}"
      : "${MAX_OBS_CHARS:=4096}"
      : "${TEST_FREQ:=20}" "${SAVE_FREQ:=20}" "${TOTAL_EPOCHS:=15}" "${TOTAL_TRAINING_STEPS=1005}"
      : "${EXPERIMENT_NAME:=dapo_mhqa_agent}" "${REWARD_FN:=compute_score}"
      ;;
    *) afm_die "unknown task '$task' (web, code or mhqa)" ;;
  esac
}

# ---- the caller's input: the original's names, misspellings, relative paths ---------------------------------------
AFM_RL_ALIASES=(LR=ACTOR_LR TRAIN_BATCH_SIZE=TRAIN_BS MINI_BATCH_SIZE=PPO_MINI_BS ROLLOUT_N=N TP=GEN_TP
  MODEL_PATH=BASE_MODEL TRAIN_FILES=TRAIN_DATASETS VAL_FILES=VAL_DATASETS TOTAL_EPOCHS=EPOCHS
  TOTAL_TRAINING_STEPS=STEPS MICRO_BATCH_SIZE=PPO_MICRO_BSZ_PER_GPU LOGPROB_MICRO_BATCH_SIZE=LOG_PROB_MICRO_BSZ_PER_GPU
  MAX_PROMPT_LENGTH=max_prompt_length MAX_RESPONSE_LENGTH=max_response_length USE_DYNAMIC_BSZ=use_dynamic_bsz)
AFM_RL_PATH_KNOBS=(MODEL_PATH TRAIN_FILES VAL_FILES CKPT_DIR SAVE_MODEL_FOLDER TOOL_CONFIG AGENT_LOOP_CONFIG
  VAL_DATA_DIR ROLLOUT_DATA_DIR RESUME_FROM_PATH)
AFM_RL_USER_PATHS=" "
AFM_CALLER_DIR=$PWD

# Knob names: those of the table at the top of this file, plus the few documented elsewhere.
afm_rl_knob_names() {
  sed -n '2,/^$/p' "$AFM_ROOT/experiments/common.sh" | grep -oE '^#   [A-Z][A-Z0-9_]+' | cut -c5-
  printf '%s\n' CLIP_RATIO_HIGH STAGE AFM_RL_VENV AFM_MODEL_PATH
}

# Apply the aliases, warn about misspelt knobs and remember which path knobs the caller gave (before the task
# defaults fill the rest in).
afm_rl_caller_input() {
  local pair v
  for pair in "${AFM_RL_ALIASES[@]}"; do afm_alias "${pair%%=*}" "${pair#*=}"; done
  [[ -n ${GEN_BS+set} ]] &&
    afm_warn "GEN_BS (the original's generation batch) is ignored: verl 0.9.1 generates TRAIN_BATCH_SIZE prompts" \
      "per batch and refills filtered groups itself (MAX_INFLIGHT_GEN_BATCHES)"
  local known
  known=$(afm_rl_knob_names | tr '\n' ' ')
  # shellcheck disable=SC2086  # word splitting of the name list is intended
  afm_warn_unknown_knobs $known "${AFM_RL_ALIASES[@]#*=}" GEN_BS
  for v in "${AFM_RL_PATH_KNOBS[@]}"; do
    [[ -n ${!v:-} ]] && AFM_RL_USER_PATHS+="$v "
  done
  return 0
}

# ALGORITHM=ppo: the original's MHQA PPO recipe changes these defaults (before the task's own).
afm_rl_algorithm_defaults() {
  local task=$1
  case "${ALGORITHM:=dapo}" in
    dapo) ;;
    ppo)
      : "${ROLLOUT_N:=1}" "${REWARD_MANAGER:=naive}" "${EXPERIMENT_NAME:=ppo_${task}_agent}"
      : "${KL_COEF:=0.001}" "${CRITIC_LR:=1e-5}" "${CRITIC_WARMUP_RATIO:=0.05}" "${CRITIC_MAX_TOKEN_LEN:=100000}"
      ;;
    *) afm_die "ALGORITHM must be dapo or ppo (got '$ALGORITHM')" ;;
  esac
}

# afm_rl_warn_model_path TASK LOCAL_FLAG: MODEL_PATH from the caller's environment (not the original's BASE_MODEL,
# whose alias note already names it) silently replaced the task's starting policy, the SFT output; an SFT run
# exports MODEL_PATH for its base model, so one left in the shell would start RL from the base model. One line.
afm_rl_warn_model_path() {
  local task=$1 local_flag=$2 default
  [[ $AFM_RL_USER_PATHS == *" MODEL_PATH "* && -z ${BASE_MODEL:-} && $local_flag == false ]] || return 0
  default=$(
    unset MODEL_PATH
    afm_rl_task_defaults "$task"
    printf '%s' "$MODEL_PATH"
  )
  [[ $MODEL_PATH == "$default" ]] && return 0
  local who="the actor"
  [[ $ALGORITHM == ppo ]] && who="the actor and the critic"
  afm_warn "MODEL_PATH=$MODEL_PATH from the environment replaces this script's starting policy $default (the" \
    "SFT output) for $who; unset MODEL_PATH to start from the SFT output"
}

# afm_rl_main TASK SCRIPT_NAME [--dry-run] [hydra overrides ...]
afm_rl_main() {
  local task=$1 script=$2
  shift 2
  local arg tail=() dry_flag=false local_flag=false
  for arg in "$@"; do
    case "$arg" in
      -h | --help)
        afm_usage "$script" "$task"
        exit 0
        ;;
      --dry-run) dry_flag=true ;;
      --local) local_flag=true ;;
      -*) afm_die "unknown option '$arg' (options: --dry-run, --local, --help; everything else is a Hydra override key=value)" ;;
      *)
        [[ $arg == *=* ]] || afm_die "argument '$arg' is not a Hydra override (key=value)"
        tail+=("$arg")
        ;;
    esac
  done

  afm_rl_caller_input
  # environment.sh only sets what is unset (keys, server addresses); it never overrides a value given here.
  if [[ -f $AFM_ROOT/environment.sh ]]; then
    # shellcheck source=../environment.sh
    source "$AFM_ROOT/environment.sh"
  fi
  [[ $local_flag == true ]] && afm_rl_local_profile "$task"
  # The hf rollout runs one model copy per trainer rank: the task's TP default does not apply.
  [[ ${ROLLOUT_ENGINE:-} == hf ]] && : "${TP:=1}"
  afm_rl_algorithm_defaults "$task"
  afm_rl_task_defaults "$task"
  afm_rl_warn_model_path "$task" "$local_flag"

  # Every knob this shell holds (set, possibly empty) goes to afm/rl/knobs.py, which checks them all, builds the verl
  # command and runs it (or prints it). It runs with the RL environment's python (not PYTHON, the trainer's).
  local name args=()
  while IFS= read -r name; do
    if [[ -n ${!name+set} ]]; then args+=("--knob=$name=${!name}"); fi
  done < <(afm_rl_knob_names)
  for name in $AFM_RL_USER_PATHS; do args+=("--user-path=$name"); done
  if [[ $dry_flag == true ]]; then args+=(--dry-run); fi
  local trainer_python
  trainer_python=$(afm_python "$AFM_ROOT" AFM_RL_VENV .venv-rl)
  afm_run_module "$(afm_python "$AFM_ROOT" AFM_RL_VENV .venv-rl "")" "$AFM_ROOT" afm.rl.knobs "--task=$task" \
    "--script=$script" "--root=$AFM_ROOT" "--cwd=$AFM_CALLER_DIR" "--python=$trainer_python" \
    "--local-workdir=${AFM_LOCAL_WORKDIR:-}" "${args[@]}" -- "${tail[@]}"
}
