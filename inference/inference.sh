#!/usr/bin/env bash
# Run CoA trajectories for a question file with afm's rollout engine (afm infer), resumably.
#
#   INPUT=data/questions.jsonl OUTPUT=runs/infer/web.jsonl PROMPT=web_agent \
#   BASE_URL=http://127.0.0.1:10000/v1 MODEL=AFM-WebAgent-32B-RL TOKENIZER=/models/AFM-WebAgent-32B-RL \
#   bash inference/inference.sh
#
# BACKEND=hf runs MODEL (a folder) in this process instead of calling a server. Tool servers are reached through
# environment.sh (SERVER_HOST, WEBSEARCH_PORT, CRAWL_PAGE_PORT, WIKI_RAG_SERVER_URL); source it first.
# Killed runs restart where they stopped (finished (question, sample) pairs are never redone). DRY_RUN=1 prints.
set -euo pipefail
cd "$(dirname "$0")/.."

INPUT="${INPUT:?set INPUT to a .json/.jsonl/.parquet question file}"
OUTPUT="${OUTPUT:-runs/infer/$(basename "${INPUT%.*}").jsonl}"
BACKEND="${BACKEND:-openai}"
MODEL="${MODEL:?set MODEL (served model name, or a model folder with BACKEND=hf)}"
BASE_URL="${BASE_URL:-http://127.0.0.1:10000/v1}"
TOKENIZER="${TOKENIZER:-$MODEL}"
PROMPT="${PROMPT:-web_agent}"
TOOLS="${TOOLS:-}"
TOOLS_CONFIG="${TOOLS_CONFIG:-}"
N_SAMPLES="${N_SAMPLES:-1}"
TEMPERATURE="${TEMPERATURE:-1.0}"
TOP_P="${TOP_P:-0.9}"
TOP_K="${TOP_K:-20}"
SEED="${SEED:-}"
MAX_TURNS="${MAX_TURNS:-25}"
MAX_TOKENS_PER_TURN="${MAX_TOKENS_PER_TURN:-4096}"
MAX_RESPONSE_TOKENS="${MAX_RESPONSE_TOKENS:-30720}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-32768}"
CONCURRENCY="${CONCURRENCY:-64}"
Q_KEY="${Q_KEY:-question}"
ANSWER_KEY="${ANSWER_KEY:-answer}"
PYTHON="${PYTHON:-$( [[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3 )}"

cmd=("$PYTHON" -m afm.cli infer --input "$INPUT" --output "$OUTPUT" --backend "$BACKEND" --model "$MODEL"
     --base-url "$BASE_URL" --tokenizer "$TOKENIZER" --prompt "$PROMPT" --n "$N_SAMPLES"
     --temperature "$TEMPERATURE" --top-p "$TOP_P" --top-k "$TOP_K" --max-turns "$MAX_TURNS"
     --max-tokens-per-turn "$MAX_TOKENS_PER_TURN" --max-response-tokens "$MAX_RESPONSE_TOKENS"
     --max-model-len "$MAX_MODEL_LEN" --concurrency "$CONCURRENCY" --q-key "$Q_KEY" --answer-key "$ANSWER_KEY")
[[ -n "$TOOLS" ]] && cmd+=(--tools "$TOOLS")
[[ -n "$TOOLS_CONFIG" ]] && cmd+=(--tools-config "$TOOLS_CONFIG")
[[ -n "$SEED" ]] && cmd+=(--seed "$SEED")
echo "[inference] ${cmd[*]}"
if [[ "${DRY_RUN:-0}" == "1" ]]; then exit 0; fi
exec "${cmd[@]}"
