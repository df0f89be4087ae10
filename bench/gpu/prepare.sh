#!/usr/bin/env bash
# bench/gpu/prepare.sh: builds mnemo for sm_90 here (preset cuda, build/cuda) and
# packs what the lent GPU machine needs into one file to carry there,
# build/gpu-carry.tar.xz (< 60 MiB): the GPU tests, the benchmarks, the CLI,
# the staged Python package and libmnemo.so without debug info, the CTest
# files, and the Google Benchmark library the benchmarks link (nothing can be
# installed there). Each executable holds the
# same kernels' fatbin; xz's window spans the files, so they pack to about one.
# bench/gpu/run.sh unpacks it into build/cuda on the GPU machine.
# Usage: bash bench/gpu/prepare.sh [--no-build]
# Threading: a script.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != "--no-build" ]; then
  cmake --preset cuda >/dev/null
  cmake --build --preset cuda
fi
build=build/cuda
stage=build/gpu-stage
rm -rf "$stage"
mkdir -p "$stage/$build/carry-lib"
# copy FILE...: into the stage at the same relative path, debug info stripped.
copy() {
  for f in "$@"; do
    mkdir -p "$stage/$(dirname "$f")"
    cp -P "$f" "$stage/$f"
    if [ -f "$f" ] && [ ! -L "$f" ] && file -b "$f" | grep -q ELF; then strip --strip-debug "$stage/$f"; fi
  done
}
copy "$build"/libmnemo.so* "$build/tools/mnemo"
# The staged Python package (its _paths.py names this build; the GPU tests import it).
while IFS= read -r -d '' f; do copy "$f"; done < <(find "$build/python" -name '*.py' -print0)
while IFS= read -r -d '' f; do copy "$f"; done < <(find "$build" -name CTestTestfile.cmake -print0)
for t in "$build"/tests/test_*gpu*; do [ -x "$t" ] && copy "$t"; done
for b in "$build"/bench/bench_*; do
  [ -x "$b" ] || continue
  copy "$b"
  # The shared libraries a bare CUDA image lacks (Google Benchmark).
  ldd "$b" | awk '/libbenchmark/ {print $3}' | while read -r so; do
    cp -L "$so" "$stage/$build/carry-lib/$(basename "$so")"
  done
done
{
  echo "source_dir=$PWD"
  echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo +uncommitted)"
  echo "date=$(date -u +%Y-%m-%dT%H:%MZ)"
  echo "nvcc=$(nvcc --version | tail -n 1)"
  echo "cuda_architectures=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
} >"$stage/$build/mnemo-build-info.txt"
tar -C "$stage" -cf - "$build" | xz -T0 -9 >build/gpu-carry.tar.xz
rm -rf "$stage"
size=$(du -m build/gpu-carry.tar.xz | cut -f1)
echo "prepare: build/gpu-carry.tar.xz is ${size} MiB"
if [ "$size" -ge 60 ]; then
  echo "prepare: build/gpu-carry.tar.xz is over the 60 MiB that can travel with the checkout" >&2
  exit 1
fi
