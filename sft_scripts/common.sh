# shellcheck shell=bash
# sft_scripts/common.sh: the launcher shared by sft_scripts/<agent>/sft_qwen2.5_<size>.sh and dpo_qwen2.5_32b.sh
# (sourced, not run).
#
# Full fine-tuning with LLaMA-Factory through `afm-sft train`, <observation> spans masked from the loss.
# Every knob is an environment variable; the value in the second column is the default. "script" means the
# script's own default (printed first by --help; the table in docs/original_mapping.md lists them all).
#
#   MODEL_PATH              script        HF hub id or local folder of the model to fine-tune
#   OUTPUT_DIR              script        checkpoints, training.log, afm_mask_report_*.json; the default is under the
#                                         repo root (saves/AFM-...-sft, what the RL scripts start from); a relative
#                                         value you give is taken from the current directory
#   DATASET                 script        name(s) from $DATASET_DIR/dataset_info.json, comma-separated
#   DATASET_DIR             <repo>/data   folder holding dataset_info.json (see data/README.md)
#   TEMPLATE                qwen          LLaMA-Factory chat template
#   LEARNING_RATE           script (1e-6) the value in brackets applies where a script sets none
#   BATCH_SIZE              1             per-device train batch size
#   GRADIENT_ACCUMULATION   script (8)    global batch = BATCH_SIZE x GRADIENT_ACCUMULATION x GPUs x NNODES
#   EPOCHS                  script (4.0)
#   LR_SCHEDULER            linear        transformers lr_scheduler_type (linear, cosine, constant_with_warmup, ...)
#   WARMUP_RATIO            script (0)    warmup as a fraction of the optimizer steps (--warmup_ratio)
#   WARMUP_STEPS            0             warmup optimizer steps; > 0 wins over WARMUP_RATIO (transformers' rule)
#   FINETUNING_TYPE         full          full | freeze | lora (LLaMA-Factory --finetuning_type)
#   PRECISION               bf16          bf16 | fp16 | fp32 (fp32 passes neither --bf16 nor --fp16)
#   CUTOFF_LEN              script (32768) max tokens per sample (prompt + response); longer ones are truncated and a
#                                         sample cut inside an observation is dropped (see the mask report)
#   PACKING                 false         (sft only) pack samples into cutoff_len rows; masking still applies
#   IGNORE_OBSERVATION      true          mask <observation>...</observation> (and the whitespace around it)
#   IGNORE_OBSERVATION_TOKEN observation  bare tag name of the masked span
#   IGNORE_OBSERVATION_CHECK observation  drop broken samples: observation (masked tag) | tags (any CoA tag, strict) | none
#   PREF_BETA               0.1           (dpo only) DPO beta
#   PREF_LOSS               sigmoid       (dpo only) sigmoid | hinge | ipo | kto_pair | orpo | simpo
#   DEEPSPEED_CONFIG        <repo>/configs/deepspeed/ds_z3_config.json
#                                         ZeRO-3; ds_z3_offload_config.json adds CPU offload; empty = no DeepSpeed.
#                                         ZeRO-3 needs the `deepspeed` package (extra: pip install -e .[deepspeed]);
#                                         the dry run and `afm doctor` say when it is missing
#   ATTN_IMPL               auto          auto: fa2 (FlashAttention-2) when a GPU is visible and flash_attn imports,
#                                         else sdpa; or fa2 | sdpa | eager (LLaMA-Factory --flash_attn); the
#                                         choice is printed
#   SAVE_STRATEGY           epoch         no | steps | epoch
#   SAVE_ONLY_MODEL         true          checkpoints without optimizer state (smaller, but not resumable)
#   LOGGING_STEPS           10
#   PREPROCESSING_NUM_WORKERS 16          processes that tokenize and mask the dataset
#   DDP_TIMEOUT             180000000     seconds; rank 0 preprocesses while the other ranks wait
#   REPORT_TO               none          none | swanlab | wandb | tensorboard (comma-separated for several);
#                                         swanlab reads SWANLAB_API_KEY from the environment and gets
#                                         --swanlab_project/--swanlab_workspace/--swanlab_run_name/--swanlab_mode/
#                                         --swanlab_logdir only for those of SWANLAB_PROJECT/_WORKSPACE/_RUN_NAME/
#                                         _MODE/_LOG_DIR that are set (SWANLAB_MODE=local: offline, no account;
#                                         install it with the swanlab extra);
#                                         wandb reads WANDB_API_KEY and WANDB_PROJECT itself. Keys are never printed.
#   CUDA_VISIBLE_DEVICES    (kept)        used as given when set; otherwise every GPU of the node
#   NNODES                  script (1)    nodes in the job; run the script once on every node
#   NODE_RANK               $RANK or 0    0 .. NNODES-1 (schedulers that export RANK per node need nothing else)
#   MASTER_ADDR             127.0.0.1     address of node 0, reachable from every node (set it when NNODES > 1)
#   MASTER_PORT             29500
#   NPROC_PER_NODE          (GPUs seen)   processes per node: the GPUs in CUDA_VISIBLE_DEVICES, else nvidia-smi -L
#   EXTRA_ARGS              (empty)       more LLaMA-Factory flags, split on whitespace and appended; arguments
#                                         given to the script are appended after them (the last value of a flag wins)
#   AFM_SFT                 afm-sft       the launcher command (falls back to <repo>/.venv/bin/afm-sft, or
#                                         $AFM_VENV/bin/afm-sft, when afm-sft is not on PATH)
#   DRY_RUN                 0             1: print the resolved environment and command, run nothing
#   MASK_REPORT             0             N > 0: run `afm-sft mask-report --show N` on the same flags (tokenize and
#                                         mask the data, print the counts and N samples, no model, no GPU) and stop
#
# The original project's names are accepted as aliases (a note says so): DATA_DATA (DATASET), TEMPALTE (TEMPLATE),
# LEARNING_RATES (LEARNING_RATE), WARMUP_RATIOS (WARMUP_RATIO), GRADIENT_ACCUMULATIONS (GRADIENT_ACCUMULATION),
# BATCH_SIZES (BATCH_SIZE), OUTPUT_DIR_BASE (OUTPUT_DIR, without the grid-search subfolder), ignore_observation,
# ignore_observation_token, finetuning_type (their upper-case knobs); STAGE is the script's own (sft, or dpo in
# dpo_qwen2.5_32b.sh) and a different value is refused. An exported variable spelt like a knob but not one (LEARNNG_RATE) gets a warning.
#
# The command is printed before it runs, OUTPUT_DIR is created and everything is appended to
# $OUTPUT_DIR/training.log ($OUTPUT_DIR/training.node<R>.log on node R > 0).
# With more than one process, more than one node or DeepSpeed, FORCE_TORCHRUN=1 and NNODES, NODE_RANK, MASTER_ADDR,
# MASTER_PORT, NPROC_PER_NODE are exported: LLaMA-Factory then starts torchrun itself.
# LLaMA-Factory re-joins the arguments with spaces for torchrun, so no value may contain whitespace.

AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# shellcheck source=../scripts/knobs.sh
source "$AFM_ROOT/scripts/knobs.sh"

# Every knob name (for the misspelling check) and the original project's names: afm name=original name.
AFM_SFT_KNOBS=(MODEL_PATH OUTPUT_DIR DATASET DATASET_DIR TEMPLATE LEARNING_RATE BATCH_SIZE GRADIENT_ACCUMULATION EPOCHS
  LR_SCHEDULER WARMUP_RATIO WARMUP_STEPS FINETUNING_TYPE STAGE PRECISION CUTOFF_LEN PACKING IGNORE_OBSERVATION
  IGNORE_OBSERVATION_TOKEN IGNORE_OBSERVATION_CHECK PREF_BETA PREF_LOSS DEEPSPEED_CONFIG ATTN_IMPL SAVE_STRATEGY SAVE_ONLY_MODEL LOGGING_STEPS
  PREPROCESSING_NUM_WORKERS DDP_TIMEOUT REPORT_TO CUDA_VISIBLE_DEVICES NNODES NODE_RANK RANK MASTER_ADDR MASTER_PORT
  NPROC_PER_NODE EXTRA_ARGS AFM_SFT AFM_VENV DRY_RUN MASK_REPORT SWANLAB_PROJECT SWANLAB_WORKSPACE SWANLAB_RUN_NAME
  SWANLAB_MODE SWANLAB_API_KEY SWANLAB_LOG_DIR)
