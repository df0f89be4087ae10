#!/usr/bin/env bash
# scripts/deps.sh: installs what building and testing mnemo needs on Debian,
# through apt, only where a package is missing. Usage: scripts/deps.sh [extra packages]
set -euo pipefail
# Build: compilers, CMake, Ninja, Google Benchmark, the DLPack header.
# Tests: numpy (DLPack test, bench/cpu_vs_numpy.py), PyTorch on CPU (view differential test),
# python3-dev (Python.h for mnemo._speedups, which the wheel test requires), python3-venv
# (scripts/test_wheel.sh: the wheel installed into a fresh virtual environment),
# headless Chromium (the HTML report test).
# Benchmarks: jemalloc and mimalloc, the general-purpose anchors of bench_alloc_anchors
# and bench/alloc_ir.sh (loaded with dlopen; skipped where missing).
# Format: clang-format 14, the version .clang-format is pinned to (tests/test_format.sh).
pkgs=(cmake ninja-build gcc g++ make pkg-config libbenchmark-dev libdlpack-dev python3 python3-dev python3-venv
      python3-numpy python3-torch chromium libjemalloc-dev libmimalloc-dev clang-format-14 "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
