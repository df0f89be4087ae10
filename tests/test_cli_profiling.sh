#!/usr/bin/env bash
# tests/test_cli_profiling.sh: the profiling commands end to end: mnemo import (RMM
# CSV: good, malformed with its line number, truncated), replay options, snapshot,
# and MNEMO_TRACE recording at exit whose replay gives the live run's peaks;
# report, replay and snapshot of a trace whose sizes sum past 2^63;
# the stack rule (profiling/stacks.h) in snapshot's holders; diff of two traces, two
# ranks, a pickle and its import (tools/cmd_diff.c);
# the environment variables: `mnemo info` and the README list every one of the
# table (runtime/env.h), and no source but runtime/env.c calls getenv.
# Usage: test_cli_profiling.sh MNEMO_CLI SOURCE_DIR
set -u
cli=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the import cache of this run only (what the user's environment says is not used)
unset MNEMO_CACHE
export XDG_CACHE_HOME=$tmp/xdg
fails=0
check() { # check "what" command...
  local what=$1
  shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
has() { grep -q -- "$2" "$1"; }

# import --from rmm
"$cli" import --from rmm "$src/tests/data/rmm/small.csv" -o "$tmp/rmm.trace" 2>"$tmp/err"
check "import rmm exits 0" test $? -eq 0
check "import rmm reports the pre-existing allocation" has "$tmp/err" "1 allocations made before the log began"
"$cli" replay "$tmp/rmm.trace" --json --no-progress >"$tmp/out" 2>&1
check "the imported RMM trace replays" has "$tmp/out" '"allocs": 2'
"$cli" import --from rmm "$src/tests/data/rmm/bad_action.csv" -o "$tmp/bad.trace" 2>"$tmp/err"
check "malformed RMM line: exit 1" test $? -eq 1
check "malformed RMM line: file and line number" has "$tmp/err" "bad_action.csv:3: unknown action"
check "malformed RMM line: nothing written" test ! -e "$tmp/bad.trace"
"$cli" import --from rmm "$src/tests/data/rmm/truncated.csv" -o "$tmp/bad.trace" 2>"$tmp/err"
check "truncated RMM log: reported with its line" has "$tmp/err" "truncated.csv:3: truncated file"
"$cli" import --from torch "$src/tests/data/torch/oom.pickle" -o "$tmp/oom.trace" 2>"$tmp/err"
check "import torch through the python importer" has "$tmp/oom.trace" " oom 0 0x100000 41943040"
"$cli" import --from csv x -o y >/dev/null 2>&1
check "import: bad --from is a usage error" test $? -eq 2
"$cli" export --to rmm "$tmp/oom.trace" -o "$tmp/x.pickle" >"$tmp/out" 2>&1
check "export: a format other than torch is a usage error" test $? -eq 2
"$cli" export --to torch "$tmp/missing.trace" -o "$tmp/x.pickle" >"$tmp/out" 2>&1
check "export of a missing trace: exit 1" test $? -eq 1
"$cli" export --to torch "$tmp/oom.trace" >"$tmp/out" 2>&1
check "export without -o: usage" has "$tmp/out" "export --to torch TRACE -o SNAPSHOT.pickle"
"$cli" export --to torch "$tmp/oom.trace" -o "$tmp/oom.pickle" >"$tmp/out" 2>&1
"$cli" import --from torch "$tmp/oom.pickle" -o "$tmp/oom2.trace" 2>"$tmp/err"
check "export then import keeps the oom event" has "$tmp/oom2.trace" " oom 0 0x100000 41943040"
printf 'not a snapshot' >"$tmp/junk.pickle"
"$cli" replay "$tmp/junk.pickle" --no-progress >"$tmp/out" 2>&1
check "replay of a file that is neither: the trace reader's message" has "$tmp/out" "junk.pickle:1"
printf '\x80\x04junk' >"$tmp/trunc.pickle"
"$cli" replay "$tmp/trunc.pickle" --no-progress >"$tmp/out" 2>&1
check "replay of a damaged pickle: exit 2, the importer's message" test $? -eq 2
check "... saying malformed snapshot" has "$tmp/out" "malformed snapshot"

# the import cache: a snapshot imported once, keyed by its bytes, the importer and the options
cache=$XDG_CACHE_HOME/mnemo
entries() { find "$cache" -name 'import-*.trace' 2>/dev/null | wc -l; }
same() { # same A B: the two replay --json outputs agree but for the host time per call
  cmp -s <(sed 's/"ns_per_op": [0-9.]*//' "$1") <(sed 's/"ns_per_op": [0-9.]*//' "$2")
}
cp "$src/tests/data/torch/framed.pickle" "$tmp/snap.pickle"
"$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/miss.json" 2>"$tmp/miss.err"
check "cache: a miss imports (exit 0)" test $? -eq 0
check "cache: one entry made" test "$(entries)" -eq 1
check "cache: its folder is private (0700)" test "$(stat -c %a "$cache")" = 700
nopy=$tmp/nopy # a PATH without python3: only a cache hit can succeed
mkdir -p "$nopy"
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/hit.json" 2>"$tmp/hit.err"
check "cache: a hit needs no importer (exit 0)" test $? -eq 0
check "cache: a hit replays the same" same "$tmp/miss.json" "$tmp/hit.json"
check "cache: a hit repeats the importer's messages" cmp -s "$tmp/miss.err" "$tmp/hit.err"
cp "$tmp/snap.pickle" "$tmp/renamed.pickle"
PATH=$nopy "$cli" replay "$tmp/renamed.pickle" --json --no-progress >"$tmp/hit2.json" 2>"$tmp/hit2.err"
check "cache: the same bytes under another name hit" test $? -eq 0
check "cache: ... and the messages name the file given ($(head -c 120 "$tmp/hit2.err"))" \
  cmp -s <(sed "s|$tmp/snap.pickle|$tmp/renamed.pickle|g" "$tmp/miss.err") "$tmp/hit2.err"
check "cache: ... never the first one's name" test "$(grep -c "$tmp/snap.pickle" "$tmp/hit2.err")" -eq 0
PATH=$nopy "$cli" report "$tmp/snap.pickle" -o "$tmp/snap.html" >"$tmp/out" 2>&1
check "cache: report uses replay's entry (every device, the importer's default)" test $? -eq 0
PATH=$nopy "$cli" snapshot "$tmp/snap.pickle" --at end >"$tmp/out" 2>&1
check "cache: so does snapshot --at" test $? -eq 0
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --json --no-progress --trace-device 0 >"$tmp/out" 2>&1
check "cache: other import options (--trace-device) miss" test $? -ne 0
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --json --no-progress --max-decompressed-size 1G >"$tmp/out" 2>&1
check "cache: other import options (--max-decompressed-size) miss" test $? -ne 0
PATH=$nopy MNEMO_CACHE=0 "$cli" replay "$tmp/snap.pickle" --no-progress >"$tmp/out" 2>&1
check "cache: MNEMO_CACHE=0 does not read it" test $? -ne 0
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --no-cache --no-progress >"$tmp/out" 2>&1
check "cache: --no-cache does not read it" test $? -ne 0
MNEMO_CACHE=0 "$cli" report "$src/tests/data/torch/oom.pickle" -o "$tmp/oom.html" >"$tmp/out" 2>&1
check "cache: MNEMO_CACHE=0 writes no entry" test "$(entries)" -eq 1
MNEMO_CACHE=$tmp/own "$cli" replay "$tmp/snap.pickle" --no-progress >"$tmp/out" 2>&1
check "cache: MNEMO_CACHE=FOLDER puts it there" test "$(find "$tmp/own" -name 'import-*.trace' | wc -l)" -eq 1
cp "$src/tests/data/torch/oom.pickle" "$tmp/snap.pickle" # the same path, other bytes
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --no-progress >"$tmp/out" 2>&1
check "cache: changed content misses" test $? -ne 0
"$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/oom.json" 2>&1
check "cache: ... and makes its own entry" test "$(entries)" -eq 2
entry=$(grep -l " oom " "$cache"/import-*.trace)
for damage in flip truncate header blanks; do
  case $damage in
    flip) python3 -c 'import sys; p = sys.argv[1]; b = bytearray(open(p, "rb").read()); b[len(b) // 2] ^= 1; open(p, "wb").write(b)' "$entry" ;;
    truncate) head -c 300 "$entry" >"$tmp/e" && cat "$tmp/e" >"$entry" ;;
    header) sed -i '1s/^mnemo-import-cache 2 /mnemo-import-cache 2 0/' "$entry" ;;
    blanks) printf 'mnemo-import-cache 2%0200d' 0 | tr 0 ' ' >"$entry" ;;
  esac
  PATH=$nopy "$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/out" 2>&1
  check "cache: a damaged entry ($damage) is not used" test $? -ne 0
  "$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/out" 2>&1
  check "cache: ... imported again, the same answer ($damage)" same "$tmp/oom.json" "$tmp/out"
  PATH=$nopy "$cli" replay "$tmp/snap.pickle" --json --no-progress >"$tmp/out" 2>&1
  check "cache: ... and the entry rewritten ($damage)" same "$tmp/oom.json" "$tmp/out"
