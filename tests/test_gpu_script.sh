#!/usr/bin/env bash
# tests/test_gpu_script.sh: the GPU proof's script is wired (label cpu, no GPU
# needed): every phase of bench/gpu/run.sh runs with --dry-run and names the
# commands it would run, a wrong phase is refused, and the Python drivers
# (compare_torch.py, torch_alloc.py, record_traces.py) parse.
# Usage: test_gpu_script.sh SOURCE_DIR PYTHON
set -uo pipefail
src=$1
py=${2:-python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0
expect() { # PHASE PATTERN
  if ! grep -q -- "$2" "$out/$1.log"; then
    echo "FAIL: phase $1 --dry-run does not mention '$2'"
    fail=1
  fi
}
for phase in env test sanitize bench compare torch; do
  if ! bash "$src/bench/gpu/run.sh" "$phase" "$out" --dry-run >"$out/$phase.stdout" 2>&1; then
    echo "FAIL: run.sh $phase --dry-run exited non-zero"
    cat "$out/$phase.stdout"
    fail=1
  fi
done
expect env "nvidia-smi"
expect test "ctest --test-dir .*-L gpu"
expect sanitize "compute-sanitizer --tool memcheck"
expect sanitize "compute-sanitizer --tool racecheck"
expect bench "bench_kernels"
expect compare "compare_torch.py"
expect torch "torch_alloc.py"
if bash "$src/bench/gpu/run.sh" nosuchphase "$out" --dry-run >/dev/null 2>&1; then
  echo "FAIL: run.sh accepted an unknown phase"
  fail=1
fi
for f in compare_torch.py torch_alloc.py record_traces.py; do
  "$py" -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$src/bench/gpu/$f" || {
    echo "FAIL: $f does not parse"
    fail=1
  }
done
[ "$fail" = 0 ] && echo "gpu script: every phase wired"
exit "$fail"
