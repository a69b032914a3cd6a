#!/usr/bin/env bash
# Run CoA trajectories for a question file with afm's rollout engine (afm infer), resumably.
#
#   INPUT=data/questions.jsonl OUTPUT=runs/infer/web.jsonl PROMPT=web_agent \
#   BASE_URL=http://127.0.0.1:10000/v1 MODEL=AFM-WebAgent-32B-RL TOKENIZER=/models/AFM-WebAgent-32B-RL \
#   bash inference/inference.sh
#   DRY_RUN=1 bash inference/inference.sh         # print the command only (DRY_RUN=1/true/yes/on, or --dry-run)
#   bash inference/inference.sh --help            # this text
#
# Knobs (environment variables). A knob left unset passes no flag: afm infer's own default applies, written once
# there (`afm infer --help` lists them); the script's own defaults are listed under "Defaults" below.
#   INPUT                 (required) .json/.jsonl/.parquet question file
#   OUTPUT                <repo>/runs/infer/<INPUT name>.jsonl   trajectories (append-only; a rerun resumes)
#   BACKEND               openai (an OpenAI-compatible server) | hf (MODEL is a folder, run here)
#   MODEL                 (required) served model name (BACKEND=openai) or model folder (BACKEND=hf)
#   BASE_URL              the server's OpenAI API
#   ENGINE                the server's engine, as serve_model.sh's ENGINE: vllm, llamacpp, sglang, openai (any
#                         other); unset, afm infer asks the server (evaluation/engine.sh)
#   TOKENIZER             tokenizer folder or hub id (token budgets are counted with it); see below
#   PROMPT                system prompt key (web_agent, mhqa, code_agent, math_agent, ...)
#   TOOLS, TOOLS_CONFIG   comma-separated tool names (unset: the prompt's); YAML of tool settings (web_agent:
#                         web_search, crawl_page, as the original's inference_web_agent.py; its
#                         verl/inference/inference.sh also gave the model code and visual_inspector:
#                         PROMPT=afm_all_tools has web_search, crawl_page and code; visual_inspector has no afm
#                         counterpart)
#   N_SAMPLES, TEMPERATURE, SEED, CONCURRENCY
#   TOP_P, TOP_K          afm infer's are the paper's web evaluation (inference_web_agent.py's top_p; the top_k of
#                         evaluation/eval_web_agent.sh); the original's verl/inference/inference.sh sampled with top_p
#                         0.95 and passed no top_k (the server's default, off): TOP_K=-1 for that
#   MAX_TURNS             generations per trajectory: trajectory_len of inference_web_agent.py (the original's
#                         verl/inference/inference.sh: max_turns=10)
#   MAX_TOKENS_PER_TURN, MAX_RESPONSE_TOKENS, MAX_MODEL_LEN   the rollout limits of afm.agent.loop.AgentConfig
#   Tool timeouts are the tools yaml's (TOOLS_CONFIG; docs/original_mapping.md, "Tools", compares them with the
#   original's 500 s)
#   Q_KEY, ANSWER_KEY     the question and answer fields
#   PYTHON                <repo>/.venv/bin/python if present, else python3
#
# TOKENIZER, when unset: the model path evaluation/serve_model.sh recorded when it started the served MODEL,
# else AFM_MODEL_PATH (environment.sh: the model folder inference/ and evaluation/ run), else MODEL with
# BACKEND=hf; otherwise the script stops and asks for it (a served name is not a tokenizer).
# Relative paths (INPUT, OUTPUT, TOOLS_CONFIG, TOKENIZER, MODEL with BACKEND=hf) are taken from the current
# directory. Tool servers are reached through environment.sh (SERVER_HOST, WEBSEARCH_PORT, CRAWL_PAGE_PORT,
# WIKI_RAG_SERVER_URL); source it first. Killed runs restart where they stopped (finished (question, sample) pairs
# are never redone).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=../evaluation/tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
# shellcheck source=../evaluation/engine.sh
source "$ROOT/evaluation/engine.sh"
AFM_DEFAULTS=(MAX_TURNS=36)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
afm_defaults AFM_DEFAULTS

[[ -n ${INPUT:-} ]] || afm_die "set INPUT to a .json/.jsonl/.parquet question file (bash inference/inference.sh --help)"
[[ -n ${MODEL:-} ]] || afm_die "set MODEL (served model name, or a model folder with BACKEND=hf)"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
INPUT=$(afm_abs "$INPUT")
OUTPUT=$(afm_abs "${OUTPUT:-$ROOT/runs/infer/$(basename "${INPUT%.*}").jsonl}")
[[ ${BACKEND:-} == hf && -e $MODEL ]] && MODEL=$(afm_abs "$MODEL")
TOKENIZER=$(afm_eval_tokenizer)
ENGINE_ARG=$(afm_engine_arg)
TOOLS_CONFIG=$(afm_abs "${TOOLS_CONFIG:-}")
PYTHON=$(afm_python "$ROOT")

cmd=("$PYTHON" -m afm.cli infer --input "$INPUT" --output "$OUTPUT" --model "$MODEL" --tokenizer "$TOKENIZER")
# The knobs with afm infer's defaults only when set: those defaults are written once, in afm/agent/infer.py.
afm_flags_if_set cmd --backend BACKEND --prompt PROMPT --n N_SAMPLES --temperature TEMPERATURE --top-p TOP_P \
  --top-k TOP_K --concurrency CONCURRENCY --q-key Q_KEY --answer-key ANSWER_KEY
# The rollout limits only when set: their defaults live in one place (AgentConfig).
afm_limit_flags cmd
# BASE_URL only when set: its default is afm's (--base-url), written once.
[[ -n ${BASE_URL:-} ]] && cmd+=(--base-url "$BASE_URL")
[[ -n "$ENGINE_ARG" ]] && cmd+=(--engine "$ENGINE_ARG")
[[ -n "${TOOLS:-}" ]] && cmd+=(--tools "$TOOLS")
[[ -n "$TOOLS_CONFIG" ]] && cmd+=(--tools-config "$TOOLS_CONFIG")
[[ -n "${SEED:-}" ]] && cmd+=(--seed "$SEED")
echo "[inference] ${cmd[*]}"
if [[ $DRY_RUN == true ]]; then exit 0; fi
exec "${cmd[@]}"
