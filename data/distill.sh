#!/usr/bin/env bash
# Multi-agent distillation end to end: teacher runs -> SFT filters -> CoA SFT dataset (LLaMA-Factory json).
#
#   TEACHER_BASE_URL=https://api.example.com/v1 TEACHER_MODEL=gpt-4.1 TEACHER_API_KEY=sk-... \
#   INPUT=data/questions.jsonl OUT_DIR=runs/distill/web TOOLS=web_search,crawl_page \
#   bash data/distill.sh
#
# Steps (each prints the command it runs):
#   1. afm data distill  -> $OUT_DIR/runs.jsonl (+ runs.summary.json: tokens per role/model, calls, tool calls)
#   2. afm data filter   -> $OUT_DIR/kept.jsonl (+ filter_report.json)          skipped with SKIP_FILTER=1
#   3. afm data convert  -> $OUT_DIR/sft/$DATASET_NAME.json + dataset_info.json + report + a copy of the run log
# Step 1 is resumable: rerun the same command after a crash or Ctrl-C and finished runs are kept, not redone.
#
# Teacher endpoint (read by configs/data/teacher.yaml; any role may use its own model/URL):
#   TEACHER_BASE_URL  OpenAI-compatible base URL ending in /v1   (default http://127.0.0.1:8000/v1)
#   TEACHER_MODEL     model name for every role                  (default teacher)
#   TEACHER_API_KEY   API key (sent as a bearer token; never written to logs)
#   PLANNER_MODEL PLANNER_BASE_URL TOOL_AGENT_MODEL CODE_AGENT_MODEL REFLECTOR_MODEL ANSWERER_MODEL
#   VERIFIER_MODEL VERIFIER_BASE_URL   per-role overrides (empty = TEACHER_*)
#   TEACHER_CONFIG    the teacher YAML (default configs/data/teacher.yaml); TEACHER_SET="k=v k2=v2" for --set
# Run:
#   INPUT (required) .jsonl/.json/.parquet questions; Q_KEY ANSWER_KEY ID_KEY name their fields (question/answer/id),
#   as in inference/inference.sh and data/select_rl.sh (A_KEY, this script's former name, is an alias of ANSWER_KEY)
#   OUT_DIR (runs/distill/<input name>)  RUNS_PER_QUESTION (1)  CONCURRENCY (8)  LIMIT (all questions)
#   TASK (qa | web | math | code; default qa)  DATA_SOURCE (= TASK)  PROMPT_KEY (auto)
#   TOOLS (e.g. web_search,crawl_page; default: the prompt's tools)  TOOLS_CONFIG (tools YAML, e.g.
#   configs/tools/code_executor.yaml; web/wiki tools reach the servers of environment.sh when not configured)
#   PRICE ("model=IN,OUT" USD per 1M tokens, for the cost line)
# Filter and conversion:
#   SKIP_FILTER (0)  FILTER_ARGS (extra flags for afm data filter)  DATASET_NAME (afm_distill_sft)
#   SFT_FORMAT (alpaca | sharegpt | both; default alpaca)  PROMPT_STYLE (user | system; default user)
#   DRY_RUN=1 (or true/yes/on) prints the commands only; --help prints this text.
# Relative paths you give (INPUT, OUT_DIR, TEACHER_CONFIG, TOOLS_CONFIG) are taken from the current directory;
# the defaults are under the repo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

INPUT="${INPUT:?set INPUT to a .json/.jsonl/.parquet question file}"
OUT_DIR=$(afm_abs "${OUT_DIR:-$ROOT/runs/distill/$(basename "${INPUT%.*}")}")
TEACHER_CONFIG=$(afm_abs "${TEACHER_CONFIG:-$ROOT/configs/data/teacher.yaml}")
TEACHER_SET="${TEACHER_SET:-}"
RUNS_PER_QUESTION="${RUNS_PER_QUESTION:-1}"
CONCURRENCY="${CONCURRENCY:-8}"
LIMIT="${LIMIT:-}"
TASK="${TASK:-qa}"
DATA_SOURCE="${DATA_SOURCE:-}"
PROMPT_KEY="${PROMPT_KEY:-}"
TOOLS="${TOOLS:-}"
TOOLS_CONFIG="${TOOLS_CONFIG:-}"
Q_KEY="${Q_KEY:-question}"
# A_KEY: the name this script used before; ANSWER_KEY wins when both are set.
if [[ -n ${A_KEY:-} && -n ${ANSWER_KEY:-} && $A_KEY != "$ANSWER_KEY" ]]; then
  afm_warn "A_KEY=$A_KEY is ignored: ANSWER_KEY=$ANSWER_KEY is also set (A_KEY is the former name of ANSWER_KEY)"
fi
ANSWER_KEY="${ANSWER_KEY:-${A_KEY:-answer}}"
ID_KEY="${ID_KEY:-id}"
PRICE="${PRICE:-}"
SKIP_FILTER="${SKIP_FILTER:-0}"
FILTER_ARGS="${FILTER_ARGS:-}"
DATASET_NAME="${DATASET_NAME:-afm_distill_sft}"
SFT_FORMAT="${SFT_FORMAT:-alpaca}"
PROMPT_STYLE="${PROMPT_STYLE:-user}"
PYTHON=$(afm_python "$ROOT")
export TEACHER_BASE_URL="${TEACHER_BASE_URL:-}" TEACHER_MODEL="${TEACHER_MODEL:-}"

run() {
  echo "[distill] $*"
  if [[ $DRY_RUN != true ]]; then "$@"; fi
}

[[ $DRY_RUN == true ]] || mkdir -p "$OUT_DIR"
RUNS="$OUT_DIR/runs.jsonl"
KEPT="$OUT_DIR/kept.jsonl"

distill=("$PYTHON" -m afm.cli data distill --input "$INPUT" --output "$RUNS" --config "$TEACHER_CONFIG"
         --runs-per-question "$RUNS_PER_QUESTION" --concurrency "$CONCURRENCY" --task "$TASK"
         --q-key "$Q_KEY" --a-key "$ANSWER_KEY" --id-key "$ID_KEY")
[[ -n "$LIMIT" ]] && distill+=(--limit "$LIMIT")
[[ -n "$DATA_SOURCE" ]] && distill+=(--data-source "$DATA_SOURCE")
[[ -n "$PROMPT_KEY" ]] && distill+=(--prompt-key "$PROMPT_KEY")
[[ -n "$TOOLS" ]] && distill+=(--tools "$TOOLS")
[[ -n "$TOOLS_CONFIG" ]] && distill+=(--tools-config "$TOOLS_CONFIG")
[[ -n "$PRICE" ]] && distill+=(--price "$PRICE")
for kv in $TEACHER_SET; do distill+=(--set "$kv"); done
run "${distill[@]}"

if [[ "$SKIP_FILTER" == "1" ]]; then
  KEPT="$RUNS"
else
  # shellcheck disable=SC2086  # FILTER_ARGS is a list of flags
  run "$PYTHON" -m afm.cli data filter --input "$RUNS" --output "$KEPT" --report "$OUT_DIR/filter_report.json" $FILTER_ARGS
fi

run "$PYTHON" -m afm.cli data convert --input "$KEPT" --output-dir "$OUT_DIR/sft" --name "$DATASET_NAME" \
  --format "$SFT_FORMAT" --prompt-style "$PROMPT_STYLE"
echo "[distill] done: dataset_dir=$OUT_DIR/sft dataset=$DATASET_NAME (add both to your afm-sft config)"
