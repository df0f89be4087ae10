#!/usr/bin/env python3
# bench/gpu/compare_torch.py: mnemo and PyTorch side by side on one CUDA GPU, in
# one process, over the same buffers: mnemo's kernels are called through ctypes on
# libmnemo.so with views over PyTorch's memory, on PyTorch's current stream, so one
# pair of CUDA events times either side. Three parts, one markdown table each:
#   kernels  copies, 2-d transposes, 4-d permutes, casts, fills and random fills:
#            GB/s = (bytes read + bytes written) / time, CUDA events, median of
#            interleaved rounds; the ceiling is cudaMemcpyAsync device-to-device of
#            the same bytes (half read, half written) in the same run; every mnemo
#            result is compared bit for bit with PyTorch's (random fills: moments).
#   alloc    host cost of one alloc+free pair from Python: torch's caching allocator
#            (torch.cuda.caching_allocator_alloc/_delete), mnemo's caching allocator
#            (ctypes), and cudaMallocAsync/cudaFreeAsync from the device's default
#            pool (CuPy's runtime binding), with each binding's call overhead.
#   h2d/d2h  pinned and pageable host<->device copies: mnemo's copy engine against
#            torch (copy_ from pinned memory; pageable: pin_memory() then
#            .to('cuda', non_blocking=True)) and the cudaMemcpyAsync ceiling; wall
#            clock around the call and a stream synchronize (the host work is part
#            of these copies), median of repetitions.
# Usage: python3 bench/gpu/compare_torch.py --lib build/cuda/libmnemo.so [--out DIR]
#        [--only kernels alloc copy] [--quick]
# Writes DIR/compare.md (also printed) and DIR/compare.json. Exit 1 when a mnemo
# call fails or a result differs from PyTorch's.
# Threading: one thread.
import argparse
import ctypes as C
import json
import os
import statistics
import sys
import time

from mnemo_ctypes import Dev, Lib

MB = 1 << 20


class Scalar(C.Structure):  # mn_scalar_t: kind, then a union of 16 bytes (8-aligned)
    _fields_ = [("kind", C.c_int), ("v", C.c_double * 2)]


class CopyConfig(C.Structure):  # mn_copy_config_t
    _fields_ = [("chunk_bytes", C.c_size_t), ("staging_buffers", C.c_uint), ("host_threads", C.c_uint)]


MN_SCALAR_FLOAT = 3
MN_COPY_NON_BLOCKING, MN_COPY_SRC_PINNED, MN_COPY_DST_PINNED = 1, 2, 4


class Mnemo(Lib):
    """The few entry points this script needs, with their types declared."""

    def __init__(self, path):
        P, S, I64P = C.c_void_p, C.c_size_t, C.POINTER(C.c_int64)
        PP = C.POINTER(C.c_void_p)
        super().__init__(path, {
            "mn_device_cuda": (Dev, [C.c_int]),
            "mn_device_cpu": (Dev, []),
            "mn_build_has_cuda": (C.c_bool, []),
            "mn_stream_wrap": (C.c_int, [Dev, P, PP]),
            "mn_stream_destroy": (C.c_int, [P]),
            "mn_storage_from_buffer": (C.c_int, [Dev, P, S, P, P, PP]),
            "mn_storage_release": (None, [P]),
            "mn_view_create": (C.c_int, [P, C.c_int, C.c_int, I64P, I64P, C.c_int64, PP]),
            "mn_view_destroy": (None, [P]),
            "mn_kernel_copy_view": (C.c_int, [P, P, P]),
            "mn_kernel_fill_view": (C.c_int, [P, P, Scalar]),
            "mn_kernel_random_uniform": (C.c_int, [P, P, C.c_uint64, C.c_uint64, C.c_double, C.c_double]),
            "mn_kernel_random_normal": (C.c_int, [P, P, C.c_uint64, C.c_uint64, C.c_double, C.c_double]),
            "mn_memcpy_async": (C.c_int, [Dev, P, Dev, P, S, P]),
            "mn_allocator_get_default": (C.c_int, [Dev, PP]),
            "mn_allocator_alloc": (C.c_int, [P, S, P, PP]),
            "mn_allocator_free": (C.c_int, [P, P]),
            "mn_allocator_empty_cache": (C.c_int, [P]),
            "mn_pinned_allocator_get_default": (C.c_int, [Dev, PP]),
            "mn_copy_bytes": (C.c_int, [Dev, P, Dev, P, S, P, C.c_uint]),
            "mn_copy_config_default": (CopyConfig, []),
            "mn_copy_set_config": (C.c_int, [C.POINTER(CopyConfig)]),
        })
        self.cuda, self.cpu = self.lib.mn_device_cuda(0), self.lib.mn_device_cpu()


