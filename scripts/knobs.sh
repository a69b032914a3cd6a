# shellcheck shell=bash
# Helpers shared by the launchers (sft_scripts/common.sh, experiments/common.sh) for reading and checking their
# environment-variable knobs. Sourced, never run.

afm_die() {
  echo "[afm] error: $*" >&2
  exit 2
}

afm_warn() {
  echo "[afm] warning: $*" >&2
}

afm_is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
afm_is_posint() { [[ $1 =~ ^[0-9]+$ && $1 -gt 0 ]]; }
afm_is_int() { [[ $1 =~ ^-?[0-9]+$ ]]; }
afm_is_number() { [[ $1 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]]; }

# true/false from the spellings people type (1/0, yes/no, on/off, any case); dies on anything else.
afm_bool() {
  local name=$1 value=${2,,}
  case "$value" in
    true | 1 | yes | on) echo true ;;
    false | 0 | no | off) echo false ;;
    *) afm_die "$name must be true or false (got '$2')" ;;
  esac
}
