#!/usr/bin/env bash
# Smoke test of the Linux bundle: it starts, opens its window under Xvfb, loads the synthetic
# tiny models and answers a prompt. Builds the bundle first unless dist/Tandem exists.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x dist/Tandem/tandem ] || bash packaging/build-linux.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dist/Tandem/tandem --version
dist/Tandem/tandem make-test-models "$tmp/models" > /dev/null
unset QT_QPA_PLATFORM  # the real X11 window under Xvfb, not offscreen
export HOME="$tmp/home" XDG_CONFIG_HOME="$tmp/home/.config" XDG_DATA_HOME="$tmp/home/.local/share"
timeout 180 xvfb-run -a -s "-screen 0 1280x860x24" dist/Tandem/tandem \
  --model "$tmp/models/tiny-target.gguf" --drafter "$tmp/models/tiny-drafter-a1.gguf" \
  --smoke-test "Hello from the bundle" 2>&1 | grep -v propagateSizeHints