AFM_SFT_ALIASES=(DATASET=DATA_DATA TEMPLATE=TEMPALTE LEARNING_RATE=LEARNING_RATES WARMUP_RATIO=WARMUP_RATIOS
  GRADIENT_ACCUMULATION=GRADIENT_ACCUMULATIONS BATCH_SIZE=BATCH_SIZES OUTPUT_DIR=OUTPUT_DIR_BASE
  IGNORE_OBSERVATION=ignore_observation IGNORE_OBSERVATION_TOKEN=ignore_observation_token
  FINETUNING_TYPE=finetuning_type)
# Per-script defaults beyond model/output/dataset, as NAME=value words; a script sets it before afm_launch.
AFM_SCRIPT_DEFAULTS=()

# Print the script's defaults and the knob table above (the header comment of this file).
afm_usage() {
  local script=$1 model=$2 output=$3 dataset=$4 d
  echo "usage: [VAR=value ...] bash $script [extra LLaMA-Factory flags ...]"
  echo
  echo "defaults of this script:"
  printf '  %-24s %s\n' MODEL_PATH "$model" OUTPUT_DIR "<repo>/$output" DATASET "$dataset"
  for d in "${AFM_SCRIPT_DEFAULTS[@]}"; do printf '  %-24s %s\n' "${d%%=*}" "${d#*=}"; done
  echo
  sed -n '2,/^$/p' "${BASH_SOURCE[0]}" | sed -e 's/^# \{0,1\}//'
}

