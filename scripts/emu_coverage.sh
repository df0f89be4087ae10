#!/usr/bin/env bash
# scripts/emu_coverage.sh: line coverage (gcov) of the CUDA kernel sources
# (kernels/cuda_exec.cu, kernels/cuda_kernels.cu, kernels/cuda_index.cu) under the launch emulation
# (preset emu, tests/cuda_emu; docs/KERNELS.md "Kernel emulation"). Clears the
# counters, runs test_kernels_emu once, then prints each file's figure, the
# total and the lines no instantiation ran; exits 1 when the total is below
# THRESHOLD percent (default 95), 2 when something is missing.
#   scripts/emu_coverage.sh [THRESHOLD] [BUILD_DIR]   (BUILD_DIR: build/emu)
# Needs gcc's gcov (same version as the compiler) and python3.
# Threading: one run at a time per build directory (it resets the counters).
set -euo pipefail

threshold=${1:-95}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$root/build/emu}
if [[ ! -d $build ]]; then
  echo "emu_coverage: no build directory $build: cmake --preset emu && cmake --build --preset emu" >&2
  exit 2
fi
build=$(cd "$build" && pwd) # gcov runs elsewhere: the path must be absolute
objdir=$build/CMakeFiles/mnemo_kernels.dir/kernels
test_bin=$build/tests/test_kernels_emu
sources=(cuda_exec.cu cuda_kernels.cu cuda_index.cu)

if [[ ! -x $test_bin ]]; then
  echo "emu_coverage: $test_bin missing: cmake --preset emu && cmake --build --preset emu" >&2
  exit 2
fi
for s in "${sources[@]}"; do
  if [[ ! -f $objdir/$s.gcno ]]; then
    echo "emu_coverage: $objdir/$s.gcno missing: is $build configured with MNEMO_KERNEL_EMU=ON?" >&2
    exit 2
  fi
done
gcov_bin=${GCOV:-gcov}
compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
if [[ -z ${GCOV:-} && $compiler =~ (^|/)g\+\+(-[0-9]+)?$ ]]; then
  # g++-12 pairs with gcov-12 (a plain gcov of another version cannot read the notes)
  ver=${BASH_REMATCH[2]}
  command -v "gcov$ver" >/dev/null && gcov_bin=gcov$ver
fi

rm -f "$objdir"/*.gcda
log=$(mktemp)
if ! "$test_bin" >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  rm -f "$log"
  echo "emu_coverage: test_kernels_emu failed" >&2
  exit 2
fi
rm -f "$log"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcdas=()
for s in "${sources[@]}"; do gcdas+=("$objdir/$s.gcda"); done
(cd "$work" && "$gcov_bin" --json-format --stdout -o "$objdir" "${gcdas[@]}" >gcov.json 2>gcov.err) || {
  cat "$work/gcov.err" >&2
  exit 2
}

python3 - "$work/gcov.json" "$threshold" "$root" "${sources[@]}" <<'EOF'
import json, os, sys

path, threshold, root, sources = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
wanted = {os.path.join(root, "kernels", s): s for s in sources}
lines = {s: {} for s in sources}  # line -> executed by any instantiation
with open(path) as f:
    for doc in f:  # one JSON document per .gcda
        doc = doc.strip()
        if not doc:
            continue
        for fe in json.loads(doc)["files"]:
            name = os.path.realpath(os.path.join(root, fe["file"]))
            if name not in wanted:
                continue
            seen = lines[wanted[name]]
            for ln in fe["lines"]:
                seen[ln["line_number"]] = seen.get(ln["line_number"], False) or ln["count"] > 0
total = hit = 0
for s in sources:
    n, h = len(lines[s]), sum(lines[s].values())
    if n == 0:
        sys.exit(f"emu_coverage: no line data for kernels/{s}")
    total, hit = total + n, hit + h
    print(f"kernels/{s}: {h}/{n} lines, {100.0 * h / n:.2f}%")
    missed = sorted(l for l, ok in lines[s].items() if not ok)
    if missed:
        src = open(os.path.join(root, "kernels", s)).read().split("\n")
        for l in missed:
            print(f"  not run: kernels/{s}:{l}: {src[l - 1].strip() if l <= len(src) else ''}")
pct = 100.0 * hit / total
print(f"CUDA kernel line coverage under the emulation: {hit}/{total} lines, {pct:.2f}% (threshold {threshold:g}%)")
sys.exit(0 if pct >= threshold else 1)
EOF
