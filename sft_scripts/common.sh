# shellcheck shell=bash
# sft_scripts/common.sh: the launcher shared by sft_scripts/<agent>/sft_qwen2.5_<size>.sh and dpo_qwen2.5_32b.sh
# (sourced, not run).
#
# Every knob (an environment variable) is declared once, with its default, help and check, in afm/launch/sft.py
# (SftSettings); `bash <script> --help` prints them all. A script sets only its own values (AFM_SCRIPT_DEFAULTS and
# the arguments of afm_launch). This file finds the launcher and runs afm/launch/sft.py with the launcher's python,
# which applies the original project's names and the misspelling check, checks every knob and builds the afm-sft
# command, then launches it (or prints it: DRY_RUN=1 / --dry-run).

AFM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# shellcheck source=../scripts/knobs.sh
source "$AFM_ROOT/scripts/knobs.sh"

# Per-script defaults beyond model/output/dataset, as NAME=value words; a script sets it before afm_launch. Every
# other default is the one of afm/launch/sft.py (SftSettings).
AFM_SCRIPT_DEFAULTS=()

# The python that runs the launcher: the interpreter beside it (a venv's bin/), else python3.
afm_launcher_python() {
  local dir
  if [[ $1 == */* ]]; then dir=$(dirname "$1"); else dir=$(dirname "$(command -v "$1" 2> /dev/null || echo ./x)"); fi
  if [[ -x $dir/python ]]; then echo "$dir/python"; else echo python3; fi
}

# afm_moved_script NAME ARGS...: what an old single-task script (sft_scripts/sft_qwen2.5_<size>.sh) does: says which
# per-agent scripts replaced it (its header's "#   bash ..." lines), on stdout with exit 0 for --help, else on stderr
# with exit 2, so that an old command line cannot train with another task's defaults.
afm_moved_script() {
  local name=$1
  shift
  if afm_asks_help "$@"; then
    afm_moved_message "$name"
    exit 0
  fi
  afm_moved_message "$name" >&2
  exit 2
}

afm_moved_message() {
  echo "$1 has moved: the SFT scripts are one per agent, with that agent's defaults. Use:"
  sed -n 's/^#   bash /  bash /p' "$AFM_ROOT/$1"
}

# afm_launch STAGE SCRIPT_NAME DEFAULT_MODEL_PATH DEFAULT_OUTPUT_DIR DEFAULT_DATASET [extra flags ...]
# Finds the launcher and its python; everything else (--help, the original's names, the misspelling check, the
# script's defaults, checking every knob, building the afm-sft command and launching it or printing it) is
# afm/launch/sft.py's work.
afm_launch() {
  local stage=$1 script=$2 default_model=$3 default_output=$4 default_dataset=$5
  shift 5
  local mode=()
  if afm_asks_help "$@"; then mode=(--usage); fi
  # --dry-run is DRY_RUN=1, as in the RL scripts; passed on, LLaMA-Factory would ignore it and train.
  afm_take_dry_run "$@"
  set -- "${AFM_ARGS[@]}"

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
  local py pair word args=()
  py=$(afm_launcher_python "${launcher[0]}")
  # --name=value: a value may start with '-' (a launcher flag such as AFM_SFT="my-sft --flag").
  for pair in "${AFM_SCRIPT_DEFAULTS[@]}"; do args+=("--default=$pair"); done
  for word in "${launcher[@]}"; do args+=("--launcher=$word"); done
  afm_run_module "$py" "$AFM_ROOT" afm.launch.sft "--stage=$stage" "--script=$script" "--root=$AFM_ROOT" \
    "--cwd=$PWD" "--model=$default_model" "--output=$default_output" "--dataset=$default_dataset" "--python=$py" \
    "${args[@]}" "${mode[@]}" -- "$@"
}
