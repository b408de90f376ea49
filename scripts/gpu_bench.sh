#!/usr/bin/env bash
# Every Gemma 4 size's shaped pair on this machine's GPU, one table: Tandem's MTP and plain
# decoding at 1, 4 and 8 clients (tandem serve --parallel 8), the drafts accepted, and
# llama-server -np 8 on the same files (draft-mtp k=3, and no drafter). Made for a machine with
# an NVIDIA GPU and no network: the CUDA build of llama-cpp-python is a wheel carried in
# (LLAMA_WHEEL) or built from the pinned sdist on disk (LLAMA_SDIST, which also builds
# llama-server and gives the test pairs Gemma 4's real vocabulary).
#
#   LLAMA_SDIST=llama_cpp_python-0.3.36.tar.gz [LLAMA_WHEEL=llama_cpp_python-…-cuda.whl] \
#     bash scripts/gpu_bench.sh [--sizes "e4b 12b 26b-a4b 31b"] [--tokens 64] [--levels "1 4 8"] [--rounds 1]
#     [--out DIR] [--models DIR] [--ctx 8192]   # each server's context, shared by its 8 sequences
#   bash scripts/gpu_bench.sh --cpu [--sizes "e4b 26b-a4b"]   # the same on the CPU (tests run it)
#
# The pairs are the writer's shapes (engine/testmodels/writer.py: every size's layers, window,
# heads and experts, narrower than the real models); LLAMA_SERVER names a llama-server binary
# to use instead of building one. Prints the table and writes it, with each size's figures
# file (scripts/bench_concurrency.py --json), into --out; the pairs go to --models (default
# OUT/models), one folder per size, and are written only where missing. On a GPU machine whose
# llama-cpp-python has no GPU offload, the CUDA wheel is installed into the venv in its place.
set -euo pipefail
cd "$(dirname "$0")/.."
cpu=0 sizes="" tokens=64 levels="1 4 8" out="gpu-bench" rounds=1 models="" ctx=8192
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) cpu=1 ;;
    --sizes) sizes="$2"; shift ;;
    --tokens) tokens="$2"; shift ;;
    --levels) levels="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --out) out="$2"; shift ;;
    --models) models="$2"; shift ;;
    --ctx) ctx="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "gpu_bench.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || { echo "gpu_bench.sh: no $PY: run bash packaging/install.sh --dev first (or set PYTHON)" >&2; exit 2; }
TANDEM="$(dirname "$PY")/tandem"
if [ "$cpu" = 0 ] && [ -z "${LLAMA_WHEEL:-}${LLAMA_SDIST:-}" ] && ! "$TANDEM" --version | grep -q "GPU offload: yes"; then
  echo "gpu_bench.sh: this llama-cpp-python has no GPU offload: give LLAMA_WHEEL (a CUDA build) or LLAMA_SDIST (the pinned sdist, to build one), or run with --cpu" >&2
  exit 1
fi
mkdir -p "$out"
if [ -n "${LLAMA_SDIST:-}" ]; then  # the test pairs' real vocabulary comes from it too, offline
  mkdir -p "$out/llama-src"
  cp -n "$LLAMA_SDIST" "$out/llama-src/" 2>/dev/null || true
  export TANDEM_LLAMA_SRC="$PWD/$out/llama-src" LLAMA_SDIST
fi
if [ "$cpu" = 1 ]; then
  layers=0
  sizes=${sizes:-"e4b 26b-a4b"}
else
  layers=999  # every layer: llama-server reads -1 as "auto"
  sizes=${sizes:-"e4b 12b 26b-a4b 31b"}
  if ! "$TANDEM" --version | grep -q "GPU offload: yes"; then
    if [ -n "${LLAMA_WHEEL:-}" ]; then
      wheel="$LLAMA_WHEEL"
    else
      echo "Building llama-cpp-python with CUDA from $LLAMA_SDIST (minutes)..." >&2
      # no build isolation: the build tools (scikit-build-core, cmake) come from the venv, offline
      CMAKE_ARGS="-DGGML_CUDA=on" "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$out/wheel" "$LLAMA_SDIST"
      wheel=$(ls "$out"/wheel/llama_cpp_python-*.whl | head -n 1)
    fi
    "$PY" -m pip install -q --no-index --no-deps --force-reinstall "$wheel"
    "$TANDEM" --version | grep -q "GPU offload: yes" || { echo "gpu_bench.sh: $wheel has no GPU offload" >&2; exit 1; }
  fi
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_CUDA=on}"
fi
server=${LLAMA_SERVER:-$(bash packaging/build-llama-server.sh | tail -n 1)}
"$TANDEM" --version
for size in $sizes; do
  dir="${models:-$out/models}/$size"
  target="$dir/$size-target.gguf" drafter="$dir/$size-drafter-a1.gguf"
  [ -f "$target" ] && [ -f "$drafter" ] || "$TANDEM" make-test-models --size "$size" --agreement 1 "$dir" >&2
  echo "== $size" >&2
  # shellcheck disable=SC2086
  "$PY" scripts/bench_concurrency.py -m "$target" -d "$drafter" --levels $levels --max-tokens "$tokens" \
    --rounds "$rounds" --ctx "$ctx" --gpu-layers "$layers" --drafter-gpu-layers "$layers" --llama-server "$server" \
    --json "$out/$size.json" >&2
done
# shellcheck disable=SC2046
"$PY" scripts/gpu_bench_table.py $(for size in $sizes; do echo "$out/$size.json"; done) | tee "$out/table.md"
