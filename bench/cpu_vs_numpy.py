#!/usr/bin/env python3
# bench/cpu_vs_numpy.py: runs bench_kernels' CPU cases and the same operations
# through numpy (Debian python3-numpy) in one run; prints one markdown table:
# per mnemo thread setting (default: one thread and the default threads, side
# by side) mnemo GB/s, the ratio to numpy and mnemo % of the memcpy/memset
# ceiling, with numpy's GB/s (numpy and its BLAS held to one thread).
# GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes, on both sides
# (`mnemo bench`'s convention). The ceiling is the best of bench_kernels'
# memcpy/memset at that size and of the mnemo case itself, so the % is never
# over 100 (a "*" marks a case that was faster than the memcpy/memset).
# Case by case, the mnemo runs and numpy's timing follow each other, so that a
# noisy machine shifts all the numbers of a row together.
# Usage: /usr/bin/python3 bench/cpu_vs_numpy.py [BUILD_DIR] [--threads LIST] [--filter REGEX]
# LIST: comma-separated mnemo thread counts, "default" = unset
# (MNEMO_KERNEL_THREADS; all CPUs, at most 16); default "1,default".
# REGEX: a Python regex the case names must match (e.g. "transpose|nchw|nhwc|attn").
# BUILD_DIR defaults to build/default (what the README's commands build), then
# build/cpu, under the repository root. Progress, one line per case, on stderr.
# Both sides get transparent huge pages for large buffers (numpy advises its
# large arrays; mnemo's CPU backend advises allocations of 4 MiB or more).
import os

# numpy's BLAS/OpenMP pools: one thread (set before numpy is imported)
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import json
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

NP = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16, "i8": np.int8, "i64": np.int64}  # bf16: its bits
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
    if op in ("api_index_select0", "api_index_select1", "api_gather1"):
        # bench_kernels' public-call gathers: numpy allocating its result (no out=),
        # as mn_view_index_select / mn_view_gather make a new storage each time
        r, c = dims
        axis = int(op[-1])
        size = dims[axis]
        s = rng.integers(-100, 100, (r, c)).astype(t)
        if op == "api_gather1":
            idx = rng.integers(0, size, (r, 1024)).astype(np.int64)
            nbytes = 2 * r * 1024 * s.itemsize + idx.nbytes
            return (lambda: np.take_along_axis(s, idx, axis=1)), nbytes
        nidx = 16384 if axis == 0 else 1024
        idx = rng.integers(0, size, nidx).astype(np.int64)
        nout = nidx * c if axis == 0 else r * nidx
        return (lambda: np.take(s, idx, axis=axis)), 2 * nout * s.itemsize + idx.nbytes
    if op in ("index_select0", "index_select1", "take_along1"):
        # bench_kernels' gathers: int64 indices in [1 - size, size - 2] (negatives wrap);
        # bytes = gathered elements read + written + indices read
        r, c = dims
        axis = int(op[-1])
        size = dims[axis]
        s = rng.integers(-100, 100, (r, c)).astype(t)
        if op == "take_along1":
            idx = rng.integers(1 - size, size - 1, (r, 1024)).astype(np.int64)
            d = np.empty((r, 1024), t)
            # take_along_axis has no out=; np.take on the flat array with the row offsets
            # added would not be the same operation, so the allocation is part of numpy's time
            return (lambda: np.take_along_axis(s, idx, axis=1)), 2 * d.nbytes + idx.nbytes
        nidx = 16384 if axis == 0 else 1024
        idx = rng.integers(1 - size, size - 1, nidx).astype(np.int64)
        d = np.empty((nidx, c) if axis == 0 else (r, nidx), t)
        return (lambda: np.take(s, idx, axis=axis, out=d)), 2 * d.nbytes + idx.nbytes
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


