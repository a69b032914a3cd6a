#!/usr/bin/env bash
# Multi-hop QA (NQ, TriviaQA, PopQA, HotpotQA, 2Wiki, MuSiQue, Bamboogle) with the wiki retrieval server
# (WIKI_RAG_SERVER_URL). Scored by the judge when configured, else EM/F1.
#
#   MODEL=AFM-MHQA-Agent-7B-RL TOKENIZER=/models/... RUN_DIR=runs/eval/mhqa bash evaluation/eval_mhqa.sh
#   bash evaluation/eval_mhqa.sh --help     # every knob; DRY_RUN=1 prints the command only
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RUN_DIR="${RUN_DIR:-$ROOT/runs/eval/mhqa}"
BENCHMARKS="${BENCHMARKS:-nq,triviaqa,popqa,hotpotqa,2wikimultihopqa,musique,bamboogle}"
run_eval "$BENCHMARKS" "$@"
