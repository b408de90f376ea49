# Build dist\Tandem\tandem.exe on Windows. Needs Python 3.10+, Visual Studio Build Tools (C++).
# For CUDA: $env:CMAKE_ARGS="-DGGML_CUDA=on"; for Vulkan: $env:CMAKE_ARGS="-DGGML_VULKAN=on"
$ErrorActionPreference = "Stop"
Set-Location (Join-Path $PSScriptRoot "..")
if (-not (Test-Path .venv)) { python -m venv .venv }
.venv\Scripts\python -m pip install --upgrade pip wheel
.venv\Scripts\python -m pip install "llama-cpp-python==0.3.36" --no-cache-dir
.venv\Scripts\python -m pip install -e . "pyinstaller==6.*"
.venv\Scripts\pyinstaller --noconfirm --clean --distpath dist --workpath build\pyinstaller packaging\tandem.spec
Write-Host "Built dist\Tandem\tandem.exe"