def list_cases(exe, pattern):
    """bench_kernels' CPU case names (after kernels/cpu/) matching `pattern`."""
    listed = subprocess.run([exe, "--benchmark_filter=kernels/cpu/", "--benchmark_list_tests"], check=True,
                            capture_output=True, text=True).stdout.split()
    names = [n.split("kernels/cpu/", 1)[1] for n in listed if n.startswith("kernels/cpu/")]
    return [n for n in names if re.search(pattern, n)] if pattern else names


def run_mnemo(exe, name, threads, tmp):
    """One bench_kernels case with MNEMO_KERNEL_THREADS = threads ("default":
    unset); its JSON row."""
    env = dict(os.environ)
    env.pop("MNEMO_KERNEL_THREADS", None)
    if threads != "default":
        env["MNEMO_KERNEL_THREADS"] = threads
    out = os.path.join(tmp, "k.json")
    flt = "--benchmark_filter=^" + re.escape("kernels/cpu/" + name) + "$"
    subprocess.run([exe, flt, "--benchmark_min_time=0.2", "--benchmark_color=false", f"--benchmark_out={out}",
                    "--benchmark_out_format=json"], check=True, env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(out) as f:
        rows = [b for b in json.load(f)["benchmarks"] if b.get("run_type") != "aggregate" and "GBps" in b]
    if len(rows) != 1:
        sys.exit(f"cpu_vs_numpy.py: {exe} gave {len(rows)} rows for {name}")
    return rows[0]


def cells(b, ref):
    """mnemo GB/s, ratio to numpy, % of the ceiling for one bench row."""
    own = b["GBps"]
    # the ceiling by construction: never below the case itself
    ceil = max(b["ceiling_GBps"], own)
    mark = "*" if b.get("ceiling_set_by_case") or own > b["ceiling_GBps"] else ""
    ratio = f"{own / ref:.2f}x" if ref else "n/a"
    return [f"{own:.2f}", ratio, f"{100 * own / ceil:.0f}%{mark}"]


def main():
    args = sys.argv[1:]
    build = None
    threads = ["1", "default"]
    pattern = None
    i = 0
    while i < len(args):
        if args[i] in ("--threads", "--filter"):
            if i + 1 >= len(args):
                sys.exit(f"cpu_vs_numpy.py: {args[i]} needs a value")
            if args[i] == "--threads":
                threads = [t.strip() for t in args[i + 1].split(",") if t.strip()]
                bad = [t for t in threads if t != "default" and not (t.isdigit() and int(t) > 0)]
                if bad or not threads:
                    sys.exit(f"cpu_vs_numpy.py: --threads takes positive counts or 'default', not {args[i + 1]!r}")
            else:
                pattern = args[i + 1]
            i += 2
        else:
            build = args[i]
            i += 1
    exe = find_bench(build)
    names = list_cases(exe, pattern)
    progress(f"{len(names)} cases x mnemo threads {', '.join(threads)} and numpy, in {exe} (about 4 s per run)")
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, name in enumerate(names):
            progress(f"  [{k + 1}/{len(names)}] {name}")
            runs = [run_mnemo(exe, name, t, tmp) for t in threads]
            case = numpy_case(name)
            ref = time_numpy(*case) if case else None
            row = [name, f"{ref:.2f}" if ref else "n/a"]
            for b in runs:
                row += cells(b, ref)
            lines.append("| " + " | ".join(row) + " |")
    label = {t: ("default threads" if t == "default" else f"{t} thread{'s' if t != '1' else ''}") for t in threads}
    print(f"numpy {np.__version__} (one thread); mnemo threads (MNEMO_KERNEL_THREADS): {', '.join(threads)} "
          f"(default: all CPUs, here {os.cpu_count()})")
    print("GB/s = (bytes read + bytes written) / seconds, 1 GB = 1e9 bytes; ceiling: the best of memcpy/memset"
          " (bench_kernels, one thread) and the mnemo case at that size (* = set by the case)")
    print()
    head = ["case", "numpy GB/s"]
    for t in threads:
        head += [f"mnemo GB/s ({label[t]})", f"/ numpy ({label[t]})", f"% of ceiling ({label[t]})"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
