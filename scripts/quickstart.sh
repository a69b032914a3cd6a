#!/usr/bin/env bash
# The main job on embedded defaults, offline on CPU: build a tiny Qwen2 model and tokenizer, write demo CoA
# trajectories, print the observation-masking report, run masked SFT then masked DPO through afm-sft (real
# LLaMA-Factory runs), print the loss curves.
#   bash scripts/quickstart.sh [--workdir runs/quickstart]
set -euo pipefail
# --help prints this text without installing anything.
if [[ "${1:-}" == "-h" || "${1:-}" == "--help" ]]; then
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
  echo "  Flags go to 'afm quickstart' (its --help lists them, with their defaults)."
  exit 0
fi
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [[ "${AFM_VENV:-.venv}" == "none" ]]; then AFM=afm; else AFM="${AFM_VENV:-.venv}/bin/afm"; fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$AFM" quickstart "$@"
