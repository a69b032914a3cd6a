#!/usr/bin/env bash
# Install what the tests need (scripts/install.sh: .venv with CPU torch, LLaMA-Factory, pytest) and run them.
#   bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
if [[ "${AFM_VENV:-.venv}" == "none" ]]; then PY="${PYTHON:-python3}"; else PY="${AFM_VENV:-.venv}/bin/python"; fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$PY" -m pytest "$@"