# A path knob the user gave: relative values are taken from the directory the script was started in.
afm_abs_path() {
  if [[ $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "${PWD%/}/${1#./}"; fi
}

# The python that runs the launcher: the interpreter beside it (a venv's bin/), else python3.
afm_launcher_python() {
  local dir
  if [[ $1 == */* ]]; then dir=$(dirname "$1"); else dir=$(dirname "$(command -v "$1" 2> /dev/null || echo ./x)"); fi
  if [[ -x $dir/python ]]; then echo "$dir/python"; else echo python3; fi
}

# True when PYTHON can import MODULE (found, not imported: no CUDA initialisation).
afm_has_module() {
  "$1" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$2') is None)" > /dev/null 2>&1
}

# Number of GPUs this node would use: CUDA_VISIBLE_DEVICES when set, else nvidia-smi, else 0.
afm_visible_gpus() {
  if [[ -n ${CUDA_VISIBLE_DEVICES+set} ]]; then
    local ids=()
    IFS=',' read -r -a ids <<< "${CUDA_VISIBLE_DEVICES//[[:space:]]/}"
    echo "${#ids[@]}"
  elif command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true
  else
    echo 0
  fi
}

# Print a command one flag per line, shell-quoted, as a copy-pasteable block.
afm_print_command() {
  local out="" arg
  for arg in "$@"; do
    if [[ -n $out && $arg == --* ]]; then
      out+=$' \\\n    '
    elif [[ -n $out ]]; then
      out+=" "
    fi
    out+=$(printf '%q' "$arg")
  done
  printf '%s\n' "$out"
}

# afm_launch STAGE SCRIPT_NAME DEFAULT_MODEL_PATH DEFAULT_OUTPUT_DIR DEFAULT_DATASET [extra flags ...]
afm_launch() {
  local stage=$1 script=$2 default_model=$3 default_output=$4 default_dataset=$5
  shift 5
  local arg
  for arg in "$@"; do
    if [[ $arg == -h || $arg == --help ]]; then
      afm_usage "$script" "$default_model" "$default_output" "$default_dataset"
      exit 0
    fi
  done
  local pair
  for pair in "${AFM_SFT_ALIASES[@]}"; do afm_alias "${pair%%=*}" "${pair#*=}"; done
  local name
  for pair in "${AFM_SCRIPT_DEFAULTS[@]}"; do
    name=${pair%%=*}
    [[ -n ${!name:-} ]] || printf -v "$name" '%s' "${pair#*=}"
  done
  afm_warn_unknown_knobs "${AFM_SFT_KNOBS[@]}" "${AFM_SFT_ALIASES[@]#*=}"

  # ---- knobs -------------------------------------------------------------------------------------------------
  local model_path=${MODEL_PATH:-$default_model}
  # A relative MODEL_PATH that exists here is a local folder; anything else is a hub id.
  [[ $model_path != /* && -e $model_path ]] && model_path=$(afm_abs_path "$model_path")
  local output_dir=$AFM_ROOT/$default_output
  [[ -n ${OUTPUT_DIR:-} ]] && output_dir=$(afm_abs_path "$OUTPUT_DIR")
  local dataset=${DATASET:-$default_dataset}
  local dataset_dir=$AFM_ROOT/data
  [[ -n ${DATASET_DIR:-} ]] && dataset_dir=$DATASET_DIR
  [[ $dataset_dir == ONLINE ]] || dataset_dir=$(afm_abs_path "$dataset_dir")
  local template=${TEMPLATE:-qwen}
  local learning_rate=${LEARNING_RATE:-1e-6}
  local batch_size=${BATCH_SIZE:-1}
  local grad_accum=${GRADIENT_ACCUMULATION:-8}
  local epochs=${EPOCHS:-4.0}
  local lr_scheduler=${LR_SCHEDULER:-linear}
  local warmup_steps=${WARMUP_STEPS:-0}
  local warmup_ratio=${WARMUP_RATIO:-0}
  local attn_impl=${ATTN_IMPL:-auto}
  local precision=${PRECISION:-bf16}
  local finetuning_type=${FINETUNING_TYPE:-full}
  local cutoff_len=${CUTOFF_LEN:-32768}
  local packing ignore_obs save_only_model
  packing=$(afm_bool PACKING "${PACKING:-false}")
  ignore_obs=$(afm_bool IGNORE_OBSERVATION "${IGNORE_OBSERVATION:-true}")
  save_only_model=$(afm_bool SAVE_ONLY_MODEL "${SAVE_ONLY_MODEL:-true}")
  local obs_token=${IGNORE_OBSERVATION_TOKEN:-observation}
  local obs_check=${IGNORE_OBSERVATION_CHECK:-observation}
  local pref_beta=${PREF_BETA:-0.1}
  local pref_loss=${PREF_LOSS:-sigmoid}
  # ${VAR-default} (no colon): DEEPSPEED_CONFIG="" switches DeepSpeed off.
  local deepspeed=${DEEPSPEED_CONFIG-$AFM_ROOT/configs/deepspeed/ds_z3_config.json}
  local save_strategy=${SAVE_STRATEGY:-epoch}
  local logging_steps=${LOGGING_STEPS:-10}
  local num_workers=${PREPROCESSING_NUM_WORKERS:-16}
  local ddp_timeout=${DDP_TIMEOUT:-180000000}
  local report_to=${REPORT_TO:-none}
  local nnodes=${NNODES:-1}
  # The original read the node's rank from RANK (set by its scheduler); NODE_RANK wins when both are set.
  local node_rank=${NODE_RANK:-${RANK:-0}}
  local master_addr=${MASTER_ADDR:-127.0.0.1}
  local master_port=${MASTER_PORT:-29500}
  local dry_run mask_report=${MASK_REPORT:-0}
  dry_run=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

  # ---- checks (before anything starts) ------------------------------------------------------------------------
  [[ $stage == sft || $stage == dpo ]] || afm_die "stage must be sft or dpo (got '$stage')"
  if [[ -n ${STAGE:-} && ${STAGE,,} != "$stage" ]]; then
    afm_die "STAGE=$STAGE, but $script trains stage $stage (DPO: sft_scripts/dpo_qwen2.5_32b.sh; SFT: the" \
      "sft_scripts/<agent>/ scripts)"
  fi
  case "$finetuning_type" in
    full | freeze | lora) ;;
    *) afm_die "FINETUNING_TYPE must be full, freeze or lora (got '$finetuning_type')" ;;
  esac
  case "$precision" in
    bf16 | fp16 | fp32) ;;
    *) afm_die "PRECISION must be bf16, fp16 or fp32 (got '$precision')" ;;
  esac
  afm_is_number "$learning_rate" || afm_die "LEARNING_RATE must be a number such as 1e-6 (got '$learning_rate')"
  afm_is_number "$epochs" || afm_die "EPOCHS must be a number such as 4.0 (got '$epochs')"
  afm_is_posint "$batch_size" || afm_die "BATCH_SIZE must be a positive integer (got '$batch_size')"
  afm_is_posint "$grad_accum" || afm_die "GRADIENT_ACCUMULATION must be a positive integer (got '$grad_accum')"
  afm_is_posint "$cutoff_len" || afm_die "CUTOFF_LEN must be a positive integer (got '$cutoff_len')"
  afm_is_uint "$warmup_steps" || afm_die "WARMUP_STEPS must be a whole number of steps (got '$warmup_steps')"
  afm_is_number "$warmup_ratio" && awk -v r="$warmup_ratio" 'BEGIN { exit !(r < 1) }' ||
    afm_die "WARMUP_RATIO must be a fraction of the steps, 0 <= WARMUP_RATIO < 1 (got '$warmup_ratio')"
  case "$attn_impl" in
    auto | fa2 | fa3 | sdpa | eager) ;;
    *) afm_die "ATTN_IMPL must be auto, fa2, fa3, sdpa or eager (got '$attn_impl')" ;;
  esac
  afm_is_posint "$logging_steps" || afm_die "LOGGING_STEPS must be a positive integer (got '$logging_steps')"
  afm_is_posint "$num_workers" || afm_die "PREPROCESSING_NUM_WORKERS must be a positive integer (got '$num_workers')"
  afm_is_posint "$ddp_timeout" || afm_die "DDP_TIMEOUT must be a positive number of seconds (got '$ddp_timeout')"
  afm_is_uint "$mask_report" || afm_die "MASK_REPORT must be a number of samples to show, 0 = off (got '$mask_report')"
  case "$save_strategy" in
    no | steps | epoch) ;;
    *) afm_die "SAVE_STRATEGY must be no, steps or epoch (got '$save_strategy')" ;;
  esac
  case "$obs_check" in
    tags | observation | none) ;;
    *) afm_die "IGNORE_OBSERVATION_CHECK must be tags, observation or none (got '$obs_check')" ;;
  esac
  [[ $obs_token =~ ^[A-Za-z][A-Za-z0-9_-]*$ ]] ||
    afm_die "IGNORE_OBSERVATION_TOKEN must be a bare tag name such as observation, not <observation> (got '$obs_token')"
  if [[ $stage == dpo ]]; then
    afm_is_number "$pref_beta" || afm_die "PREF_BETA must be a number such as 0.1 (got '$pref_beta')"
    case "$pref_loss" in
      sigmoid | hinge | ipo | kto_pair | orpo | simpo) ;;
      *) afm_die "PREF_LOSS must be one of sigmoid, hinge, ipo, kto_pair, orpo, simpo (got '$pref_loss')" ;;
    esac
  fi
  afm_is_posint "$nnodes" || afm_die "NNODES must be a positive integer (got '$nnodes')"
  afm_is_uint "$node_rank" && ((node_rank < nnodes)) ||
    afm_die "NODE_RANK must be 0 .. NNODES-1 = $((nnodes - 1)) (got '$node_rank')"
  afm_is_posint "$master_port" && ((master_port <= 65535)) ||
    afm_die "MASTER_PORT must be a port number (got '$master_port')"
  [[ -n $model_path ]] || afm_die "MODEL_PATH is empty"

  if [[ -n $deepspeed && ! -f $deepspeed ]]; then
    afm_die "DEEPSPEED_CONFIG file not found: $deepspeed (set DEEPSPEED_CONFIG= to train without DeepSpeed)"
  fi
  if [[ $dataset_dir != ONLINE ]]; then
    [[ -f $dataset_dir/dataset_info.json ]] ||
      afm_die "no dataset_info.json in DATASET_DIR=$dataset_dir (see data/README.md)"
    local name names=()
    IFS=',' read -r -a names <<< "$dataset"
    ((${#names[@]} > 0)) || afm_die "DATASET is empty"
    for name in "${names[@]}"; do
      [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || afm_die "DATASET has an invalid name '$name' (comma-separated names)"
      grep -Eq "\"${name//./\\.}\"[[:space:]]*:" "$dataset_dir/dataset_info.json" ||
        afm_die "dataset '$name' is not in $dataset_dir/dataset_info.json (see data/README.md)"
    done
  fi

  # ---- processes and GPUs -------------------------------------------------------------------------------------
  local gpus nproc
  gpus=$(afm_visible_gpus)
  if [[ -n ${NPROC_PER_NODE:-} ]]; then
    nproc=$NPROC_PER_NODE
    afm_is_posint "$nproc" || afm_die "NPROC_PER_NODE must be a positive integer (got '$nproc')"
  elif ((gpus > 0)); then
    nproc=$gpus
  else
    nproc=1
    if [[ $dry_run == false && $mask_report == 0 ]]; then
      afm_warn "no GPU found (CUDA_VISIBLE_DEVICES unset or empty, no nvidia-smi): starting 1 process"
    fi
  fi
  if ((nnodes > 1)) && [[ $master_addr == 127.0.0.1 || $master_addr == localhost ]]; then
    afm_warn "NNODES=$nnodes but MASTER_ADDR=$master_addr: set MASTER_ADDR to node 0's address on every node"
  fi
  local torchrun=false
  if ((nnodes > 1 || nproc > 1)) || [[ -n $deepspeed ]]; then
    torchrun=true
  fi

  # ---- experiment tracking ------------------------------------------------------------------------------------
  local item items=() report_list=() tracking=()
  IFS=',' read -r -a items <<< "${report_to// /}"
  for item in "${items[@]}"; do
    case "$item" in
      none | "") ;;
      swanlab)
        # LLaMA-Factory's own SwanLab callback; swanlab reads SWANLAB_API_KEY from the environment.
        tracking+=(--use_swanlab true)
        [[ -n ${SWANLAB_PROJECT:-} ]] && tracking+=(--swanlab_project "$SWANLAB_PROJECT")
        [[ -n ${SWANLAB_WORKSPACE:-} ]] && tracking+=(--swanlab_workspace "$SWANLAB_WORKSPACE")
        [[ -n ${SWANLAB_RUN_NAME:-} ]] && tracking+=(--swanlab_run_name "$SWANLAB_RUN_NAME")
        [[ -n ${SWANLAB_MODE:-} ]] && tracking+=(--swanlab_mode "$SWANLAB_MODE")
        [[ -n ${SWANLAB_LOG_DIR:-} ]] && tracking+=(--swanlab_logdir "$(afm_abs_path "$SWANLAB_LOG_DIR")")
        if [[ -z ${SWANLAB_API_KEY:-} && ${SWANLAB_MODE:-cloud} != local && $dry_run == false ]]; then
          afm_warn "REPORT_TO=swanlab without SWANLAB_API_KEY: swanlab needs a previous 'swanlab login'"
        fi
        ;;
      wandb | tensorboard) report_list+=("$item") ;;
      *) afm_die "REPORT_TO must be none, swanlab, wandb or tensorboard, comma-separated (got '$report_to')" ;;
    esac
  done
  local report_flag=none
  if ((${#report_list[@]} > 0)); then
    report_flag=$(IFS=,; echo "${report_list[*]}")
  fi

  # ---- the command --------------------------------------------------------------------------------------------
  local launcher=()
  if [[ -n ${AFM_SFT:-} ]]; then
    read -r -a launcher <<< "$AFM_SFT"
  elif command -v afm-sft > /dev/null 2>&1; then
    launcher=(afm-sft)
  else
    local venv=${AFM_VENV:-.venv}
    [[ $venv == /* ]] || venv=$AFM_ROOT/$venv
    if [[ -x $venv/bin/afm-sft ]]; then launcher=("$venv/bin/afm-sft"); else launcher=(afm-sft); fi
  fi

  # ---- attention kernel and DeepSpeed, as the launcher's python sees them --------------------------------------
  local py attn=$attn_impl attn_why="ATTN_IMPL=$attn_impl"
  py=$(afm_launcher_python "${launcher[0]}")
  if [[ $attn == auto ]]; then
    if ((gpus == 0)); then
      attn=sdpa attn_why="no GPU visible"
    elif afm_has_module "$py" flash_attn; then
      attn=fa2 attn_why="GPU and flash_attn found"
    else
      attn=sdpa attn_why="flash_attn is not installed (pip install flash-attn for FlashAttention-2)"
    fi
  fi
  local attn_flag=$attn
  [[ $attn == eager ]] && attn_flag=disabled
  local ds_note=""
  if [[ -n $deepspeed ]] && ! afm_has_module "$py" deepspeed; then
    ds_note="DeepSpeed ZeRO-3 is configured (DEEPSPEED_CONFIG) but the deepspeed package is not installed in"
    ds_note+=" $py: pip install -e '.[deepspeed]' (or set DEEPSPEED_CONFIG= to train without DeepSpeed)"
  fi

  local flags=(
    --model_name_or_path "$model_path"
    --trust_remote_code true
    --stage "$stage"
    --do_train true
    --finetuning_type "$finetuning_type"
    --dataset "$dataset"
    --dataset_dir "$dataset_dir"
    --template "$template"
    --cutoff_len "$cutoff_len"
    --output_dir "$output_dir"
    --per_device_train_batch_size "$batch_size"
    --gradient_accumulation_steps "$grad_accum"
    --learning_rate "$learning_rate"
    --num_train_epochs "$epochs"
    --lr_scheduler_type "$lr_scheduler"
    --logging_steps "$logging_steps"
    --save_strategy "$save_strategy"
    --save_only_model "$save_only_model"
    --plot_loss true
    --preprocessing_num_workers "$num_workers"
    --ddp_timeout "$ddp_timeout"
  )
  # transformers: a warmup_ratio overrides warmup_steps, so only one of them is passed.
  if ((warmup_steps == 0)) && awk -v r="$warmup_ratio" 'BEGIN { exit !(r > 0) }'; then
    flags+=(--warmup_ratio "$warmup_ratio")
  else
    flags+=(--warmup_steps "$warmup_steps")
  fi
  flags+=(--ignore_observation "$ignore_obs")
  if [[ $ignore_obs == true ]]; then
    flags+=(--ignore_observation_token "$obs_token" --ignore_observation_check "$obs_check")
  fi
  if [[ $stage == sft ]]; then
    flags+=(--packing "$packing")
  else
    flags+=(--pref_beta "$pref_beta" --pref_loss "$pref_loss")
  fi
  # Flags that only matter to a training run (not to MASK_REPORT).
  local train_only=()
  case "$precision" in
    bf16) train_only+=(--bf16 true) ;;
    fp16) train_only+=(--fp16 true) ;;
  esac
  train_only+=(--flash_attn "$attn_flag")
  train_only+=(--report_to "$report_flag" "${tracking[@]}")
  [[ -n $deepspeed ]] && train_only+=(--deepspeed "$deepspeed")
  local extra=()
  read -r -a extra <<< "${EXTRA_ARGS:-}"
  local tail=("${extra[@]}" "$@")

  for arg in "${flags[@]}" "${train_only[@]}" "${tail[@]}"; do
    [[ $arg =~ [[:space:]] || -z $arg ]] &&
      afm_die "argument '$arg' is empty or contains whitespace; LLaMA-Factory's torchrun launch would split it"
  done

  if ((mask_report > 0)); then
    # One process, no DeepSpeed: only the tokenizer and the data pipeline run.
    local cmd=("${launcher[@]}" mask-report --show "$mask_report" "${flags[@]}" "${tail[@]}")
    echo "[afm] mask report for $stage: $dataset"
    afm_print_command "${cmd[@]}"
    [[ $dry_run == true ]] && return 0
    "${cmd[@]}"
    return
  fi

  local env_lines=()
  [[ -n ${CUDA_VISIBLE_DEVICES+set} ]] && env_lines+=("CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES")
  if [[ $torchrun == true ]]; then
    export FORCE_TORCHRUN=1 NNODES=$nnodes NODE_RANK=$node_rank MASTER_ADDR=$master_addr
    export MASTER_PORT=$master_port NPROC_PER_NODE=$nproc
    env_lines+=(FORCE_TORCHRUN=1 "NNODES=$nnodes" "NODE_RANK=$node_rank" "MASTER_ADDR=$master_addr"
      "MASTER_PORT=$master_port" "NPROC_PER_NODE=$nproc")
  fi
  local cmd=("${launcher[@]}" train "${flags[@]}" "${train_only[@]}" "${tail[@]}")

  local log_name=training.log
  ((node_rank > 0)) && log_name=training.node$node_rank.log
  local summary
  summary=$(
    echo "[afm] $script: stage=$stage nodes=$nnodes node_rank=$node_rank processes/node=$nproc" \
      "global batch=$((batch_size * grad_accum * nproc * nnodes))"
    echo "[afm] attention: $attn ($attn_why)"
    if ((${#env_lines[@]} > 0)); then
      printf '[afm] environment:\n'
      printf '  %s\n' "${env_lines[@]}"
    fi
    printf '[afm] command:\n'
    afm_print_command "${cmd[@]}"
  )
  if [[ $dry_run == true ]]; then
    printf '%s\n' "$summary"
    [[ -n $ds_note ]] && afm_warn "$ds_note"
    return 0
  fi

  if ! command -v "${launcher[0]}" > /dev/null 2>&1; then
    afm_die "'${launcher[0]}' not found: run 'bash scripts/install.sh', activate the environment or set AFM_SFT"
  fi
  [[ -z $ds_note ]] || afm_die "$ds_note"
  # A launcher given by path brings its environment's torchrun (LLaMA-Factory runs `torchrun` from PATH).
  if [[ ${launcher[0]} == */* ]]; then
    PATH="$(cd "$(dirname "${launcher[0]}")" && pwd):$PATH"
    export PATH
  fi
  # SWANLAB_PROJECT went in as --swanlab_project; swanlab >= 0.10 would also parse the variable as its own nested
  # settings (JSON) and fail on a plain name.
  unset SWANLAB_PROJECT
  mkdir -p "$output_dir"
  local log=$output_dir/$log_name
  {
    echo "[afm] ===== $(date '+%Y-%m-%d %H:%M:%S') on $(uname -n) ====="
    printf '%s\n' "$summary"
  } | tee -a "$log"
  echo "[afm] log: $log"
  "${cmd[@]}" 2>&1 | tee -a "$log"
}
