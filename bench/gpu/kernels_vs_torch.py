#!/usr/bin/env python3
# bench/gpu/kernels_vs_torch.py: the GPU side-by-side of bench_kernels: the same
# cases through PyTorch (copy_, contiguous layouts, casts, fill_) timed with
# CUDA events in the same run; prints one markdown table: mnemo GB/s, torch
# GB/s, ratio, % of the D2D copy ceiling (cudaMemcpy D2D / cudaMemset).
# Usage: python3 bench/gpu/kernels_vs_torch.py BENCH_KERNELS_JSON
#        (bench/gpu/run.sh produces the JSON with build/cuda/bench/bench_kernels)
import json
import sys


def torch_case(torch, name):
    """(fn, bytes moved, ceiling fn) for a case name; None when torch lacks it."""
    op, dt, shape = name.split("/")
    dev = "cuda"
    T = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i8": torch.int8,
         "i64": torch.int64, "e4m3": getattr(torch, "float8_e4m3fn", None)}

    def rnd(shape, dtype):
        x = torch.empty(shape, device=dev, dtype=torch.float32).uniform_(-100, 100)
        return x.to(dtype)

    if op == "copy":
        s = rnd((1 << 24,), T[dt])
        d = torch.empty_like(s)
        return (lambda: d.copy_(s)), 2 * s.numel() * s.element_size()
    if op == "fill":
        d = torch.empty(1 << 24, device=dev, dtype=T[dt])
        return (lambda: d.fill_(1.5)), d.numel() * d.element_size()
    if op == "cast":
        a, b = dt.split("_to_")
        if T.get(a) is None or T.get(b) is None:
            return None
        s = rnd((1 << 24,), T[a])
        d = torch.empty(s.shape, device=dev, dtype=T[b])
        return (lambda: d.copy_(s)), s.numel() * (s.element_size() + d.element_size())
    dims = [int(x) for x in shape.split("x")]
    t = T[dt]
    if op == "transpose":
        r, c = dims
        s = rnd((c, r), t).t()
    elif op == "nchw_to_nhwc":
        s = rnd(dims, t).permute(0, 2, 3, 1)
    elif op == "nhwc_to_nchw":
        n, c, h, w = dims
        s = rnd((n, h, w, c), t).permute(0, 3, 1, 2)
    elif op == "attn_swap":
        s = rnd(dims, t).transpose(-1, -2)
    else:
        return None
    d = torch.empty(s.shape, device=dev, dtype=t)  # contiguous, as x.contiguous() makes
    return (lambda: d.copy_(s)), 2 * d.numel() * d.element_size()


def time_events(torch, fn, reps=25, batch=4):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(batch):
            fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / batch)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    data = json.load(open(sys.argv[1]))
    try:
        import torch
        assert torch.cuda.is_available()
        tver = torch.__version__
    except Exception as e:  # no torch on this machine: mnemo's numbers alone
        torch, tver = None, f"unavailable ({e})"
    print(f"torch {tver}; {torch.cuda.get_device_name() if torch else ''}")
    print()
    print("| case | mnemo GB/s | torch GB/s | mnemo / torch | mnemo % of ceiling | torch % of ceiling | ceiling GB/s |")
    print("|---|---|---|---|---|---|---|")
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or "GBps" not in b or "kernels/cuda/" not in b["name"]:
            continue
        name = b["name"].split("kernels/cuda/", 1)[1]
        own, ceil = b["GBps"], b["ceiling_GBps"]
        case = torch_case(torch, name) if torch else None
        if case is None:
            print(f"| {name} | {own:.0f} | n/a | n/a | {100 * own / ceil:.0f}% | n/a | {ceil:.0f} |")
            continue
        fn, nbytes = case
        ref = nbytes / time_events(torch, fn) / 1e9
        print(f"| {name} | {own:.0f} | {ref:.0f} | {own / ref:.2f}x | {100 * own / ceil:.0f}% | "
              f"{100 * ref / ceil:.0f}% | {ceil:.0f} |")
        del fn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