done
chmod 777 "$cache"
PATH=$nopy "$cli" replay "$tmp/snap.pickle" --no-progress >"$tmp/out" 2>&1
check "cache: a folder others may write to is not used" test $? -ne 0
chmod 700 "$cache"

# bench/gen_torch_snapshot.py (the scale benchmark's snapshots) makes consistent
# snapshots: imported without a warning, replayed near PyTorch's peak reserved (the
# generator's allocator is a simplified PyTorch's)
python3 "$src/bench/gen_torch_snapshot.py" "$tmp/gen.pickle" --events 3000 2>/dev/null
"$cli" replay "$tmp/gen.pickle" --json --no-progress --no-cache >"$tmp/gen.json" 2>"$tmp/gen.err"
check "generated snapshot: replays" test $? -eq 0
check "generated snapshot: no importer warning" test "$(grep -c warning "$tmp/gen.err")" -eq 0
ratio=$(grep -o '"reserved_vs_torch": [0-9.]*' "$tmp/gen.json" | head -1 | cut -d' ' -f2)
check "generated snapshot: peak reserved within 1% of PyTorch's (got ${ratio:-none})" \
  awk -v r="${ratio:-0}" 'BEGIN { exit !(r > 0.99 && r < 1.01) }'
check "generated snapshot: three streams" has "$tmp/gen.json" '"streams": 3'
python3 "$src/bench/gen_torch_snapshot.py" "$tmp/gen2.pickle" --events 3000 2>/dev/null
check "generated snapshot: deterministic" cmp -s "$tmp/gen.pickle" "$tmp/gen2.pickle"

