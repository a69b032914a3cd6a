#!/usr/bin/env bash
# The GPU checks a session runs when it is lent a CUDA machine, in one go (device time is scarce):
#   1. bench_sft_gpu.py   SFT tokens/s with vs without observation masking (LLaMA-Factory run_exp + afm overlay)
#   2. bench_hf_rollout.py  the `hf` rollout engine, batched vs one at a time, and its exactness check
# Usage: bash benchmarks/gpu_checks.sh [OUT_DIR]      (OUT_DIR default benchmarks/out/gpu_checks)
# On a machine whose Python lacks LLaMA-Factory's pinned stack, put wheels in .whl/ first (see benchmarks/README.md):
# they are installed into a private folder, never over the machine's own packages.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT_DIR=${1:-benchmarks/out/gpu_checks}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/afm_site .whl/*.whl \
    || { echo "gpu_checks: installing .whl/ failed"; exit 1; }
  export PYTHONPATH=/tmp/afm_site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export DISABLE_VERSION_CHECK=${DISABLE_VERSION_CHECK:-1}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; "$PY" -V
  "$PY" -c "import torch, transformers, llamafactory; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'llamafactory', llamafactory.__version__)"; } 2>&1 | tee "$OUT_DIR/machine.txt"
rc=0
timeout "${SFT_TIMEOUT:-330}" "$PY" benchmarks/bench_sft_gpu.py --out benchmarks/out/gpu ${SFT_ARGS:-} 2>&1 \
  | tee "$OUT_DIR/bench_sft_gpu.log" || rc=1
cp benchmarks/out/gpu/bench_sft_gpu.json "$OUT_DIR/" 2>/dev/null
tail -n 40 benchmarks/out/gpu/*.log 2>/dev/null > "$OUT_DIR/sft_child_tail.log"
timeout "${HF_TIMEOUT:-150}" "$PY" benchmarks/bench_hf_rollout.py --device cuda ${HF_ARGS:-} 2>&1 \
  | tee "$OUT_DIR/bench_hf_rollout.log" || rc=1
exit $rc
