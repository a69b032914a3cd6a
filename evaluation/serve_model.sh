#!/usr/bin/env bash
# Serve a model with vLLM's OpenAI-compatible server, with the settings the paper's evaluation used (its
# max_model_len and gpu_memory_utilization: the defaults below), or on CPU with llama.cpp's llama-server, and wait
# until it answers.
#
#   MODEL_PATH=/models/AFM-WebAgent-32B-RL SERVED_NAME=AFM-WebAgent-32B-RL TP=4 PORT=10000 bash evaluation/serve_model.sh
#   ENGINE=llamacpp MODEL_PATH=model.gguf TOKENIZER=hf_dir PORT=10000 bash evaluation/serve_model.sh   # CPU
#   DRY_RUN=1 bash evaluation/serve_model.sh      # print the command only (or --dry-run)
#   bash evaluation/serve_model.sh --help         # this text
#
# Knobs (environment variables; the plain defaults are listed under "Defaults" below):
#   ENGINE                  the engine: vllm, or llamacpp: llama.cpp's llama-server (CPU; a GGUF file as MODEL_PATH;
#                           built by AFM_ENGINES=llamacpp bash scripts/install.sh). afm infer / afm eval run find
#                           its dialect themselves (--engine auto) and talk to its native /completion endpoint;
#                           it also serves an OpenAI-compatible /v1 on PORT.
#   MODEL_PATH              $AFM_MODEL_PATH   model folder or hub id to serve (relative: from the current directory)
#   SERVED_NAME             basename of MODEL_PATH (less .gguf)   the name clients pass as MODEL (the original
#                           fixed it to AFM-WebAgent-32B-RL, the name of its RL checkpoint folder, which this
#                           default gives for that folder; another model is served under its own name, not posing
#                           as that one)
#   TP, PORT, HOST, MAX_MODEL_LEN, GPU_MEMORY_UTILIZATION   vllm's tensor parallel size, the address, the context
#                           and the GPU memory share (llama.cpp: MAX_MODEL_LEN tokens per slot)
#   TRUST_REMOTE_CODE       passes --trust-remote-code when true, as the original's run_qwen.sh (false: never run
#                           Python shipped with the checkpoint; Qwen2.5 and the AFM models need none)
#   LOG                     <repo>/runs/serve/<SERVED_NAME>.log
# llamacpp only:
#   PARALLEL                slots (requests decoded together); MAX_MODEL_LEN tokens each
#   THREADS                 CPU threads: one per slot, at most the CPUs there are
#   TOKENIZER               the HF tokenizer folder that matches the GGUF (afm model prepare's hf folder; default:
#                           MODEL_PATH's folder when it holds tokenizer.json): recorded instead of the GGUF
#   LLAMA_SERVER            the llama-server binary (default: the one scripts/build_llamacpp.sh built)
# When the server is up, the model path (llamacpp: TOKENIZER) is recorded in
# <repo>/runs/serve/<SERVED_NAME>.model_path: inference/ and evaluation/ read it as their TOKENIZER default for
# MODEL=<SERVED_NAME>. The server keeps running; stop it with kill <pid> (SIGTERM reaches the server itself).
# vllm needs a GPU and `pip install vllm` (not part of afm's extras: pick the build matching your CUDA).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
AFM_DEFAULTS=(ENGINE=vllm TP=1 PORT=10000 HOST=127.0.0.1 MAX_MODEL_LEN=32768 GPU_MEMORY_UTILIZATION=0.7
  TRUST_REMOTE_CODE=true PARALLEL=4)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
afm_defaults AFM_DEFAULTS