# replay
trace=$src/data/traces/ctx128_forward_mixed.trace
"$cli" replay "$trace" --device cuda >"$tmp/out" 2>&1
rc=$?
if "$cli" info | grep -q "cuda:0"; then
  check "replay --device cuda on a GPU" test $rc -eq 0
else
  check "replay --device cuda without a GPU: exit 1" test $rc -eq 1
  check "replay --device cuda without a GPU: says so" has "$tmp/out" "no CUDA device here"
fi
"$cli" replay "$trace" --capacity 16G --retries 2 --json --no-progress >"$tmp/out" 2>&1
check "replay --capacity 16G: OOMs on a 22.6 GiB trace" grep -q '"ooms": [1-9]' "$tmp/out"
check "replay --retries counted" grep -q '"retries": [1-9]' "$tmp/out"
"$cli" replay "$trace" --config "" --config expandable_segments:True --progress >"$tmp/out" 2>"$tmp/err"
check "replay: comparison table with both configs" has "$tmp/out" "expandable_segments:True"
check "replay --progress: bar on stderr" has "$tmp/err" "100%"
"$cli" replay "$trace" --json >"$tmp/out" 2>"$tmp/err" </dev/null
check "replay: no progress bar when stderr is not a terminal" test ! -s "$tmp/err"

# snapshot
"$cli" snapshot "$src/tests/corpus/trace/small.trace" --at end --blocks >"$tmp/out" 2>&1
check "snapshot of a trace: segment table" has "$tmp/out" "largest free"
check "snapshot of a trace: memory summary" has "$tmp/out" "mnemo memory summary, device sim:0"
# a trace with stacks: who holds the memory at the peak, grouped by stack
"$cli" snapshot "$src/data/traces/gpt2_train_2s.trace" --blocks >"$tmp/out" 2>&1
check "snapshot: replayed as recorded" has "$tmp/out" "(as recorded: defaults)"
check "snapshot of a v3 trace: who holds the memory" has "$tmp/out" "who holds the memory: 700 live allocations"
check "... the largest group's innermost frame" has "$tmp/out" "forward  (/opt/torch/.venv/lib/python3.12/site-packages/transformers/activations.py:66)"
check "... --blocks: the live allocations with their innermost frame" has "$tmp/out" "      at forward"
"$cli" snapshot "$trace" --at 99999999 >"$tmp/out" 2>&1
check "snapshot --at out of range: usage error" test $? -eq 2

# the stack rule (profiling/stacks.h, docs/PROFILING.md): each group of "who holds the
# memory" opens with its first user frame, never with an allocator-internal one
first_frames() { # the first line under each group's header, in order
  sed -n '/^who holds the memory/,/^$/p' "$1" | awk 'g { print; g = 0 } / MiB .*% in [0-9]* allocation/ { g = 1 }' | sed 's/^ *//'
}
"$cli" snapshot "$src/tests/data/traces/stack_rule.trace" --at end --blocks >"$tmp/out" 2>&1
first_frames "$tmp/out" >"$tmp/keys"
cat >"$tmp/want" <<'WANT'
torch::autograd::generated::MulBackward0::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)
forward  (/home/u/model.py:42)
(no user frame; the frames not internal:)
my_op(at::Tensor const&)  (/src/my_ext.cpp)
on_epoch_start  (/home/u/cb.py:7)
main  (/opt/torch/x/train.py:5)
step  (/opt/torch/.venv/lib/python3.12/site-packages/torch/optim/adam.py:100)
WANT
check "stack rule: each case's group opens with its first user frame" cmp -s "$tmp/keys" "$tmp/want" ||
  diff "$tmp/want" "$tmp/keys"
check "stack rule: no allocator-internal frame shown" \
  bash -c "! grep -E 'unwind::unwind|CapturedTraceback|gather_with_cpp|CachingAllocator::|RegisterCUDA|_PyEval' '$tmp/out'"
check "stack rule: --blocks names the first user frame" has "$tmp/out" "      at on_epoch_start  (/home/u/cb.py:7)"
# a real training step: the backward pass's allocations (C++ frames only, on
# autograd's engine thread) group under their autograd node
"$cli" snapshot "$src/data/traces/ctx128_fullstep.trace" >"$tmp/out" 2>&1
first_frames "$tmp/out" >"$tmp/keys"
check "ctx128 step: the backward pass groups under its node (BmmBackward0)" \
  grep -q '^torch::autograd::generated::BmmBackward0::apply' "$tmp/keys"
