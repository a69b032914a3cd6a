#!/usr/bin/env bash
# Web-agent benchmarks (GAIA-103 text, BrowseComp, HLE-500, WebWalker) with the paper's sampling (temperature 1.0,
# top_p 0.9, top_k 20; 3 samples for Pass@1 / Bo3 / Pass@3). Needs the search and crawl servers
# (server/start_servers.sh) and a judge (GRM_BASE_URL, GRM_MODEL_NAME in environment.sh; without one answers are
# scored by EM/F1 and the report says so). Resumable: rerun the same command after a crash.
#
#   MODEL=AFM-WebAgent-32B-RL TOKENIZER=/models/AFM-WebAgent-32B-RL RUN_DIR=runs/eval/web bash evaluation/eval_web_agent.sh
#   bash evaluation/eval_web_agent.sh --help     # every knob; DRY_RUN=1 prints the command only
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
afm_eval_help "${BASH_SOURCE[0]}" "$@"
RUN_DIR="${RUN_DIR:-$ROOT/runs/eval/web_agent}"
BENCHMARKS="${BENCHMARKS:-gaia,browsecomp,hle,webwalker}"
N_SAMPLES="${N_SAMPLES:-3}"
run_eval "$BENCHMARKS" "$@"
