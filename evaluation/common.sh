# shellcheck shell=bash
# evaluation/common.sh: shared by evaluation/eval_*.sh (sourced, not run): resolve the knobs, print and run
# `afm eval run`. Knobs of every eval script (environment variables) and defaults:
#   MODEL                 (required)        served model name (BACKEND=openai) or model folder (BACKEND=hf)
#   RUN_DIR               script            results, trajectories and the report (<repo>/runs/eval/<agent>);
#                                           rerun the same command to resume
#   BENCHMARKS            script            comma-separated benchmark names
#   BACKEND               afm's             openai (a server) | hf (a model folder run here)
#   BASE_URL              afm's            the server's OpenAI API; unset: --base-url's default (afm eval run --help)
#   ENGINE                auto              the server's engine, as serve_model.sh's ENGINE: vllm, llamacpp, sglang,
#                                           openai (any other); auto asks the server (evaluation/engine.sh)
#   TOKENIZER             see below         the served model's tokenizer (token budgets are counted with it)
#   N_SAMPLES             script            samples per question (avg@k, pass@k)
#   TEMPERATURE, TOP_P, TOP_K, MAX_TURNS, MAX_RESPONSE_TOKENS, SEED, LIMIT, MAX_MODEL_LEN, CONCURRENCY
#                         unset: afm eval run's defaults (afm eval run --help; the samplings are per benchmark)
#   DATA_ROOT             (built-in)        folder of benchmark files (the original's AFM/data works)
#   TOOLS_CONFIG          (none)            YAML of tool settings
#   KEEP_TRAJECTORIES     false             keep every trajectory in RUN_DIR
#   DRY_RUN               false             true/1/yes/on (or the --dry-run argument): print the command, run nothing
#   PYTHON                <repo>/.venv/bin/python if present, else python3
# Arguments given to a script are appended to `afm eval run` (see: afm eval run --help).
# TOKENIZER, when unset: the model path evaluation/serve_model.sh recorded for the served MODEL, else
# AFM_MODEL_PATH (environment.sh), else MODEL with BACKEND=hf; otherwise the script stops and asks for it.
# Relative paths (RUN_DIR, DATA_ROOT, TOOLS_CONFIG, TOKENIZER) are taken from the current directory.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
# shellcheck source=engine.sh
source "$ROOT/evaluation/engine.sh"

# afm_eval_help SCRIPT ARGS...: --help prints the script's own header, its values (RUN_DIR, BENCHMARKS, N_SAMPLES as
# the script set them: each written once, in the script), then the knobs above.
afm_eval_help() {
  local script=$1
  shift
  if afm_asks_help "$@"; then
    afm_print_header "$script"
    echo
    echo "This script's values (set a variable to change one):"
    printf '  %-21s %s\n' RUN_DIR "$RUN_DIR" BENCHMARKS "$BENCHMARKS" N_SAMPLES "${N_SAMPLES:-(afm eval run default)}"
    echo
    afm_print_header "${BASH_SOURCE[0]}"
    exit 0
  fi
}

# run_eval BENCHMARKS [afm eval run flags ...]: --help prints the calling script's help (afm_eval_help), else the
# command runs (or is printed: DRY_RUN).
run_eval() {
  local benchmarks="$1"
  shift
  afm_eval_help "${BASH_SOURCE[1]}" "$@"
  afm_take_dry_run "$@"
  set -- "${AFM_ARGS[@]}"
  [[ -n ${MODEL:-} ]] || afm_die "set MODEL (served model name; BACKEND=hf: a model folder); --help lists the knobs"
  local dry_run keep python tokenizer run_dir engine
  dry_run=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
  keep=$(afm_bool KEEP_TRAJECTORIES "${KEEP_TRAJECTORIES:-0}")
  python=$(afm_python "$ROOT")
  [[ ${BACKEND:-} == hf && -e $MODEL ]] && MODEL=$(afm_abs "$MODEL")
  tokenizer=$(afm_eval_tokenizer)
  engine=$(afm_engine_arg)
  run_dir=$(afm_abs "$RUN_DIR")
  local cmd=("$python" -m afm.cli eval run --benchmarks "$benchmarks" --run-dir "$run_dir" --model "$MODEL"
    --tokenizer "$tokenizer")
  # These only when set: their defaults are afm eval run's, written once (afm/agent/infer.py, AgentConfig).
  [[ -n ${BACKEND:-} ]] && cmd+=(--backend "$BACKEND")
  [[ -n ${BASE_URL:-} ]] && cmd+=(--base-url "$BASE_URL")
  [[ -n ${CONCURRENCY:-} ]] && cmd+=(--concurrency "$CONCURRENCY")
  [[ -n ${MAX_MODEL_LEN:-} ]] && cmd+=(--max-model-len "$MAX_MODEL_LEN")
  [[ -n $engine ]] && cmd+=(--engine "$engine")
  [[ -n "${N_SAMPLES:-}" ]] && cmd+=(--n "$N_SAMPLES")
  [[ -n "${TEMPERATURE:-}" ]] && cmd+=(--temperature "$TEMPERATURE")
  [[ -n "${TOP_P:-}" ]] && cmd+=(--top-p "$TOP_P")
  [[ -n "${TOP_K:-}" ]] && cmd+=(--top-k "$TOP_K")
  [[ -n "${MAX_TURNS:-}" ]] && cmd+=(--max-turns "$MAX_TURNS")
  [[ -n "${MAX_RESPONSE_TOKENS:-}" ]] && cmd+=(--max-response-tokens "$MAX_RESPONSE_TOKENS")
  [[ -n "${DATA_ROOT:-}" ]] && cmd+=(--data-root "$(afm_abs "$DATA_ROOT")")
  [[ -n "${LIMIT:-}" ]] && cmd+=(--limit "$LIMIT")
  [[ -n "${SEED:-}" ]] && cmd+=(--seed "$SEED")
  [[ -n "${TOOLS_CONFIG:-}" ]] && cmd+=(--tools-config "$(afm_abs "$TOOLS_CONFIG")")
  [[ $keep == true ]] && cmd+=(--keep-trajectories)
  cmd+=("$@")
  echo "[eval] ${cmd[*]}"
  if [[ $dry_run == true ]]; then return 0; fi
  "${cmd[@]}"
}
