#!/usr/bin/env python3
# bench/cpu_vs_numpy.py: runs bench_kernels' CPU cases and the same operations
# through numpy (Debian python3-numpy) in one run; prints one markdown table:
# mnemo GB/s, numpy GB/s, ratio, mnemo % of the memcpy/memset ceiling.
# Usage: /usr/bin/python3 bench/cpu_vs_numpy.py [BUILD_DIR] [--threads N]
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


def main():
    args = sys.argv[1:]
    build = "build/cpu"
    threads = None
    i = 0
    while i < len(args):
        if args[i] == "--threads":
            threads = args[i + 1]
            i += 2
        else:
            build = args[i]
            i += 1
    env = dict(os.environ)
    if threads:
        env["MNEMO_KERNEL_THREADS"] = threads
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "k.json")
        subprocess.run([os.path.join(build, "bench", "bench_kernels"), "--benchmark_filter=kernels/cpu/",
                        "--benchmark_min_time=0.2", f"--benchmark_out={out}", "--benchmark_out_format=json"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        data = json.load(open(out))
    print(f"numpy {np.__version__}, mnemo threads: {threads or 'default (all CPUs)'}; "
          f"numpy is single-threaded")
    print()
    print("| case | mnemo GB/s | numpy GB/s | mnemo / numpy | mnemo % of ceiling | ceiling GB/s |")
    print("|---|---|---|---|---|---|")
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or "GBps" not in b:
            continue
        name = b["name"].split("kernels/cpu/", 1)[1]
        own, ceil, pct = b["GBps"], b["ceiling_GBps"], b["pct_of_ceiling"]
        case = numpy_case(name)
        if case is None:
            print(f"| {name} | {own:.2f} | n/a | n/a | {pct:.0f}% | {ceil:.2f} |")
            continue
        fn, nbytes = case
        ref = time_numpy(fn, nbytes)
        print(f"| {name} | {own:.2f} | {ref:.2f} | {own / ref:.2f}x | {pct:.0f}% | {ceil:.2f} |")


if __name__ == "__main__":
    main()