check "ctx128 step: the optimizer's state under optimizers.py" grep -q '^step  (.*/optimizers.py:82)' "$tmp/keys"
check "ctx128 step: no group opens with an object file or allocator internals" \
  bash -c "! grep -E 'execute_native_thread_routine|\.o\)|\.so|unwind|CachingAllocator|gather' '$tmp/keys'"
check "ctx128 step: no allocator-internal frame shown" \
  bash -c "! sed -n '/^who holds/,\$p' '$tmp/out' | grep -E 'unwind::unwind|CapturedTraceback|gather_with_cpp|CachingAllocator::'"

# mnemo diff A B: two bundled traces (a training step, a forward pass)
full=$src/data/traces/ctx128_fullstep.trace
fwd=$src/data/traces/ctx128_forward_mixed.trace
"$cli" diff "$full" "$fwd" >"$tmp/out" 2>&1
check "diff of two traces exits 0" test $? -eq 0
check "diff: the peaks, A and B" has "$tmp/out" "replay allocated                        51.30 GiB      22.37 GiB   -28.92 GiB (-56.4%)"
check "diff: who holds each peak, by the first user frame" has "$tmp/out" "who holds each peak of allocated bytes"
check "diff: the backward pass's group only in A" \
  grep -q -- "-12929.66 MiB   torch::autograd::generated::BmmBackward0::apply(.*) (226 -> 0 allocations)" "$tmp/out"
check "diff: segments only in one" has "$tmp/out" "97 only in B"
"$cli" diff "$full" "$fwd" --json >"$tmp/diff.json" 2>"$tmp/err"
"$cli" replay "$full" --json --no-progress >"$tmp/ra.json" 2>&1
"$cli" replay "$fwd" --json --no-progress >"$tmp/rb.json" 2>&1
# the JSON: one object; its figures against replay --json, the trace's meta, and sums
diff_json_check() { # diff_json_check DIFF.json REPLAY_A.json REPLAY_B.json TRACE_A TRACE_B
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = []
for side, rp, tr in (("a", sys.argv[2], sys.argv[4]), ("b", sys.argv[3], sys.argv[5])):
    s, r = d[side], json.load(open(rp))
    r = r[0] if isinstance(r, list) else r
    if (s["peak_allocated"], s["peak_reserved"]) != (r["peak_allocated"], r["peak_reserved"]):
        bad.append(f"{side}: peaks {s['peak_allocated']}, {s['peak_reserved']} != replay's")
    meta = dict(l.split()[1:] for l in open(tr) if l.startswith("meta ") and len(l.split()) == 3)
    for k in ("torch_peak_allocated", "torch_peak_reserved"):
        if str(s[k]) != meta.get(k, "None"):
            bad.append(f"{side}: {k} {s[k]} != meta {meta.get(k)}")
    held = sum(g[side + "_bytes"] for g in d["groups"])
    if held != s["live_bytes_at_peak"] or sum(g[side + "_count"] for g in d["groups"]) != s["live_at_peak"]:
        bad.append(f"{side}: groups hold {held} B, not the {s['live_bytes_at_peak']} B alive at its peak")
deltas = [abs(g["b_bytes"] - g["a_bytes"]) for g in d["groups"]]
if deltas != sorted(deltas, reverse=True) or any(g["delta_bytes"] != g["b_bytes"] - g["a_bytes"] for g in d["groups"]):
    bad.append("groups not by |delta|, largest first, or a wrong delta")
if any(x["a_count"] == x["b_count"] for x in d["segments"]) or \
        sum(x["a_count"] - x["b_count"] for x in d["segments"]) != d["a"]["segments_at_peak"] - d["b"]["segments_at_peak"]:
    bad.append("segment rows do not account for the segment counts")
print("; ".join(bad) or "ok")
sys.exit(1 if bad else 0)
PY
}
check "diff --json: one object; peaks as replay, PyTorch's as meta, groups sum to each peak's live bytes" \
  diff_json_check "$tmp/diff.json" "$tmp/ra.json" "$tmp/rb.json" "$full" "$fwd"
check "diff --json: the labels A and B" grep -q '"label": "B"' "$tmp/diff.json"
# two ranks of one job (generated): labelled by rank, the change per group exact
gen_rank() { # gen_rank FILE N_MODEL_ALLOCS WITH_EXTRA
  {
    echo "mnemo-trace 3"
    echo "frame 1 10 /home/u/train.py main"
    echo "frame 2 42 /home/u/model.py forward"
    echo "frame 3 7 /home/u/comm.py all_gather"
    echo "stack 1 2 1"
    echo "stack 2 3 1"
    n=0
    for k in $(seq 1 "$2"); do echo "$k alloc 0 0x$((k + 16))0000000 10485760 10485760 0 1"; n=$((n + 1)); done
    if [ "$3" = 1 ]; then echo "50 alloc 0 0x900000000 31457280 31457280 0 2"; n=$((n + 1)); fi
    echo "end $n"
  } >"$1"
}
gen_rank "$tmp/job_rank0.trace" 2 0
gen_rank "$tmp/job_rank1.trace" 3 1
"$cli" diff "$tmp/job_rank0.trace" "$tmp/job_rank1.trace" --json >"$tmp/ranks.json" 2>&1
"$cli" replay "$tmp/job_rank0.trace" --json --no-progress >"$tmp/ra.json" 2>&1
"$cli" replay "$tmp/job_rank1.trace" --json --no-progress >"$tmp/rb.json" 2>&1
check "diff of two ranks: the JSON's sums and peaks hold" \
  diff_json_check "$tmp/ranks.json" "$tmp/ra.json" "$tmp/rb.json" "$tmp/job_rank0.trace" "$tmp/job_rank1.trace"
