#!/usr/bin/env bash
# scripts/demo.sh: the main job on a fresh machine: installs what is missing,
# builds mnemo (with CUDA when nvcc is found) and runs `mnemo demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target mnemo_cli
./build/default/tools/mnemo info
./build/default/tools/mnemo demo
