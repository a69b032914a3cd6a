# shellcheck shell=bash
# afm_pip_install PY ARGS...: `pip install ARGS` into the virtual environment of the interpreter PY, through uv or pip
# (AFM_INSTALLER). Sourced by scripts/install.sh and scripts/install_vllm.sh, never run.
#
# Why uv: pip took 157 s for .venv and 236 s for .venv-rl with vLLM on a fresh 2-core machine, a fifth of CI's time;
# uv resolves the same versions (`pip freeze` of both environments compared, benchmarks/RESULTS.md, twenty-fourth
# session) and installs them in parallel, compiling the bytecode on every core. uv reads neither pip.conf nor PIP_*
# variables, so pip's own index settings (`pip config list`: index-url, extra-index-url, find-links; a mirror, a
# folder of local wheels) are handed to it, with pip's rule for several indexes (the best version from any of them).
# Where uv cannot be installed or fails, pip does the install.
#
# Knobs: AFM_INSTALLER (uv | pip; default uv; "none" environments, AFM_VENV=none, always use pip: uv would need
# --system there), AFM_UV_VERSION (the uv release installed into the environment with pip), AFM_COMPILE_BYTECODE
# (1, the default: compile every installed module, as pip does; 0: leave it to the first process that imports each
# module, which scripts/test.sh sets for its own installs).

AFM_UV_VERSION=${AFM_UV_VERSION:-0.13.9}

# afm_uv_for PY: the path of uv in PY's environment, installed there with pip when missing or of another version;
# fails when it cannot be had.
afm_uv_for() {
  local py=$1 uv
  uv="$(dirname "$py")/uv"
  if [[ ! -x $uv || "$("$uv" --version 2>/dev/null)" != "uv $AFM_UV_VERSION"* ]]; then
    "$py" -m pip install -q --disable-pip-version-check "uv==$AFM_UV_VERSION" >/dev/null 2>&1 || return 1
  fi
  [[ -x $uv ]] && echo "$uv"
}

# afm_pip_index_args PY: uv flags for pip's index settings as PY's pip sees them (its config files and PIP_*), one per
# line.
afm_pip_index_args() {
  local key value url
  "$1" -m pip config list 2>/dev/null | while IFS='=' read -r key value; do
    value=${value#\'} value=${value%\'}
    case "$key" in
      *.index-url) echo "--index-url=$value" ;;
      *.extra-index-url) for url in $value; do echo "--extra-index-url=$url"; done ;;
      *.find-links) for url in $value; do echo "--find-links=$url"; done ;;
    esac
  done | awk '!seen[$0]++'
}

afm_pip_install() {
  local py=$1 uv
  shift
  local installer=${AFM_INSTALLER:-uv}
  [[ $installer == uv || $installer == pip ]] || afm_die "AFM_INSTALLER must be uv or pip (got '$installer')"
  if [[ $installer == uv && -f "$(dirname "$py")/../pyvenv.cfg" ]]; then
    if uv=$(afm_uv_for "$py"); then
      local index=() compile=(--compile-bytecode)
      [[ ${AFM_COMPILE_BYTECODE:-1} == 0 ]] && compile=()
      mapfile -t index < <(afm_pip_index_args "$py")
      # --compile-bytecode: as pip does. Without it an environment with PYTHONDONTWRITEBYTECODE=1 (this machine's, and
      # so CI's) compiles every module it imports in every process: the test suite took 1.84x the CPU (scripts/test.sh
      # turns it off for its installs and lets the suite's first importer write each .pyc instead)
      if "$uv" pip install --python "$py" "${compile[@]}" --index-strategy unsafe-best-match "${index[@]}" "$@"; then
        return 0
      fi
      echo "[install] uv could not install $*: pip does it" >&2
    else
      echo "[install] uv $AFM_UV_VERSION could not be installed: pip does the install" >&2
    fi
  fi
  local no_compile=()
  [[ ${AFM_COMPILE_BYTECODE:-1} == 0 ]] && no_compile=(--no-compile)
  "$py" -m pip install --disable-pip-version-check "${no_compile[@]}" "$@"
}