check "diff of two ranks: labelled rank 0 and rank 1" \
  /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d['ranks'] and d['a']['label'] == 'rank 0' and d['b']['label'] == 'rank 1'))" "$tmp/ranks.json"
check "diff of two ranks: the change per group, largest first" \
  /usr/bin/python3 -c "
import json, sys
g = [(x['group'], x['delta_bytes']) for x in json.load(open(sys.argv[1]))['groups']]
sys.exit(g != [('/home/u/comm.py:7 all_gather', 31457280), ('/home/u/model.py:42 forward', 10485760)])" "$tmp/ranks.json"
check "diff of two ranks: a segment only in rank 1" \
  /usr/bin/python3 -c "import json,sys; sys.exit(not any(s['b_count'] > s['a_count'] for s in json.load(open(sys.argv[1]))['segments']))" "$tmp/ranks.json"
"$cli" diff "$tmp/job_rank0.trace" "$tmp/job_rank1.trace" >"$tmp/out" 2>&1
check "diff of two ranks (text): says so, and names the ranks" has "$tmp/out" "mnemo diff of two ranks:"
check "... rank 1's extra group" grep -q "+30.00 MiB   /home/u/comm.py:7 all_gather (0 -> 1 allocations)" "$tmp/out"
# a snapshot against its own import: nothing changes
"$cli" diff "$src/data/traces/gpt2_train_2s.pickle.gz" "$src/data/traces/gpt2_train_2s.trace" --json >"$tmp/same.json" 2>"$tmp/err"
check "diff of a pickle (imported on the fly) and its trace: no change anywhere" \
  /usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(not (d['groups'] and all(g['delta_bytes'] == 0 for g in d['groups']) and not d['segments'] and
              d['a']['peak_reserved'] == d['b']['peak_reserved']))" "$tmp/same.json"
# a snapshot of two GPUs: one device compared, named; --trace-device picks it (its own PyTorch figures)
md=$src/tests/data/torch/multi_device.pickle
"$cli" diff "$md" "$md" --json >"$tmp/md.json" 2>"$tmp/err"
check "diff of a two-GPU snapshot: device 0 compared, a note names the choice" \
  bash -c "grep -q 'comparing device 0 (--trace-device N for another)' '$tmp/err' && grep -q '\"device\": 0' '$tmp/md.json'"
"$cli" diff "$md" "$md" --trace-device=1 --json >"$tmp/md.json" 2>"$tmp/err"
check "diff --trace-device 1: device 1 with its PyTorch figures (dev1.torch_*), no change" \
  /usr/bin/python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
a = d['a']
sys.exit(not (a['device'] == 1 and a['torch_peak_allocated'] == 8388608 and a['torch_peak_reserved'] == 20971520 and
              all(g['delta_bytes'] == 0 for g in d['groups']) and not d['segments']))" "$tmp/md.json"
"$cli" diff "$md" "$md" --trace-device 3 >/dev/null 2>"$tmp/err"
rc=$?
check "diff --trace-device of a device it lacks: exit 2 (got $rc)" test $rc -eq 2
check "... said" has "$tmp/err" "has no device 3"

# snapshot of a snapshot with three GPUs (one OOM on cuda:1) and one with pinned host
# memory: --trace-device picks the device (replayed as `replay` does: its capacity
# as recorded, its OOM tried again), a note names the one shown by default
mdo="$src/tests/data/torch/multi_device_oom.pickle"
"$cli" snapshot "$mdo" --json >"$tmp/s0.json" 2>"$tmp/err"
check "snapshot --json of 3 GPUs: exit 0" test $? -eq 0
check "... a note: the lowest device shown" has "$tmp/err" "holds several devices; showing device 0"
"$cli" snapshot "$mdo" --json --trace-device 1 >"$tmp/s1.json" 2>"$tmp/err"
check "snapshot --json --trace-device 1: exit 0" test $? -eq 0
"$cli" replay "$mdo" --json --trace-device 1 --no-progress >"$tmp/r1.json" 2>/dev/null
check "... device 1's allocations at its peak, as replay's peak allocated" python3 -c "
import json, sys
s0, s1, r = (json.load(open(p)) for p in sys.argv[1:4])
sys.exit(not (s0['device'] == 0 and s1['device'] == 1 and s1['allocated_bytes'] == r['peak_allocated'] and
              sum(a['size'] for a in s1['allocations']) == s1['allocated_bytes'] and
              s0['allocated_bytes'] != s1['allocated_bytes']))" "$tmp/s0.json" "$tmp/s1.json" "$tmp/r1.json"
