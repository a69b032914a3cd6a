#!/usr/bin/env bash
# Serve a model with vLLM's OpenAI-compatible server, with the settings the paper's evaluation used
# (max_model_len 32768, gpu_memory_utilization 0.7), and wait until it answers.
#
#   MODEL_PATH=/models/AFM-WebAgent-32B-RL SERVED_NAME=AFM-WebAgent-32B-RL TP=4 PORT=10000 bash evaluation/serve_model.sh
#
# Needs a GPU and `pip install vllm` (not part of afm's extras: pick the build matching your CUDA).
set -euo pipefail
MODEL_PATH="${MODEL_PATH:?set MODEL_PATH}"
SERVED_NAME="${SERVED_NAME:-$(basename "$MODEL_PATH")}"
TP="${TP:-1}"
PORT="${PORT:-10000}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-32768}"
GPU_MEMORY_UTILIZATION="${GPU_MEMORY_UTILIZATION:-0.7}"
LOG="${LOG:-runs/serve/${SERVED_NAME}.log}"
cmd=(vllm serve "$MODEL_PATH" --served-model-name "$SERVED_NAME" --max-model-len "$MAX_MODEL_LEN"
     --tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION" --port "$PORT"
     --host "${HOST:-127.0.0.1}")
echo "[serve] ${cmd[*]}"
if [[ "${DRY_RUN:-0}" == "1" ]]; then exit 0; fi
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
    echo "[serve] ready: http://${HOST:-127.0.0.1}:${PORT}/v1 (model ${SERVED_NAME}, pid ${pid}, log ${LOG})"
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "[serve] vLLM exited; see $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
  sleep 1
done
echo "[serve] not ready after 600 s; see $LOG" >&2
exit 1
