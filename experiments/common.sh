# shellcheck shell=bash
# experiments/common.sh: the DAPO launcher shared by train_dapo_{web,code,mhqa}_agent.sh (sourced, not run).
#
# Multi-turn agentic RL on verl 0.9.1 (`python -m verl.trainer.main_ppo`, V1 trainer, FSDP actor, vLLM/SGLang
# async rollout) with the afm_agent loop, afm's tools and afm's reward entry. The DAPO overrides are in
# configs/verl/dapo.sh. Every knob is an environment variable; "task" means the per-script default (printed by
# --help and at the top of each script). Arguments given to a script are appended as extra Hydra overrides
# (the last value of a key wins), e.g. `bash experiments/train_dapo_web_agent.sh trainer.total_epochs=1`.
#
#   ALGORITHM               dapo        dapo (configs/verl/dapo.sh) | ppo (the original's MHQA recipe: GAE, a
#                                       critic, KL 0.001, n=1; configs/verl/ppo.sh; train_ppo_mhqa_agent.sh)
#   MODEL_PATH              task        HF id or folder of the starting policy: the output of the matching SFT
#                                       script (web saves/AFM-WebAgent-32B-sft, code saves/AFM-CodeAgent-32B-sft,
#                                       mhqa saves/AFM-MHQA-Agent-7B-sft); AFM_MODEL_PATH is not read here
#   TRAIN_FILES             task        RL parquet(s) from `afm data rl` / data/prepare_rl.sh, comma-separated
#   VAL_FILES               task        validation parquet(s), comma-separated; "" = no validation
#   (paths you give - MODEL_PATH, TRAIN_FILES, VAL_FILES, CKPT_DIR, TOOL_CONFIG, AGENT_LOOP_CONFIG, VAL_DATA_DIR,
#    ROLLOUT_DATA_DIR, RESUME_FROM_PATH - are taken from the current directory when relative; the defaults are
#    under the repo)
#   NNODES                  1           nodes in the Ray cluster (start it with experiments/ray_cluster.sh)
#   GPUS_PER_NODE           8           GPUs used on each node
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
#                                       (web 8192, code 2048, mhqa 4096; verl's default 256 is far too small)
#   AGENT_LOOP              afm_agent   rollout.agent.default_agent_loop (rows' agent_name column wins)
#   AGENT_LOOP_CONFIG       configs/verl/agent_loops.yaml   where afm_agent is declared
#   TOOL_CONFIG             configs/verl/tools/<task>.yaml  verl tool yaml of the task
#   AGENT_NUM_WORKERS       8           agent-loop worker actors
#   VAL_N                   1           validation samples per prompt
#   VAL_TEMPERATURE         0.6         validation temperature
#   VAL_TOP_P               0.95        validation top_p
#   VAL_DO_SAMPLE           true        false = greedy validation
#   VAL_BEFORE_TRAIN        true        validate once before the first step
#   TEST_FREQ               task        validate every N steps (-1 = never)
#   SAVE_FREQ               task        checkpoint every N steps (-1 = never; one is also saved at the end)
#   TOTAL_EPOCHS            task        epochs over TRAIN_FILES
#   TOTAL_TRAINING_STEPS    task        stop after N steps ("" = run all epochs)
#   PROJECT_NAME            afm_rl      tracker project
#   EXPERIMENT_NAME         task        run name (also the checkpoint folder)
#   LOGGER                  console,tensorboard   comma-separated: console, wandb, swanlab, tensorboard, mlflow,
#                                       file (wandb/swanlab read WANDB_API_KEY/SWANLAB_API_KEY from environment.sh;
#                                       swanlab also SWANLAB_MODE (cloud | local: offline, no account) and
#                                       SWANLAB_LOG_DIR, default $CKPT_DIR/swanlog; pip install -e .[swanlab])
#   CKPT_DIR                checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME   trainer.default_local_dir (Hydra logs in CKPT_DIR/hydra/)
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
#   MAX_NUM_GEN_BATCHES     10          DAPO paper's cap; ignored by verl 0.9.1's V1 buffer (kept for reference)
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
# shellcheck source=../configs/verl/dapo.sh
source "$AFM_ROOT/configs/verl/dapo.sh"
# shellcheck source=../configs/verl/ppo.sh
source "$AFM_ROOT/configs/verl/ppo.sh"
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

