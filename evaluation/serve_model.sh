#!/usr/bin/env bash
# Serve a model with vLLM's OpenAI-compatible server, with the settings the paper's evaluation used
# (max_model_len 32768, gpu_memory_utilization 0.7), and wait until it answers.
#
#   MODEL_PATH=/models/AFM-WebAgent-32B-RL SERVED_NAME=AFM-WebAgent-32B-RL TP=4 PORT=10000 bash evaluation/serve_model.sh
#   DRY_RUN=1 bash evaluation/serve_model.sh      # print the command only (or --dry-run)
#   bash evaluation/serve_model.sh --help         # this text
#
# Knobs (environment variables) and defaults:
#   MODEL_PATH              $AFM_MODEL_PATH   model folder or hub id to serve (relative: from the current directory)
#   SERVED_NAME             basename of MODEL_PATH   the name clients pass as MODEL (the original fixed it to
#                           AFM-WebAgent-32B-RL, the name of its RL checkpoint folder, which this default gives for
#                           that folder; another model is served under its own name, not posing as that one)
#   TP 1  PORT 10000  HOST 127.0.0.1  MAX_MODEL_LEN 32768  GPU_MEMORY_UTILIZATION 0.7
#   TRUST_REMOTE_CODE       true      --trust-remote-code, as the original's run_qwen.sh (false: never run Python
#                           shipped with the checkpoint; Qwen2.5 and the AFM models need none)
#   LOG                     <repo>/runs/serve/<SERVED_NAME>.log
# When the server is up, the model path is recorded in <repo>/runs/serve/<SERVED_NAME>.model_path: inference/ and
# evaluation/ read it as their TOKENIZER default for MODEL=<SERVED_NAME>.
# Needs a GPU and `pip install vllm` (not part of afm's extras: pick the build matching your CUDA).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
afm_help_if_asked "${BASH_SOURCE[0]}" "$@"
afm_take_dry_run "$@"
set -- "${AFM_ARGS[@]}"

MODEL_PATH="${MODEL_PATH:-${AFM_MODEL_PATH:-}}"
[[ -n $MODEL_PATH ]] || afm_die "set MODEL_PATH (or AFM_MODEL_PATH in environment.sh) to the model to serve"
[[ -e $MODEL_PATH ]] && MODEL_PATH=$(afm_abs "$MODEL_PATH")
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
SERVED_NAME="${SERVED_NAME:-$(basename "$MODEL_PATH")}"
TP="${TP:-1}"
PORT="${PORT:-10000}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-32768}"
GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.7}"
TRUST_REMOTE_CODE=$(afm_bool TRUST_REMOTE_CODE "${TRUST_REMOTE_CODE:-true}")
LOG=$(afm_abs "${LOG:-$ROOT/runs/serve/${SERVED_NAME}.log}")
cmd=(vllm serve "$MODEL_PATH" --served-model-name "$SERVED_NAME" --max-model-len "$MAX_MODEL_LEN"
     --tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION" --port "$PORT"
     --host "${HOST:-127.0.0.1}")
[[ $TRUST_REMOTE_CODE == true ]] && cmd+=(--trust-remote-code)
echo "[serve] ${cmd[*]}"
if [[ $DRY_RUN == true ]]; then exit 0; fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[serve] no GPU found: vLLM needs one. On CPU use BACKEND=hf with afm eval run / afm infer." >&2
  exit 2
fi
command -v vllm >/dev/null 2>&1 || { echo "[serve] vllm is not installed (pip install vllm)" >&2; exit 2; }
mkdir -p "$(dirname "$LOG")"
nohup "${cmd[@]}" >"$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:${PORT}/v1/models" >/dev/null; then
    record=$(afm_served_record "$SERVED_NAME")
    mkdir -p "$(dirname "$record")"
    printf '%s\n' "$MODEL_PATH" > "$record"
    echo "[serve] ready: http://${HOST:-127.0.0.1}:${PORT}/v1 (model ${SERVED_NAME}, pid ${pid}, log ${LOG})"
    echo "[serve] recorded the model path for TOKENIZER in $record"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "[serve] vLLM exited; see $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
  sleep 1
done
echo "[serve] not ready after 600 s; see $LOG" >&2
exit 1
