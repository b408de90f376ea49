#!/usr/bin/env bash
# Fresh-machine proof: build the wheel and sdist, install the wheel into a new virtual
# environment in a temporary folder (not the source tree), then run `tandem --version` and
# a `tandem generate` on synthetic models. A missing package-data file or dependency fails.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the sdist, then the wheel built from it (build's default): a file the sdist lacks fails here, and
# no build/ folder of the source tree is reused (setuptools would ship modules moved away since)
.venv/bin/python -m build --outdir "$tmp/dist" . > /dev/null
mkdir -p dist
rm -f dist/tandem_chat-*  # the older version's files; the bundle's dist/Tandem stays
cp "$tmp"/dist/tandem_chat-* dist/
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q "$(cat .venv/llama-wheel.txt)" dist/tandem_chat-*.whl
cd "$tmp"  # away from the source tree: nothing can be imported from it
"$tmp/venv/bin/tandem" --version
"$tmp/venv/bin/tandem" make-test-models "$tmp/models" > /dev/null
"$tmp/venv/bin/tandem" generate --model "$tmp/models/tiny-target.gguf" --drafter "$tmp/models/tiny-drafter-a1.gguf" \
  --max-tokens 16 --json "Hello from a fresh install" | "$tmp/venv/bin/python" -c \
  "import json, sys; d = json.load(sys.stdin); assert len(d['tokens']) == 16 and d['stats']['draft_tokens'] > 0; print('wheel ok:', d['stats']['decode_tps'] and round(d['stats']['decode_tps']), 'tok/s')"
"$tmp/venv/bin/python" -c "from importlib import resources; assert resources.files('resources').joinpath('catalog.json').is_file(); assert resources.files('resources').joinpath('icons/tandem-256.png').is_file()"
echo "wheel check passed"
