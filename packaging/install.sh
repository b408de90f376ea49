#!/usr/bin/env bash
# Install Tandem into ./.venv (created if missing).
#   bash packaging/install.sh          # the app
#   bash packaging/install.sh --dev    # the app + test tools, the small real test model and llama-server
# llama-cpp-python is compiled from source for this machine (a few minutes, once), with Tandem's
# patches to its vendored llama.cpp (packaging/llama-cpp/*.patch): the wheel is kept in
# ~/.cache/tandem/wheels, keyed by the build flags and the patches, and reused afterwards.
# Extra llama.cpp build flags go in CMAKE_ARGS, e.g. CMAKE_ARGS="-DGGML_CUDA=on" (see README).
# LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz builds from the pinned sdist on disk (offline).
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_VERSION=0.3.36
PY=${PYTHON:-python3}
extras=""
[ "${1:-}" = "--dev" ] && extras="[test]"

# Python 3.11 or newer (the MCP client uses its exception groups): said at once, not after minutes of compiling
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "Tandem needs Python 3.11 or newer; $PY is $("$PY" --version 2>&1 || echo 'missing'). Run: PYTHON=python3.11 bash packaging/install.sh" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip wheel

# Intel AMX kernels (ggml's -march=native picks them on Xeon CPUs that report AMX) crash with
# SIGILL on virtual machines that report AMX without supporting it. Consumer CPUs have no AMX,
# so leaving it out costs desktop users nothing.
flags="${CMAKE_ARGS:-}"
if [ "$(uname -m)" = "x86_64" ] && grep -q amx_tile /proc/cpuinfo 2>/dev/null; then
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  flags="$flags -DCMAKE_C_FLAGS='$noamx' -DCMAKE_CXX_FLAGS='$noamx'"
fi
sha256() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi; }  # macOS: shasum
patches=$(cat packaging/llama-cpp/*.patch | sha256 | cut -c1-16)
key=$(printf '%s|%s|%s|%s' "$LLAMA_VERSION" "$flags" "$(uname -m)" "$patches" | sha256 | cut -c1-16)
wheels="$HOME/.cache/tandem/wheels/$key"
if ! ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl >/dev/null 2>&1; then
  echo "Building llama-cpp-python $LLAMA_VERSION for this machine (a few minutes, once)..."
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if [ -n "${LLAMA_SDIST:-}" ]; then
    cp "$LLAMA_SDIST" "$work/"
  else
    .venv/bin/python -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$LLAMA_VERSION"
  fi
  tar -xzf "$work"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$work"
  src="$work/llama_cpp_python-$LLAMA_VERSION"
  for p in "$PWD"/packaging/llama-cpp/*.patch; do
    if command -v patch >/dev/null; then patch -s -p1 -d "$src/vendor/llama.cpp" < "$p"
    else (cd "$src/vendor/llama.cpp" && git apply -p1 "$p"); fi
  done
  mkdir -p "$wheels"
  CMAKE_ARGS="$flags" .venv/bin/python -m pip wheel -q --no-deps --no-cache-dir -w "$wheels" "$src"
fi
wheel=$(ls "$wheels"/llama_cpp_python-"$LLAMA_VERSION"-*.whl | head -n 1)
.venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel"
echo "$wheel" > .venv/llama-wheel.txt  # for packaging/check-wheel.sh
.venv/bin/python -m pip install -q -e ".$extras"
if [ -n "$extras" ]; then
  # the remote-backend tests chat with a real llama-server of the same llama.cpp (cached)
  bash packaging/build-llama-server.sh > /dev/null
fi
echo "Tandem installed: run .venv/bin/tandem"
