#!/usr/bin/env bash
# RL difficulty selection as in the paper: sample a reference model N times per question (afm infer), then keep the
# questions it rarely solves and write the verl RL parquet (afm data select).
#
#   MODE=web QUESTIONS=data/rl/hotpotqa_train.jsonl OUTPUT=data/rl/web_train.parquet \
#   BASE_URL=http://127.0.0.1:10000/v1 MODEL=AFM-WebAgent-7B-SFT TOKENIZER=/models/AFM-WebAgent-7B-SFT \
#   EXCLUDE="data/AFM-WebAgent-SFT-Dataset/WebAgentSFTDataset.json" bash data/select_rl.sh
#
# Knobs (environment variables). A knob left unset passes no flag: the default of afm infer / afm data select
# applies, written once there (their --help lists them); the per-mode defaults are listed under "Defaults" below.
#   MODE             web | code (required). web: drop questions with pass rate r_q > THRESHOLD over N samples
#                    (the paper's N, threshold and EM scoring are afm's defaults); code: drop questions solved in
#                    all N samples (paper: N/N).
#   QUESTIONS        question file (.jsonl/.json/.parquet) with gold answers (required)
#   OUTPUT           RL parquet (default data/rl/<questions>_<mode>_selected.parquet)
#   SAMPLES          afm infer output (default runs/select/<questions>_<mode>_n<N>.jsonl; resumable)
#   SKIP_INFER=1     reuse existing SAMPLES, only select
#   MODEL, BASE_URL, TOKENIZER, BACKEND (openai|hf)   the reference model (see inference/inference.sh)
#   PROMPT           the system prompt key; TOOLS, TOOLS_CONFIG as for afm infer
#   N_SAMPLES, TEMPERATURE, TOP_P, TOP_K, SEED, CONCURRENCY   afm infer's sampling
#   MAX_TURNS, MAX_TOKENS_PER_TURN, MAX_RESPONSE_TOKENS, MAX_MODEL_LEN   the rollout limits (AgentConfig's)
#   THRESHOLD        web: the highest pass rate kept
#   SCORER           em | rewards (sandboxed tests / Math-Verify by data source); unset: the mode's
#   EXCLUDE          space-separated SFT files whose questions RL must not contain (web; the paper keeps SFT
#                    and RL disjoint there; code RL may overlap SFT, so leave it empty for code)
#   EXCLUDE_BY       both | id | question
#   MAX_QUESTIONS    random sample size of the remaining questions (unset: all);  SELECT_SEED its seed
#   DATA_SOURCE, ABILITY   the rows' fields (unset: the mode's);  PROMPT_KEY = PROMPT
#   Q_KEY, ANSWER_KEY, ID_KEY   the question, answer and id fields
# DRY_RUN=1 (or true/yes/on) prints the commands without running them; --help prints this text.
# Relative paths you give (QUESTIONS, OUTPUT, SAMPLES, EXCLUDE, TOOLS_CONFIG) are taken from the current directory;
# the defaults are under the repo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=../evaluation/tokenizer.sh
source "$ROOT/evaluation/tokenizer.sh"
# What afm infer needs per mode (afm data select applies the rest of the mode's rule itself)
AFM_DEFAULTS_BY=MODE
# shellcheck disable=SC2034  # both are read by name: afm_defaults "AFM_DEFAULTS_$MODE" and --help
AFM_DEFAULTS_web=(N_SAMPLES=32 PROMPT=web_agent) AFM_DEFAULTS_code=(N_SAMPLES=8 PROMPT=code_agent)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

MODE="${MODE:?set MODE to web or code}"
QUESTIONS="${QUESTIONS:?set QUESTIONS to a question file with gold answers}"
case "$MODE" in
  web | code) afm_defaults "AFM_DEFAULTS_$MODE" ;;
  *) echo "MODE must be web or code, got $MODE" >&2; exit 2 ;;
esac
NAME="$(basename "${QUESTIONS%.*}")"
OUTPUT=$(afm_abs "${OUTPUT:-$ROOT/data/rl/${NAME}_${MODE}_selected.parquet}")
SAMPLES=$(afm_abs "${SAMPLES:-$ROOT/runs/select/${NAME}_${MODE}_n${N_SAMPLES}.jsonl}")
PROMPT_KEY="${PROMPT_KEY:-$PROMPT}"
PYTHON=$(afm_python "$ROOT")

run() {
  echo "[select_rl] $*"
  if [[ $DRY_RUN != true ]]; then "$@"; fi
}

if [[ "${SKIP_INFER:-0}" != "1" ]]; then
  MODEL="${MODEL:?set MODEL (served model name, or a model folder with BACKEND=hf), or SKIP_INFER=1}"
  TOKENIZER=$(afm_eval_tokenizer)  # the rule of inference/inference.sh (evaluation/tokenizer.sh)
  [[ $DRY_RUN == true ]] || mkdir -p "$(dirname "$SAMPLES")"
  infer=("$PYTHON" -m afm.cli infer --input "$QUESTIONS" --output "$SAMPLES" --model "$MODEL" --tokenizer "$TOKENIZER"
         --prompt "$PROMPT" --n "$N_SAMPLES")
  # the knobs with afm infer's defaults only when set: those defaults are written once, in afm/agent/infer.py
  afm_flags_if_set infer --backend BACKEND --temperature TEMPERATURE --top-p TOP_P --top-k TOP_K \
    --concurrency CONCURRENCY --q-key Q_KEY --answer-key ANSWER_KEY --id-key ID_KEY
  # the rollout limits only when set: afm infer's defaults are AgentConfig's (one place)
  afm_limit_flags infer
  # BASE_URL only when set: its default is afm infer's (--base-url), written once.
  [[ -n ${BASE_URL:-} ]] && infer+=(--base-url "$BASE_URL")
  [[ -n "${TOOLS:-}" ]] && infer+=(--tools "$TOOLS")
  [[ -n "${TOOLS_CONFIG:-}" ]] && infer+=(--tools-config "$TOOLS_CONFIG")
  [[ -n "${SEED:-}" ]] && infer+=(--seed "$SEED")
  # afm infer exits 1 when some trajectories failed; failed samples still count (as wrong) in the pass rate.
  run "${infer[@]}" || echo "[select_rl] afm infer reported failed samples; selecting on what was written" >&2
fi

select=("$PYTHON" -m afm.cli data select --questions "$QUESTIONS" --samples "$SAMPLES" --output "$OUTPUT"
        --mode "$MODE" --n "$N_SAMPLES" --prompt-key "$PROMPT_KEY" --rates "${OUTPUT%.parquet}.rates.jsonl")
# the knobs with afm data select's defaults (the mode's rule, afm/data/difficulty.py) only when set
afm_flags_if_set select --threshold THRESHOLD --scorer SCORER --exclude-by EXCLUDE_BY --seed SELECT_SEED \
  --data-source DATA_SOURCE --ability ABILITY --q-key Q_KEY --a-key ANSWER_KEY --id-key ID_KEY
if [[ -n "${EXCLUDE:-}" ]]; then
  read -r -a excl <<< "$EXCLUDE"
  select+=(--exclude "${excl[@]}")
fi
[[ -n "${MAX_QUESTIONS:-}" ]] && select+=(--max-questions "$MAX_QUESTIONS")
[[ -n "${TOOLS:-}" ]] && select+=(--tools "$TOOLS")
run "${select[@]}"
