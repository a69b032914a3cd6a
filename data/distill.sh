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
# Teacher endpoint (read by configs/data/teacher.yaml, which holds the defaults; any role may use its own model/URL):
#   TEACHER_BASE_URL  OpenAI-compatible base URL ending in /v1
#   TEACHER_MODEL     model name for every role
#   TEACHER_API_KEY   API key (sent as a bearer token; never written to logs)
#   PLANNER_MODEL PLANNER_BASE_URL TOOL_AGENT_MODEL CODE_AGENT_MODEL REFLECTOR_MODEL ANSWERER_MODEL
#   VERIFIER_MODEL VERIFIER_BASE_URL   per-role overrides (empty = TEACHER_*)
#   TEACHER_CONFIG    the teacher YAML (default configs/data/teacher.yaml); TEACHER_SET="k=v k2=v2" for --set
# Run (a knob left unset passes no flag: the default of afm data distill / convert applies, written once there;
# their --help lists them):
#   INPUT (required) .jsonl/.json/.parquet questions; Q_KEY ANSWER_KEY ID_KEY name their fields, as in
#   inference/inference.sh and data/select_rl.sh (A_KEY, this script's former name, is an alias of ANSWER_KEY)
#   OUT_DIR (runs/distill/<input name>)  RUNS_PER_QUESTION  CONCURRENCY  LIMIT (unset: all questions)
#   TASK (qa | web | math | code)  DATA_SOURCE (= TASK)  PROMPT_KEY (auto)
#   TOOLS (e.g. web_search,crawl_page; unset: the prompt's tools)  TOOLS_CONFIG (tools YAML, e.g.
#   configs/tools/code_executor.yaml; web/wiki tools reach the servers of environment.sh when not configured)
#   PRICE ("model=IN,OUT" USD per 1M tokens, for the cost line)
# Filter and conversion:
#   SKIP_FILTER (1: skip step 2; the default is under "Defaults" below)  FILTER_ARGS (extra flags for afm data
#   filter)  DATASET_NAME  SFT_FORMAT (alpaca | sharegpt | both)  PROMPT_STYLE (user | system)
#   DRY_RUN=1 (or true/yes/on) prints the commands only; --help prints this text.
# Relative paths you give (INPUT, OUT_DIR, TEACHER_CONFIG, TOOLS_CONFIG) are taken from the current directory;
# the defaults are under the repo.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
AFM_DEFAULTS=(SKIP_FILTER=0)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

INPUT="${INPUT:?set INPUT to a .json/.jsonl/.parquet question file}"
OUT_DIR=$(afm_abs "${OUT_DIR:-$ROOT/runs/distill/$(basename "${INPUT%.*}")}")
TEACHER_CONFIG=$(afm_abs "${TEACHER_CONFIG:-$ROOT/configs/data/teacher.yaml}")
TEACHER_SET="${TEACHER_SET:-}"
# A_KEY: the name this script used before; ANSWER_KEY wins when both are set.
if [[ -n ${A_KEY:-} && -n ${ANSWER_KEY:-} && $A_KEY != "$ANSWER_KEY" ]]; then
  afm_warn "A_KEY=$A_KEY is ignored: ANSWER_KEY=$ANSWER_KEY is also set (A_KEY is the former name of ANSWER_KEY)"
fi
ANSWER_KEY="${ANSWER_KEY:-${A_KEY:-}}"
afm_defaults AFM_DEFAULTS
FILTER_ARGS="${FILTER_ARGS:-}"
PYTHON=$(afm_python "$ROOT")
export TEACHER_BASE_URL="${TEACHER_BASE_URL:-}" TEACHER_MODEL="${TEACHER_MODEL:-}"

run() {
  echo "[distill] $*"
  if [[ $DRY_RUN != true ]]; then "$@"; fi
}

[[ $DRY_RUN == true ]] || mkdir -p "$OUT_DIR"
RUNS="$OUT_DIR/runs.jsonl"
KEPT="$OUT_DIR/kept.jsonl"

distill=("$PYTHON" -m afm.cli data distill --input "$INPUT" --output "$RUNS" --config "$TEACHER_CONFIG")
# every knob only when set: afm data distill's defaults are written once, in afm/data/distill.py
afm_flags_if_set distill --runs-per-question RUNS_PER_QUESTION --concurrency CONCURRENCY --task TASK --q-key Q_KEY \
  --a-key ANSWER_KEY --id-key ID_KEY --limit LIMIT --data-source DATA_SOURCE --prompt-key PROMPT_KEY --tools TOOLS \
  --tools-config TOOLS_CONFIG --price PRICE
for kv in $TEACHER_SET; do distill+=(--set "$kv"); done
run "${distill[@]}"

if [[ "$SKIP_FILTER" == "1" ]]; then
  KEPT="$RUNS"
else
  # shellcheck disable=SC2086  # FILTER_ARGS is a list of flags
  run "$PYTHON" -m afm.cli data filter --input "$RUNS" --output "$KEPT" --report "$OUT_DIR/filter_report.json" $FILTER_ARGS
fi

convert=("$PYTHON" -m afm.cli data convert --input "$KEPT" --output-dir "$OUT_DIR/sft")
# afm data convert's defaults (afm/data/convert.py) only when set, as above
afm_flags_if_set convert --name DATASET_NAME --format SFT_FORMAT --prompt-style PROMPT_STYLE
run "${convert[@]}"
echo "[distill] done: dataset_dir=$OUT_DIR/sft dataset=${DATASET_NAME:-(the one its dataset_info.json names)}" \
  "(add both to your afm-sft config)"