def torch_dtypes(torch):
    """torch dtype -> mnemo's mn_dtype value (include/mnemo/dtype.h)."""
    m = {torch.bool: 0, torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4, torch.int64: 5,
         torch.float16: 6, torch.bfloat16: 7, torch.float32: 8, torch.float64: 9}
    for name, code in (("float8_e4m3fn", 12), ("float8_e5m2", 13)):
        if hasattr(torch, name):
            m[getattr(torch, name)] = code
    return m


class Views:
    """mnemo views over torch tensors' memory (no copy); destroyed together."""

    def __init__(self, mn, torch):
        self.mn, self.codes, self.live = mn, torch_dtypes(torch), []

    def of(self, t):
        mn, L = self.mn, self.mn.lib
        us = t.untyped_storage()
        st = mn.out(L.mn_storage_from_buffer, mn.cuda, C.c_void_p(us.data_ptr()), us.nbytes(), None, None)
        nd = t.dim()
        sizes, strides = (C.c_int64 * max(nd, 1))(*t.shape), (C.c_int64 * max(nd, 1))(*t.stride())
        try:
            v = mn.out(L.mn_view_create, st, self.codes[t.dtype], nd, sizes, strides, t.storage_offset())
        finally:
            L.mn_storage_release(st)  # the view holds its own reference
        self.live.append(v)
        return v

    def close(self):
        for v in self.live:
            self.mn.lib.mn_view_destroy(v)
        self.live = []


def event_time(torch, fn, reps, batch):
    """Median seconds of one fn() over reps timings of `batch` queued calls."""
    s = torch.cuda.current_stream()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(s)
        for _ in range(batch):
            fn()
        b.record(s)
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3 / batch)
    return statistics.median(ts)


def interleaved(torch, fns, rounds, reps, batch):
    """Times each fn in turn, `rounds` times over; the median of each one's rounds."""
    for f in fns:  # warm-up: module load, first-touch, planner caches
        f()
        f()
    torch.cuda.synchronize()
    got = [[] for _ in fns]
    for _ in range(rounds):
        for i, f in enumerate(fns):
            got[i].append(event_time(torch, f, reps, batch))
    return [statistics.median(g) for g in got]


# ---- kernels -------------------------------------------------------------------------


