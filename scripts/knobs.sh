# shellcheck shell=bash
# Helpers shared by the launchers (sft_scripts/common.sh, experiments/common.sh) and the data, inference, evaluation
# and server scripts for reading their environment-variable knobs. Sourced, never run. The SFT and RL launchers'
# settings, the original project's names and the misspelling check live in afm/launch/ (sft.py, rl.py, names.py;
# afm_run_module runs them).

afm_die() {
  echo "[afm] error: $*" >&2
  exit 2
}

afm_warn() {
  echo "[afm] warning: $*" >&2
}

# true/false from the spellings people type (1/0, yes/no, on/off, any case); dies on anything else.
afm_bool() {
  local name=$1 value=${2,,}
  case "$value" in
    true | 1 | yes | on) echo true ;;
    false | 0 | no | off) echo false ;;
    *) afm_die "$name must be true or false (got '$2')" ;;
  esac
}

# ---- help and paths shared by the data, inference and evaluation scripts ------------------------------------------
# afm_print_header FILE: FILE's leading comment block (its usage and knobs), without the comment marks.
afm_print_header() {
  sed -n '2,/^[^#]/p' "$1" | sed -e '/^[^#]/d' -e '/^# shellcheck/d' -e 's/^# \{0,1\}//'
}

# afm_asks_help ARGS...: succeeds when an argument is -h or --help (the one test of every script's --help).
afm_asks_help() {
  local arg
  for arg in "$@"; do
    if [[ $arg == -h || $arg == --help ]]; then return 0; fi
  done
  return 1
}

# afm_help_if_asked FILE ARGS...: when an argument is -h or --help, print FILE's leading comment block (its usage
# and knobs), then the script's AFM_DEFAULTS when it has them, and exit 0. A script whose defaults depend on one knob
# (data/select_rl.sh's MODE) names that knob in AFM_DEFAULTS_BY and keeps one array per value, AFM_DEFAULTS_<value>.
afm_help_if_asked() {
  local file=$1 set
  shift
  if afm_asks_help "$@"; then
    afm_print_header "$file"
    if declare -p AFM_DEFAULTS &> /dev/null; then
      echo
      echo "Defaults:"
      afm_print_defaults AFM_DEFAULTS
    fi
    for set in $(compgen -A arrayvar AFM_DEFAULTS_); do
      echo
      echo "Defaults with ${AFM_DEFAULTS_BY:-?}=${set#AFM_DEFAULTS_}:"
      afm_print_defaults "$set"
    done
    exit 0
  fi
}

# A script's plain-valued defaults are NAME=value words of one array (AFM_DEFAULTS by convention), written there only:
# afm_defaults gives each knob unset or empty its value, afm_print_defaults lists them for --help.
# afm_defaults ARRAY: apply the NAME=value words of the array named ARRAY.
afm_defaults() {
  local -n _afm_pairs=$1
  local pair name
  for pair in "${_afm_pairs[@]}"; do
    name=${pair%%=*}
    [[ -n ${!name:-} ]] || printf -v "$name" '%s' "${pair#*=}"
  done
}

# afm_print_defaults ARRAY: the NAME=value words of the array named ARRAY as --help rows.
afm_print_defaults() {
  local -n _afm_rows=$1
  local pair
  for pair in "${_afm_rows[@]}"; do printf '  %-23s %s\n' "${pair%%=*}" "${pair#*=}"; done
}

# afm_script_start FILE ARGS...: how the data, inference, evaluation and build scripts take their arguments: --help
# prints FILE's header and exits, --dry-run becomes DRY_RUN=1, and the other arguments are left in AFM_ARGS; the
# script goes on with: set -- "${AFM_ARGS[@]}"
afm_script_start() {
  afm_help_if_asked "$@"
  shift
  afm_take_dry_run "$@"
}

# afm_take_dry_run ARGS...: the one dry-run rule of every launch script: the argument --dry-run means DRY_RUN=1
# (the RL scripts took it first; a script that passed it on, as the SFT scripts once did to LLaMA-Factory, trained
# instead). Exports DRY_RUN=1 when --dry-run is among ARGS and leaves the other arguments in AFM_ARGS; the script
# goes on with: set -- "${AFM_ARGS[@]}"
afm_take_dry_run() {
  AFM_ARGS=()
  local arg
  for arg in "$@"; do
    if [[ $arg == --dry-run ]]; then
      export DRY_RUN=1
    else
      AFM_ARGS+=("$arg")
    fi
  done
}

