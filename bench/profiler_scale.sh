#!/usr/bin/env bash
# bench/profiler_scale.sh: the profiler at scale (1M and 10M events): generates
# PyTorch-shaped snapshots of 1M and 10M events (bench/gen_torch_snapshot.py) and
# times, side by side in one run, the Python importer alone, `mnemo replay` cold
# (import + replay, empty import cache) and warm (cached), `mnemo report`,
# `mnemo snapshot` (the pickle's segment table, and the imported trace at its
# peak), each with its wall time and peak resident memory (/usr/bin/time).
# Prints a Markdown table (and writes it to --md FILE). Single-threaded script.
#
# Usage: bench/profiler_scale.sh [--mnemo PATH] [--events "1000000 10000000"]
#                                [--work DIR] [--md FILE] [--before CLI TOOLS_DIR]
#   --mnemo  the CLI to measure (default build/cpu/tools/mnemo); its importer is
#            the one it finds (the source tree's tools/ for a build-tree CLI)
#   --events the snapshot sizes (default: 1M and 10M; 10M takes about 5 minutes
#            and some 8 GB of memory in the importer)
#   --before another build to measure in the same run, row by row (an older
#            commit's CLI and its tools/ folder: before/after figures)
#   --work   where the snapshots (kept between runs: generating 10M takes ~2 min),
#            traces, reports and the import cache go (default /tmp/mnemo-scale)
# Needs: python3, /usr/bin/time. The generated files are not part of the repo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/.." && pwd)
mnemo=$src/build/cpu/tools/mnemo
events="1000000 10000000"
work=/tmp/mnemo-scale
md=
before_cli=
before_tools=
while [ $# -gt 0 ]; do
  case $1 in
    --mnemo) mnemo=$2; shift 2 ;;
    --events) events=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --md) md=$2; shift 2 ;;
    --before) before_cli=$2; before_tools=$3; shift 3 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "profiler_scale.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$mnemo" ] || { echo "profiler_scale.sh: no CLI at $mnemo (build it: cmake --build build/cpu --target mnemo_cli)" >&2; exit 1; }
importer=$src/tools/import_torch_snapshot.py
mkdir -p "$work"
cache=$work/cache
export XDG_CACHE_HOME=$work/xdg # nothing of the user's cache is read or written
unset MNEMO_CACHE

declare -A secs_of mib_of
labels=()
# measure WHO LABEL N COMMAND...: one run under /usr/bin/time (wall seconds,
# peak RSS of the largest process: the CLI or the importer it runs)
measure() {
  local who=$1 label=$2 n=$3
  shift 3
  local tf=$work/time.txt
  if ! /usr/bin/time -f "%e %M" -o "$tf" "$@" >"$work/out.txt" 2>"$work/err.txt"; then
    echo "profiler_scale.sh: failed: $*" >&2
    tail -5 "$work/err.txt" >&2
    exit 1
  fi
  local secs kb
  read -r secs kb <"$tf"
  local key="$n|$label"
  [ -n "${secs_of[$key|after]+x}${secs_of[$key|before]+x}" ] || labels+=("$key")
  secs_of[$key|$who]=$secs
  mib_of[$key|$who]=$((kb / 1024))
  printf '%-6s %-10s %-48s %8s s %7s MiB\n' "$who" "$n" "$label" "$secs" "$((kb / 1024))" >&2
}

# step N LABEL ARGS...: the CLI command `mnemo ARGS` (trace/snapshot paths in
# ARGS), for each build; LABEL "importer" runs the Python importer instead.
step() {
  local n=$1 label=$2
  shift 2
  for who in before after; do
    local cli=$mnemo tools=$src/tools
    if [ $who = before ]; then
      [ -n "$before_cli" ] || continue
      cli=$before_cli tools=$before_tools
    fi
    if [ "$1" = importer ]; then
      measure $who "$label" "$n" python3 "$tools/import_torch_snapshot.py" "${@:2}"
    elif [ "$1" = cold ]; then # an empty cache first
      rm -rf "$cache"
      measure $who "$label" "$n" env MNEMO_TOOLS_DIR="$tools" MNEMO_CACHE="$cache" "$cli" "${@:2}"
    else
      measure $who "$label" "$n" env MNEMO_TOOLS_DIR="$tools" MNEMO_CACHE="$cache" "$cli" "$@"
    fi
  done
}

for n in $events; do
  snap=$work/gen_${n}.pickle
  if [ ! -s "$snap" ]; then
    echo "generating $snap ..." >&2
    python3 "$here/gen_torch_snapshot.py" "$snap" --events "$n" --seed 33
  fi
  size=$(($(stat -c %s "$snap") / 1048576))
  tr=$work/gen_${n}.trace
  step "$n" "importer alone (python3, to a trace; $size MB pickle)" importer "$snap" -o "$tr"
  step "$n" "replay cold (import + replay, cache empty)" cold replay "$snap" --no-progress
  step "$n" "replay warm (import cached)" replay "$snap" --no-progress
  step "$n" "report warm (-o HTML)" report "$snap" -o "$work/gen_${n}.html"
  step "$n" "snapshot of the pickle (its segment table)" snapshot "$snap"
  step "$n" "replay of the imported .trace (no import)" replay "$tr" --no-progress
  step "$n" "report of the imported .trace" report "$tr" -o "$work/gen_${n}.html"
  step "$n" "snapshot of the imported .trace (at its peak)" snapshot "$tr"
done

{
  if [ -n "$before_cli" ]; then
    echo "| events | step | before: wall s | before: peak RSS MiB | after: wall s | after: peak RSS MiB |"
    echo "| ---: | --- | ---: | ---: | ---: | ---: |"
  else
    echo "| events | step | wall s | peak RSS MiB |"
    echo "| ---: | --- | ---: | ---: |"
  fi
  for key in "${labels[@]}"; do
    n=${key%%|*} label=${key#*|}
    if [ -n "$before_cli" ]; then
      echo "| $n | $label | ${secs_of[$key|before]} | ${mib_of[$key|before]} | ${secs_of[$key|after]} | ${mib_of[$key|after]} |"
    else
      echo "| $n | $label | ${secs_of[$key|after]} | ${mib_of[$key|after]} |"
    fi
  done
} >"$work/table.md"
cat "$work/table.md"
if [ -n "$md" ]; then cp "$work/table.md" "$md"; fi
