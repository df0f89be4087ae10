#!/usr/bin/env bash
# tests/test_cli_conventions.sh: the conventions every mnemo subcommand keeps
# (tools/cli.h, docs/PROFILING.md "CLI conventions"): --help/-h prints the
# command's usage on stdout and exits 0 (demo --help runs nothing); --opt=value is
# --opt value; -o - writes stdout (report, import, export) and no file named -;
# an unknown option, a missing value or a missing argument is exit 2 with a
# message naming it and the usage hint on stderr; no option silently ignored
# (snapshot of a pickle --at, --config with --allocator naive, --max-decompressed-size
# with --from rmm, arguments to info); config names shown whole; `mnemo --help`
# lists every command of the table and the exit statuses.
# Usage: test_cli_conventions.sh MNEMO_CLI SOURCE_DIR
set -u
cli=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1 # a file named - would land here
fails=0
check() { # check "what" command...
  local what=$1
  shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
has() { grep -qF -- "$2" "$1"; }
trace=$src/data/traces/ctx128_forward_mixed.trace
small=$src/tests/corpus/trace/small.trace
pickle=$src/tests/data/torch/oom.pickle
rmm=$src/tests/data/rmm/small.csv
commands="info demo replay report snapshot diff import export bench version"

# mnemo --help: every command of the table, the exit statuses
"$cli" --help >"$tmp/out" 2>"$tmp/err"
check "mnemo --help exits 0" test $? -eq 0
for c in $commands; do check "mnemo --help lists $c" grep -q "^  $c  *[a-z]" "$tmp/out"; done
check "mnemo --help documents exit status 1" grep -q "^  1  a failure" "$tmp/out"
check "mnemo --help documents exit status 2" grep -q "^  2  bad usage" "$tmp/out"
"$cli" help replay >"$tmp/out" 2>&1
check "mnemo help replay: replay's usage" has "$tmp/out" "usage: mnemo replay TRACE"
"$cli" nosuch >"$tmp/out" 2>"$tmp/err"
check "unknown command: exit 2" test $? -eq 2
check "... named on stderr" has "$tmp/err" '"nosuch"'

# --help and -h on every command: its usage on stdout, exit 0, nothing on stderr
for c in $commands; do
  for h in --help -h; do
    timeout 20 "$cli" "$c" "$h" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    check "$c $h exits 0 (got $rc)" test $rc -eq 0
    check "$c $h: its usage on stdout" grep -q "^usage: mnemo $c" "$tmp/out"
    check "$c $h: --help listed" has "$tmp/out" "-h, --help"
    check "$c $h: nothing on stderr" test ! -s "$tmp/err"
  done
done
"$cli" demo --help >"$tmp/out" 2>&1
check "demo --help runs no demo" test -z "$(grep -e 'demo ok' -e 'demo FAILED' -e '^on ' "$tmp/out")"
"$cli" replay "$small" --no-progress --help >"$tmp/out" 2>&1
check "--help after other arguments: the usage, no replay" test -z "$(grep '^trace ' "$tmp/out")"
check "... the options are listed with their help" has "$tmp/out" "--config ALLOC_CONF"

# unknown option: exit 2, named, the usage hint, for every command
for c in $commands; do
  "$cli" "$c" --bogus-option >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "$c --bogus-option: exit 2 (got $rc)" test $rc -eq 2
  check "$c --bogus-option: named on stderr" has "$tmp/err" '"--bogus-option"'
  check "$c --bogus-option: the usage hint" has "$tmp/err" "usage: mnemo $c"
done
"$cli" replay "$small" -Q >"$tmp/out" 2>"$tmp/err"
check "an unknown short option: exit 2, named" test $? -eq 2 -a -n "$(grep -F '"-Q"' "$tmp/err")"
"$cli" replay "$small" --json=yes >"$tmp/out" 2>"$tmp/err"
check "a flag given a value: exit 2" test $? -eq 2
check "... saying it takes none" has "$tmp/err" "--json takes no value"

# a missing value: exit 2, named
missing() { # missing NAME OPTION COMMAND ARGS...: the option last, with no value
  local name=$1 opt=$2
  shift 2
  "$cli" "$@" "$opt" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  check "$name: exit 2 (got $rc)" test $rc -eq 2
  check "$name: '$opt needs a value' on stderr" has "$tmp/err" "$opt needs a value"
}
missing "replay --config" --config replay "$small"
missing "replay --repeat" --repeat replay "$small"
missing "report -o" -o report "$small"
missing "report --title" --title report "$small" -o "$tmp/r.html"
missing "snapshot --at (a trace)" --at snapshot "$small"
missing "snapshot --at (a pickle)" --at snapshot "$pickle"
missing "import --from" --from import "$rmm" -o "$tmp/i.trace"
missing "export --device" --device export --to torch "$small" -o "$tmp/e.pickle"
missing "bench --sizes" --sizes bench
"$cli" replay >"$tmp/out" 2>"$tmp/err"
check "replay without a trace: exit 2" test $? -eq 2
check "... saying what is missing" has "$tmp/err" "missing trace"
"$cli" replay "$small" "$small" >"$tmp/out" 2>"$tmp/err"
check "replay of two traces: exit 2, the second named" test $? -eq 2 -a -n "$(grep -F 'unexpected argument' "$tmp/err")"

# --opt=value is --opt value (the timings aside)
strip() { sed -e 's/"ns_per_op": [0-9.e+-]*//g' "$1"; }
"$cli" replay "$trace" --json --no-progress --config=expandable_segments:True --capacity=80G --retries=1 >"$tmp/a"
"$cli" replay "$trace" --json --no-progress --config expandable_segments:True --capacity 80G --retries 1 >"$tmp/b"
check "replay --config=X is --config X (same JSON)" test -s "$tmp/a" -a "$(strip "$tmp/a")" = "$(strip "$tmp/b")"
check "... with the config given" has "$tmp/a" '"config": "expandable_segments:True"'
"$cli" replay --json --no-progress --config= --config=expandable_segments:True "$trace" >"$tmp/a"
check "options before the trace, --config= (defaults) twice: a list of 2" test "$(grep -c '"config":' "$tmp/a")" -eq 2
"$cli" snapshot "$small" --at=end >"$tmp/a" 2>&1
"$cli" snapshot "$small" --at end >"$tmp/b" 2>&1
check "snapshot --at=end is --at end" test -s "$tmp/a" -a "$(cat "$tmp/a")" = "$(cat "$tmp/b")"
check "... at the end" has "$tmp/a" "[end]"
"$cli" report "$small" --output="$tmp/eq.html" >"$tmp/out" 2>&1
check "report --output=FILE is -o FILE" grep -q "mn-data" "$tmp/eq.html"

# -o - writes stdout, and no file named -
"$cli" report "$small" -o - >"$tmp/page.html" 2>"$tmp/err"
check "report -o -: exit 0" test $? -eq 0
check "report -o -: the page on stdout" grep -q "mn-data" "$tmp/page.html"
check "report -o -: the summary on stderr" has "$tmp/err" "report (stdout)"
check "report -o -: nothing but the page on stdout" test "$(tail -c 8 "$tmp/page.html" | tr -d '\n')" = "</html>"
"$cli" import --from rmm "$rmm" -o - >"$tmp/rmm.out" 2>"$tmp/err"
check "import --from rmm -o -: the trace on stdout" test "$(head -n 1 "$tmp/rmm.out")" = "mnemo-trace 1"
"$cli" replay "$tmp/rmm.out" --json --no-progress >"$tmp/out" 2>&1
check "... a trace that replays" has "$tmp/out" '"allocs": 2'
"$cli" import --from torch "$pickle" -o - >"$tmp/torch.out" 2>"$tmp/err"
check "import --from torch -o -: the trace on stdout" has "$tmp/torch.out" " oom 0 0x100000 41943040"
"$cli" export --to torch "$small" -o - >"$tmp/exp.out" 2>"$tmp/err"
check "export -o -: the pickle on stdout" test "$(head -c 1 "$tmp/exp.out" | od -An -tx1 | tr -d ' ')" = 80
"$cli" bench --device cpu --cases fill_u8 --sizes 64K --reps 1 --min-time 0 --plot - >"$tmp/out" 2>"$tmp/err"
check "bench --plot -: exit 2 (stdout holds the results), nothing run" test $? -eq 2 -a ! -s "$tmp/out"
check "no file named - anywhere" test ! -e "$tmp/-"

# no silent ignores
"$cli" snapshot "$pickle" --at end >"$tmp/out" 2>"$tmp/err"
check "snapshot of a pickle --at end: honoured (imported, replayed to the end)" has "$tmp/out" "[end]"
"$cli" snapshot "$pickle" --at 99999 >"$tmp/out" 2>"$tmp/err"
check "snapshot of a pickle --at out of range: exit 2" test $? -eq 2
"$cli" snapshot "$small" --at nowhere >"$tmp/out" 2>"$tmp/err"
check "snapshot --at nowhere: exit 2" test $? -eq 2
"$cli" replay "$small" --allocator naive --config expandable_segments:True >"$tmp/out" 2>"$tmp/err"
check "replay --allocator naive with one --config: exit 2" test $? -eq 2
check "... saying why" has "$tmp/err" "--config applies to the caching allocator"
"$cli" import --from rmm "$rmm" -o "$tmp/x.trace" --max-decompressed-size 1G >"$tmp/out" 2>"$tmp/err"
check "import --from rmm --max-decompressed-size: exit 2" test $? -eq 2
"$cli" export --to torch "$small" -o "$tmp/e.pickle" --device=first >"$tmp/out" 2>"$tmp/err"
check "export --device first: exit 2, mnemo's message (not the script's)" test $? -eq 2 -a -n "$(grep '^mnemo export: --device' "$tmp/err")"
"$cli" import --from torch "$pickle" -o "$tmp/i.trace" --device first >"$tmp/out" 2>"$tmp/err"
check "import --device first: exit 2, mnemo's message" test $? -eq 2 -a -n "$(grep '^mnemo import: --device' "$tmp/err")"
"$cli" import --from torch "$pickle" -o "$tmp/i.trace" --device=all >"$tmp/out" 2>"$tmp/err"
check "import --device=all: exit 0" test $? -eq 0
"$cli" info extra >"$tmp/out" 2>"$tmp/err"
check "info with an argument: exit 2" test $? -eq 2
"$cli" version extra >"$tmp/out" 2>"$tmp/err"
check "version with an argument: exit 2" test $? -eq 2
"$cli" bench extra >"$tmp/out" 2>"$tmp/err"
check "bench with an argument: exit 2" test $? -eq 2

# config names whole: the replay table and the report summary
long="expandable_segments:False,max_split_size_mb:1024,roundup_power2_divisions:4,garbage_collection_threshold:0.8"
"$cli" replay "$small" --no-progress --config "$long" --config "" >"$tmp/out" 2>&1
check "replay table: the long config name whole" grep -q "^$long  *[0-9]" "$tmp/out"
check "replay table: the columns aligned (peak alloc header over the figures)" /usr/bin/python3 - "$tmp/out" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
head = next(l for l in lines if l.startswith("config "))
col = head.index("peak alloc") + len("peak alloc")
rows = [l for l in lines if l.startswith("expandable_segments:False") or l.startswith("(defaults)")]
assert len(rows) == 2 and all(r[col - 1] == "B" for r in rows), (head, rows)
PY
"$cli" report "$small" -o "$tmp/long.html" --config "$long" >"$tmp/out" 2>&1
check "report summary: the long config name whole" has "$tmp/out" "  $long "

echo "$fails failed"
[ "$fails" -eq 0 ]
