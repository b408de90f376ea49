#!/usr/bin/env bash
# Build llama.cpp's llama-server from the sources vendored in the pinned llama-cpp-python sdist
# (the same llama.cpp as Tandem's engine), for the tests of Tandem's remote backend and for
# users who want a server of the same version. Cached like the wheel; prints the binary's path.
# Another of llama.cpp's tools by name, for benchmarks against it (llama-speculative-simple).
#   bash packaging/build-llama-server.sh            # CPU build
#   CMAKE_ARGS="-DGGML_CUDA=on" bash packaging/build-llama-server.sh
#   bash packaging/build-llama-server.sh llama-speculative-simple
#   LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz bash packaging/build-llama-server.sh   # offline
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_VERSION=0.3.36
TARGET=${1:-llama-server}
case "$TARGET" in llama-server) examples=OFF ;; llama-speculative-simple|llama-lookup) examples=ON ;;
  *) echo "unknown tool $TARGET" >&2; exit 2 ;; esac
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python
flags="${CMAKE_ARGS:-}"
if [ "$(uname -m)" = "x86_64" ] && grep -q amx_tile /proc/cpuinfo 2>/dev/null; then
  # see install.sh: AMX kernels crash on VMs that report AMX without supporting it
  flags="$flags -DCMAKE_C_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16 -DCMAKE_CXX_FLAGS=-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16"
fi
sha256() { if command -v sha256sum >/dev/null; then sha256sum; else shasum -a 256; fi; }
suffix=$([ "$TARGET" = llama-server ] && echo server || echo "$TARGET")  # the server's cache key as it was
key=$(printf '%s|%s|%s|%s' "$LLAMA_VERSION" "$flags" "$(uname -m)" "$suffix" | sha256 | cut -c1-16)
out="$HOME/.cache/tandem/llama-server/$key"
if [ -x "$out/$TARGET" ]; then echo "$out/$TARGET"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "Building $TARGET $LLAMA_VERSION for this machine (a few minutes, once)..." >&2
if [ -n "${LLAMA_SDIST:-}" ]; then  # the pinned sdist already on disk (a machine without network)
  cp "$LLAMA_SDIST" "$work/llama_cpp_python-$LLAMA_VERSION.tar.gz"
else
  "$PY" -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$LLAMA_VERSION" >&2
fi
tar -xzf "$work"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$work"
src="$work/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp"
# no web UI (nothing is fetched during the build), no HTTPS, static: one file to cache
# CMake (and Ninja) from PyPI where the system has none, as llama-cpp-python's own build does
CMAKE=$(command -v cmake || true)
if [ -z "$CMAKE" ]; then
  "$PY" -m pip install -q cmake ninja >&2
  CMAKE="$(dirname "$PY")/cmake"
  export PATH="$(dirname "$PY"):$PATH"
fi
gen=""
command -v ninja >/dev/null && gen="-G Ninja"
eval "\"$CMAKE\"" -S "$src" -B "$work/build" $gen -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=$examples -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF "$flags" >&2
"$CMAKE" --build "$work/build" --target "$TARGET" -j "$(nproc 2>/dev/null || sysctl -n hw.ncpu)" >&2
mkdir -p "$out"
cp "$work/build/bin/$TARGET" "$out/$TARGET.tmp"
mv "$out/$TARGET.tmp" "$out/$TARGET"
echo "$out/$TARGET"
