#!/bin/bash
# tests/test_cli_files.sh: the mnemo CLI on paths that are not regular files
# and outputs that cannot be written: each command exits 1 at once
# with a message, never blocks on a FIFO, never reads /dev/zero forever and
# never reports success for output that was lost. timeout turns a hang into a
# failure. Usage: test_cli_files.sh MNEMO_CLI SOURCE_DIR
set -u
cli=$1 src=$2
trace=$src/data/traces/ctx128_forward_mixed.trace
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkfifo "$d/f"
fail=0
# expect NAME WANTED_TEXT COMMAND...: exit status 1 and WANTED_TEXT on stderr
expect() {
  local name=$1 want=$2
  shift 2
  timeout 60 "$@" >"$d/out" 2>"$d/err"
  local rc=$?
  if [ "$rc" != 1 ] || ! grep -q "$want" "$d/err"; then
    echo "FAIL $name: exit $rc, stderr: $(head -c 300 "$d/err")"
    fail=1
  else
    echo "ok   $name: $(head -c 200 "$d/err")"
  fi
}
expect "snapshot of a FIFO" "not a regular file" "$cli" snapshot "$d/f"
expect "import --from rmm of a FIFO" "not a regular file" "$cli" import --from rmm "$d/f" -o "$d/o.trace"
expect "import --from torch of a FIFO" "not a regular file" "$cli" import --from torch "$d/f" -o "$d/o.trace"
expect "import --from torch of /dev/zero" "not a regular file" "$cli" import --from torch /dev/zero -o "$d/o.trace"
expect "export of a FIFO" "not a regular file" "$cli" export --to torch "$d/f" -o "$d/o.pickle"
expect "replay of a FIFO" "not a regular file" "$cli" replay "$d/f"
expect "report into a FIFO" "not a regular file" "$cli" report "$trace" -o "$d/f"
expect "report into /dev/full" "not a regular file" "$cli" report "$trace" -o /dev/full
expect "replay with stdout on /dev/full" "writing the output failed" sh -c "exec '$cli' replay '$trace' >/dev/full"
# and the report still lands in a regular file
if ! timeout 120 "$cli" report "$trace" -o "$d/r.html" >/dev/null || ! grep -q "mn-data" "$d/r.html"; then
  echo "FAIL report into a regular file"
  fail=1
fi
exit $fail