# A word as the shell reads it back: plain when it holds only safe characters, else in single quotes.
afm_quote() {
  if [[ $1 =~ ^[A-Za-z0-9_./:,=+@%-]+$ ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# A comma-separated file list as a Hydra value: one path as is, several as [a,b]. Relative paths are taken from
# the repo root. Dies on characters Hydra's grammar would misread.
AFM_HYDRA_UNSAFE='[][[:space:]=,"{}'"'"']'
afm_hydra_files() {
  local name=$1 value=$2 item items=() out=()
  IFS=',' read -r -a items <<< "$value"
  for item in "${items[@]}"; do
    item=${item#"${item%%[![:space:]]*}"}
    item=${item%"${item##*[![:space:]]}"}
    [[ -z $item ]] && continue
    [[ $item == /* || $item == ~* ]] || item=$(afm_rl_base "$name")/${item#./}
    [[ $item =~ $AFM_HYDRA_UNSAFE ]] &&
      afm_die "$name: path '$item' has spaces, quotes, '=' or brackets, which Hydra overrides cannot carry"
    out+=("$item")
  done
  ((${#out[@]} > 0)) || afm_die "$name is empty"
  if ((${#out[@]} == 1)); then
    printf '%s' "${out[0]}"
  else
    local IFS=,
    printf '[%s]' "${out[*]}"
  fi
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
AFM_RL_PATH_KNOBS=(MODEL_PATH TRAIN_FILES VAL_FILES CKPT_DIR TOOL_CONFIG AGENT_LOOP_CONFIG VAL_DATA_DIR
  ROLLOUT_DATA_DIR RESUME_FROM_PATH)
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

# The folder a relative value of path knob NAME is taken from: the caller's directory for a value the caller
# gave, the repo root for a default.
afm_rl_base() {
  if [[ $AFM_RL_USER_PATHS == *" $1 "* ]]; then printf '%s' "${AFM_CALLER_DIR%/}"; else printf '%s' "$AFM_ROOT"; fi
}

# ALGORITHM=ppo: the original's MHQA PPO recipe changes these defaults (before the task's own).
afm_rl_algorithm_defaults() {
  local task=$1
  case "${ALGORITHM:=dapo}" in
    dapo) ;;
    ppo)
      : "${ROLLOUT_N:=1}" "${REWARD_MANAGER:=naive}" "${EXPERIMENT_NAME:=ppo_${task}_agent}"
      : "${KL_COEF:=0.001}" "${CRITIC_LR:=1e-5}" "${CRITIC_WARMUP_RATIO:=0.05}" "${CRITIC_MAX_TOKEN_LEN:=100000}"
      local v
      for v in KL_COEF:$KL_COEF CRITIC_LR:$CRITIC_LR CRITIC_WARMUP_RATIO:$CRITIC_WARMUP_RATIO; do
        afm_is_number "${v#*:}" || afm_die "${v%%:*} must be a number (got '${v#*:}')"
      done
      afm_is_posint "$CRITIC_MAX_TOKEN_LEN" ||
        afm_die "CRITIC_MAX_TOKEN_LEN must be a positive integer (got '$CRITIC_MAX_TOKEN_LEN')"
      ;;
    *) afm_die "ALGORITHM must be dapo or ppo (got '$ALGORITHM')" ;;
  esac
}

# afm_rl_attention PYTHON: "<implementation> (<why>)" for ATTN_IMPL (auto looks at this machine).
afm_rl_attention() {
  local python=$1 impl=${ATTN_IMPL:-auto}
  case "$impl" in
    flash_attention_2 | sdpa | eager) echo "$impl (ATTN_IMPL=$impl)" ;;
    auto)
      if ! { command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi -L 2> /dev/null | grep -q '^GPU '; }; then
        echo "sdpa (no GPU on this machine)"
      elif "$python" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('flash_attn') is None)" \
        > /dev/null 2>&1; then
        echo "flash_attention_2 (GPU and flash_attn found)"
      else
        echo "sdpa (flash_attn is not installed: pip install flash-attn for FlashAttention-2)"
      fi
      ;;
    *) afm_die "ATTN_IMPL must be auto, flash_attention_2, sdpa or eager (got '$impl')" ;;
  esac
}

# The algorithm's overrides, one per line.
afm_algorithm_overrides() {
  if [[ $ALGORITHM == ppo ]]; then afm_ppo_overrides; else afm_dapo_overrides; fi
}

# The python that has verl and afm.
afm_rl_python() {
  if [[ -n ${PYTHON:-} ]]; then
    echo "$PYTHON"
  elif [[ -x $AFM_ROOT/${AFM_RL_VENV:-.venv-rl}/bin/python ]]; then
    echo "$AFM_ROOT/${AFM_RL_VENV:-.venv-rl}/bin/python"
  else
    echo python3
  fi
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

  # ---- knobs -------------------------------------------------------------------------------------------------
  local dry_run
  dry_run=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
  [[ $dry_flag == true ]] && dry_run=true
  local device=${DEVICE:-gpu}
  local nnodes=${NNODES:-1} gpus=${GPUS_PER_NODE:-8}
  [[ $device == cpu ]] && gpus=${GPUS_PER_NODE:-1}
  GPUS_PER_NODE_EFFECTIVE=$gpus
  local engine=${ROLLOUT_ENGINE:-vllm}
  local micro=${MICRO_BATCH_SIZE:-2}
  local lr=${LR:-1e-6}
  local temperature=${TEMPERATURE:-1.0} top_p=${TOP_P:-1.0}
  local max_tool_calls=${MAX_TOOL_CALLS:-$MAX_TURNS}
  local agent_loop=${AGENT_LOOP:-afm_agent}
  local agent_cfg=${AGENT_LOOP_CONFIG:-configs/verl/agent_loops.yaml}
  local tool_cfg=${TOOL_CONFIG:-configs/verl/tools/$task.yaml}
  local agent_workers=${AGENT_NUM_WORKERS:-8}
  local val_n=${VAL_N:-1} val_temp=${VAL_TEMPERATURE:-0.6} val_top_p=${VAL_TOP_P:-0.95}
  local project=${PROJECT_NAME:-afm_rl}
  local experiment=$EXPERIMENT_NAME
  local logger=${LOGGER:-console,tensorboard}
  local ckpt_dir=${CKPT_DIR:-$AFM_ROOT/checkpoints/$project/$experiment}
  local resume_mode=${RESUME_MODE:-auto} resume_path=${RESUME_FROM_PATH:-}
  local max_ckpt=${MAX_CKPT_TO_KEEP:-}
  local val_dir=${VAL_DATA_DIR-$ckpt_dir/validation} rollout_dir=${ROLLOUT_DATA_DIR:-}
  local reward_manager=${REWARD_MANAGER:-dapo} reward_fn=$REWARD_FN
  local reward_workers=${REWARD_NUM_WORKERS:-8}
  local format_mode=${FORMAT_MODE:-score_only}
  local infra_limit=${INFRA_FAIL_LIMIT:-8}
  local overlong_len=${OVERLONG_BUFFER_LEN:-$((MAX_RESPONSE_LENGTH / 8))}
  local overlong_factor=${OVERLONG_PENALTY_FACTOR:-1.0}
  local sp_size=${SP_SIZE:-1}
  local total_steps=${TOTAL_TRAINING_STEPS:-}
  local max_len=$((MAX_PROMPT_LENGTH + MAX_RESPONSE_LENGTH))
  local ppo_max_tokens=${PPO_MAX_TOKEN_LEN:-$max_len}
  local use_dyn overlong val_sample val_before param_offload opt_offload
  use_dyn=$(afm_bool USE_DYNAMIC_BSZ "$USE_DYNAMIC_BSZ")
  overlong=$(afm_bool OVERLONG_BUFFER "${OVERLONG_BUFFER:-true}")
  val_sample=$(afm_bool VAL_DO_SAMPLE "${VAL_DO_SAMPLE:-true}")
  val_before=$(afm_bool VAL_BEFORE_TRAIN "${VAL_BEFORE_TRAIN:-true}")
  param_offload=$(afm_bool PARAM_OFFLOAD "${PARAM_OFFLOAD:-true}")
  opt_offload=$(afm_bool OPTIMIZER_OFFLOAD "${OPTIMIZER_OFFLOAD:-true}")
  FILTER_GROUPS=$(afm_bool FILTER_GROUPS "${FILTER_GROUPS:-true}")
  FILTER_METRIC=${FILTER_METRIC:-acc}
  MAX_INFLIGHT_GEN_BATCHES=${MAX_INFLIGHT_GEN_BATCHES:-2}
  MAX_NUM_GEN_BATCHES=${MAX_NUM_GEN_BATCHES:-10}
  CLIP_RATIO_LOW=${CLIP_RATIO_LOW:-0.2}
  CLIP_RATIO_HIGH=${CLIP_RATIO_HIGH:-0.28}
  LOSS_AGG_MODE=${LOSS_AGG_MODE:-token-mean}

  # ---- checks (before anything starts) ------------------------------------------------------------------------
  case "$engine" in
    vllm | sglang | hf) ;;
    *) afm_die "ROLLOUT_ENGINE must be vllm, sglang or hf (got '$engine')" ;;
  esac
  TRAINER_MODE=${TRAINER_MODE:-sync}
  case "$TRAINER_MODE" in
    sync | colocate_async) ;;
    separate_async)
      [[ $device == gpu ]] || afm_die "TRAINER_MODE=separate_async needs GPUs: verl pushes weights to the separate" \
        "rollout through an nccl/nixl/mooncake checkpoint engine (trainer_separate_async.py:68); on the CPU use colocate_async"
      ;;
    *) afm_die "TRAINER_MODE must be sync, colocate_async or separate_async (got '$TRAINER_MODE')" ;;
  esac
  case "$device" in
    gpu) ;;
    cpu) [[ $engine == hf ]] || afm_die "DEVICE=cpu needs ROLLOUT_ENGINE=hf (vLLM/SGLang need a GPU)" ;;
    *) afm_die "DEVICE must be gpu or cpu (got '$device')" ;;
  esac
  [[ $engine != hf || $TP == 1 ]] || afm_die "ROLLOUT_ENGINE=hf runs one model copy per rank: TP must be 1 (got '$TP')"
  case "$reward_manager" in
    dapo | rate_limited | naive) ;;
    *) afm_die "REWARD_MANAGER must be dapo, rate_limited or naive (got '$reward_manager')" ;;
  esac
  case "$reward_fn" in
    compute_score | compute_score_async) ;;
    *) afm_die "REWARD_FN must be compute_score or compute_score_async (got '$reward_fn')" ;;
  esac
  case "$format_mode" in
    score_only | multiply | penalty) ;;
    *) afm_die "FORMAT_MODE must be score_only, multiply or penalty (got '$format_mode')" ;;
  esac
  [[ $infra_limit =~ ^[0-9]+$ ]] || afm_die "INFRA_FAIL_LIMIT must be a whole number >= 0 (got '$infra_limit')"
  case "$FILTER_METRIC" in
    acc | score | reward) ;;
    *) afm_die "FILTER_METRIC must be acc, score or reward (got '$FILTER_METRIC')" ;;
  esac
  case "$LOSS_AGG_MODE" in
    token-mean | token-sum | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm) ;;
    *) afm_die "LOSS_AGG_MODE must be token-mean, token-sum, seq-mean-token-sum, seq-mean-token-mean or" \
      "seq-mean-token-sum-norm (got '$LOSS_AGG_MODE')" ;;
  esac
  case "$resume_mode" in
    auto | disable) ;;
    resume_path)
      [[ -n $resume_path ]] || afm_die "RESUME_MODE=resume_path needs RESUME_FROM_PATH=<CKPT_DIR>/global_step_N"
      ;;
    *) afm_die "RESUME_MODE must be auto, disable or resume_path (got '$resume_mode')" ;;
  esac
  local item loggers=()
  IFS=',' read -r -a loggers <<< "${logger// /}"
  ((${#loggers[@]} > 0)) || afm_die "LOGGER is empty (use console)"
  for item in "${loggers[@]}"; do
    case "$item" in
      console | wandb | swanlab | tensorboard | mlflow | file | clearml | trackio) ;;
      *) afm_die "LOGGER must be a comma-separated list of console, wandb, swanlab, tensorboard, mlflow, file" \
        "(got '$logger')" ;;
    esac
  done
  local v
  for v in NNODES:$nnodes GPUS_PER_NODE:$gpus TP:$TP ROLLOUT_N:$ROLLOUT_N TRAIN_BATCH_SIZE:$TRAIN_BATCH_SIZE \
    MINI_BATCH_SIZE:$MINI_BATCH_SIZE MICRO_BATCH_SIZE:$micro LOGPROB_MICRO_BATCH_SIZE:$LOGPROB_MICRO_BATCH_SIZE \
    MAX_PROMPT_LENGTH:$MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH:$MAX_RESPONSE_LENGTH MAX_TURNS:$MAX_TURNS \
    MAX_TOOL_CALLS:$max_tool_calls AGENT_NUM_WORKERS:$agent_workers VAL_N:$val_n TOTAL_EPOCHS:$TOTAL_EPOCHS \
    REWARD_NUM_WORKERS:$reward_workers PPO_MAX_TOKEN_LEN:$ppo_max_tokens SP_SIZE:$sp_size \
    MAX_INFLIGHT_GEN_BATCHES:$MAX_INFLIGHT_GEN_BATCHES MAX_OBS_CHARS:$MAX_OBS_CHARS; do
    afm_is_posint "${v#*:}" || afm_die "${v%%:*} must be a positive integer (got '${v#*:}')"
  done
  for v in TEST_FREQ:$TEST_FREQ SAVE_FREQ:$SAVE_FREQ WARMUP_STEPS:$WARMUP_STEPS \
    MAX_NUM_GEN_BATCHES:$MAX_NUM_GEN_BATCHES; do
    afm_is_int "${v#*:}" || afm_die "${v%%:*} must be an integer, -1 = off (got '${v#*:}')"
  done
  for v in LR:$lr TEMPERATURE:$temperature TOP_P:$top_p VAL_TEMPERATURE:$val_temp VAL_TOP_P:$val_top_p \
    GPU_MEM_UTIL:$GPU_MEM_UTIL WEIGHT_DECAY:$WEIGHT_DECAY WARMUP_RATIO:$WARMUP_RATIO \
    CLIP_RATIO_LOW:$CLIP_RATIO_LOW CLIP_RATIO_HIGH:$CLIP_RATIO_HIGH CLIP_RATIO_C:$CLIP_RATIO_C \
    OVERLONG_PENALTY_FACTOR:$overlong_factor; do
    afm_is_number "${v#*:}" || afm_die "${v%%:*} must be a number (got '${v#*:}')"
  done
  [[ -z $total_steps ]] || afm_is_posint "$total_steps" ||
    afm_die "TOTAL_TRAINING_STEPS must be a positive integer or empty (got '$total_steps')"
  [[ -z $max_ckpt ]] || afm_is_posint "$max_ckpt" ||
    afm_die "MAX_CKPT_TO_KEEP must be a positive integer or empty (got '$max_ckpt')"
  ((MINI_BATCH_SIZE <= TRAIN_BATCH_SIZE)) ||
    afm_die "MINI_BATCH_SIZE ($MINI_BATCH_SIZE) must not exceed TRAIN_BATCH_SIZE ($TRAIN_BATCH_SIZE)"
  ((TRAIN_BATCH_SIZE % MINI_BATCH_SIZE == 0)) ||
    afm_die "TRAIN_BATCH_SIZE ($TRAIN_BATCH_SIZE) must be a multiple of MINI_BATCH_SIZE ($MINI_BATCH_SIZE)"
  [[ $ALGORITHM == ppo ]] || ((ROLLOUT_N > 1)) ||
    afm_warn "ROLLOUT_N=1: GRPO advantages are zero and filter_groups keeps nothing (ALGORITHM=ppo trains with n=1)"
  ((gpus % TP == 0)) || afm_die "GPUS_PER_NODE ($gpus) must be a multiple of TP ($TP)"
  if [[ $use_dyn == false ]]; then
    (((TRAIN_BATCH_SIZE * ROLLOUT_N) % (nnodes * gpus) == 0)) ||
      afm_die "TRAIN_BATCH_SIZE x ROLLOUT_N ($((TRAIN_BATCH_SIZE * ROLLOUT_N))) must be divisible by the" \
        "$((nnodes * gpus)) GPUs (verl checks it; or USE_DYNAMIC_BSZ=true)"
  fi
  if [[ $reward_manager == dapo && $overlong == true ]]; then
    if ! afm_is_posint "$overlong_len" || ((overlong_len > MAX_RESPONSE_LENGTH)); then
      afm_die "OVERLONG_BUFFER_LEN must be 1 .. MAX_RESPONSE_LENGTH ($MAX_RESPONSE_LENGTH) (got '$overlong_len')"
    fi
  fi
  if [[ $reward_manager != dapo && -n ${OVERLONG_BUFFER_LEN:-} ]]; then
    afm_warn "OVERLONG_BUFFER_LEN is used by REWARD_MANAGER=dapo only; $reward_manager applies no length penalty"
  fi
  local max_concurrent=${REWARD_MAX_CONCURRENT:-64} max_rpm=${REWARD_MAX_RPM:-} max_tpm=${REWARD_MAX_TPM:-}
  local tokens_per_req=${REWARD_TOKENS_PER_REQUEST:-2000} reward_timeout=${REWARD_TIMEOUT:-300}
  if [[ $reward_manager == rate_limited ]]; then
    afm_is_posint "$max_concurrent" || afm_die "REWARD_MAX_CONCURRENT must be a positive integer (got '$max_concurrent')"
    [[ -z $max_rpm ]] || afm_is_posint "$max_rpm" || afm_die "REWARD_MAX_RPM must be a positive integer (got '$max_rpm')"
    [[ -z $max_tpm ]] || afm_is_posint "$max_tpm" || afm_die "REWARD_MAX_TPM must be a positive integer (got '$max_tpm')"
    afm_is_posint "$tokens_per_req" || afm_die "REWARD_TOKENS_PER_REQUEST must be a positive integer"
    afm_is_number "$reward_timeout" || afm_die "REWARD_TIMEOUT must be a number of seconds (got '$reward_timeout')"
  fi
  [[ -n $MODEL_PATH ]] || afm_die "MODEL_PATH is empty"
  [[ $experiment =~ ^[A-Za-z0-9_.-]+$ ]] || afm_die "EXPERIMENT_NAME may hold letters, digits, '_', '.', '-' (got '$experiment')"
  [[ $project =~ ^[A-Za-z0-9_.-]+$ ]] || afm_die "PROJECT_NAME may hold letters, digits, '_', '.', '-' (got '$project')"

  local model=$MODEL_PATH model_base
  model_base=$(afm_rl_base MODEL_PATH)
  # A relative path that exists (here, or under the repo for the default) is a local folder; saves/... and ./...
  # are always folders; anything else is a hub id (org/name).
  if [[ $model != /* && -e $model_base/$model ]]; then model=$model_base/${model#./}; fi
  if [[ $model == saves/* || $model == ./* ]]; then model=$model_base/${model#./}; fi
  local train_files val_files=""
  train_files=$(afm_hydra_files TRAIN_FILES "$TRAIN_FILES")
  [[ -n ${VAL_FILES// /} ]] && val_files=$(afm_hydra_files VAL_FILES "$VAL_FILES")
  [[ $agent_cfg == /* ]] || agent_cfg=$(afm_rl_base AGENT_LOOP_CONFIG)/$agent_cfg
  [[ $tool_cfg == /* ]] || tool_cfg=$(afm_rl_base TOOL_CONFIG)/$tool_cfg
  [[ $ckpt_dir == /* ]] || ckpt_dir=$(afm_rl_base CKPT_DIR)/$ckpt_dir
  [[ -z $val_dir || $val_dir == /* ]] || val_dir=$(afm_rl_base VAL_DATA_DIR)/$val_dir
  [[ -z $rollout_dir || $rollout_dir == /* ]] || rollout_dir=$(afm_rl_base ROLLOUT_DATA_DIR)/$rollout_dir
  [[ -z $resume_path || $resume_path == /* ]] || resume_path=$(afm_rl_base RESUME_FROM_PATH)/$resume_path
  local reward_path=$AFM_ROOT/afm/rewards/score.py
  [[ -f $reward_path ]] || afm_die "reward entry not found: $reward_path"

  # ---- the overrides ------------------------------------------------------------------------------------------
  local ov=()
  # data
  ov+=("data.train_files=$train_files")
  if [[ -n $val_files ]]; then
    ov+=("data.val_files=$val_files" "trainer.test_freq=$TEST_FREQ" "trainer.val_before_train=$val_before")
  else
    # verl 0.9.1's V1 trainer builds a validation dataset even when it never validates (trainer_base.py:718):
    # data.val_files=null crashes it, so the training files stand in and validation stays off.
    ov+=("data.val_files=$train_files" "trainer.test_freq=-1" "trainer.val_before_train=False")
  fi
  ov+=(
    "data.prompt_key=prompt"
    "data.reward_fn_key=data_source"
    "data.max_prompt_length=$MAX_PROMPT_LENGTH"
    "data.max_response_length=$MAX_RESPONSE_LENGTH"
    "data.train_batch_size=$TRAIN_BATCH_SIZE"
    "data.return_raw_chat=True"
    "data.filter_overlong_prompts=True"
    "data.truncation=error"
    "data.shuffle=True"
  )
  # model and actor (FSDP)
  ov+=(
    "actor_rollout_ref.model.path=$model"
    "actor_rollout_ref.model.enable_gradient_checkpointing=True"
    "actor_rollout_ref.model.use_remove_padding=True"
    "actor_rollout_ref.actor.optim.lr=$lr"
    "actor_rollout_ref.actor.optim.lr_warmup_steps=$WARMUP_STEPS"
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=$WARMUP_RATIO"
    "actor_rollout_ref.actor.optim.weight_decay=$WEIGHT_DECAY"
    "actor_rollout_ref.actor.ppo_mini_batch_size=$MINI_BATCH_SIZE"
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$micro"
    "actor_rollout_ref.actor.use_dynamic_bsz=$use_dyn"
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$ppo_max_tokens"
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=$sp_size"
    "actor_rollout_ref.actor.fsdp_config.param_offload=$param_offload"
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=$opt_offload"
  )
  local attention
  attention=$(afm_rl_attention "$(afm_rl_python)")
  ov+=("+actor_rollout_ref.model.override_config.attn_implementation=${attention%% *}")
  [[ $ALGORITHM == ppo ]] && ov+=("+critic.model.override_config.attn_implementation=${attention%% *}")
  # DAPO (configs/verl/dapo.sh) or PPO (configs/verl/ppo.sh)
  local line
  MODEL=$model
  while IFS= read -r line; do ov+=("$line"); done < <(afm_algorithm_overrides)
  # rollout: async server, multi-turn through the afm_agent loop
  ov+=(
    "actor_rollout_ref.rollout.name=$engine"
    "actor_rollout_ref.rollout.mode=async"
    "actor_rollout_ref.rollout.n=$ROLLOUT_N"
    "actor_rollout_ref.rollout.temperature=$temperature"
    "actor_rollout_ref.rollout.top_p=$top_p"
    "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP"
    "actor_rollout_ref.rollout.gpu_memory_utilization=$GPU_MEM_UTIL"
    "actor_rollout_ref.rollout.max_model_len=$max_len"
    "actor_rollout_ref.rollout.max_num_batched_tokens=$max_len"
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$LOGPROB_MICRO_BATCH_SIZE"
    "actor_rollout_ref.rollout.calculate_log_probs=True"
    "actor_rollout_ref.rollout.val_kwargs.n=$val_n"
    "actor_rollout_ref.rollout.val_kwargs.temperature=$val_temp"
    "actor_rollout_ref.rollout.val_kwargs.top_p=$val_top_p"
    "actor_rollout_ref.rollout.val_kwargs.do_sample=$val_sample"
    "actor_rollout_ref.rollout.multi_turn.enable=True"
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=$MAX_TURNS"
    "actor_rollout_ref.rollout.multi_turn.max_user_turns=$max_tool_calls"
    "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=$MAX_OBS_CHARS"
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=$tool_cfg"
    "actor_rollout_ref.rollout.agent.agent_loop_config_path=$agent_cfg"
    "actor_rollout_ref.rollout.agent.default_agent_loop=$agent_loop"
    "actor_rollout_ref.rollout.agent.num_workers=$agent_workers"
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$LOGPROB_MICRO_BATCH_SIZE"
  )
  # rollout engine and device (experiments/local.sh)
  while IFS= read -r line; do ov+=("$line"); done < <(afm_rl_engine_overrides "$engine" "$device")
  while IFS= read -r line; do ov+=("$line"); done < <(afm_rl_checkpoint_overrides)
  # reward: afm's entry through verl's reward loop
  ov+=(
    "reward.num_workers=$reward_workers"
    "reward.reward_manager.name=$reward_manager"
    "reward.custom_reward_function.path=$reward_path"
    "reward.custom_reward_function.name=$reward_fn"
    "+reward.custom_reward_function.reward_kwargs.format_mode=$format_mode"
    "+reward.custom_reward_function.reward_kwargs.infra_fail_limit=$infra_limit"
  )
  if [[ $reward_manager == dapo ]]; then
    [[ $ALGORITHM == ppo ]] && afm_warn "REWARD_MANAGER=dapo with ALGORITHM=ppo: DAPO's overlong shaping on PPO"
    ov+=(
      "+reward.reward_kwargs.max_resp_len=$MAX_RESPONSE_LENGTH"
      "+reward.reward_kwargs.overlong_buffer_cfg.enable=$overlong"
      "+reward.reward_kwargs.overlong_buffer_cfg.len=$overlong_len"
      "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=$overlong_factor"
      "+reward.reward_kwargs.overlong_buffer_cfg.log=True"
    )
  elif [[ $reward_manager == rate_limited ]]; then
    ov+=("+reward.max_concurrent=$max_concurrent" "+reward.estimated_tokens_per_request=$tokens_per_req"
      "+reward.timeout=$reward_timeout")
    [[ -n $max_rpm ]] && ov+=("+reward.max_rpm=$max_rpm")
    [[ -n $max_tpm ]] && ov+=("+reward.max_tpm=$max_tpm")
  fi
  # trainer: cluster, logging, checkpoints, validation
  local logger_list
  logger_list=$(IFS=,; echo "[${loggers[*]}]")
  ov+=(
    "trainer.nnodes=$nnodes"
    "trainer.n_gpus_per_node=$gpus"
    "trainer.project_name=$project"
    "trainer.experiment_name=$experiment"
    "trainer.logger=$logger_list"
    "trainer.total_epochs=$TOTAL_EPOCHS"
    "trainer.save_freq=$SAVE_FREQ"
    "trainer.default_local_dir=$ckpt_dir"
    "trainer.resume_mode=$resume_mode"
    "trainer.log_val_generations=10"
    # Hydra's own log folder: next to the checkpoints, not ./outputs/ of wherever the script was started
    "hydra.run.dir=$ckpt_dir/hydra/\${now:%Y-%m-%d_%H-%M-%S}"
  )
  [[ -n $total_steps ]] && ov+=("trainer.total_training_steps=$total_steps")
  [[ $resume_mode == resume_path ]] && ov+=("trainer.resume_from_path=$resume_path")
  [[ -n $max_ckpt ]] && ov+=("trainer.max_actor_ckpt_to_keep=$max_ckpt")
  [[ -n $val_dir ]] && ov+=("trainer.validation_data_dir=$val_dir")
  [[ -n $rollout_dir ]] && ov+=("trainer.rollout_data_dir=$rollout_dir")

  local extra=()
  read -r -a extra <<< "${EXTRA_ARGS:-}"
  ov+=("${extra[@]}" "${tail[@]}")

  local python
  python=$(afm_rl_python)
  local cmd=("$python" -m verl.trainer.main_ppo "${ov[@]}")

  # ---- environment notes --------------------------------------------------------------------------------------
  local env_lines=()
  if ((nnodes > 1)); then
    export RAY_ADDRESS=${RAY_ADDRESS:-auto}
    env_lines+=("RAY_ADDRESS=$RAY_ADDRESS")
  elif [[ -n ${RAY_ADDRESS:-} ]]; then
    env_lines+=("RAY_ADDRESS=$RAY_ADDRESS")
  fi
  [[ -n ${CUDA_VISIBLE_DEVICES+set} ]] && env_lines+=("CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES")
  if [[ ,${logger// /}, == *,swanlab,* ]]; then
    # verl's swanlab logger reads these from the environment; its default log dir is relative to the repo root.
    export SWANLAB_LOG_DIR
    SWANLAB_LOG_DIR=$(afm_abs "${SWANLAB_LOG_DIR:-$ckpt_dir/swanlog}")
    env_lines+=("SWANLAB_LOG_DIR=$SWANLAB_LOG_DIR")
    [[ -n ${SWANLAB_MODE:-} ]] && env_lines+=("SWANLAB_MODE=$SWANLAB_MODE")
  fi

  local summary
  summary=$(
    echo "[afm] $script: task=$task nodes=$nnodes gpus/node=$gpus device=$device engine=$engine TP=$TP" \
      "prompts/step=$TRAIN_BATCH_SIZE x $ROLLOUT_N rollouts, mini-batch=$MINI_BATCH_SIZE," \
      "prompt+response=$MAX_PROMPT_LENGTH+$MAX_RESPONSE_LENGTH, turns<=$MAX_TURNS, reward=$reward_manager/$reward_fn"
    echo "[afm] algorithm: $ALGORITHM; attention: $attention"
    echo "[afm] checkpoints: $ckpt_dir (resume_mode=$resume_mode)"
    if ((${#env_lines[@]} > 0)); then
      printf '[afm] environment:\n'
      printf '  %s\n' "${env_lines[@]}"
    fi
    printf '[afm] command:\n'
    printf '%s -m verl.trainer.main_ppo' "$(afm_quote "$python")"
    for arg in "${ov[@]}"; do printf ' \\\n    %s' "$(afm_quote "$arg")"; done
    printf '\n'
  )

  # ---- warnings about the setup (not fatal in a dry run) -----------------------------------------------------
  [[ $dry_run == true ]] || afm_rl_local_prepare "$python"
  local problems=() f
  local file_list=()
  IFS=',' read -r -a file_list <<< "${train_files#[},${val_files#[}"
  for f in "${file_list[@]}"; do
    f=${f%]}
    [[ -z $f ]] && continue
    [[ -f $f ]] || problems+=("data file not found: $f (build it with data/prepare_rl.sh or 'afm data rl')")
  done
  [[ -f $tool_cfg ]] || problems+=("tool config not found: $tool_cfg")
  [[ -f $agent_cfg ]] || problems+=("agent loop config not found: $agent_cfg")
  if [[ $model == /* && ! -e $model ]]; then
    problems+=("MODEL_PATH not found: $model (train the SFT model first, or set MODEL_PATH to a hub id)")
  fi
  if [[ $task == web && -z ${GRM_BASE_URL:-} ]]; then
    afm_warn "GRM_BASE_URL is empty: web rewards fall back to exact match / F1 instead of the LLM judge"
  fi
  if [[ $dry_run == true ]]; then
    printf '%s\n' "$summary"
    for f in "${problems[@]}"; do afm_warn "$f"; done
    return 0
  fi
  if ((${#problems[@]} > 0)); then
    printf '%s\n' "$summary"
    for f in "${problems[@]}"; do echo "[afm] error: $f" >&2; done
    exit 2
  fi
  "$python" -c "import verl, afm" 2> /dev/null ||
    afm_die "'$python' cannot import verl and afm: run 'AFM_VENV=.venv-rl AFM_EXTRAS=rl bash scripts/install.sh' or set PYTHON"
  afm_rl_device_env "$device"
  if ((nnodes > 1)) && command -v ray > /dev/null 2>&1; then
    ray status > /dev/null 2>&1 ||
      afm_die "NNODES=$nnodes but no Ray cluster is reachable: start it with experiments/ray_cluster.sh head|worker"
  fi

  # swanlab >= 0.10 parses SWANLAB_PROJECT (exported by environment.sh for the SFT scripts) as its own nested
  # settings and fails on a plain name; verl names the project itself (trainer.project_name).
  unset SWANLAB_PROJECT
  ulimit -n 65535 2> /dev/null || true
  mkdir -p "$ckpt_dir"
  local log=$ckpt_dir/train.log
  {
    echo "[afm] ===== $(date '+%Y-%m-%d %H:%M:%S') on $(uname -n) ====="
    printf '%s\n' "$summary"
  } | tee -a "$log"
  echo "[afm] log: $log"
  cd "$AFM_ROOT" || exit 2
  "${cmd[@]}" 2>&1 | tee -a "$log"
}