"$cli" snapshot "$mdo" --trace-device 1 --at end >"$tmp/out" 2>/dev/null
check "snapshot --trace-device 1 (text) names the device" grep -q '\[end\] device 1$' "$tmp/out"
"$cli" snapshot "$mdo" --trace-device 5 --json >/dev/null 2>"$tmp/err"
rc=$?
check "snapshot --trace-device of a device it lacks: exit 2 (got $rc)" test $rc -eq 2
"$cli" snapshot "$src/tests/data/torch/torch214.pickle" --trace-device 1 --json >"$tmp/out" 2>"$tmp/err"
rc=$?
check "snapshot --trace-device of the pinned host memory: exit 2 (got $rc), nothing printed" test $rc -eq 2 -a ! -s "$tmp/out"
check "... said why" has "$tmp/err" "pinned host memory (meta host_device)"
"$cli" report "$md" "$md" --trace-device 1 -o "$tmp/md.html" >/dev/null 2>&1
check "report A B --trace-device 1: the page" grep -q '"device": 1' "$tmp/md.html"
# usage errors
"$cli" diff "$full" >/dev/null 2>&1
check "diff with one input: usage error" test $? -eq 2
"$cli" diff "$full" "$fwd" "$full" >/dev/null 2>&1
check "diff with three inputs: usage error" test $? -eq 2
"$cli" diff "$full" "$tmp/missing.trace" >/dev/null 2>"$tmp/err"
check "diff of a missing file: exit 1, named" test $? -eq 1
"$cli" report "$full" "$fwd" >/dev/null 2>&1
check "report A B without -o: usage error" test $? -eq 2
"$cli" report "$full" "$fwd" -o "$tmp/d.html" --capacity 1G >/dev/null 2>"$tmp/err"
check "report A B with an option of one trace's report: usage error, said" test $? -eq 2
check "... naming the options two inputs take" has "$tmp/err" "with two inputs (a comparison): -o, --title"
"$cli" report "$full" "$fwd" -o "$tmp/d.html" >"$tmp/out" 2>&1
check "report A B writes the diff page" grep -q 'id="mn-delta"' "$tmp/d.html"
"$cli" report "$full" "$fwd" -o - >"$tmp/d2.html" 2>"$tmp/err"
check "report A B -o -: the page on stdout, the summary on stderr" \
  bash -c "grep -q 'id=\"mn-delta\"' '$tmp/d2.html' && grep -q '^report (stdout)' '$tmp/err'"
"$cli" diff "$full" "$fwd" --top=2 --config=expandable_segments:True >"$tmp/out" 2>&1
check "diff --top=2 --config=X: two rows, replayed with X" \
  bash -c "grep -q '(2 of [0-9]* groups)' '$tmp/out' && grep -q 'replayed on sim:0 (expandable_segments:True)' '$tmp/out'"
"$cli" diff "$full" "$fwd" --config a --config b >/dev/null 2>"$tmp/err"
rc=$?
check "diff with two --config: usage error (got $rc)" test $rc -eq 2
check "... said" has "$tmp/err" "one --config for both"

# MNEMO_TRACE: every caching allocator of the process is recorded, written at exit.
# (--no-pre-segments: laying the pre segments out as recorded allocates and frees
# placeholders, which the recorder would record as events of the live run too)
MNEMO_TRACE="$tmp/rec.trace" "$cli" replay "$src/tests/corpus/trace/small.trace" --json --no-progress \
  --no-pre-segments >"$tmp/live" 2>&1
check "MNEMO_TRACE writes the trace at exit" test -s "$tmp/rec.trace"
"$cli" replay "$tmp/rec.trace" --json --no-progress >"$tmp/again" 2>&1
live=$(grep -o '"peak_reserved": [0-9]*' "$tmp/live")
again=$(grep -o '"peak_reserved": [0-9]*' "$tmp/again")
check "recorded-at-exit trace replays to the live peak reserved ($live / $again)" test -n "$live" -a "$live" = "$again"
live=$(grep -o '"peak_allocated": [0-9]*' "$tmp/live")
again=$(grep -o '"peak_allocated": [0-9]*' "$tmp/again")
check "... and peak allocated ($live / $again)" test -n "$live" -a "$live" = "$again"

