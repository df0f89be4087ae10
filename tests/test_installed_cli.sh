#!/usr/bin/env bash
# tests/test_installed_cli.sh: the installed mnemo CLI works where it is installed,
# from any prefix, without the source tree: it finds its PyTorch importer and
# exporter and the sample traces in <prefix>/share/mnemo relative to itself. Installs
# the build into a scratch prefix, moves the prefix elsewhere (so no path compiled
# in at install time can be what it uses), and drives replay, report, snapshot,
# import, export and demo on a real snapshot with MNEMO_TOOLS_DIR/MNEMO_DATA_DIR
# unset, and imports the installed Python package from there. Single-threaded;
# writes only its scratch folder.
#
# usage: test_installed_cli.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the import cache of this run only (ctest points XDG_CACHE_HOME into the build tree,
# which `mnemo info` would print: nothing of the source tree may show there)
export XDG_CACHE_HOME=$tmp/xdg
unset MNEMO_CACHE
unset MNEMO_TOOLS_DIR MNEMO_DATA_DIR
fails=0
check() {
  local what=$1
  shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}
has() { grep -q -- "$2" "$1"; }

cmake --install "$build" --prefix "$tmp/first" >/dev/null || { echo "FAIL  install"; exit 1; }
mv "$tmp/first" "$tmp/moved"
cli=$tmp/moved/bin/mnemo
share=$tmp/moved/share/mnemo
check "importer installed" test -x "$share/import_torch_snapshot.py"
check "exporter installed" test -x "$share/export_torch_snapshot.py"
check "sample traces installed" test -s "$share/traces/ctx128_forward_mixed.trace"

"$cli" info >"$tmp/out" 2>&1
check "info: the importer found next to the moved executable" has "$tmp/out" "importer: $share/import_torch_snapshot.py"
check "info: the sample traces found there too" has "$tmp/out" "sample traces: $share/traces"
check "info: nothing from the source tree" test "$(grep -c "$src" "$tmp/out")" -eq 0

snap=$src/data/traces/resnet50_train.pickle.gz
"$cli" replay "$snap" --json --no-progress >"$tmp/replay" 2>"$tmp/err"
check "replay of a .pickle.gz from the moved prefix" test $? -eq 0
check "... replayed as recorded" has "$tmp/replay" '"as_recorded": true'
check "... to PyTorch's peak reserved" grep -q '"reserved_vs_torch": 1.0000' "$tmp/replay"

"$cli" report "$snap" -o "$tmp/report.html" >"$tmp/out" 2>&1
check "report of a .pickle.gz" test $? -eq 0 -a -s "$tmp/report.html"
"$cli" snapshot "$snap" >"$tmp/out" 2>&1
check "snapshot of a .pickle.gz: its segment table" has "$tmp/out" "largest free"
"$cli" import --from torch "$snap" -o "$tmp/r.trace" >"$tmp/out" 2>&1
check "import --from torch" test $? -eq 0 -a -s "$tmp/r.trace"
"$cli" export --to torch "$share/traces/ctx128_forward_mixed.trace" -o "$tmp/x.pickle" >"$tmp/out" 2>&1
check "export --to torch of an installed sample trace" test $? -eq 0 -a -s "$tmp/x.pickle"
"$cli" replay "$tmp/x.pickle" --json --no-progress >"$tmp/out" 2>&1
check "... and the exported snapshot replays" has "$tmp/out" '"peak_reserved"'
TMPDIR=$tmp "$cli" demo >"$tmp/out" 2>&1
demo_rc=$?
check "demo replays the installed sample trace" has "$tmp/out" "replaying the bundled PyTorch trace $share/traces"
# every step passes: the SIM device, used by the skeleton, is then resized for the trace's report
check "demo exits 0" test "$demo_rc" -eq 0
check "demo ok (no step failed)" has "$tmp/out" "^demo ok$"

# The Python package from the moved prefix loads the prefix's own libmnemo.so
# and finds the prefix's CLI (the paths it was installed with are relative).
# (Python cannot load a sanitized library: sanitizer builds set MNEMO_TEST_NO_PYTHON.)
pkg=$(find "$tmp/moved" -path '*/mnemo/__init__.py' | head -n 1)
check "python package installed" test -n "$pkg"
if [ -n "$pkg" ] && [ -z "${MNEMO_TEST_NO_PYTHON:-}" ]; then
  PYTHONPATH=$(dirname "$(dirname "$pkg")") "${MNEMO_PYTHON:-/usr/bin/python3}" -c '
import os, sys, mnemo
from mnemo import _paths
here = os.path.dirname(mnemo.__file__)
cli = os.path.normpath(os.path.join(here, _paths.CLI))
print(mnemo.library_path, cli)
assert os.path.realpath(mnemo.library_path).startswith(os.path.realpath(sys.argv[1])), mnemo.library_path
assert os.path.realpath(cli) == os.path.realpath(sys.argv[1] + "/bin/mnemo"), cli
assert mnemo.device("sim:0").properties()["name"]
' "$tmp/moved" >"$tmp/out" 2>&1
  check "python: import mnemo from the moved prefix uses its libmnemo.so and CLI" test $? -eq 0 || cat "$tmp/out"
  # the snapshot importer is installed in the package: a pickle is imported and
  # replayed in process, with no CLI at all
  MNEMO_CLI=$tmp/no-such-mnemo PYTHONPATH=$(dirname "$(dirname "$pkg")") "${MNEMO_PYTHON:-/usr/bin/python3}" -c '
import os, sys
from mnemo import profiling
assert os.path.dirname(profiling._importer().__file__) == os.path.dirname(profiling.__file__)
assert profiling.import_snapshot(sys.argv[1])["entries"]
assert profiling.replay(sys.argv[1])[0]["reserved_vs_torch"] == 1.0
' "$snap" >"$tmp/out" 2>&1
  check "python: the installed package imports and replays a snapshot in process" test $? -eq 0 || cat "$tmp/out"
fi

# A copy of the executable with no share/mnemo beside it says what it misses.
mkdir -p "$tmp/lonely/bin"
cp "$cli" "$tmp/lonely/bin/mnemo"
"$tmp/lonely/bin/mnemo" replay "$snap" --no-progress >"$tmp/out" 2>&1
rc=$?
check "without its share folder: exit 1" test $rc -eq 1
check "... naming the place it looked" has "$tmp/out" "cannot find import_torch_snapshot.py"

if [ "$fails" -ne 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
