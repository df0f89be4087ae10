#!/usr/bin/env bash
# bench/alloc_ir.sh: instructions per alloc+free pair of the allocator's anchor cases
# (bench/alloc_ir.c) under callgrind: each case runs twice, with N1 and N2
# pairs, counting only mn_alloc_ir_loop (--toggle-collect), and
#   Ir/pair = (Ir(N2) - Ir(N1)) / (pairs2 - pairs1)
# so setup and the first run's one-time costs (segments made, heaps grown)
# cancel out. Prints a markdown table (case, Ir/pair) and the recorder's
# on/off ratio. A case whose library is missing (jemalloc, mimalloc) is a
# "skipped" row. Deterministic: no timing, so the machine's noise is out.
# Usage: bench/alloc_ir.sh [ALLOC_IR] [CASE...]
#        bench/alloc_ir.sh --smoke ALLOC_IR   (every case natively for a few
#        pairs, no valgrind: exits 1 if one fails; CTest alloc_ir_smoke)
#   ALLOC_IR: the alloc_ir executable (default: build/cpu/bench/alloc_ir, then
#   build/default/bench/alloc_ir); CASE: any of `alloc_ir --list` (default: all).
#   Environment: N1, N2 (pairs; default 20000 and 60000; trace cases round up
#   to whole runs of the trace), ALLOC_IR_TRACE (another trace file).
set -euo pipefail
if [ "${1:-}" = "--smoke" ]; then
  [ $# -eq 2 ] && [ -x "$2" ] || { echo "usage: alloc_ir.sh --smoke ALLOC_IR" >&2; exit 1; }
  export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.rtld.optional_static_tls=16384"
  fails=0
  for c in $("$2" --list); do
    rc=0
    out=$("$2" "$c" 100 2>&1) || rc=$?
    case $rc in
      0) echo "ok      $out" ;;
      3) echo "skipped $out" ;;
      *) echo "FAIL    $c (exit $rc): $out"; fails=$((fails + 1)) ;;
    esac
  done
  echo "$fails failed"
  [ "$fails" -eq 0 ]
  exit
fi
here=$(cd "$(dirname "$0")/.." && pwd)
bin=""
if [ $# -gt 0 ] && [ -x "$1" ] && [ ! -d "$1" ]; then bin=$1; shift; fi
if [ -z "$bin" ]; then
  for b in "$here/build/cpu/bench/alloc_ir" "$here/build/default/bench/alloc_ir"; do
    [ -x "$b" ] && { bin=$b; break; }
  done
fi
[ -n "$bin" ] || { echo "alloc_ir.sh: no alloc_ir built (cmake --build BUILD --target alloc_ir); pass its path" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "alloc_ir.sh: valgrind not found (Debian: apt-get install valgrind)" >&2; exit 1; }
n1=${N1:-20000}
n2=${N2:-60000}
[ "$n2" -gt "$n1" ] || { echo "alloc_ir.sh: N2 ($n2) must be larger than N1 ($n1)" >&2; exit 1; }
if [ $# -gt 0 ]; then cases=("$@"); else mapfile -t cases < <("$bin" --list); fi
trace_args=()
[ -n "${ALLOC_IR_TRACE:-}" ] && trace_args=(--trace "$ALLOC_IR_TRACE")
# jemalloc's initial-exec TLS needs more static TLS than glibc leaves for dlopen.
export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.rtld.optional_static_tls=16384"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run CASE N: sets ir, pairs, info (alloc_ir's line); returns 3 when skipped.
run() {
  local rc=0
  valgrind --tool=callgrind --toggle-collect=mn_alloc_ir_loop --callgrind-out-file="$tmp/cg.out" \
    "$bin" "$1" "$2" "${trace_args[@]}" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
  info=$(grep -m1 -E "^$1: " "$tmp/stdout" || true)
  if [ $rc -ne 0 ]; then return $rc; fi
  ir=$(awk '/^(totals|summary):/ {print $2; exit}' "$tmp/cg.out")
  pairs=$(sed -n 's/.* pairs=\([0-9]*\).*/\1/p' <<<"$info")
  [ -n "$ir" ] && [ -n "$pairs" ]
}

declare -A per_pair
echo "alloc_ir: $bin; N1=$n1 N2=$n2; valgrind $(valgrind --version | sed 's/valgrind-//')" >&2
printf '| case | Ir/pair |\n|---|---:|\n'
for c in "${cases[@]}"; do
  rc=0
  run "$c" "$n1" || rc=$?
  if [ $rc -eq 3 ]; then
    printf '| %s | skipped (%s) |\n' "$c" "${info#*skipped: }"
    continue
  elif [ $rc -ne 0 ]; then
    printf '| %s | failed (exit %d: %s) |\n' "$c" "$rc" "$(grep -v '^==' "$tmp/stderr" | tail -1)"
    continue
  fi
  ir1=$ir p1=$pairs
  case "$c" in trace/*) echo "$info" | sed 's/ pairs=[0-9]*//' >&2 ;; esac
  rc=0
  run "$c" "$n2" || rc=$?
  if [ $rc -ne 0 ]; then
    printf '| %s | failed (exit %d) |\n' "$c" "$rc"
    continue
  fi
  v=$(awk -v a="$ir1" -v b="$ir" -v p="$p1" -v q="$pairs" 'BEGIN { printf "%.1f", (b - a) / (q - p) }')
  per_pair[$c]=$v
  printf '| %s | %s |\n' "$c" "$v"
done
if [ -n "${per_pair[recorder/off]:-}" ]; then
  echo
  for r in on stacks16; do
    [ -n "${per_pair[recorder/$r]:-}" ] || continue
    awk -v a="${per_pair[recorder/off]}" -v b="${per_pair[recorder/$r]}" -v r="$r" \
      'BEGIN { printf "recorder/%s / recorder/off = %.2f (+%.1f Ir per pair)\n", r, b / a, b - a }'
  done
fi
