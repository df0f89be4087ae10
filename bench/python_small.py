#!/usr/bin/env python3
# bench/python_small.py: the per-call cost of mnemo's Python package on small
# objects, side by side with torch (CPU) and numpy in one run: creating and
# destroying a small tensor, making a small view of one (slice, select,
# transpose, view), DLPack imports/exports and numpy -> X -> numpy round
# trips, indexing a storage (s[i], s[i] = v; untyped and typed) and tolist()
# of a small view. Prints one markdown table: ns per call of each library
# and the ratio torch/mnemo (> 1: mnemo is faster; numpy/mnemo the same way
# where numpy has the concept). Within a repetition each case runs mnemo,
# torch and numpy one after the other (a noisy machine shifts a row
# together); a figure is the best (minimum) of the repetitions.
# Usage: PYTHONPATH=build/cpu/python /usr/bin/python3 bench/python_small.py
#            [--reps N] [--number N] [--filter REGEX] [--json FILE]
# (Debian's /usr/bin/python3 has numpy and torch, scripts/deps.sh; torch or
# numpy missing: their columns are left empty.)
import argparse
import gc
import json
import os
import re
import sys
import timeit

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import mnemo  # noqa: E402

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    import torch
    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    torch = None


def cases():
    """(name, {lib: (stmt, setup globals)}) for every case; stmt is a string
    timed by timeit in the given namespace."""
    out = []

    def add(name, **libs):
        out.append((name, {k: v for k, v in libs.items() if v is not None}))

    m4 = mnemo.empty(4)
    m23 = mnemo.empty(2, 3)
    m8 = mnemo.zeros(8)
    nm = {"mnemo": mnemo, "m4": m4, "m23": m23, "m8": m8}
    tn = tt = None
    if torch is not None:
        t23 = torch.zeros(2, 3)
        tt = {"torch": torch, "t4": torch.empty(4), "t23": t23, "t8": torch.zeros(8)}
    if np is not None:
        an = {"np": np, "a4": np.empty(4, np.float32), "a23": np.zeros((2, 3), np.float32),
              "a8": np.zeros(8, np.float32)}
    T = (lambda s: (s, tt)) if torch is not None else (lambda s: None)
    N = (lambda s: (s, an)) if np is not None else (lambda s: None)
    M = lambda s: (s, nm)  # noqa: E731

    add("empty(4) create+destroy", mnemo=M("mnemo.empty(4)"), torch=T("torch.empty(4)"),
        numpy=N("np.empty(4, np.float32)"))
    add("empty(2, 3) create+destroy", mnemo=M("mnemo.empty(2, 3)"), torch=T("torch.empty(2, 3)"),
        numpy=N("np.empty((2, 3), np.float32)"))
    add("x[1:3] (slice view)", mnemo=M("m4[1:3]"), torch=T("t4[1:3]"), numpy=N("a4[1:3]"))
    add("x[0] (select view, 2-d)", mnemo=M("m23[0]"), torch=T("t23[0]"), numpy=N("a23[0]"))
    add("x.t() (transpose view)", mnemo=M("m23.t()"), torch=T("t23.t()"), numpy=N("a23.T"))
    add("x.view(3, 2)", mnemo=M("m23.view(3, 2)"), torch=T("t23.view(3, 2)"), numpy=N("a23.reshape(3, 2)"))
    add("x.shape", mnemo=M("m23.shape"), torch=T("t23.shape"), numpy=N("a23.shape"))
    if np is not None:
        nm["a4"] = an["a4"]
        if torch is not None:
            tt["a4"] = an["a4"]
            tt["np"] = np
        add("from_dlpack(numpy array)", mnemo=M("mnemo.from_dlpack(a4)"), torch=T("torch.from_dlpack(a4)"))
        nm["np"] = np
        add("numpy.from_dlpack(x) (export)", mnemo=M("np.from_dlpack(m4)"), torch=T("np.from_dlpack(t4)"))
        add("numpy -> X -> numpy (DLPack)", mnemo=M("np.from_dlpack(mnemo.from_dlpack(a4))"),
            torch=T("np.from_dlpack(torch.from_dlpack(a4))"))
    us = m8.untyped_storage()
    ts = m8.storage()
    nm.update(us=us, ts=ts)
    if torch is not None:
        tts = tt["t8"].storage()
        tt.update(tus=tts.untyped(), tts=tts)
    add("untyped storage s[5]", mnemo=M("us[5]"), torch=T("tus[5]"), numpy=N("a8.view(np.uint8)[5]"))
    add("untyped storage s[5] = 7", mnemo=M("us[5] = 7"), torch=T("tus[5] = 7"))
    add("typed storage s[5] (float32)", mnemo=M("ts[5]"), torch=T("tts[5]"), numpy=N("a8[5]"))
    add("typed storage s[5] = 1.5", mnemo=M("ts[5] = 1.5"), torch=T("tts[5] = 1.5"), numpy=N("a8.__setitem__(5, 1.5)"))
    add("x.tolist() (4 elements)", mnemo=M("m4.tolist()"), torch=T("t4.tolist()"), numpy=N("a4.tolist()"))
    add("x.tolist() (2x3)", mnemo=M("m23.tolist()"), torch=T("t23.tolist()"), numpy=N("a23.tolist()"))
    return out


def time_one(stmt, ns, number):
    t = timeit.Timer(stmt, globals=ns)
    return t.timeit(number) / number * 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--reps", type=int, default=7, help="repetitions (best of)")
    ap.add_argument("--number", type=int, default=0, help="calls per repetition (0: ~20 ms per repetition)")
    ap.add_argument("--filter", default="", help="a regex the case names must match")
    ap.add_argument("--json", default="", help="also write the figures to this JSON file")
    args = ap.parse_args()
    pat = re.compile(args.filter)
    rows = []
    gc.disable()  # (as timeit does) the collector's timing is nobody's per-call cost
    for name, libs in cases():
        if not pat.search(name):
            continue
        numbers = {}
        for lib, (stmt, ns) in libs.items():
            if args.number:
                numbers[lib] = args.number
            else:  # calibrate: ~20 ms per repetition
                per = max(time_one(stmt, ns, 200), 1.0)
                numbers[lib] = max(200, int(2e7 / per))
        best = {lib: float("inf") for lib in libs}
        for _ in range(args.reps):
            for lib, (stmt, ns) in libs.items():
                best[lib] = min(best[lib], time_one(stmt, ns, numbers[lib]))
        rows.append((name, best))
        print(f"{name}: " + ", ".join(f"{k} {v:.0f} ns" for k, v in best.items()), file=sys.stderr)
    gc.enable()
    tv = torch.__version__ if torch is not None else "-"
    nv = np.__version__ if np is not None else "-"
    print(f"mnemo {mnemo.__version__}, torch {tv} (CPU), numpy {nv}, Python {sys.version.split()[0]}; "
          f"best of {args.reps}; ratio = other's ns / mnemo's ns (> 1: mnemo is faster)\n")
    print("| case | mnemo ns | torch ns | torch/mnemo | numpy ns | numpy/mnemo |")
    print("|---|---:|---:|---:|---:|---:|")

    def cell(v):
        return f"{v:,.0f}" if v is not None else ""

    for name, best in rows:
        m, t, n = best.get("mnemo"), best.get("torch"), best.get("numpy")
        rt = f"{t / m:.2f}x" if t is not None and m else ""
        rn = f"{n / m:.2f}x" if n is not None and m else ""
        print(f"| {name} | {cell(m)} | {cell(t)} | {rt} | {cell(n)} | {rn} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({name: best for name, best in rows}, f, indent=1)


if __name__ == "__main__":
    main()
