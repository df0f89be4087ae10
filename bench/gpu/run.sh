#!/usr/bin/env bash
# bench/gpu/run.sh: the one script for a GPU machine: builds mnemo for sm_90,
# runs the gpu-labelled tests, then every benchmark, and prints one results table,
# then the kernels' side-by-side with PyTorch (bench/gpu/kernels_vs_torch.py).
# Usage: bash bench/gpu/run.sh [OUTDIR]   (OUTDIR defaults to $OUT or /tmp/mnemo-gpu)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp/mnemo-gpu}}
mkdir -p "$out"
log="$out/gpu-run.log"
: >"$log"
say() { echo "$@" | tee -a "$log"; }

say "== mnemo GPU run $(date -u +%Y-%m-%dT%H:%MZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log"

say "== build (preset cuda: sm_90)"
if ! { cmake --preset cuda && cmake --build --preset cuda; } >>"$log" 2>&1; then
  say "build FAILED (see $log)"
  exit 1
fi
./build/cuda/tools/mnemo info | tee -a "$log"

say "== gpu tests"
ctest --test-dir build/cuda -L gpu --output-on-failure 2>&1 | tee -a "$log" | tail -n 15
gpu_rc=${PIPESTATUS[0]}

if command -v compute-sanitizer >/dev/null 2>&1; then
  say "== compute-sanitizer (memcheck, racecheck) on the gpu tests"
  for t in build/cuda/tests/test_*gpu*; do
    [ -x "$t" ] || continue
    for tool in memcheck racecheck; do
      if MNEMO_TEST_QUICK=1 compute-sanitizer --tool "$tool" --error-exitcode 9 "$t" >>"$log" 2>&1; then
        say "  $tool $(basename "$t"): clean"
      else
        say "  $tool $(basename "$t"): ERRORS (see $log)"
        gpu_rc=1
      fi
    done
  done
fi

say "== benchmarks"
for b in build/cuda/bench/bench_*; do
  [ -x "$b" ] || continue
  name=$(basename "$b")
  "$b" --benchmark_format=console --benchmark_out="$out/$name.json" --benchmark_out_format=json \
    --benchmark_min_time=0.2 >>"$log" 2>&1 || say "  $name FAILED"
done

say "== results table"
/usr/bin/env python3 - "$out" <<'PY' | tee -a "$log"
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"| benchmark | time/iter | GB/s | items/s |")
print(f"|---|---|---|---|")
for f in sorted(out.glob("bench_*.json")):
    data = json.loads(f.read_text())
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        gbs = b.get("bytes_per_second")
        ips = b.get("items_per_second")
        t = f'{b.get("real_time", 0):.1f} {b.get("time_unit", "")}'
        print(f'| {b["name"]} | {t} | {gbs / 1e9:.1f} |' if gbs else f'| {b["name"]} | {t} | |',
              f'{ips:.3g} |' if ips else ' |')
PY
say "== kernels vs PyTorch (CUDA events, same run)"
if [ -f "$out/bench_kernels.json" ]; then
  /usr/bin/env python3 bench/gpu/kernels_vs_torch.py "$out/bench_kernels.json" 2>&1 | tee "$out/kernels_vs_torch.md" | tee -a "$log"
else
  say "  bench_kernels.json missing: bench_kernels did not run"
fi
exit "$gpu_rc"
