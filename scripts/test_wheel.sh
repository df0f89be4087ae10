#!/usr/bin/env bash
# scripts/test_wheel.sh: the Python package as pip users get it (CI, .ci/run).
# Builds the wheel from this checkout as `pip install .` does (an isolated
# build environment with scikit-build-core from PyPI; CUDA when CMake finds
# nvcc), checks what it holds, installs it into a fresh virtual environment
# (--system-site-packages: Debian's numpy and torch), runs every CPU test of
# tests/python/ with that environment's python, no PYTHONPATH, from a folder
# outside the checkout (so they import the installed package, which the script
# asserts), then uninstalls it and checks that the environment is back to what
# it was, file for file.
# Usage: scripts/test_wheel.sh [WORKDIR]   (default: a new temporary folder,
# removed at the end; extra `pip wheel` arguments in $MNEMO_WHEEL_ARGS, e.g.
# "--config-settings=cmake.define.MNEMO_CUDA=OFF").
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
py=${MNEMO_WHEEL_PYTHON:-/usr/bin/python3}
if [ $# -ge 1 ]; then
  work=$1
  rm -rf "$work"
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/mnemo-wheel-XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
work=$(cd "$work" && pwd)
case "$work/" in "$src"/*) echo "test_wheel: WORKDIR must be outside the checkout ($src)" >&2; exit 2 ;; esac
start=$SECONDS
venv=$work/venv
"$py" -m venv --system-site-packages "$venv"
vpy=$venv/bin/python
unset PYTHONPATH MNEMO_LIBRARY MNEMO_CLI MNEMO_TOOLS_DIR MNEMO_DATA_DIR

echo "== test_wheel: pip wheel $src"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(--config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache --config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
            --config-settings=cmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2086
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$vpy" -m pip wheel --no-deps --disable-pip-version-check -q -w "$work/dist" "${launcher[@]}" \
  ${MNEMO_WHEEL_ARGS:-} "$src"
wheels=("$work"/dist/mnemo-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || { echo "test_wheel: expected one wheel in $work/dist" >&2; exit 1; }
whl=${wheels[0]}
echo "   built $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB) in $((SECONDS - start)) s"

# What the wheel holds: the package, the native prefix inside it, no tests or
# benchmarks, no headers, static library, CMake or pkg-config files.
"$vpy" - "$whl" <<'EOF'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["mnemo/__init__.py", "mnemo/__main__.py", "mnemo/_paths.py", "mnemo/py.typed",
        "mnemo/_native/bin/mnemo", "mnemo/_native/share/mnemo/traces/ctx128_forward_mixed.trace"]
# (the CLI's scripts: test_package runs `mnemo info`, which says where it found them)
bad = [n for n in need if n not in names]
if not any(n.startswith("mnemo/_native/lib/libmnemo.so") for n in names):
    bad.append("mnemo/_native/lib/libmnemo.so*")
if not any(n.startswith("mnemo/_speedups.") and n.endswith(".so") for n in names):
    bad.append("mnemo/_speedups.*.so")  # the compiled fast paths (python/mnemo/_speedups.c)
extra = [n for n in names if not (n.startswith("mnemo/") or ".dist-info/" in n)
         or n.endswith((".a", ".h", ".pc", ".cmake")) or "/test" in n or "bench" in n]
if bad or extra:
    sys.exit(f"test_wheel: the wheel lacks {bad} / has unexpected {extra}")
print(f"   {len(names)} files, as expected")
EOF

listing() { (cd "$venv" && find . -path ./lib/python3*/site-packages/pip -prune -o -path '*/pip/*' -prune -o -print | sort); }
listing > "$work/before.txt"
echo "== test_wheel: pip install $(basename "$whl") into $venv"
"$vpy" -m pip install --no-index --disable-pip-version-check -q "$whl"

run=$work/run # a folder outside the checkout: nothing there to import
mkdir -p "$run"
cd "$run"
"$vpy" - "$venv" <<'EOF'
import os, sys
import mnemo
venv = os.path.realpath(sys.argv[1])
for what, path in (("mnemo.__file__", mnemo.__file__), ("mnemo.library_path", mnemo.library_path)):
    if not os.path.realpath(path).startswith(venv + os.sep):
        sys.exit(f"test_wheel: {what} is {path}, not in the virtual environment {venv}")
print(f"   mnemo {mnemo.__version__} from {os.path.dirname(mnemo.__file__)}")
EOF
[ -x "$venv/bin/mnemo" ] || { echo "test_wheel: no mnemo console script in $venv/bin" >&2; exit 1; }

echo "== test_wheel: tests/python against the installed package"
failed=()
for t in "$src"/tests/python/test_*.py "$src"/tests/python/fuzz_lifetimes.py; do
  name=$(basename "$t" .py)
  case "$name" in test_gpu | test_hooks_gpu) continue ;; esac
  args=()
  [ "$name" = fuzz_lifetimes ] && args=(--seed 1 --steps 1500)
  t0=$SECONDS
  rc=0
  MNEMO_EXPECT_INSTALLED=1 MNEMO_EXPECT_SPEEDUPS=1 PATH="$venv/bin:$PATH" "$vpy" "$t" "${args[@]}" > "$work/$name.log" 2>&1 || rc=$?
  case $rc in
    0) echo "   ok      $name ($((SECONDS - t0)) s)" ;;
    77) echo "   skipped $name: $(tail -n 1 "$work/$name.log")" ;;
    *) echo "   FAILED  $name (exit $rc):"; tail -n 30 "$work/$name.log" | sed 's/^/     /'; failed+=("$name") ;;
  esac
done

echo "== test_wheel: pip uninstall mnemo"
"$vpy" -m pip uninstall --disable-pip-version-check -q -y mnemo
listing > "$work/after.txt"
if ! diff -u "$work/before.txt" "$work/after.txt" > "$work/left.diff"; then
  echo "test_wheel: pip uninstall left the environment changed:" >&2
  sed 's/^/   /' "$work/left.diff" >&2
  failed+=(uninstall)
fi
echo "== test_wheel: $((SECONDS - start)) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test_wheel: FAILED: ${failed[*]}" >&2
  exit 1
fi
