#!/usr/bin/env bash
# bench/gpu/run.sh: one phase of the GPU proof, run on the lent GPU machine over
# the build that bench/gpu/prepare.sh made here (build/cuda, carried along).
# Each phase ends within 8 minutes (every step wrapped in `timeout`) and writes
# its own files under OUTDIR: PHASE.log and, where it has one, a table.
#
# Usage: bash bench/gpu/run.sh PHASE [OUTDIR] [--dry-run]
#   env       the machine: GPU, driver, toolkit, Python packages, `mnemo info`
#   test      every gpu-labelled CTest (MNEMO_REQUIRE_GPU=1: no device = failure)
#   sanitize  compute-sanitizer memcheck and racecheck on the GPU test executables
#   bench     the C benchmarks (Google Benchmark, its library carried in the build)
#   compare   bench/gpu/compare_torch.py: kernels, allocator host cost and host<->device
#             copies, mnemo and PyTorch side by side in one process, CUDA events on both
#   torch     bench/gpu/torch_alloc.py: a small transformer trained with PyTorch's
#             allocator and with mnemo's (CUDAPluggableAllocator), CuPy through mnemo,
#             and the training step recorded as a trace and replayed by mnemo
# OUTDIR defaults to $OUT or /tmp/mnemo-gpu. --dry-run prints what the phase would
# run and checks that the files it needs exist, without touching a GPU.
# Threading: a script; nothing runs concurrently.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
phase=${1:-}
shift || true
out=${OUT:-/tmp/mnemo-gpu}
dry=0
for a in "$@"; do
  case "$a" in
    --dry-run) dry=1 ;;
    *) out=$a ;;
  esac
done
case "$phase" in
  env | test | sanitize | bench | compare | torch) ;;
  *)
    echo "usage: bash bench/gpu/run.sh env|test|sanitize|bench|compare|torch [OUTDIR] [--dry-run]" >&2
    exit 2
    ;;
esac
build=$root/build/cuda
mkdir -p "$out"
log=$out/$phase.log
: >"$log"
say() { echo "$@" | tee -a "$log"; }
budget=${MNEMO_GPU_PHASE_S:-470} # whole phase, seconds (the device allows 600 a command)
deadline=$((SECONDS + budget))
left() { echo $((deadline - SECONDS)); }
# run LIMIT_S CMD...: one step, bounded by LIMIT_S and by what is left of the phase;
# in a dry run, prints it instead.
run() {
  local lim=$1
  shift
  local l
  l=$(left)
  [ "$lim" -gt "$l" ] && lim=$l
  if [ "$dry" = 1 ]; then
    echo "  would run (<= ${lim}s): $*" | tee -a "$log"
    return 0
  fi
  if [ "$lim" -le 5 ]; then
    say "  NOT RUN (phase time used up): $*"
    return 124
  fi
  timeout --kill-after=10 "$lim" "$@"
}

# The build carries absolute paths (CTest files, RPATHs): recreate the folder it
# was made in as a link to this checkout when the checkout lives elsewhere.
# bench/gpu/prepare.sh packed it into build/gpu-carry.tar.xz (carried with the call).
if [ ! -f "$build/mnemo-build-info.txt" ] && [ -f build/gpu-carry.tar.xz ]; then
  if [ "$dry" = 1 ]; then
    say "  would unpack build/gpu-carry.tar.xz into $build"
  else
    tar -xJf build/gpu-carry.tar.xz 2>>"$log" ||
      "${MNEMO_PYTHON:-python3}" -c "import tarfile; tarfile.open('build/gpu-carry.tar.xz').extractall('.')"
  fi
fi
if [ ! -f "$build/mnemo-build-info.txt" ] && [ "$dry" = 0 ]; then
  say "no carried build at $build: run bash bench/gpu/prepare.sh here first and carry build/gpu-carry.tar.xz"
  exit 1
