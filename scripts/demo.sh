#!/usr/bin/env bash
# scripts/demo.sh: the main job on a fresh machine: installs what is missing,
# builds mnemo (with CUDA when nvcc is found) and runs `mnemo demo`: the walking
# skeleton, a bundled PyTorch trace replayed with its HTML report, a copy-throughput run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target mnemo_cli
./build/default/tools/mnemo info
TMPDIR="$PWD/build/default" ./build/default/tools/mnemo demo
echo
echo "replay comparison (docs/PROFILING.md):"
./build/default/tools/mnemo replay data/traces/ctx128_fullstep.trace --no-progress \
  --config "" --config expandable_segments:True --config roundup_power2_divisions:4
