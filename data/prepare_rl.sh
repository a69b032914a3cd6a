#!/usr/bin/env bash
# Build the RL parquets that experiments/train_dapo_*_agent.sh read (data/rl/<task>_{train,val}.parquet) from
# question/answer files, with `afm data rl` (a report of what was dropped and why lands next to each parquet).
#
#   bash data/prepare_rl.sh mhqa     # NQ + HotpotQA (Search-R1 style)      -> data/rl/mhqa_{train,val}.parquet
#   bash data/prepare_rl.sh web      # web questions, judged by the LLM     -> data/rl/web_{train,val}.parquet
#   bash data/prepare_rl.sh code     # code problems with tests (+ math)    -> data/rl/code_{train,val}.parquet
#   bash data/prepare_rl.sh demo     # tiny built-in examples of all three, offline -> $OUT_DIR/demo_*.parquet
#   DRY_RUN=1 bash data/prepare_rl.sh mhqa    # print the commands only (DRY_RUN=1/true/yes/on)
#   bash data/prepare_rl.sh --help            # this text
#
# Input files (.jsonl, .json or .parquet; one object per question). Knobs (the script's own defaults are listed
# under "Defaults" below; AGENT_NAME unset passes no flag, afm data rl's default applies):
#   RAW_DIR       <repo>/data/raw   where the inputs below are
#   OUT_DIR       <repo>/data/rl    where the parquets go (what experiments/train_*.sh read by default)
#   VAL_FRACTION  share of the training questions held out for validation when no *_VAL file exists
#   AGENT_NAME    verl agent loop of the rows ("none" = verl's default_agent_loop)
#   AFM           afm           the afm command (falls back to .venv/bin/afm, .venv-rl/bin/afm, then $PYTHON -m afm.cli)
#   MAX_PROMPT_TOKENS + TOKENIZER   drop prompts longer than the training scripts' data.max_prompt_length
#
#   mhqa  NQ_TRAIN=$RAW_DIR/nq_train.jsonl  HOTPOTQA_TRAIN=$RAW_DIR/hotpotqa_train.jsonl
#         MHQA_VAL (optional; e.g. nq_test.jsonl) MHQA_A_KEY (the answer field; Search-R1's by default, "answer"
#         works too)
#         rows {"id", "question", "golden_answers": ["..", ".."]}; data sources nq / hotpotqa (EM reward);
#         prompt mhqa (wiki_search)
#   web   WEB_TRAIN=$RAW_DIR/web_train.jsonl  WEB_VAL=$RAW_DIR/web_val.jsonl (optional, e.g. GAIA text-103)
#         rows {"id", "question", "answer"}; data source search (LLM judge, EM/F1 without one); prompt web_agent
#   code  CODE_TRAIN=$RAW_DIR/code_train.jsonl  MATH_TRAIN=$RAW_DIR/math_train.jsonl (optional)
#         code rows {"id", "question", "tests": {"inputs": [..], "outputs": [..]} or LiveCodeBench's
#         {"stdin": [..], "expected_output": [..]} / {"functional": "..."}, "stdin": true?, "starter_code"?};
#         data source codecontests (unit tests in the sandbox), prompt code_agent.
#         math rows {"id", "question", "answer"}; data source math_dapo (Math-Verify), prompt math_agent; written
#         to data/rl/math_train.parquet: train on both with
#         TRAIN_FILES=data/rl/code_train.parquet,data/rl/math_train.parquet bash experiments/train_dapo_code_agent.sh
#
# The paper's RL sets also went through difficulty selection (drop questions a reference model already solves):
# see data/select_rl.sh, which writes the same parquet format.
set -euo pipefail
# Relative paths you give (RAW_DIR, OUT_DIR, NQ_TRAIN, ...) are taken from the current directory.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../scripts/knobs.sh
source "$ROOT/scripts/knobs.sh"
AFM_DEFAULTS=(VAL_FRACTION=0.01 MHQA_A_KEY=golden_answers)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
afm_defaults AFM_DEFAULTS

task=${1:-}
RAW_DIR=$(afm_abs "${RAW_DIR:-$ROOT/data/raw}")
OUT_DIR=$(afm_abs "${OUT_DIR:-$ROOT/data/rl}")
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")

if [[ -n ${AFM:-} ]]; then
  read -r -a afm <<< "$AFM"
elif command -v afm > /dev/null 2>&1; then
  afm=(afm)
elif [[ -x $ROOT/.venv/bin/afm ]]; then
  afm=("$ROOT/.venv/bin/afm")
elif [[ -x $ROOT/.venv-rl/bin/afm ]]; then
  afm=("$ROOT/.venv-rl/bin/afm")
else
  afm=("$(afm_python "$ROOT")" -m afm.cli)
fi
common=()
# AGENT_NAME only when set: afm data rl's default (afm/data/rl_parquet.py) is written once there
afm_flags_if_set common --agent-name AGENT_NAME
if [[ -n ${MAX_PROMPT_TOKENS:-} ]]; then
  [[ -n ${TOKENIZER:-} ]] || { echo "[afm] error: MAX_PROMPT_TOKENS needs TOKENIZER" >&2; exit 2; }
  common+=(--max-prompt-tokens "$MAX_PROMPT_TOKENS" --tokenizer "$TOKENIZER")