# environment variables: one table (runtime/env.h), one reader (runtime/env.c)
# Sizes are user data: a valid trace whose sizes sum past 2^63 (two blocks of
# 2^63 - 4096 bytes, one of 2^64 - 1) goes through report, replay and snapshot
# with no signed overflow (the asan preset's UBSan aborts on one) and curves
# that saturate instead of going negative.
big=$(((1 << 62) + ((1 << 62) - 4096)))
{
  echo "mnemo-trace 1"
  echo "0 segment_alloc 0 0x100000000 $big"
  echo "1 alloc 0 0x100000000 $big"
  echo "2 segment_alloc 0 0x200000000 $big"
  echo "3 alloc 0 0x200000000 $big"
  echo "4 alloc 0 0x300000000 18446744073709551615"
  echo "5 free_requested 0 0x100000000 $big"
  echo "6 free_completed 0 0x100000000 $big"
  echo "7 alloc 0 0x400000000 1024"
  echo "end 8"
} >"$tmp/huge.trace"
"$cli" report "$tmp/huge.trace" -o "$tmp/huge.html" >"$tmp/out" 2>&1
rc=$?
check "report of a trace with huge sizes exits 0 ($(grep -m1 'runtime error' "$tmp/out"))" test $rc -eq 0
check "report of huge sizes: the curves never negative, saturated at 2^63 - 1" /usr/bin/python3 - "$tmp/huge.html" <<'PY'
import json, re, sys
page = open(sys.argv[1]).read()
d = json.loads(re.search(r'<script id="mn-data" type="application/json">(.*?)</script>', page, re.S).group(1))
pts = d["points"]
curves = [pts[k] for k in ("lv", "g", "ra", "rr", "a", "r", "q")]
assert all(v >= 0 for c in curves for v in c), curves
assert pts["lv"][-1] == 2**63 - 1 and pts["ra"][-1] == 2**63 - 1 and pts["rr"][-1] == 2**63 - 1, pts
PY
"$cli" replay "$tmp/huge.trace" --json --no-progress >"$tmp/out" 2>&1
check "replay of huge sizes exits 0" test $? -eq 0
"$cli" snapshot "$tmp/huge.trace" --at end --blocks >"$tmp/out" 2>&1
check "snapshot of huge sizes exits 0" test $? -eq 0

names=$(sed -n 's/^ *X([A-Z_]*, *"\([A-Z_]*\)".*/\1/p' "$src/runtime/env.h")
check "the environment table has its 11+ variables" test "$(echo "$names" | wc -l)" -ge 11
MNEMO_TOOLS_DIR=/no/such/dir "$cli" info >"$tmp/out" 2>&1
check "mnemo info exits 0" test $? -eq 0
for n in $names; do
  check "mnemo info lists $n" grep -q "^  $n[ =]" "$tmp/out"
