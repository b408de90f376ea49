#!/usr/bin/env bash
# Build dist/Tandem.app on macOS (Apple Silicon builds llama.cpp with Metal by default):
#   bash packaging/install.sh && bash packaging/build-macos.sh
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install -q "pyinstaller==6.*"
.venv/bin/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/tandem.spec
echo "Built dist/Tandem.app (sign with: codesign --deep -s 'Developer ID Application: …' dist/Tandem.app)"