def kernel_cases(torch, quick):
    """(name, make) pairs; make() -> dict(src, dst_shape/dtype or fill value, kind). Every
    buffer the case reads or writes is >= 256 MiB (4x the H100's 50 MB L2 and more)."""
    f32, bf16, f16, i8, i64 = torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int64
    e4m3 = getattr(torch, "float8_e4m3fn", None)
    n = (16 if quick else 64) * MB  # elements of a 1-d float32 operand: 256 MiB
    k = 4096 if quick else 8192
    b = 16 if quick else 64  # batch of the 4-d cases: 64x256x64x64 float32 is 256 MiB

    def rnd(shape, dtype):
        x = torch.empty(shape, device="cuda", dtype=f32).uniform_(-100, 100)
        return x.to(dtype)

    cases = [
        ("copy/f32/64M", lambda: dict(kind="copy", src=rnd((n,), f32))),
        ("transpose/f32/8192x8192", lambda: dict(kind="copy", src=rnd((k, k), f32).t())),
        ("transpose/bf16/16384x8192", lambda: dict(kind="copy", src=rnd((k, 2 * k), bf16).t())),
        ("transpose/i8/16384x16384", lambda: dict(kind="copy", src=rnd((2 * k, 2 * k), i8).t())),
        ("transpose/f32/8191x8193", lambda: dict(kind="copy", src=rnd((k + 1, k - 1), f32).t())),
        ("transpose/bf16/16383x8193", lambda: dict(kind="copy", src=rnd((k + 1, 2 * k - 1), bf16).t())),
        ("nchw_to_nhwc/f32/64x256x64x64",
         lambda: dict(kind="copy", src=rnd((b, 256, 64, 64), f32).permute(0, 2, 3, 1))),
        ("nchw_to_nhwc/bf16/128x256x64x64",
         lambda: dict(kind="copy", src=rnd((2 * b, 256, 64, 64), bf16).permute(0, 2, 3, 1))),
        ("nhwc_to_nchw/f32/64x256x64x64",
         lambda: dict(kind="copy", src=rnd((b, 64, 64, 256), f32).permute(0, 3, 1, 2))),
        ("nhwc_to_nchw/bf16/128x256x64x64",
         lambda: dict(kind="copy", src=rnd((2 * b, 64, 64, 256), bf16).permute(0, 3, 1, 2))),
        ("nchw_to_nhwc/f32/512x3x224x224 (C=3)",
         lambda: dict(kind="copy", src=rnd((8 * b, 3, 224, 224), f32).permute(0, 2, 3, 1))),
        *[(f"nchw_to_nhwc/{tn}/{8 * b * 3 // c}x{c}x224x224 (C={c})",
           (lambda c=c, t=t: dict(kind="copy", src=rnd((8 * b * 3 // c, c, 224, 224), t).permute(0, 2, 3, 1))))
          for c in (2, 4, 8, 12, 16, 24, 32) for tn, t in (("f32", f32), ("bf16", bf16))],
        ("attn_swap/f16/16x32x2048x128",
         lambda: dict(kind="copy", src=rnd((b // 4, 32, 2048, 128), f16).transpose(-1, -2))),
        ("cast/f32_to_bf16/64M", lambda: dict(kind="cast", src=rnd((n,), f32), dtype=bf16)),
        ("cast/bf16_to_f32/64M", lambda: dict(kind="cast", src=rnd((n,), bf16), dtype=f32)),
        ("cast/f32_to_f16/64M", lambda: dict(kind="cast", src=rnd((n,), f32), dtype=f16)),
        ("cast/f16_to_f32/64M", lambda: dict(kind="cast", src=rnd((n,), f16), dtype=f32)),
        ("cast/f32_to_i64/64M", lambda: dict(kind="cast", src=rnd((n,), f32), dtype=i64)),
        ("fill/f32/64M", lambda: dict(kind="fill", dst=torch.empty(n, device="cuda", dtype=f32))),
        ("fill/bf16/128M", lambda: dict(kind="fill", dst=torch.empty(2 * n, device="cuda", dtype=bf16))),
        ("random_uniform/f32/64M", lambda: dict(kind="uniform", dst=torch.empty(n, device="cuda", dtype=f32))),
        ("random_normal/f32/64M", lambda: dict(kind="normal", dst=torch.empty(n, device="cuda", dtype=f32))),
    ]
    if e4m3 is not None:
        at = [c[0] for c in cases].index("fill/f32/64M")
        cases[at:at] = [
            ("cast/f32_to_e4m3/64M", lambda: dict(kind="cast", src=rnd((n,), f32), dtype=e4m3)),
            ("cast/e4m3_to_f32/64M", lambda: dict(kind="cast", src=rnd((n,), e4m3), dtype=f32)),
        ]
    return cases


def bits_equal(torch, a, b):
    return bool(torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)))


def run_kernels(torch, mn, quick):
    L = mn.lib
    ms = mn.out(L.mn_stream_wrap, mn.cuda, C.c_void_p(torch.cuda.current_stream().cuda_stream))
    rows, failures = [], 0
    rounds, reps, batch = (2, 5, 2) if quick else (3, 9, 4)
    for name, make in kernel_cases(torch, quick):
        views = Views(mn, torch)
        try:
            c = make()
            kind = c["kind"]
            if kind in ("copy", "cast"):
                src = c["src"]
                dt = c.get("dtype", src.dtype)
                d_m = torch.empty(src.shape, device="cuda", dtype=dt)  # contiguous, as .contiguous() makes
                d_t = torch.empty_like(d_m)
                moved = src.numel() * (src.element_size() + d_m.element_size())
                vd, vs = views.of(d_m), views.of(src)
                mn_fn = lambda: mn.ok(L.mn_kernel_copy_view(ms, vd, vs), name)
                t_fn = lambda: d_t.copy_(src)
            else:
                d_m = c["dst"]
                d_t = torch.empty_like(d_m)
                moved = d_m.numel() * d_m.element_size()
                vd = views.of(d_m)
                if kind == "fill":
                    one_five = Scalar(MN_SCALAR_FLOAT, (C.c_double * 2)(1.5, 0.0))
                    mn_fn = lambda: mn.ok(L.mn_kernel_fill_view(ms, vd, one_five), name)
                    t_fn = lambda: d_t.fill_(1.5)
                elif kind == "uniform":
                    mn_fn = lambda: mn.ok(L.mn_kernel_random_uniform(ms, vd, 1234, 0, -1.0, 1.0), name)
                    t_fn = lambda: d_t.uniform_(-1.0, 1.0)
                else:
                    mn_fn = lambda: mn.ok(L.mn_kernel_random_normal(ms, vd, 1234, 0, 0.0, 1.0), name)
                    t_fn = lambda: d_t.normal_(0.0, 1.0)
            # Correctness first, on a poisoned destination (0xFF bytes: NaN or -1).
            d_m.view(torch.uint8).fill_(0xFF)
            d_t.view(torch.uint8).fill_(0xFF)
            mn_fn()
            t_fn()
            torch.cuda.synchronize()
            if kind in ("copy", "cast", "fill"):
                exact = bits_equal(torch, d_m, d_t)
                check = "bit-exact" if exact else "DIFFERS"
                if not exact:
                    bad = (d_m.view(torch.uint8) != d_t.view(torch.uint8)).sum().item()
                    check += f" ({bad} bytes)"
                    failures += 1
            else:
                m, s = d_m.double().mean().item(), d_m.double().std().item()
                want_m, want_s = (0.0, (4 / 12) ** 0.5) if kind == "uniform" else (0.0, 1.0)
                inside = kind == "normal" or bool(((d_m >= -1) & (d_m < 1)).all().item())
                good = abs(m - want_m) < 1e-3 and abs(s - want_s) < 1e-3 and inside and not d_m.isnan().any().item()
                check = f"mean {m:+.5f}, std {s:.5f}" + ("" if good else " OUT OF RANGE")
                failures += not good
            # The ceiling: cudaMemcpyAsync device-to-device of moved/2 bytes each way.
            scratch = torch.empty(moved + 512, device="cuda", dtype=torch.uint8)
            half = (moved // 2 + 255) // 256 * 256
            base = scratch.data_ptr()
            ceil_fn = lambda: mn.ok(L.mn_memcpy_async(mn.cuda, C.c_void_p(base + half), mn.cuda, C.c_void_p(base),
                                                       moved // 2, ms), "memcpy ceiling")
            t_ceil, t_mn, t_t = interleaved(torch, [ceil_fn, mn_fn, t_fn], rounds, reps, batch)
            g = lambda t: moved / t / 1e9
            rows.append(dict(case=name, moved_bytes=moved, mnemo_gbps=g(t_mn), torch_gbps=g(t_t),
                             ceiling_gbps=g(t_ceil), mnemo_s=t_mn, torch_s=t_t, check=check))
            r = rows[-1]
            print(f"  {name}: mnemo {r['mnemo_gbps']:.0f} GB/s, torch {r['torch_gbps']:.0f} GB/s, "
                  f"ceiling {r['ceiling_gbps']:.0f} GB/s; {check}", flush=True)
            del scratch
        except Exception as e:  # one broken case is reported, the others still run
            rows.append(dict(case=name, error=str(e)))
            print(f"  {name}: ERROR {e}", flush=True)
            failures += 1
        finally:
            torch.cuda.synchronize()
            views.close()
            c = None
            torch.cuda.empty_cache()
    L.mn_stream_destroy(ms)
    return rows, failures


def kernels_md(rows):
    out = ["| case | MiB moved | mnemo GB/s | torch GB/s | mnemo / torch | mnemo % of ceiling | "
           "torch % of ceiling | ceiling GB/s | mnemo vs torch result |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | | | | | | | | ERROR: {r['error']} |")
            continue
        c = r["ceiling_gbps"]
        out.append(f"| {r['case']} | {r['moved_bytes'] / MB:.0f} | {r['mnemo_gbps']:.0f} | {r['torch_gbps']:.0f} | "
                   f"{r['mnemo_gbps'] / r['torch_gbps']:.2f}x | {100 * r['mnemo_gbps'] / c:.0f}% | "
                   f"{100 * r['torch_gbps'] / c:.0f}% | {c:.0f} | {r['check']} |")
    return "\n".join(out)


# ---- allocator host cost --------------------------------------------------------------


def run_alloc(torch, mn, quick):
    L = mn.lib
    n = 20000 if quick else 100000
    rounds = 5
    s = torch.cuda.current_stream()
    ms = mn.out(L.mn_stream_wrap, mn.cuda, C.c_void_p(s.cuda_stream))
    a = mn.out(L.mn_allocator_get_default, mn.cuda)
    try:
        import cupy
        rt = cupy.cuda.runtime
    except Exception as e:  # CuPy absent: that column is left out, said why
        cupy, rt = None, None
        print(f"  cupy unavailable ({e}): no cudaMallocAsync row", flush=True)
    rows = []
    alloc, free = L.mn_allocator_alloc, L.mn_allocator_free
    p = C.c_void_p()
    pref = C.byref(p)
    noop = L.mn_build_has_cuda

    def per_pair(loop):
        ts = []
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            loop()
            ts.append((time.perf_counter_ns() - t0) / n)
        return statistics.median(ts)

    for size in (4096, MB, 16 * MB):
        def torch_loop():
            for _ in range(n):
                torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size, 0, s))

        def mnemo_loop():
            for _ in range(n):
                alloc(a, size, ms, pref)
                free(a, p)

        def noop_loop():
            for _ in range(n):
                noop()
                noop()

        torch_loop(), mnemo_loop()  # warm: the blocks are cached from here on
        st = alloc(a, size, ms, pref)
        mn.ok(st, "mn_allocator_alloc")
        mn.ok(free(a, p), "mn_allocator_free")
        row = dict(size=size, torch_ns=per_pair(torch_loop), mnemo_ns=per_pair(mnemo_loop),
                   ctypes_two_calls_ns=per_pair(noop_loop))
        if rt is not None:
            sp = s.cuda_stream

            def async_loop():
                for _ in range(n):
                    rt.freeAsync(rt.mallocAsync(size, sp), sp)

            async_loop()
            row["cuda_malloc_async_ns"] = per_pair(async_loop)
            torch.cuda.synchronize()
        rows.append(row)
        print(f"  {size} B: " + ", ".join(f"{k} {v:.0f}" for k, v in row.items() if k != "size"), flush=True)
    L.mn_stream_destroy(ms)
    return rows


def alloc_md(rows):
    out = ["Host time per alloc+free pair, both from Python (ns, median of 5 rounds); the "
           "ctypes column is the cost of two empty ctypes calls, the part of mnemo's figure that is "
           "the binding, not the allocator.", "",
           "| size | torch caching allocator | mnemo caching allocator (ctypes) | two empty ctypes calls | "
           "mnemo less binding | cudaMallocAsync+cudaFreeAsync (default pool, CuPy binding) |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        asy = f"{r['cuda_malloc_async_ns']:.0f}" if "cuda_malloc_async_ns" in r else "n/a (no CuPy)"
        out.append(f"| {r['size']} | {r['torch_ns']:.0f} | {r['mnemo_ns']:.0f} | {r['ctypes_two_calls_ns']:.0f} | "
                   f"{r['mnemo_ns'] - r['ctypes_two_calls_ns']:.0f} | {asy} |")
    return "\n".join(out)


# ---- host <-> device copies ----------------------------------------------------------------


def wall_time(torch, fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.current_stream().synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run_copy(torch, mn, quick):
    L = mn.lib
    s = torch.cuda.current_stream()
    ms = mn.out(L.mn_stream_wrap, mn.cuda, C.c_void_p(s.cuda_stream))
    pool = mn.out(L.mn_pinned_allocator_get_default, mn.cuda)
    rows = []
    reps = 5 if quick else 11
    cfg0 = L.mn_copy_config_default()
    for nbytes in ((64 * MB,) if quick else (64 * MB, 256 * MB)):
        dev = torch.empty(nbytes, device="cuda", dtype=torch.uint8)
        pinned_t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        pageable = torch.empty(nbytes, dtype=torch.uint8)
        pageable.random_(0, 255)
        pinned_t.copy_(pageable)
        pin_m = mn.out(L.mn_allocator_alloc, pool, nbytes, None)
        C.memmove(pin_m, pageable.data_ptr(), nbytes)
        D, P, G = C.c_void_p(dev.data_ptr()), C.c_void_p(pinned_t.data_ptr()), C.c_void_p(pageable.data_ptr())

        def mn_copy(dst_dev, dst, src_dev, src, flags, what):
            return lambda: mn.ok(L.mn_copy_bytes(dst_dev, dst, src_dev, src, nbytes, ms, flags), what)

        def set_threads(k):
            c = CopyConfig(cfg0.chunk_bytes, cfg0.staging_buffers, k)
            mn.ok(L.mn_copy_set_config(C.byref(c)), "mn_copy_set_config")

        nb = MN_COPY_NON_BLOCKING
        cases = [
            ("h2d pinned", mn_copy(mn.cuda, D, mn.cpu, pin_m, nb | MN_COPY_SRC_PINNED, "h2d pinned"),
             lambda: dev.copy_(pinned_t, non_blocking=True),
             lambda: mn.ok(L.mn_memcpy_async(mn.cuda, D, mn.cpu, P, nbytes, ms), "ceiling")),
            ("d2h pinned", mn_copy(mn.cpu, pin_m, mn.cuda, D, nb | MN_COPY_DST_PINNED, "d2h pinned"),
             lambda: pinned_t.copy_(dev, non_blocking=True),
             lambda: mn.ok(L.mn_memcpy_async(mn.cpu, P, mn.cuda, D, nbytes, ms), "ceiling")),
            ("h2d pageable non_blocking (mnemo staged; torch pin_memory().to(cuda, non_blocking))",
             mn_copy(mn.cuda, D, mn.cpu, G, nb, "h2d pageable"),
             lambda: dev.copy_(pageable.pin_memory().to("cuda", non_blocking=True)),
             lambda: mn.ok(L.mn_memcpy_async(mn.cuda, D, mn.cpu, P, nbytes, ms), "ceiling")),
            ("h2d pageable non_blocking (torch .to(cuda, non_blocking) straight)",
             mn_copy(mn.cuda, D, mn.cpu, G, nb, "h2d pageable"),
             lambda: dev.copy_(pageable, non_blocking=True),
             lambda: mn.ok(L.mn_memcpy_async(mn.cuda, D, mn.cpu, P, nbytes, ms), "ceiling")),
            ("d2h pageable (blocking, staged by mnemo; torch copy_)",
             mn_copy(mn.cpu, G, mn.cuda, D, 0, "d2h pageable"),
             lambda: pageable.copy_(dev),
             lambda: mn.ok(L.mn_memcpy_async(mn.cpu, P, mn.cuda, D, nbytes, ms), "ceiling")),
        ]
        for name, mfn, tfn, cfn in cases:
            row = dict(case=name, bytes=nbytes)
            try:
                t_ceil = wall_time(torch, cfn, reps)
                set_threads(cfg0.host_threads)
                t_mn = wall_time(torch, mfn, reps)
                if "pageable" in name:
                    set_threads(8)
                    row["mnemo8_gbps"] = nbytes / wall_time(torch, mfn, reps) / 1e9
                    set_threads(cfg0.host_threads)
                t_t = wall_time(torch, tfn, reps)
                row.update(mnemo_gbps=nbytes / t_mn / 1e9, torch_gbps=nbytes / t_t / 1e9,
                           ceiling_gbps=nbytes / t_ceil / 1e9)
            except Exception as e:
                row["error"] = str(e)
            rows.append(row)
            print(f"  {nbytes >> 20} MiB {name}: " +
                  ", ".join(f"{k} {v:.1f}" for k, v in row.items() if k.endswith("gbps")) +
                  (f" ERROR {row['error']}" if "error" in row else ""), flush=True)
        # The data arrived: a final pinned round trip compared byte for byte.
        mn.ok(L.mn_copy_bytes(mn.cuda, D, mn.cpu, G, nbytes, ms, 0), "h2d check")
        back = torch.empty_like(pageable)
        mn.ok(L.mn_copy_bytes(mn.cpu, C.c_void_p(back.data_ptr()), mn.cuda, D, nbytes, ms, 0), "d2h check")
        rows.append(dict(case="round trip check", bytes=nbytes, equal=bool(torch.equal(back, pageable))))
        mn.ok(L.mn_allocator_free(pool, pin_m), "free pinned")
        del dev, pinned_t, pageable, back
    set_threads(cfg0.host_threads)
    L.mn_stream_destroy(ms)
    return rows


def copy_md(rows):
    out = ["GB/s = bytes / wall time of the call plus a stream synchronize (median); the ceiling is "
           "cudaMemcpyAsync from/to the same pinned buffer. mnemo's pageable copies run with its default "
           "(1 host thread per chunk copy) and with host_threads=8.", "",
           "| MiB | case | mnemo GB/s | mnemo, 8 host threads | torch GB/s | mnemo / torch | "
           "cudaMemcpyAsync ceiling GB/s | mnemo % of ceiling |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "equal" in r:
            out.append(f"| {r['bytes'] >> 20} | {r['case']} | {'equal' if r['equal'] else 'DIFFERS'} | | | | | |")
            continue
        if "error" in r:
            out.append(f"| {r['bytes'] >> 20} | {r['case']} | ERROR: {r['error']} | | | | | |")
            continue
        m8 = f"{r['mnemo8_gbps']:.1f}" if "mnemo8_gbps" in r else ""
        out.append(f"| {r['bytes'] >> 20} | {r['case']} | {r['mnemo_gbps']:.1f} | {m8} | {r['torch_gbps']:.1f} | "
                   f"{r['mnemo_gbps'] / r['torch_gbps']:.2f}x | {r['ceiling_gbps']:.1f} | "
                   f"{100 * r['mnemo_gbps'] / r['ceiling_gbps']:.0f}% |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=".")
    ap.add_argument("--only", nargs="*", default=["kernels", "alloc", "copy"])
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repetitions")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("compare_torch: torch sees no CUDA device")
        return 1
    mn = Mnemo(os.path.abspath(args.lib))
    torch.cuda.init()
    props = torch.cuda.get_device_properties(0)
    head = (f"{torch.cuda.get_device_name(0)}, {props.multi_processor_count} SMs, "
            f"L2 {props.L2_cache_size >> 20} MiB; torch {torch.__version__} (CUDA {torch.version.cuda}); "
            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    print(head, flush=True)
    res, md, failures = dict(device=head), [f"# mnemo vs PyTorch on one GPU\n\n{head}\n"], 0
    if "kernels" in args.only:
        print("== kernels", flush=True)
        res["kernels"], f = run_kernels(torch, mn, args.quick)
        failures += f
        md += ["## Kernels (CUDA events on both sides, same stream, same buffers)\n",
               "GB/s = (bytes read + bytes written) / time; ceiling = cudaMemcpyAsync D2D of the same "
               "number of bytes, measured in the same run; median of interleaved rounds.\n",
               kernels_md(res["kernels"]), ""]
    if "alloc" in args.only:
        print("== alloc", flush=True)
        res["alloc"] = run_alloc(torch, mn, args.quick)
        md += ["## Allocator host cost\n", alloc_md(res["alloc"]), ""]
    if "copy" in args.only:
        print("== copy", flush=True)
        res["copy"] = run_copy(torch, mn, args.quick)
        failures += sum(1 for r in res["copy"] if "error" in r or r.get("equal") is False)
        md += ["## Host <-> device copies\n", copy_md(res["copy"]), ""]
    text = "\n".join(md)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "compare.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(text)
    print(f"compare_torch: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