# afm_abs PATH: PATH made absolute against the current directory (empty stays empty).
afm_abs() {
  if [[ -z $1 || $1 == /* ]]; then printf '%s' "$1"; else printf '%s' "${PWD%/}/${1#./}"; fi
}

# afm_python ROOT [VENV_VAR [VENV_DEFAULT [OVERRIDE_VAR]]]: the one interpreter lookup of every script. The value of
# OVERRIDE_VAR (default PYTHON; "" = none) when set, else the interpreter of the virtual environment that VENV_VAR
# names (default AFM_VENV, itself defaulting to VENV_DEFAULT, .venv; relative to ROOT) when it exists, else python3.
#   afm_python "$ROOT"                             the SFT/eval/inference side: PYTHON, .venv, python3
#   afm_python "$ROOT" AFM_RL_VENV .venv-rl        the RL side: PYTHON, .venv-rl, python3
#   afm_python "$ROOT" AFM_VENV .venv AFM_PYTHON   the tool servers: AFM_PYTHON, .venv, python3
afm_python() {
  local root=$1 venv_var=${2:-AFM_VENV} venv_default=${3:-.venv} override_var=${4-PYTHON}
  local venv=${!venv_var:-$venv_default}
  [[ $venv == /* ]] || venv=$root/$venv
  if [[ -n $override_var && -n ${!override_var:-} ]]; then
    printf '%s' "${!override_var}"
  elif [[ -x $venv/bin/python ]]; then
    printf '%s' "$venv/bin/python"
  else
    printf '%s' python3
  fi
}

# afm_flags_if_set ARRAY FLAG NAME [FLAG NAME ...]: append "FLAG value" to the array named ARRAY for each knob NAME
# that is set (not empty). An unset knob passes nothing, so its default stays the one of the afm command the script
# runs (written once there, shown by that command's --help).
afm_flags_if_set() {
  local -n _afm_into=$1
  shift
  while (( $# >= 2 )); do
    if [[ -n ${!2:-} ]]; then _afm_into+=("$1" "${!2}"); fi
    shift 2
  done
}

# afm_limit_flags ARRAY: append afm infer's rollout-limit flags for the knobs the user set (MAX_TURNS,
# MAX_TOKENS_PER_TURN, MAX_RESPONSE_TOKENS, MAX_MODEL_LEN) to the array named ARRAY. An unset knob passes nothing,
# so the default stays the one of afm.agent.loop.AgentConfig (written once, shown by `afm infer --help`).
afm_limit_flags() {
  local -n _afm_argv=$1
  if [[ -n ${MAX_TURNS:-} ]]; then _afm_argv+=(--max-turns "$MAX_TURNS"); fi
  if [[ -n ${MAX_TOKENS_PER_TURN:-} ]]; then _afm_argv+=(--max-tokens-per-turn "$MAX_TOKENS_PER_TURN"); fi
  if [[ -n ${MAX_RESPONSE_TOKENS:-} ]]; then _afm_argv+=(--max-response-tokens "$MAX_RESPONSE_TOKENS"); fi
  if [[ -n ${MAX_MODEL_LEN:-} ]]; then _afm_argv+=(--max-model-len "$MAX_MODEL_LEN"); fi
}

# afm_env_default NAME: the literal default environment.sh states for NAME (its `export NAME="${NAME:-value}"`
# line), so that a script run without `source environment.sh` uses the same value without writing it again (the
# servers' ports are stated there only). Prints nothing when the file gives NAME no literal default.
afm_env_default() {
  local file
  file="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/environment.sh"
  [[ -r $file ]] || return 0
  awk -v name="$1" '
    index($0, "export " name "=\"${" name ":-") == 1 {
      value = substr($0, length("export " name "=\"${" name ":-") + 1)
      if (value ~ /^[^"$}]*}"[[:space:]]*$/) { sub(/}".*/, "", value); print value }
      exit
    }' "$file"
}

# afm_run_module PYTHON ROOT MODULE ARGS...: run afm's MODULE (e.g. afm.launch.sft) with PYTHON from the checkout at
# ROOT, whichever afm PYTHON may have installed, without putting ROOT on the PYTHONPATH of what MODULE starts.
afm_run_module() {
  local python=$1 root=$2
  shift 2
  "$python" -c 'import runpy, sys; sys.path[0] = sys.argv.pop(1); runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)' \
    "$root" "$@"
}
