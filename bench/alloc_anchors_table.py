#!/usr/bin/python3
"""bench/alloc_anchors_table.py: the markdown tables of one bench_alloc_anchors
run, from its Google Benchmark JSON (one run, so every ratio is side by side).

    build/cpu/bench/bench_alloc_anchors --benchmark_repetitions=5 \\
        --benchmark_report_aggregates_only=true \\
        --benchmark_out=anchors.json --benchmark_out_format=json
    python3 bench/alloc_anchors_table.py anchors.json

Single-threaded rows give CPU ns per alloc+free pair (the median over the
repetitions when there are some; CPU time, so that other load on a shared
machine weighs less); the threads rows give pairs per second over all threads
from wall time and the ratio to the 1-thread row of the same allocator.
"""
import json
import re
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for b in doc["benchmarks"]:
        if b.get("error_occurred"):
            continue
        agg = b.get("aggregate_name")
        if agg not in (None, "median"):
            continue
        name = b.get("run_name", b["name"])
        rows.setdefault(name, b)  # the median, else the (only) iteration row
        if agg == "median":
            rows[name] = b
    return doc.get("context", {}), rows


def ns(b):
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
    return b["cpu_time"] * scale


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: alloc_anchors_table.py BENCH_JSON")
    ctx, rows = load(sys.argv[1])
    print(f"host: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
          f"load average {ctx.get('load_avg', '?')}, {ctx.get('date', '')}\n")

    print("| trace sequence | CPU ns / pair | sizes divided by |\n|---|---:|---:|")
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/trace/(\w+)", name)
        if m:
            print(f"| {m.group(1)} | {ns(b) / b['pairs_per_run']:.1f} | {b['divisor']:.0f} |")

    print("\n| fixed 3072 B pair | CPU ns / pair |\n|---|---:|")
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/fixed_pair/(\w+)", name)
        if m:
            print(f"| {m.group(1)} | {ns(b):.1f} |")

    print("\n| threads (own stream each) | threads | pairs/s (all threads) | x 1 thread |\n|---|---:|---:|---:|")
    one = {}
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/threads/(\w+)/real_time/threads:(\d+)", name)
        if not m:
            continue
        who, n = m.group(1), int(m.group(2))
        rate = b.get("pairs_per_s", 0.0)
        if n == 1:
            one[who] = rate
        ratio = rate / one[who] if one.get(who) else float("nan")
        print(f"| {who} | {n} | {rate / 1e6:.2f} M | {ratio:.2f} |")

    print("\n| cached pair, frees pending on another stream | CPU ns / pair | still pending |\n|---|---:|---:|")
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/pending_pair/(\d+)", name)
        if m:
            print(f"| {m.group(1)} | {ns(b):.1f} | {b.get('still_pending', 0):.0f} |")

    print("\n| cached pair, recorder | CPU ns / pair | x off |\n|---|---:|---:|")
    off = rows.get("anchors/recorder_pair/off")
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/recorder_pair/(\w+)", name)
        if m:
            print(f"| {m.group(1)} | {ns(b):.1f} | {ns(b) / ns(off) if off else float('nan'):.2f} |")

    print("\n| cached pair, cached blocks | CPU ns / pair |\n|---|---:|")
    for name, b in rows.items():
        m = re.fullmatch(r"anchors/cached_pair/(\d+)", name)
        if m:
            print(f"| {m.group(1)} | {ns(b):.1f} |")


if __name__ == "__main__":
    main()
