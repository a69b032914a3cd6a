#!/usr/bin/env bash
# Code and math agents (AIME24/25, MATH500, AMC23, OlympiadBench, LiveCodeBench v4/v5, CodeContests) with the
# sandboxed code tool, avg@k over N_SAMPLES samples as in the paper. LiveCodeBench private tests are read from
# LIVECODEBENCH_TESTCASES_DIR (python -m afm.eval.lcb_testcases writes it).
#
#   MODEL=AFM-CodeAgent-32B-RL TOKENIZER=/models/... RUN_DIR=runs/eval/code bash evaluation/eval_code_agent.sh
#   bash evaluation/eval_code_agent.sh --help     # every knob; DRY_RUN=1 prints the command only
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RUN_DIR="${RUN_DIR:-$ROOT/runs/eval/code_agent}"
BENCHMARKS="${BENCHMARKS:-aime24,aime25,math500,amc23,olympiadbench,livecodebench_v4,livecodebench_v5}"
N_SAMPLES="${N_SAMPLES:-16}"
run_eval "$BENCHMARKS" "$@"