fi
src=$(sed -n 's/^source_dir=//p' "$build/mnemo-build-info.txt" 2>/dev/null)
if [ "$dry" = 0 ] && [ -n "$src" ] && [ "$src" != "$root" ] && [ ! -e "$src/CMakeLists.txt" ]; then
  mkdir -p "$(dirname "$src")" && ln -sfn "$root" "$src"
fi
export LD_LIBRARY_PATH="$build/carry-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MNEMO_REQUIRE_GPU=1
py=${MNEMO_PYTHON:-python3}
export PYTHONUNBUFFERED=1
commit=$(sed -n 's/^commit=//p' "$build/mnemo-build-info.txt" 2>/dev/null)
say "== mnemo GPU phase $phase, $(date -u +%Y-%m-%dT%H:%MZ), build of commit $commit"

gpu_tests=(test_gpu_runtime test_allocators_gpu test_caching_gpu test_copy_gpu test_storage_gpu test_kernels_gpu
           test_graph_gpu test_share_gpu)
# The NCCL module's test (built where NCCL was found) needs libnccl.so.2 on this
# machine too (200 MiB: never carried). PyTorch's wheels bring one (the
# nvidia-nccl package): its directory is used when the loader finds none;
# without any the test is left out, and said so.
ctest_skip=()
if [ -x "$build/tests/test_nccl_gpu" ]; then
  if ldd "$build/tests/test_nccl_gpu" 2>/dev/null | grep -q "not found"; then
    wheel_nccl=$("$py" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' \
                 2>/dev/null || true)
    if [ -n "$wheel_nccl" ] && [ -e "$wheel_nccl/libnccl.so.2" ]; then
      export LD_LIBRARY_PATH="$wheel_nccl:$LD_LIBRARY_PATH"
      say "  test_nccl_gpu: libnccl.so.2 from $wheel_nccl"
    fi
  fi
  if ldd "$build/tests/test_nccl_gpu" 2>/dev/null | grep -q "not found"; then
    say "  test_nccl_gpu: NOT RUN (libnccl.so.2 is not on this machine)"
    ctest_skip=(-E '^test_nccl_gpu$')
  else
    gpu_tests+=(test_nccl_gpu)
  fi
fi
rc=0
case "$phase" in
  env)
    run 30 nvidia-smi 2>&1 | tee -a "$log"
    run 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,compute_cap \
      --format=csv 2>&1 | tee -a "$log"
    run 10 nvcc --version 2>&1 | tail -n 2 | tee -a "$log"
    run 20 compute-sanitizer --version 2>&1 | tail -n 1 | tee -a "$log"
    run 60 "$py" -c "import sys, torch, numpy; print(sys.executable, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0))" 2>&1 | tee -a "$log"
    run 60 "$py" -c "import cupy; print('cupy', cupy.__version__)" 2>&1 | tee -a "$log"
    run 30 "$build/tools/mnemo" info 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    run 30 cuobjdump --list-elf "$build/libmnemo.so" 2>&1 | tee -a "$log"
    ;;
  test)
    run $((budget - 20)) ctest --test-dir "$build" -L gpu "${ctest_skip[@]}" --output-on-failure --timeout 240 \
      --output-junit "$out/test-junit.xml" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    ;;
  sanitize)
    # MNEMO_TEST_QUICK=1: the kernel tests' reduced case matrix (the tools are ~10-100x slower);
    # MNEMO_TEST_SANITIZER=1: the tests leave out their on-purpose failing CUDA calls (an
    # allocation larger than the GPU), which the tool reports like any failing call.
    # The whole log of every run that is not clean goes into sanitize-logs.tgz.
    export MNEMO_TEST_QUICK=1 MNEMO_TEST_SANITIZER=1
    [ "$dry" = 0 ] && mkdir -p "$out/sanitize-logs"
    for tool in memcheck racecheck; do
      for t in "${gpu_tests[@]}"; do
        extra=()
        [ "$tool" = memcheck ] && extra=(--leak-check full)
        slog=$out/sanitize-logs/$tool-$t.log
        [ "$dry" = 1 ] && slog=/dev/null
        run 120 compute-sanitizer --tool "$tool" "${extra[@]}" --error-exitcode 9 "$build/tests/$t" >"$slog" 2>&1
        r=$?
        [ "$dry" = 1 ] && continue
        summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|checks, " "$slog" | tr '\n' ' ')
        if [ $r -eq 0 ]; then
          say "  $tool $t: clean ($summary)"
          rm -f "$slog"
        else
          say "  $tool $t: exit $r ($summary)"
          grep -E "^========= [A-Z]" "$slog" | grep -v "Host Frame" | sort | uniq -c | sort -rn | head -n 8 |
            sed 's/^/    | /' | tee -a "$log"
          rc=1
        fi
      done
    done
    if [ "$dry" = 0 ]; then
      if [ -n "$(ls -A "$out/sanitize-logs")" ]; then
        tar -C "$out" -czf "$out/sanitize-logs.tgz" sanitize-logs
      fi
      rm -rf "$out/sanitize-logs"
    fi
    ;;
  bench)
    # `mnemo bench` on the GPU: every transfer, layout, cast and fill case with
    # its ceilings measured in the same run (docs/COPY.md "mnemo bench").
    run 120 "$build/tools/mnemo" bench --device cuda:0 --sizes 1M..256M --no-progress --plot "$out/mnemo_bench.svg" \
      --json >"$out/mnemo_bench.json" 2>>"$log" || {
      say "  mnemo bench: FAILED (exit $?)"
      rc=1
    }
    for b in bench_runtime bench_caching bench_pinned bench_copy bench_storage bench_kernels; do
      if [ ! -x "$build/bench/$b" ]; then
        say "  $b: not built (Google Benchmark missing where prepare.sh ran)"
        rc=1
        continue
      fi
      filter=.
      # CPU cases are measured here on 2-core VMs (bench/results); the GPU machine runs the rest.
      [ "$b" = bench_kernels ] && filter=cuda
      run 150 "$build/bench/$b" --benchmark_filter="$filter" --benchmark_min_time=0.1 \
        --benchmark_out="$out/$b.json" --benchmark_out_format=json >>"$log" 2>&1 || {
        say "  $b: FAILED (exit $?)"
        rc=1
      }
    done
    [ "$dry" = 0 ] && "$py" - "$out" <<'PY' | tee "$out/bench.md" | tee -a "$log"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
