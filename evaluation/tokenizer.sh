# shellcheck shell=bash
# evaluation/tokenizer.sh: the one rule for the tokenizer of inference/ and evaluation/ (sourced, not run; needs
# ROOT and scripts/knobs.sh). A served model name is not a tokenizer: the token budgets must be counted with the
# served model's own tokenizer, never a hub download guessed from its name.
#
#   1. TOKENIZER when set (a relative folder is taken from the current directory);
#   2. the model path evaluation/serve_model.sh recorded in <repo>/runs/serve/<MODEL>.model_path when it started
#      the server that serves MODEL;
#   3. AFM_MODEL_PATH (environment.sh);
#   4. MODEL itself with BACKEND=hf (a model folder);
#   otherwise stop with a message saying what to set.

# afm_served_record NAME: the file serve_model.sh writes for served model NAME.
afm_served_record() {
  printf '%s' "$ROOT/runs/serve/${1//\//_}.model_path"
}

# afm_eval_tokenizer: print the tokenizer to use (reads TOKENIZER, MODEL, BACKEND, AFM_MODEL_PATH).
afm_eval_tokenizer() {
  local record
  record=$(afm_served_record "${MODEL:-}")
  if [[ -n ${TOKENIZER:-} ]]; then
    if [[ -e $TOKENIZER ]]; then afm_abs "$TOKENIZER"; else printf '%s' "$TOKENIZER"; fi
  elif [[ -n ${MODEL:-} && -s $record ]]; then
    head -n 1 "$record"
  elif [[ -n ${AFM_MODEL_PATH:-} ]]; then
    if [[ -e $AFM_MODEL_PATH ]]; then afm_abs "$AFM_MODEL_PATH"; else printf '%s' "$AFM_MODEL_PATH"; fi
  elif [[ ${BACKEND:-} == hf && -n ${MODEL:-} ]]; then
    printf '%s' "$MODEL"
  else
    afm_die "set TOKENIZER to the model folder (or hub id) the server was started with, or AFM_MODEL_PATH;" \
      "evaluation/serve_model.sh records it for its served name, and MODEL=${MODEL:-} has no record"
  fi
}
