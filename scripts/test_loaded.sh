#!/usr/bin/env bash
# The test suite on a deliberately busy machine: AFM_LOAD_PROCS busy-loop processes run beside
# `bash scripts/test.sh "$@"` and are stopped when it ends. A test that passes alone but fails here races the
# machine's load (a wall-clock deadline on the behaviour, a fixed poll window): fix the test, not the load.
#
#   bash scripts/test_loaded.sh                       # the whole suite beside the default number of loops
#   AFM_LOAD_PROCS=8 bash scripts/test_loaded.sh tests/test_servers_crawl.py -q
#
# The busy loops run at the default nice level, like the other jobs of a shared machine.
set -euo pipefail
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  exit 0
fi
cd "$(dirname "$0")/.."
procs="${AFM_LOAD_PROCS:-4}"
[[ "$procs" =~ ^[0-9]+$ ]] || { echo "AFM_LOAD_PROCS must be a number, got '$procs'" >&2; exit 2; }
pids=()
stop_load() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < procs; i++)); do
  ( trap - INT TERM; while :; do :; done ) &
  pids+=("$!")
done
echo "[test_loaded] $procs busy loops on $(nproc) cores (pids ${pids[*]}); the suite runs beside them"
status=0
bash scripts/test.sh "$@" || status=$?
exit "$status"
