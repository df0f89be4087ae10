#!/usr/bin/env bash
# scripts/test.sh: the whole test suite on a fresh machine: installs what is
# missing, builds everything (CUDA when nvcc is found) and runs CTest. GPU tests
# report "skipped" where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset default
cmake --build --preset default
ctest --preset default -j "$(nproc)"