fi

need() {
  [[ -f $1 ]] || { echo "[afm] error: input not found: $1 ($2)" >&2; exit 2; }
}

run() {
  printf '[afm]'
  printf ' %q' "$@"
  printf '\n'
  [[ $DRY_RUN == true ]] || "$@"
}

# val_args NAME VAL_FILE: nothing when VAL_FILE exists (it is converted separately), else the held-out-fraction flags.
val_args() {
  local name=$1 val=$2
  if [[ -n $val && -f $val ]]; then
    return 0
  fi
  printf '%s\n' --val-fraction "$VAL_FRACTION" --val-output "$OUT_DIR/${name}_val.parquet"
}

mhqa() {
  local nq=${NQ_TRAIN:-$RAW_DIR/nq_train.jsonl} hotpot=${HOTPOTQA_TRAIN:-$RAW_DIR/hotpotqa_train.jsonl}
  local a_key=$MHQA_A_KEY val=${MHQA_VAL:-}
  need "$nq" "NQ training questions; set NQ_TRAIN"
  need "$hotpot" "HotpotQA training questions; set HOTPOTQA_TRAIN"
  local extra=()
  mapfile -t extra < <(val_args mhqa "$val")
  run "${afm[@]}" data rl --input "$nq" --input "$hotpot" --data-source nq --data-source hotpotqa \
    --prompt-key mhqa --ability qa --a-key "$a_key" --output "$OUT_DIR/mhqa_train.parquet" "${common[@]}" "${extra[@]}"
  if [[ -n $val && -f $val ]]; then
    run "${afm[@]}" data rl --input "$val" --data-source nq --prompt-key mhqa --ability qa --a-key "$a_key" \
      --split val --output "$OUT_DIR/mhqa_val.parquet" "${common[@]}"
  fi
}

web() {
  local train=${WEB_TRAIN:-$RAW_DIR/web_train.jsonl} val=${WEB_VAL:-$RAW_DIR/web_val.jsonl}
  need "$train" "web training questions; set WEB_TRAIN"
  local extra=()
  mapfile -t extra < <(val_args web "$val")
  run "${afm[@]}" data rl --input "$train" --data-source search --prompt-key web_agent --ability qa \
    --output "$OUT_DIR/web_train.parquet" "${common[@]}" "${extra[@]}"
  if [[ -f $val ]]; then
    run "${afm[@]}" data rl --input "$val" --data-source gaia --prompt-key web_agent --ability qa --split val \
      --output "$OUT_DIR/web_val.parquet" "${common[@]}"
  fi
}

code() {
  local train=${CODE_TRAIN:-$RAW_DIR/code_train.jsonl} math=${MATH_TRAIN:-$RAW_DIR/math_train.jsonl}
  need "$train" "code problems with tests; set CODE_TRAIN"
  run "${afm[@]}" data rl --input "$train" --data-source codecontests --prompt-key code_agent --ability code \
    --a-key tests --tools code --output "$OUT_DIR/code_train.parquet" "${common[@]}" \
    --val-fraction "$VAL_FRACTION" --val-output "$OUT_DIR/code_val.parquet"
  if [[ -f $math ]]; then
    run "${afm[@]}" data rl --input "$math" --data-source math_dapo --prompt-key math_agent --ability math \
      --tools code --output "$OUT_DIR/math_train.parquet" "${common[@]}"
  fi
}

demo() {
  local raw=$OUT_DIR/demo_raw
  mkdir -p "$raw"
  cat > "$raw/nq.jsonl" << 'EOF'
{"id": "nq-1", "question": "who wrote the novel frankenstein", "golden_answers": ["Mary Shelley", "Mary Wollstonecraft Shelley"]}
{"id": "nq-2", "question": "what is the capital of australia", "golden_answers": ["Canberra"]}
{"id": "nq-3", "question": "", "golden_answers": ["dropped: empty question"]}
EOF
  cat > "$raw/hotpotqa.jsonl" << 'EOF'
{"id": "hp-1", "question": "Which river flows through the city where the Eiffel Tower stands?", "golden_answers": ["Seine"]}
{"id": "hp-2", "question": "Who directed the film that won Best Picture in 1998?", "golden_answers": ["James Cameron"]}
EOF
  cat > "$raw/code.jsonl" << 'EOF'
{"id": "c-1", "question": "Read two integers a and b and print a + b.", "stdin": true, "tests": {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}}
{"id": "c-2", "question": "Read n and print n squared.", "stdin": true, "tests": {"inputs": ["3\n"], "outputs": ["9\n"]}}
EOF
  NQ_TRAIN=$raw/nq.jsonl HOTPOTQA_TRAIN=$raw/hotpotqa.jsonl MHQA_A_KEY=golden_answers VAL_FRACTION=0.25 mhqa
  CODE_TRAIN=$raw/code.jsonl MATH_TRAIN=/nonexistent VAL_FRACTION=0.5 code
}

case "$task" in
  mhqa | web | code | demo)
    mkdir -p "$OUT_DIR"
    "$task"
    ;;
  *)
    echo "usage: bash data/prepare_rl.sh mhqa|web|code|demo   (knobs in the comments at the top)" >&2
    exit 2
    ;;
esac
