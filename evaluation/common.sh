# Shared by evaluation/eval_*.sh: resolve the python, print and run `afm eval run` (DRY_RUN=1 only prints).
# shellcheck shell=bash
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}"

run_eval() {
  local benchmarks="$1"; shift
  local cmd=("$PYTHON" -m afm.cli eval run --benchmarks "$benchmarks" --run-dir "$RUN_DIR"
             --backend "${BACKEND:-openai}" --model "$MODEL" --base-url "${BASE_URL:-http://127.0.0.1:10000/v1}"
             --tokenizer "${TOKENIZER:-$MODEL}" --concurrency "${CONCURRENCY:-64}"
             --max-model-len "${MAX_MODEL_LEN:-32768}")
  [[ -n "${N_SAMPLES:-}" ]] && cmd+=(--n "$N_SAMPLES")
  [[ -n "${TEMPERATURE:-}" ]] && cmd+=(--temperature "$TEMPERATURE")
  [[ -n "${TOP_P:-}" ]] && cmd+=(--top-p "$TOP_P")
  [[ -n "${TOP_K:-}" ]] && cmd+=(--top-k "$TOP_K")
  [[ -n "${MAX_TURNS:-}" ]] && cmd+=(--max-turns "$MAX_TURNS")
  [[ -n "${MAX_RESPONSE_TOKENS:-}" ]] && cmd+=(--max-response-tokens "$MAX_RESPONSE_TOKENS")
  [[ -n "${DATA_ROOT:-}" ]] && cmd+=(--data-root "$DATA_ROOT")
  [[ -n "${LIMIT:-}" ]] && cmd+=(--limit "$LIMIT")
  [[ -n "${SEED:-}" ]] && cmd+=(--seed "$SEED")
  [[ -n "${TOOLS_CONFIG:-}" ]] && cmd+=(--tools-config "$TOOLS_CONFIG")
  [[ "${KEEP_TRAJECTORIES:-0}" == "1" ]] && cmd+=(--keep-trajectories)
  cmd+=("$@")
  echo "[eval] ${cmd[*]}"
  if [[ "${DRY_RUN:-0}" == "1" ]]; then return 0; fi
  "${cmd[@]}"
}
