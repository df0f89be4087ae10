#!/usr/bin/env bash
# tests/test_pkgconfig.sh: a C program built against an installed mnemo through
# pkg-config alone, at a prefix that was moved after the install (mnemo.pc finds
# its prefix from its own folder): shared (-lmnemo), static through
# mnemo-static.pc, and `pkg-config --static` where the prefix holds only
# libmnemo.a (Libs.private must then be complete). Each program runs the
# skeleton on CPU and SIM and, with MNEMO_TRACE set, writes a trace at exit.
# Single-threaded; writes only its scratch folder.
#
# usage: test_pkgconfig.sh BUILD_DIR MAIN_C CC [CFLAGS]
set -uo pipefail
build=$1 main=$2 cc=$3 flags=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {
  local what=$1
  shift
  if "$@"; then echo "ok    $what"; else echo "FAIL  $what"; fails=$((fails + 1)); fi
}

cmake --install "$build" --prefix "$tmp/first" >/dev/null || { echo "FAIL  install"; exit 1; }
mv "$tmp/first" "$tmp/moved"
pc=$(find "$tmp/moved" -name mnemo.pc -path '*/pkgconfig/*')
check "mnemo.pc installed" test -n "$pc"
check "mnemo-static.pc installed" test -f "$(dirname "$pc")/mnemo-static.pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
unset PKG_CONFIG_LIBDIR

# Flags point into the moved prefix and nowhere else of mnemo's.
cflags=$(pkg-config --cflags mnemo | xargs)
libdir=$(pkg-config --variable=libdir mnemo)
check "--cflags name the moved prefix ($cflags)" test "$(cd "${cflags#-I}" 2>/dev/null && pwd -P)" = "$(cd "$tmp/moved/include" && pwd -P)"
check "libdir is the moved prefix's" test -f "$libdir/libmnemo.so"
check "no /usr/local in the flags" test "$(pkg-config --cflags --libs --static mnemo | grep -c /usr/local/include)" -eq 0

run() { # name exe: runs it with MNEMO_TRACE and checks the trace
  local name=$1 exe=$2
  rm -f "$exe.trace"
  MNEMO_TRACE="$exe.trace" "$exe" >"$tmp/$name.out" 2>&1
  check "$name: runs" test $? -eq 0
  check "$name: MNEMO_TRACE wrote its trace" test -s "$exe.trace"
}

# 1. shared
# shellcheck disable=SC2046
$cc $flags -o "$tmp/shared" "$main" $(pkg-config --cflags --libs mnemo) -Wl,-rpath,"$libdir" 2>"$tmp/err"
check "shared: links" test $? -eq 0 || cat "$tmp/err"
run shared "$tmp/shared"
check "shared: uses the moved prefix's libmnemo.so" grep -q "$libdir/libmnemo.so" <(ldd "$tmp/shared")

# 2. static through mnemo-static.pc
# shellcheck disable=SC2046
$cc $flags -o "$tmp/static" "$main" $(pkg-config --cflags --libs mnemo-static) 2>"$tmp/err"
check "static (mnemo-static.pc): links" test $? -eq 0 || cat "$tmp/err"
run static "$tmp/static"
check "static: no libmnemo.so needed" test "$(ldd "$tmp/static" | grep -c libmnemo)" -eq 0

# 3. pkg-config --static where only the archive is installed
cp -a "$tmp/moved" "$tmp/archive-only"
rm -f "$tmp/archive-only"/lib*/libmnemo.so*
export PKG_CONFIG_PATH=$(dirname "$(find "$tmp/archive-only" -name mnemo.pc -path '*/pkgconfig/*')")
# shellcheck disable=SC2046
$cc $flags -o "$tmp/static2" "$main" $(pkg-config --cflags --libs --static mnemo) 2>"$tmp/err"
check "--static with Libs.private: links" test $? -eq 0 || cat "$tmp/err"
run static-libs-private "$tmp/static2"

if [ "$fails" -ne 0 ]; then
  echo "$fails failed"
  exit 1
fi
echo "all passed"