MODEL_PATH="${MODEL_PATH:-${AFM_MODEL_PATH:-}}"
[[ -n $MODEL_PATH ]] || afm_die "set MODEL_PATH (or AFM_MODEL_PATH in environment.sh) to the model to serve"
[[ -e $MODEL_PATH ]] && MODEL_PATH=$(afm_abs "$MODEL_PATH")
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
SERVED_NAME="${SERVED_NAME:-$(basename "$MODEL_PATH" .gguf)}"
TRUST_REMOTE_CODE=$(afm_bool TRUST_REMOTE_CODE "$TRUST_REMOTE_CODE")
LOG=$(afm_abs "${LOG:-$ROOT/runs/serve/${SERVED_NAME}.log}")
record_path="$MODEL_PATH"
case "$ENGINE" in
  vllm)
    cmd=(vllm serve "$MODEL_PATH" --served-model-name "$SERVED_NAME" --max-model-len "$MAX_MODEL_LEN"
         --tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION" --port "$PORT"
         --host "$HOST")
    [[ $TRUST_REMOTE_CODE == true ]] && cmd+=(--trust-remote-code)
    ;;
  llamacpp)
    [[ $MODEL_PATH == *.gguf ]] || afm_die "ENGINE=llamacpp serves a GGUF file; MODEL_PATH=$MODEL_PATH is not one" \
      "(afm model prepare writes one)"
    THREADS="${THREADS:-$(( PARALLEL < $(nproc) ? PARALLEL : $(nproc) ))}"
    LLAMA_SERVER="${LLAMA_SERVER:-$(DRY_RUN=1 bash "$ROOT/scripts/build_llamacpp.sh" | tail -n 1)}"
    if [[ -z ${TOKENIZER:-} && -f "$(dirname "$MODEL_PATH")/tokenizer.json" ]]; then
      TOKENIZER=$(dirname "$MODEL_PATH")
    fi
    record_path=$([[ -n ${TOKENIZER:-} ]] && afm_abs "$TOKENIZER" || true)
    # -c is the KV cache of all slots together; --no-webui: an API server only
    cmd=("$LLAMA_SERVER" -m "$MODEL_PATH" --alias "$SERVED_NAME" --host "$HOST" --port "$PORT"
         -np "$PARALLEL" -c $(( MAX_MODEL_LEN * PARALLEL )) -t "$THREADS" -tb "$THREADS" --no-webui)
    ;;
  *) afm_die "ENGINE must be vllm or llamacpp, got '$ENGINE'" ;;
esac
echo "[serve] ${cmd[*]}"
if [[ $DRY_RUN == true ]]; then exit 0; fi
if [[ $ENGINE == vllm ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "[serve] no GPU found: vLLM needs one. On CPU use ENGINE=llamacpp with a GGUF, or BACKEND=hf with" \
      "afm eval run / afm infer." >&2
    exit 2
  fi
  command -v vllm >/dev/null 2>&1 || { echo "[serve] vllm is not installed (pip install vllm)" >&2; exit 2; }
else
  [[ -x $LLAMA_SERVER ]] || afm_die "llama-server is not built ($LLAMA_SERVER): run AFM_ENGINES=llamacpp bash" \
    "scripts/install.sh (or bash scripts/build_llamacpp.sh), or set LLAMA_SERVER"
  [[ -f $MODEL_PATH ]] || afm_die "MODEL_PATH=$MODEL_PATH does not exist"
fi
mkdir -p "$(dirname "$LOG")"
# the binary itself is the background process (nohup execs it): its pid is the server's, so SIGTERM reaches it
nohup "${cmd[@]}" >"$LOG" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  if curl -sf "http://127.0.0.1:${PORT}/v1/models" >/dev/null; then
    echo "[serve] ready: http://${HOST}:${PORT}/v1 (model ${SERVED_NAME}, pid ${pid}, log ${LOG})"
    if [[ -n $record_path ]]; then
      record=$(afm_served_record "$SERVED_NAME")
      mkdir -p "$(dirname "$record")"
      printf '%s\n' "$record_path" > "$record"
      echo "[serve] recorded the model path for TOKENIZER in $record"
    else
      afm_warn "no TOKENIZER given for the GGUF: pass TOKENIZER=<hf folder> to afm infer / afm eval run"
    fi
    exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { echo "[serve] $ENGINE exited; see $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
  sleep 1
done
echo "[serve] not ready after 600 s; see $LOG" >&2
exit 1
