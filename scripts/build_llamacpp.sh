#!/usr/bin/env bash
# Build llama.cpp's `llama-server` for CPU from a package-registry source, cached by version.
#
#   bash scripts/build_llamacpp.sh                 # prints the binary's path on its last line
#   AFM_ENGINES=llamacpp bash scripts/install.sh   # the same, as part of the install
#   DRY_RUN=1 bash scripts/build_llamacpp.sh       # say what would be built and where (or --dry-run)
#   bash scripts/build_llamacpp.sh --help          # this text
#
# The source is the PyPI sdist of llama-cpp-python (it vendors llama.cpp, MIT licence); nothing comes from a model
# hub or GitHub. Only the server binary is built, and it is run directly (evaluation/serve_model.sh ENGINE=llamacpp),
# not through a Python wrapper, so SIGTERM reaches it.
# Portable flags: GGML_NATIVE=OFF with AVX2/FMA/F16C only. With GGML_NATIVE=ON on a VM that reports AMX, every
# generation segfaulted in ggml_backend_amx_mul_mat, and some machines here are AVX2-only AMD EPYC.
# The web UI is off (its prebuilt copy would come from a hub), and so is HTTPS (the server listens on 127.0.0.1).
#
# Knobs (environment variables; the plain defaults are listed under "Defaults" below):
#   AFM_LLAMACPP_VERSION           llama-cpp-python version whose vendored llama.cpp is built
#   AFM_LLAMACPP_HOME     ~/.cache/afm/llamacpp   cache root; the binary is <home>/<version>/bin/llama-server
#   AFM_LLAMACPP_JOBS     nproc    parallel compile jobs
#   PYTHON                         the python whose pip downloads the sdist
# A finished build is reused; delete its folder to rebuild. Needs cmake and a C++ compiler; on 2 cores it takes
# 15-45 minutes (43 min measured with the machine under a load of ~9), then nothing.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=knobs.sh
source "$ROOT/scripts/knobs.sh"
AFM_DEFAULTS=(AFM_LLAMACPP_VERSION=0.3.36 PYTHON=python3)
afm_script_start "${BASH_SOURCE[0]}" "$@"
set -- "${AFM_ARGS[@]}"
(( $# == 0 )) || afm_die "unknown argument '$1' (knobs are environment variables; see --help)"
DRY_RUN=$(afm_bool DRY_RUN "${DRY_RUN:-0}")
afm_defaults AFM_DEFAULTS

version=$AFM_LLAMACPP_VERSION
home="${AFM_LLAMACPP_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/afm/llamacpp}"
jobs="${AFM_LLAMACPP_JOBS:-$(nproc)}"
python=$PYTHON
prefix="$home/$version"
binary="$prefix/bin/llama-server"

if [[ -x "$binary" ]]; then
  echo "[llamacpp] cached: $binary"
  echo "$binary"
  exit 0
fi
if [[ $DRY_RUN == true ]]; then
  echo "[llamacpp] would build llama-server from llama-cpp-python==$version (GGML_NATIVE=OFF, AVX2) into:"
  echo "$binary"
  exit 0
fi
for tool in cmake c++ tar; do
  command -v "$tool" >/dev/null 2>&1 || afm_die "'$tool' is needed to build llama-server"
done

mkdir -p "$home"
work="$(mktemp -d "$home/build-$version.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
echo "[llamacpp] downloading the llama-cpp-python==$version sdist from the package index"
"$python" -m pip download --disable-pip-version-check --quiet --no-deps --no-binary :all: \
  "llama-cpp-python==$version" -d "$work" || afm_die "could not download the llama-cpp-python==$version sdist"
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || afm_die "no vendored llama.cpp in the sdist ($src)"

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
echo "[llamacpp] configuring (GGML_NATIVE=OFF, AVX2; $jobs jobs)"
cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_BACKEND_DL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_APP=OFF \
  >"$work/configure.log" 2>&1 || { tail -30 "$work/configure.log" >&2; afm_die "cmake configure failed"; }
echo "[llamacpp] compiling llama-server"
cmake --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; afm_die "build failed"; }

rm -rf "$prefix.tmp"
mkdir -p "$prefix.tmp/bin"
cp "$work/build/bin/llama-server" "$prefix.tmp/bin/"
cp "$src/LICENSE" "$prefix.tmp/LICENSE-llama.cpp"
echo "llama-cpp-python==$version (vendored llama.cpp), GGML_NATIVE=OFF AVX2, built in $((SECONDS - start)) s" \
  > "$prefix.tmp/BUILD_INFO"
rm -rf "$prefix" && mv "$prefix.tmp" "$prefix"
echo "[llamacpp] built in $((SECONDS - start)) s: $binary"
echo "$binary"
