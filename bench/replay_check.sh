#!/bin/bash
# bench/replay_check.sh: replays every bundled trace (data/traces, and the shared real
# snapshots when ../shared/traces exists) under several allocator configs with two mnemo
# CLIs, and compares what they report (peaks, segment counts, OOMs, ...; timings left out).
# For allocator changes that must not change behaviour:
#   git worktree add /tmp/base HEAD~1 && cmake -S /tmp/base -B /tmp/base/build -DMNEMO_CUDA=OFF \
#     && cmake --build /tmp/base/build --target mnemo_cli
#   bash bench/replay_check.sh /tmp/base/build/tools/mnemo build/cpu/tools/mnemo
# Exit status 0 when every replay agrees, 1 otherwise (the differences are printed).
set -u
if [ $# -ne 2 ]; then
  echo "usage: $0 BASE_MNEMO NEW_MNEMO" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
configs=("" "expandable_segments:True" "max_split_size_mb:64"
         "garbage_collection_threshold:0.6,max_split_size_mb:128" "roundup_power2_divisions:4"
         "expandable_segments:True,roundup_power2_divisions:[256:8,>:2]")
traces=("$here"/data/traces/*.trace "$here"/data/traces/*.pickle.gz)
for t in "$here"/../shared/traces/*.pickle; do [ -e "$t" ] && traces+=("$t"); done
n=0
fail=0
for t in "${traces[@]}"; do
  for i in "${!configs[@]}"; do
    args=(replay "$t" --json --no-progress)
    [ -n "${configs[$i]}" ] && args+=(--config "${configs[$i]}")
    for side in base new; do
      bin=$1
      [ $side = new ] && bin=$2
      "$bin" "${args[@]}" 2>&1 | sed -E 's/"ns_per_op": [0-9.]+, ?//' > "$out/$side"
    done
    n=$((n + 1))
    if ! diff -q "$out/base" "$out/new" > /dev/null; then
      echo "DIFFERS: $(basename "$t") ${configs[$i]:-(as recorded)}"
      diff "$out/base" "$out/new" | head -20
      fail=1
    fi
  done
done
echo "$n replays compared ($(( ${#traces[@]} )) traces x ${#configs[@]} configs): $([ $fail = 0 ] && echo identical || echo "some differ")"
exit $fail