print("GB/s columns are the benchmarks' own counters (bytes read + written per second);")
print("time is Google Benchmark's real time per iteration.\n")
print("| benchmark | real time/iter | GB/s | ceiling GB/s | % of ceiling | items/s |")
print("|---|---|---|---|---|---|")
for f in sorted(out.glob("bench_*.json")):
    for b in json.loads(f.read_text()).get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        if "error_message" in b:
            print(f"| {b['name']} | ERROR: {b['error_message']} | | | | |")
            continue
        g = b.get("GBps") or (b.get("bytes_per_second", 0) / 1e9 or None)
        c, p, i = b.get("ceiling_GBps"), b.get("pct_of_ceiling"), b.get("items_per_second")
        f1 = lambda v, fmt: format(v, fmt) if v else ""
        print(f"| {b['name']} | {b['real_time']:.1f} {b['time_unit']} | {f1(g, '.1f')} | {f1(c, '.1f')} | "
              f"{f1(p, '.0f')} | {f1(i, '.3g')} |")
PY
    ;;
  compare)
    run $((budget - 10)) "$py" bench/gpu/compare_torch.py --lib "$build/libmnemo.so" --out "$out" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    ;;
  torch)
    run $((budget - 10)) "$py" bench/gpu/torch_alloc.py --lib "$build/libmnemo.so" --mnemo "$build/tools/mnemo" \
      --out "$out" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    ;;
esac
[ "$dry" = 1 ] && rc=0
say "== phase $phase: exit $rc after $SECONDS s"
exit "$rc"
