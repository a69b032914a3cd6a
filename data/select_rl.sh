#!/usr/bin/env bash
# RL difficulty selection as in the paper: sample a reference model N times per question (afm infer), then keep the
# questions it rarely solves and write the verl RL parquet (afm data select).
#
#   MODE=web QUESTIONS=data/rl/hotpotqa_train.jsonl OUTPUT=data/rl/web_train.parquet \
#   BASE_URL=http://127.0.0.1:10000/v1 MODEL=AFM-WebAgent-7B-SFT TOKENIZER=/models/AFM-WebAgent-7B-SFT \
#   EXCLUDE="data/AFM-WebAgent-SFT-Dataset/WebAgentSFTDataset.json" bash data/select_rl.sh
#
# Knobs (environment variables) and defaults:
#   MODE             web | code (required). web: drop questions with pass rate r_q > THRESHOLD over N samples
#                    (paper: N=32, 0.3, EM); code: drop questions solved in all N samples (paper: 8/8).
#   QUESTIONS        question file (.jsonl/.json/.parquet) with gold answers (required)
#   OUTPUT           RL parquet (default data/rl/<questions>_<mode>_selected.parquet)
#   SAMPLES          afm infer output (default runs/select/<questions>_<mode>_n<N>.jsonl; resumable)
#   SKIP_INFER=1     reuse existing SAMPLES, only select
#   MODEL, BASE_URL, TOKENIZER, BACKEND (openai|hf)   the reference model (see inference/inference.sh)
#   PROMPT           web_agent (web) | code_agent (code); TOOLS, TOOLS_CONFIG as for afm infer
#   N_SAMPLES        32 (web) | 8 (code);  TEMPERATURE 1.0, TOP_P 0.9, TOP_K 20, SEED (empty), CONCURRENCY 64
#   MAX_TURNS, MAX_TOKENS_PER_TURN, MAX_RESPONSE_TOKENS, MAX_MODEL_LEN   unset: afm infer's defaults (AgentConfig's)
#   THRESHOLD        0.3 (web)
#   SCORER           em (web) | rewards (code: sandboxed tests / Math-Verify by data source)
#   EXCLUDE          space-separated SFT files whose questions RL must not contain (web; the paper keeps SFT
#                    and RL disjoint there; code RL may overlap SFT, so leave it empty for code)
#   EXCLUDE_BY       both | id | question (default both)
#   MAX_QUESTIONS    random sample size of the remaining questions (default: all);  SELECT_SEED 0
#   DATA_SOURCE      search (web) | livecodebench (code);  PROMPT_KEY = PROMPT;  ABILITY qa | code
#   Q_KEY question, ANSWER_KEY answer, ID_KEY id
# DRY_RUN=1 (or true/yes/on) prints the commands without running them; --help prints this text.
# Relative paths you give (QUESTIONS, OUTPUT, SAMPLES, EXCLUDE, TOOLS_CONFIG) are taken from the current directory;
# the defaults are under the repo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=../evaluation/tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

MODE="${MODE:?set MODE to web or code}"
QUESTIONS="${QUESTIONS:?set QUESTIONS to a question file with gold answers}"
case "$MODE" in
  web) N_DEFAULT=32; PROMPT_DEFAULT=web_agent; SOURCE_DEFAULT=search; ABILITY_DEFAULT=qa; SCORER_DEFAULT=em ;;
  code) N_DEFAULT=8; PROMPT_DEFAULT=code_agent; SOURCE_DEFAULT=livecodebench; ABILITY_DEFAULT=code; SCORER_DEFAULT=rewards ;;
  *) echo "MODE must be web or code, got $MODE" >&2; exit 2 ;;
