#!/usr/bin/env bash
# Web-agent benchmarks (GAIA-103 text, BrowseComp, HLE-500, WebWalker) with the paper's sampling (afm eval run's
# per-benchmark defaults; N_SAMPLES samples for Pass@1 / Bo3 / Pass@3). Needs the search and crawl servers
# (server/start_servers.sh) and a judge (GRM_BASE_URL, GRM_MODEL_NAME in environment.sh; without one answers are
# scored by EM/F1 and the report says so). Resumable: rerun the same command after a crash.
#
#   MODEL=AFM-WebAgent-32B-RL TOKENIZER=/models/AFM-WebAgent-32B-RL RUN_DIR=runs/eval/web bash evaluation/eval_web_agent.sh
#   bash evaluation/eval_web_agent.sh --help     # every knob; DRY_RUN=1 prints the command only
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RUN_DIR="${RUN_DIR:-$ROOT/runs/eval/web_agent}"
BENCHMARKS="${BENCHMARKS:-gaia,browsecomp,hle,webwalker}"
N_SAMPLES="${N_SAMPLES:-3}"
run_eval "$BENCHMARKS" "$@"
