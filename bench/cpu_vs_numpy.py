#!/usr/bin/env python3
# bench/cpu_vs_numpy.py: runs bench_kernels' CPU cases and the same operations
# through numpy (Debian python3-numpy) in one run; prints one markdown table:
# mnemo GB/s, numpy GB/s, ratio, mnemo % of the memcpy/memset ceiling.
# GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes, on both sides
# (`mnemo bench`'s convention). The ceiling is the best of bench_kernels'
# memcpy/memset at that size and of the mnemo case itself, so the % is never
# over 100 (a "*" marks a case that was faster than the memcpy/memset).
# Usage: /usr/bin/python3 bench/cpu_vs_numpy.py [BUILD_DIR] [--threads N]
# BUILD_DIR defaults to build/default (what the README's commands build), then
# build/cpu, under the repository root. Progress, one line per case, on stderr.
# Both sides get transparent huge pages for large buffers (numpy advises its
# large arrays; mnemo's CPU backend advises allocations of 4 MiB or more).
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i8": np.int8, "i64": np.int64}
NP_CAST = {"f32": np.float32, "f16": np.float16, "i64": np.int64}  # numpy has no bf16 / fp8


def numpy_case(name):
    """(callable, bytes moved) for a bench case name, or None when numpy lacks it."""
    op, dt, shape = name.split("/")
    rng = np.random.default_rng(1234)
    if op == "copy":
        n = 1 << 24
        s = rng.uniform(-100, 100, n).astype(NP[dt])
        d = np.empty_like(s)
        return (lambda: np.copyto(d, s)), 2 * s.nbytes
    if op == "fill":
        d = np.empty(1 << 24, NP[dt])
        return (lambda: d.fill(1.5)), d.nbytes
    if op == "cast":
        a, b = dt.split("_to_")
        if a not in NP_CAST or b not in NP_CAST:
            return None
        s = rng.uniform(-100, 100, 1 << 24).astype(NP_CAST[a])
        d = np.empty(s.shape, NP_CAST[b])
        return (lambda: np.copyto(d, s, casting="unsafe")), s.nbytes + d.nbytes
    dims = [int(x) for x in shape.split("x")]
    t = NP[dt]
    if op == "transpose":  # logical (R, C) from storage (C, R)
        r, c = dims
        s = rng.integers(-100, 100, (c, r)).astype(t)
        d = np.empty((r, c), t)
        return (lambda: np.copyto(d, s.T)), 2 * d.nbytes
    if op == "nchw_to_nhwc":
        s = rng.integers(-100, 100, dims).astype(t)
        n, c, h, w = dims
        d = np.empty((n, h, w, c), t)
        return (lambda: np.copyto(d, s.transpose(0, 2, 3, 1))), 2 * d.nbytes
    if op == "nhwc_to_nchw":
        n, c, h, w = dims
        s = rng.integers(-100, 100, (n, h, w, c)).astype(t)
        d = np.empty((n, c, h, w), t)
        return (lambda: np.copyto(d, s.transpose(0, 3, 1, 2))), 2 * d.nbytes
    if op == "attn_swap":
        b, h, sq, dd = dims
        s = rng.integers(-100, 100, dims).astype(t)
        d = np.empty((b, h, dd, sq), t)
        return (lambda: np.copyto(d, s.swapaxes(-1, -2))), 2 * d.nbytes
    return None


def time_numpy(fn, nbytes, reps=11):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return nbytes / ts[len(ts) // 2] / 1e9


def progress(text):
    print(text, file=sys.stderr, flush=True)


def find_bench(build):
    """The bench_kernels executable: in BUILD_DIR when given, else build/default
    then build/cpu under the repository root."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tries = [build] if build else [os.path.join(root, "build", "default"), os.path.join(root, "build", "cpu")]
    for b in tries:
        exe = os.path.join(b, "bench", "bench_kernels")
        if os.access(exe, os.X_OK):
            return exe
    sys.exit("cpu_vs_numpy.py: no bench/bench_kernels in " + " or ".join(tries) +
             " (build it: cmake --preset default && cmake --build --preset default; it needs Debian's"
             " libbenchmark-dev)")


def run_mnemo(exe, env, out):
    """Runs bench_kernels' CPU cases into `out` (JSON), one progress line per case."""
    flt = "--benchmark_filter=kernels/cpu/"
    listed = subprocess.run([exe, flt, "--benchmark_list_tests"], check=True, env=env,
                            capture_output=True, text=True).stdout.split()
    total = len(listed)
    progress(f"mnemo: {total} cases in {exe} (about 4 s each)")
    proc = subprocess.Popen([exe, flt, "--benchmark_min_time=0.2", "--benchmark_color=false",
                             f"--benchmark_out={out}", "--benchmark_out_format=json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    done = 0
    for line in proc.stdout:
        if line.startswith("kernels/cpu/"):
            done += 1
            progress(f"  mnemo [{done}/{total}] {line.split()[0]}")
    if proc.wait() != 0:
        sys.exit(f"cpu_vs_numpy.py: {exe} failed (exit {proc.returncode})")


def main():
    args = sys.argv[1:]
    build = None
    threads = None
    i = 0
    while i < len(args):
        if args[i] == "--threads":
            if i + 1 >= len(args):
                sys.exit("cpu_vs_numpy.py: --threads needs a value")
            threads = args[i + 1]
            i += 2
        else:
            build = args[i]
            i += 1
    exe = find_bench(build)
    env = dict(os.environ)
    if threads:
        env["MNEMO_KERNEL_THREADS"] = threads
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "k.json")
        run_mnemo(exe, env, out)
        with open(out) as f:
            data = json.load(f)
    rows = [b for b in data["benchmarks"] if b.get("run_type") != "aggregate" and "GBps" in b]
    lines = []
    for k, b in enumerate(rows):
        name = b["name"].split("kernels/cpu/", 1)[1]
        progress(f"  numpy [{k + 1}/{len(rows)}] {name}")
        own = b["GBps"]
        # the ceiling by construction: never below the case itself
        ceil = max(b["ceiling_GBps"], own)
        mark = "*" if b.get("ceiling_set_by_case") or own > b["ceiling_GBps"] else ""
        pct = f"{100 * own / ceil:.0f}%{mark}"
        case = numpy_case(name)
        if case is None:
            lines.append(f"| {name} | {own:.2f} | n/a | n/a | {pct} | {ceil:.2f} |")
            continue
        fn, nbytes = case
        ref = time_numpy(fn, nbytes)
        lines.append(f"| {name} | {own:.2f} | {ref:.2f} | {own / ref:.2f}x | {pct} | {ceil:.2f} |")
    print(f"numpy {np.__version__}, mnemo threads: {threads or 'default (all CPUs)'}; "
          f"numpy is single-threaded")
    print("GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes; ceiling: the best of memcpy/memset"
          " (bench_kernels) and the mnemo case at that size (* = set by the case)")
    print()
    print("| case | mnemo GB/s | numpy GB/s | mnemo / numpy | mnemo % of ceiling | ceiling GB/s |")
    print("|---|---|---|---|---|---|")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
