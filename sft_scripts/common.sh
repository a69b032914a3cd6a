# shellcheck shell=bash
# sft_scripts/common.sh: the launcher shared by sft_scripts/<agent>/sft_qwen2.5_<size>.sh and dpo_qwen2.5_32b.sh
# (sourced, not run).
#
# Full fine-tuning with LLaMA-Factory through `afm-sft train`, <observation> spans masked from the loss.
# Every knob is an environment variable; the value in the second column is the default. "script" means the
# script's own default (printed first by --help; the table in docs/original_mapping.md lists them all).
# The knobs are checked and turned into the afm-sft command by afm/sft/knobs.py (SftSettings), which this file runs
# with the launcher's python; `python -m afm.sft.knobs --help` shows how to call it directly.
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
#   JOIN_TIMEOUT            600           (NNODES > 1) seconds a node waits for the others to join (torchrun's
#                                         rendezvous); then it stops with one line saying which side is missing
#   HANG_TIMEOUT            1800          (several processes) seconds a rank may stay at one point of a step (its
#                                         batch, forward, backward, logging); then every rank stops and each node
#                                         prints one line naming the rank that held the others up, what it was
#                                         doing and what to check. Saving and evaluating are not judged; 0 = off
#                                         (the others then wait DDP_TIMEOUT)
#   EXTRA_ARGS              (empty)       more LLaMA-Factory flags, split on whitespace and appended; arguments
#                                         given to the script are appended after them (the last value of a flag wins)
#   AFM_SFT                 afm-sft       the launcher command (falls back to <repo>/.venv/bin/afm-sft, or
#                                         $AFM_VENV/bin/afm-sft, when afm-sft is not on PATH)
#   DRY_RUN                 0             1 (or the --dry-run argument): print the resolved environment and
#                                         command, run nothing
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
  NPROC_PER_NODE JOIN_TIMEOUT HANG_TIMEOUT EXTRA_ARGS AFM_SFT AFM_VENV DRY_RUN MASK_REPORT SWANLAB_PROJECT SWANLAB_WORKSPACE SWANLAB_RUN_NAME
  SWANLAB_MODE SWANLAB_API_KEY SWANLAB_LOG_DIR)
AFM_SFT_ALIASES=(DATASET=DATA_DATA TEMPLATE=TEMPALTE LEARNING_RATE=LEARNING_RATES WARMUP_RATIO=WARMUP_RATIOS
  GRADIENT_ACCUMULATION=GRADIENT_ACCUMULATIONS BATCH_SIZE=BATCH_SIZES OUTPUT_DIR=OUTPUT_DIR_BASE
  IGNORE_OBSERVATION=ignore_observation IGNORE_OBSERVATION_TOKEN=ignore_observation_token
  FINETUNING_TYPE=finetuning_type)
# Per-script defaults beyond model/output/dataset, as NAME=value words; a script sets it before afm_launch. Every
# other default is the one of afm/sft/knobs.py (SftSettings), listed in the table above.
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

# The python that runs the launcher: the interpreter beside it (a venv's bin/), else python3.
afm_launcher_python() {
  local dir
  if [[ $1 == */* ]]; then dir=$(dirname "$1"); else dir=$(dirname "$(command -v "$1" 2> /dev/null || echo ./x)"); fi
  if [[ -x $dir/python ]]; then echo "$dir/python"; else echo python3; fi
}

# afm_launch STAGE SCRIPT_NAME DEFAULT_MODEL_PATH DEFAULT_OUTPUT_DIR DEFAULT_DATASET [extra flags ...]
# The original's names, the script's defaults and the misspelling check are applied here; checking every knob,
# building the afm-sft command and launching it (or printing it: DRY_RUN=1) is afm/sft/knobs.py's work.
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
  # --dry-run is DRY_RUN=1, as in the RL scripts; passed on, LLaMA-Factory would ignore it and train.
  afm_take_dry_run "$@"
  set -- "${AFM_ARGS[@]}"
  local pair
  for pair in "${AFM_SFT_ALIASES[@]}"; do afm_alias "${pair%%=*}" "${pair#*=}"; done
  afm_warn_unknown_knobs "${AFM_SFT_KNOBS[@]}" "${AFM_SFT_ALIASES[@]#*=}"

  # The launcher: AFM_SFT, else afm-sft on PATH, else the one of the AFM_VENV environment.
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
  local py word args=()
  py=$(afm_launcher_python "${launcher[0]}")
  # --name=value: a value may start with '-' (a launcher flag such as AFM_SFT="afm-sft --flag").
  for pair in "${AFM_SCRIPT_DEFAULTS[@]}"; do args+=("--default=$pair"); done
  for word in "${launcher[@]}"; do args+=("--launcher=$word"); done
  afm_run_module "$py" "$AFM_ROOT" afm.sft.knobs "--stage=$stage" "--script=$script" "--root=$AFM_ROOT" "--cwd=$PWD" \
    "--model=$default_model" "--output=$default_output" "--dataset=$default_dataset" "--python=$py" "${args[@]}" \
    -- "$@"
}
