#!/usr/bin/env bash
# Build the Linux one-folder bundle into dist/Tandem/ (run after packaging/install.sh).
# For a GPU build, install llama-cpp-python with CUDA or Vulkan first, e.g.
#   CMAKE_ARGS="-DGGML_CUDA=on" bash packaging/install.sh
# and the bundle then carries those backend libraries (the user needs the GPU driver).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install -q "pyinstaller==6.*"
.venv/bin/pyinstaller --noconfirm --clean --distpath dist --workpath build/pyinstaller packaging/tandem.spec
install -Dm644 packaging/linux/io.github.tandem_chat.Tandem.desktop dist/Tandem/share/applications/io.github.tandem_chat.Tandem.desktop
install -Dm644 packaging/linux/io.github.tandem_chat.Tandem.metainfo.xml dist/Tandem/share/metainfo/io.github.tandem_chat.Tandem.metainfo.xml
for s in 16 24 32 48 64 128 256 512; do
  install -Dm644 "resources/icons/tandem-$s.png" "dist/Tandem/share/icons/hicolor/${s}x${s}/apps/io.github.tandem_chat.Tandem.png"
done
install -Dm644 resources/icons/tandem.svg dist/Tandem/share/icons/hicolor/scalable/apps/io.github.tandem_chat.Tandem.svg
echo "Built dist/Tandem/tandem"