done
# README's table is the same table: a row `| \`NAME\` | meaning | default |` per
# variable, as `mnemo info` prints them ("  NAME..." then "      meaning; default: D")
sed -n '/^## Environment variables/,/^## [^E]/p' "$src/README.md" | grep '^| `' >"$tmp/readme_env"
sed -n '/^environment:/,$p' "$tmp/out" >"$tmp/info_env"
rows=0
while IFS= read -r l; do
  case $l in
    "      "*)
      body=${l#      }
      row="| \`$name\` | ${body%; default: *} | ${body##*; default: } |"
      rows=$((rows + 1))
      check "README's environment table has: $row" grep -qxF -- "$row" "$tmp/readme_env" ;;
    "  "*) name=${l#  }; name=${name%%[ =]*} ;;
  esac
done <"$tmp/info_env"
check "README's environment table has no other rows" test "$(wc -l <"$tmp/readme_env")" -eq "$rows"
check "mnemo info shows a set value" grep -q '^  MNEMO_TOOLS_DIR="/no/such/dir"$' "$tmp/out"
(cd "$src" && grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cpp' 'getenv *\(' \
  runtime allocators kernels storage profiling tools | grep -v '^runtime/env\.c:') >"$tmp/getenv"
check "no getenv( outside runtime/env.c (found: $(cat "$tmp/getenv"))" test ! -s "$tmp/getenv"

# what report is doing, on stderr: with --progress (the default on a terminal for
# 100,000 entries or more), never when stderr is not a terminal or with --no-progress
ctx="$src/data/traces/ctx128_forward_mixed.trace"
"$cli" report "$ctx" -o "$tmp/p.html" --config "" --config expandable_segments:True --progress >"$tmp/out" 2>"$tmp/perr"
check "report --progress exits 0" test $? -eq 0
check "report --progress: each config's replay" has "$tmp/perr" "cuda:0: replaying 6543 entries (config 2 of 2)"
check "report --progress: writing the page" has "$tmp/perr" "writing the page (1 devices)"
check "report --progress: the line is cleared before the summary" test "$(tail -c 4 "$tmp/perr" | od -An -c | tr -d ' ')" = '\r033[K'
check "report --progress: the summary on stdout as always" has "$tmp/out" "report $tmp/p.html: 6543 entries"
"$cli" report "$ctx" -o "$tmp/p.html" >"$tmp/out" 2>"$tmp/perr"
check "report: nothing on stderr when it is not a terminal" test ! -s "$tmp/perr"
"$cli" report "$ctx" -o "$tmp/p.html" --progress --no-progress >"$tmp/out" 2>"$tmp/perr"
check "report --no-progress: nothing on stderr" test ! -s "$tmp/perr"

# report --json: the summary as one JSON object (what mnemo.profiling.report
# returns): its numbers those of `replay --json` and of the trace's meta, its
# "summary" the text printed without --json, the page byte for byte the same
"$cli" report "$ctx" -o "$tmp/j.html" --config "" --config expandable_segments:True --json >"$tmp/j.json" 2>"$tmp/err"
check "report --json exits 0, nothing on stderr" test $? -eq 0 -a ! -s "$tmp/err"
"$cli" report "$ctx" -o "$tmp/t.html" --config "" --config expandable_segments:True >"$tmp/t.txt" 2>&1
masked() { sed -E 's/"ns_per_op": [0-9.e+-]+/T/g; s/0x[0-9a-f]+/A/g; s/"addr": "[^"]*"/A/g' "$1"; }
same_page() { cmp -s <(masked "$1") <(masked "$2"); }
check "report --json: the same page as without (but for timings and SIM addresses)" same_page "$tmp/j.html" "$tmp/t.html"
"$cli" replay "$ctx" --json --no-progress --config "" --config expandable_segments:True >"$tmp/rp.json" 2>&1
check "report --json: its numbers" /usr/bin/python3 - "$tmp/j.json" "$tmp/t.txt" "$tmp/rp.json" "$tmp/j.html" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
rp = json.load(open(sys.argv[3]))
assert d["path"] == sys.argv[4] and d["bytes"] == os.path.getsize(sys.argv[4]), d
assert (d["entries"], d["configs"], len(d["devices"])) == (6543, 2, 1), d
import re
bytes_masked = lambda s: re.sub(r", \d+ bytes\n", ", N bytes\n", s, count=1)  # the page holds timings: +-digits
assert bytes_masked(d["summary"]) == bytes_masked(text.replace(sys.argv[4].replace("j.html", "t.html"), sys.argv[4])), \
    (d["summary"], text)
dev = d["devices"][0]
assert (dev["device"], dev["label"], dev["replayed"], dev["state_only"]) == (0, "cuda:0", True, False), dev
assert (dev["capacity"], dev["capacity_from"]) == (rp[0]["capacity"], rp[0]["capacity_from"]), dev
assert (dev["peak_reserved"], dev["peak_allocated"]) == (rp[0]["peak_reserved"], rp[0]["peak_allocated"]), dev
assert dev["torch"] == {"peak_reserved": 24245174272, "peak_allocated": 24024505344}, dev
assert f"at entry {dev['peak_reserved_entry']}; peak allocated" in text, text
assert f"at entry {dev['peak_allocated_entry']}\n" in text, text
sm = dev["segment_map"]
assert sm["entry"] == dev["peak_reserved_entry"] and f"{sm['segments']} segments, {sm['blocks']} blocks" in text, sm
assert f"{dev['live_at_peak_allocated']} allocations alive" in text and dev["largest_live"]["line"] > 0, dev
assert [r["config"] for r in dev["results"]] == ["", "expandable_segments:True"], dev
for r, q in zip(dev["results"], rp):
    assert (r["peak_reserved"], r["peak_allocated"], r["ooms"]) == (q["peak_reserved"], q["peak_allocated"], q["ooms"])
    assert abs(r["ratio"] - q["ratio"]) < 1e-4 and not r["as_recorded"], (r, q)
PY
# a snapshot with a GPU and its pinned host memory (shown as recorded), the page on stdout: the JSON on stderr
"$cli" report "$src/tests/data/torch/torch214.pickle" -o - --json >"$tmp/j2.html" 2>"$tmp/j2.err"
check "report -o - --json exits 0" test $? -eq 0
check "report -o - --json: the page on stdout, the JSON on stderr, after the importer notes" /usr/bin/python3 - "$tmp/j2.html" "$tmp/j2.err" <<'PY'
import json, sys
assert open(sys.argv[1]).read().rstrip().endswith("</html>")
err = open(sys.argv[2]).read()
d = json.loads(err[err.index('{"path"'):])
assert d["path"] is None and d["summary"].startswith("report (stdout): "), d
assert [(x["device"], x["label"], x["replayed"]) for x in d["devices"]] == [(0, "cuda:0", True), (1, "pinned host memory", False)], d
host = d["devices"][1]
assert host["capacity"] is None and host["results"] == [] and host["torch"] is None, host
assert host["peak_allocated"] == 4194304 and host["segment_map"]["entry"] == host["peak_allocated_entry"], host
assert d["devices"][0]["results"][0]["as_recorded"] is True, d
PY
# report A B --json: the comparison's page, and `diff --json`'s object with its path and size
full="$src/data/traces/ctx128_fullstep.trace"
"$cli" report "$full" "$ctx" -o "$tmp/dj.html" --json >"$tmp/dj.json" 2>"$tmp/err"
check "report A B --json exits 0" test $? -eq 0
"$cli" diff "$full" "$ctx" --json >"$tmp/dd.json" 2>&1
check "report A B --json: diff --json's object, with the page's path and size" /usr/bin/python3 - "$tmp/dj.json" "$tmp/dd.json" "$tmp/dj.html" <<'PY'
import json, os, sys
d, dd = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert d.pop("path") == sys.argv[3] and d.pop("bytes") == os.path.getsize(sys.argv[3]), d
assert d == dd, (d, dd)
PY

echo "$fails failed"
[ "$fails" -eq 0 ]