esac
NAME="$(basename "${QUESTIONS%.*}")"
N_SAMPLES="${N_SAMPLES:-$N_DEFAULT}"
PROMPT="${PROMPT:-$PROMPT_DEFAULT}"
OUTPUT=$(afm_abs "${OUTPUT:-$ROOT/data/rl/${NAME}_${MODE}_selected.parquet}")
SAMPLES=$(afm_abs "${SAMPLES:-$ROOT/runs/select/${NAME}_${MODE}_n${N_SAMPLES}.jsonl}")
BACKEND="${BACKEND:-openai}"
TEMPERATURE="${TEMPERATURE:-1.0}"
TOP_P="${TOP_P:-0.9}"
TOP_K="${TOP_K:-20}"
SEED="${SEED:-}"
CONCURRENCY="${CONCURRENCY:-64}"
THRESHOLD="${THRESHOLD:-0.3}"
SCORER="${SCORER:-$SCORER_DEFAULT}"
EXCLUDE="${EXCLUDE:-}"
EXCLUDE_BY="${EXCLUDE_BY:-both}"
MAX_QUESTIONS="${MAX_QUESTIONS:-}"
SELECT_SEED="${SELECT_SEED:-0}"
DATA_SOURCE="${DATA_SOURCE:-$SOURCE_DEFAULT}"
PROMPT_KEY="${PROMPT_KEY:-$PROMPT}"
ABILITY="${ABILITY:-$ABILITY_DEFAULT}"
Q_KEY="${Q_KEY:-question}"
ANSWER_KEY="${ANSWER_KEY:-answer}"
ID_KEY="${ID_KEY:-id}"
PYTHON=$(afm_python "$ROOT")

run() {
  echo "[select_rl] $*"
  if [[ $DRY_RUN != true ]]; then "$@"; fi
}

if [[ "${SKIP_INFER:-0}" != "1" ]]; then
  MODEL="${MODEL:?set MODEL (served model name, or a model folder with BACKEND=hf), or SKIP_INFER=1}"
  TOKENIZER=$(afm_eval_tokenizer)  # the rule of inference/inference.sh (evaluation/tokenizer.sh)
  [[ $DRY_RUN == true ]] || mkdir -p "$(dirname "$SAMPLES")"
  infer=("$PYTHON" -m afm.cli infer --input "$QUESTIONS" --output "$SAMPLES" --backend "$BACKEND" --model "$MODEL"
         --tokenizer "$TOKENIZER" --prompt "$PROMPT" --n "$N_SAMPLES"
         --temperature "$TEMPERATURE" --top-p "$TOP_P" --top-k "$TOP_K" --concurrency "$CONCURRENCY"
         --q-key "$Q_KEY" --answer-key "$ANSWER_KEY" --id-key "$ID_KEY")
  # the rollout limits only when set: afm infer's defaults are AgentConfig's (one place)
  afm_limit_flags infer
  # BASE_URL only when set: its default is afm infer's (--base-url), written once.
  [[ -n ${BASE_URL:-} ]] && infer+=(--base-url "$BASE_URL")
  [[ -n "${TOOLS:-}" ]] && infer+=(--tools "$TOOLS")
  [[ -n "${TOOLS_CONFIG:-}" ]] && infer+=(--tools-config "$TOOLS_CONFIG")
  [[ -n "$SEED" ]] && infer+=(--seed "$SEED")
  # afm infer exits 1 when some trajectories failed; failed samples still count (as wrong) in the pass rate.
  run "${infer[@]}" || echo "[select_rl] afm infer reported failed samples; selecting on what was written" >&2
fi

select=("$PYTHON" -m afm.cli data select --questions "$QUESTIONS" --samples "$SAMPLES" --output "$OUTPUT"
        --mode "$MODE" --n "$N_SAMPLES" --threshold "$THRESHOLD" --scorer "$SCORER" --exclude-by "$EXCLUDE_BY"
        --seed "$SELECT_SEED" --data-source "$DATA_SOURCE" --prompt-key "$PROMPT_KEY" --ability "$ABILITY"
        --q-key "$Q_KEY" --a-key "$ANSWER_KEY" --id-key "$ID_KEY" --rates "${OUTPUT%.parquet}.rates.jsonl")
if [[ -n "$EXCLUDE" ]]; then
  read -r -a excl <<< "$EXCLUDE"
  select+=(--exclude "${excl[@]}")
fi
[[ -n "$MAX_QUESTIONS" ]] && select+=(--max-questions "$MAX_QUESTIONS")
[[ -n "${TOOLS:-}" ]] && select+=(--tools "$TOOLS")
run "${select[@]}"
