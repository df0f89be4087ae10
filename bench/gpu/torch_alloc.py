#!/usr/bin/env python3
# bench/gpu/torch_alloc.py: mnemo as the allocator of real frameworks on a CUDA GPU:
# a small transformer trained with PyTorch's caching allocator and with mnemo's
# (CUDAPluggableAllocator), same seed and steps, peaks and step times side by side;
# CuPy allocating through mnemo (CFunctionAllocator); and the training step recorded
# with PyTorch's memory history, converted to a trace and replayed by `mnemo replay`.
"""Train, allocate and trace through mnemo on a CUDA GPU (PyTorch >= 2.1, CuPy).

Usage: python3 bench/gpu/torch_alloc.py --lib build/cuda/libmnemo.so
           --mnemo build/cuda/tools/mnemo --out OUTDIR [--steps N] [--budget-s S] [--dry-run]
       (bench/gpu/run.sh torch runs it on the lent GPU machine)

Parts, each independent (a failure is reported with its error text and the
others still run; the exit status is 1 when any part failed):
  1. train   a decoder-style TransformerEncoder LM (d_model 1024, 8 layers, 16 heads,
             ff 4096, causal, batch 16 x 512 tokens, vocab 32000 head, AdamW, bf16
             autocast), --steps steps (default 6), one subprocess per allocator:
               torch              PyTorch's caching allocator, defaults
               torch_expandable   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
               mnemo              mnemo through CUDAPluggableAllocator, defaults
               mnemo_expandable   the same with MNEMO_ALLOC_CONF=expandable_segments:True
             PyTorch's peaks from torch.cuda.max_memory_reserved/allocated; mnemo's
             from its own statistics (mn_allocator_get_stats through ctypes on the
             same libmnemo.so). Peaks cover the whole process (model and optimizer
             state included). Per-step losses must agree with `torch` (|diff| <= 0.05).
  2. cupy    CuPy's allocator set to mnemo_cupy_malloc/free; a few hundred arrays
             of 64 B..32 MiB allocated and freed, contents, a matmul and a sum
             checked against numpy; mnemo's statistics must show the allocations;
             then mnemo_empty_cache(0).
  3. trace   the training step under PyTorch's default allocator: one warm-up step,
             then memory history (stacks="python") over 2 steps, the snapshot, and
             torch.cuda.memory_stats() peaks over those steps; converted with
             tools/import_torch_snapshot.py and replayed by `mnemo replay --json`
             (defaults and expandable_segments:True) on the SIM device.

Writes into OUTDIR (three files): torch.md (the report, also printed), torch.json
(every number), small_transformer_train.tar.gz (the snapshot .pickle.gz, the
.trace and its .json metadata in data/traces' NAME.json form).
--dry-run prints the plan and checks what it can without a GPU: imports, the
files, the ctypes mirror of mnemo's statistics on the SIM device, a replay of a
bundled trace, and one training step of a tiny model on the CPU; exit 0.
"""

import argparse
import ctypes
import gzip
import inspect
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback

from mnemo_ctypes import MN_DEVICE_CUDA, MN_DEVICE_SIM, Dev, Lib  # beside this file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
IMPORTER = os.path.join(ROOT, "tools", "import_torch_snapshot.py")
TRACE_NAME = "small_transformer_train"
GIB = float(1 << 30)

MODEL = {"vocab": 32000, "d_model": 1024, "layers": 8, "heads": 16, "ff": 4096, "batch": 16, "seq": 512}
TINY = {"vocab": 128, "d_model": 64, "layers": 2, "heads": 4, "ff": 128, "batch": 2, "seq": 16}
LOSS_TOL = 0.05  # |loss - torch's loss| per step; bf16 noise is far below, corruption far above

# config name -> (uses mnemo, environment set for the subprocess)
TRAIN_CONFIGS = [
    ("torch", False, {}),
    ("torch_expandable", False, {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                                 "PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
    ("mnemo", True, {}),
    ("mnemo_expandable", True, {"MNEMO_ALLOC_CONF": "expandable_segments:True"}),
]
# Cleared in every subprocess, then set again from the config's own environment.
CLEARED_ENV = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "MNEMO_ALLOC_CONF", "MNEMO_TRACE", "MNEMO_NVTX")
LIMITS = {"train": 100, "cupy": 90, "trace": 150, "import": 90, "replay": 60}  # seconds per subprocess


def say(msg):
    print(msg, flush=True)


# ---- mnemo's statistics through ctypes (mnemo/allocator.h, mnemo/device.h) -------------

POOLS = ("all", "small", "large")  # MN_POOL_ALL, MN_POOL_SMALL, MN_POOL_LARGE
POOLED = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
          "active_bytes", "inactive_split_bytes", "requested_bytes")  # MN_ALLOC_STATS_MAP, in order
SCALARS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
           "max_split_size")
STATE_NAMES = ("active", "active_pending_free", "inactive")


class MnStat(ctypes.Structure):  # mn_stat_t
    _fields_ = [(k, ctypes.c_int64) for k in ("current", "peak", "allocated", "freed")]


class MnAllocStats(ctypes.Structure):  # mn_alloc_stats_t, MN_ALLOC_STATS_VERSION 1: 984 bytes
    _fields_ = ([("size", ctypes.c_uint32), ("version", ctypes.c_uint32)] +
                [(k, MnStat * 3) for k in POOLED] +
                [("oversize_allocations", MnStat), ("oversize_segments", MnStat)] +
                [(k, ctypes.c_int64) for k in SCALARS])


class MnSnapshotBlock(ctypes.Structure):  # mn_snapshot_block_t
    _fields_ = [("address", ctypes.c_size_t), ("size", ctypes.c_size_t), ("requested_size", ctypes.c_size_t),
                ("state", ctypes.c_int)]


class MnSnapshotSegment(ctypes.Structure):  # mn_snapshot_segment_t
    _fields_ = [("device", Dev), ("address", ctypes.c_size_t), ("total_size", ctypes.c_size_t),
                ("allocated_size", ctypes.c_size_t), ("active_size", ctypes.c_size_t),
                ("requested_size", ctypes.c_size_t), ("stream_id", ctypes.c_uint64), ("is_large", ctypes.c_bool),
                ("is_expandable", ctypes.c_bool), ("pool_id", ctypes.c_uint64), ("nblocks", ctypes.c_size_t),
                ("blocks", ctypes.POINTER(MnSnapshotBlock))]


class MnSnapshot(ctypes.Structure):  # mn_snapshot_t
    _fields_ = [("nsegments", ctypes.c_size_t), ("segments", ctypes.POINTER(MnSnapshotSegment))]


class Mnemo(Lib):
    """The default allocator of one device in an already loaded libmnemo.so
    (ctypes.CDLL of the path CUDAPluggableAllocator loaded gives the same instance)."""

    def __init__(self, lib_path, dev_type=MN_DEVICE_CUDA, index=0):
        assert ctypes.sizeof(MnAllocStats) == 984 and ctypes.sizeof(MnSnapshotSegment) == 80
        P, I, S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
        super().__init__(lib_path, {
            "mn_allocator_get_default": (I, [Dev, ctypes.POINTER(P)]),
            "mn_allocator_get_stats": (I, [P, P]),
            "mn_allocator_snapshot": (I, [P, ctypes.POINTER(ctypes.POINTER(MnSnapshot))]),
            "mn_snapshot_free": (None, [ctypes.POINTER(MnSnapshot)]),
            "mn_allocator_name": (ctypes.c_char_p, [P]),
            "mnemo_empty_cache": (I, [I]),
            "mnemo_torch_alloc": (P, [S, I, P]),
            "mnemo_torch_free": (None, [P, S, I, P]),
            "mn_pluggable_set_device_type": (I, [I]),
        })
        self.dev = Dev(dev_type, index)

    def allocator(self):
        return self.out(self.lib.mn_allocator_get_default, self.dev)

    def stats(self):
        """mn_alloc_stats_t as a dict: {name: {pool: {current, peak, allocated, freed}}} plus the scalars."""
        a = self.allocator()
        buf = ctypes.create_string_buffer(4096)  # room for a larger struct from a newer library
        self.ok(self.lib.mn_allocator_get_stats(a, buf), "mn_allocator_get_stats")
        s = MnAllocStats.from_buffer(buf)
        if s.size != ctypes.sizeof(MnAllocStats) or s.version != 1:
            raise RuntimeError(f"mn_alloc_stats_t is {s.size} bytes, version {s.version}: this mirror "
                               f"expects {ctypes.sizeof(MnAllocStats)} bytes, version 1")
        stat = lambda st: {k: int(getattr(st, k)) for k in ("current", "peak", "allocated", "freed")}
        out = {k: {p: stat(getattr(s, k)[i]) for i, p in enumerate(POOLS)} for k in POOLED}
        out["oversize_allocations"] = stat(s.oversize_allocations)
        out["oversize_segments"] = stat(s.oversize_segments)
        out.update({k: int(getattr(s, k)) for k in SCALARS})
        out["allocator"] = (self.lib.mn_allocator_name(a) or b"").decode()
        return out

    def segments(self):
        """A summary of mn_allocator_snapshot: segment and block counts, bytes, expandable runs."""
        snap = ctypes.POINTER(MnSnapshot)()
        self.ok(self.lib.mn_allocator_snapshot(self.allocator(), ctypes.byref(snap)), "mn_allocator_snapshot")
        try:
            out = {"segments": 0, "expandable_segments": 0, "large_segments": 0, "blocks": 0,
                   "total_bytes": 0, "allocated_bytes": 0, "requested_bytes": 0,
                   "blocks_by_state": {k: 0 for k in STATE_NAMES}}
            for i in range(snap.contents.nsegments):
                seg = snap.contents.segments[i]
                out["segments"] += 1
                out["expandable_segments"] += bool(seg.is_expandable)
                out["large_segments"] += bool(seg.is_large)
                out["blocks"] += seg.nblocks
                out["total_bytes"] += seg.total_size
                out["allocated_bytes"] += seg.allocated_size
                out["requested_bytes"] += seg.requested_size
                for j in range(seg.nblocks):
                    st = seg.blocks[j].state
                    key = STATE_NAMES[st] if 0 <= st < len(STATE_NAMES) else "other"
                    out["blocks_by_state"][key] = out["blocks_by_state"].get(key, 0) + 1
            return out
        finally:
            self.lib.mn_snapshot_free(snap)


def sim_selfcheck(lib_path):
    """Checks the ctypes mirror against the library without a GPU: the pluggable
    entry points serve the SIM device; known allocations must show in the stats."""
    m = Mnemo(lib_path, MN_DEVICE_SIM, 0)
    m.ok(m.lib.mn_pluggable_set_device_type(MN_DEVICE_SIM), "mn_pluggable_set_device_type")
    sizes = [1000, 1 << 20, 3 << 20, 12345678]
    ptrs = [m.lib.mnemo_torch_alloc(n, 0, None) for n in sizes]
    if not all(ptrs):
        raise RuntimeError(f"mnemo_torch_alloc on sim:0 failed: {m.last_error()}")
    s = m.stats()
    seg = m.segments()
    problems = []
    if s["allocation"]["all"]["current"] != len(sizes):
        problems.append(f"allocation.all.current {s['allocation']['all']['current']} != {len(sizes)}")
    if s["requested_bytes"]["all"]["current"] != sum(sizes):
        problems.append(f"requested_bytes.all.current {s['requested_bytes']['all']['current']} != {sum(sizes)}")
    if s["allocation"]["small"]["current"] + s["allocation"]["large"]["current"] != len(sizes):
        problems.append("small + large allocations != all")
    if s["reserved_bytes"]["all"]["current"] != seg["total_bytes"]:
        problems.append(f"reserved_bytes.all.current {s['reserved_bytes']['all']['current']} != "
                        f"snapshot total {seg['total_bytes']}")
    if seg["blocks_by_state"]["active"] != len(sizes) or seg["requested_bytes"] != sum(sizes):
        problems.append(f"snapshot: {seg}")
    for p, n in zip(ptrs, sizes):
        m.lib.mnemo_torch_free(p, n, 0, None)
    rc = m.lib.mnemo_empty_cache(0)
    after = m.stats()
    if rc != 0 or after["allocation"]["all"]["current"] != 0 or after["reserved_bytes"]["all"]["current"] != 0:
        problems.append(f"after frees and mnemo_empty_cache (rc {rc}): allocation.current "
                        f"{after['allocation']['all']['current']}, reserved.current "
                        f"{after['reserved_bytes']['all']['current']}")
    if after["allocation"]["all"]["allocated"] != len(sizes) or after["num_device_alloc"] <= 0:
        problems.append(f"allocation.allocated {after['allocation']['all']['allocated']}, "
                        f"num_device_alloc {after['num_device_alloc']}")
    m.lib.mn_pluggable_set_device_type(MN_DEVICE_CUDA)
    return problems, s


# ---- the model and its training step --------------------------------------------------------

def build_training(torch, dev, cfg, nbatches, seed=0):
    """(step(k) -> detached loss, description). Weights are initialized on the CPU from
    `seed`, so every allocator starts from the same bytes; batches come from a CPU
    generator and are copied in at each step."""
    nn, F = torch.nn, torch.nn.functional
    V, D, S, B = cfg["vocab"], cfg["d_model"], cfg["seq"], cfg["batch"]

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.pos = nn.Parameter(torch.randn(S, D) * 0.02)
            layer = nn.TransformerEncoderLayer(D, cfg["heads"], cfg["ff"], dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.enc = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.norm = nn.LayerNorm(D)
            self.head = nn.Linear(D, V, bias=False)
            self.causal = "is_causal" in inspect.signature(self.enc.forward).parameters

        def forward(self, ids, mask):
            x = self.emb(ids) + self.pos[: ids.shape[1]]
            x = self.enc(x, mask=mask, is_causal=True) if self.causal else self.enc(x, mask=mask)
            return self.head(self.norm(x))

    torch.manual_seed(seed)
    model = LM()
    model.to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed + 1)
    batches = [torch.randint(0, V, (B, S + 1), generator=gen) for _ in range(max(1, nbatches))]
    mask = torch.full((S, S), float("-inf")).triu(1).to(dev)
    amp = dev.type == "cuda"

    def step(k):
        ids = batches[k % len(batches)].to(dev)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(ids[:, :-1], mask)
            loss = F.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    nparams = sum(p.numel() for p in model.parameters())
    info = {"model": (f"TransformerEncoder LM (torch.nn, pre-norm, causal, GELU, no dropout): d_model {D}, "
                      f"{cfg['layers']} layers, {cfg['heads']} heads, ff {cfg['ff']}, vocab {V} (untied head), "
                      f"{nparams / 1e6:.1f}M parameters, random init (seed {seed})"),
            "batch": f"{B} x {S} tokens, {'bf16 autocast' if amp else 'fp32'}, AdamW lr 3e-4",
            "params": nparams, "causal_hint": model.causal}
    return step, info


def sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run_steps(torch, dev, step, n, tag):
    losses, ms = [], []
    for k in range(n):
        sync(torch, dev)
        t0 = time.perf_counter()
        loss = step(k)
        sync(torch, dev)
        ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(float(loss.item()))
        say(f"{tag}: step {k}: loss {losses[-1]:.6f}, {ms[-1]:.1f} ms")
    return losses, ms


# ---- subprocess workers (python3 torch_alloc.py --worker KIND ...) ----------------------------

def worker_train(args, res):
    name = args.config
    use_mnemo = dict((c, m) for c, m, _ in TRAIN_CONFIGS)[name]
    import torch
    res.update({"config": name, "torch": torch.__version__, "cuda": torch.version.cuda,
                "env": {k: os.environ.get(k, "") for k in CLEARED_ENV if os.environ.get(k)}})
    if use_mnemo:  # before anything touches CUDA
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.lib, "mnemo_torch_alloc", "mnemo_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    dev = torch.device("cuda:0")
    res["gpu"] = torch.cuda.get_device_name(0)
    t0 = time.perf_counter()
    step, info = build_training(torch, dev, MODEL, args.steps)
    res.update(info)
    res["setup_s"] = time.perf_counter() - t0
    losses, ms = run_steps(torch, dev, step, args.steps, name)
    res["losses"], res["step_ms"] = losses, ms
    res["median_step_ms"] = statistics.median(ms[1:] if len(ms) > 1 else ms)
    if use_mnemo:
        m = Mnemo(args.lib)
        st = m.stats()
        res["mnemo_stats"] = st
        try:
            res["mnemo_segments"] = m.segments()
        except Exception as e:  # the statistics are what counts
            res["mnemo_segments"] = {"error": str(e)}
        res["peak_reserved"] = st["reserved_bytes"]["all"]["peak"]
        res["peak_allocated"] = st["allocated_bytes"]["all"]["peak"]
        res["device_allocs"] = st["num_device_alloc"]
        res["alloc_retries"] = st["num_alloc_retries"]
        res["expandable_in_effect"] = res["mnemo_segments"].get("expandable_segments", 0) > 0
    else:
        res["peak_reserved"] = torch.cuda.max_memory_reserved(dev)
        res["peak_allocated"] = torch.cuda.max_memory_allocated(dev)
        ms_ = torch.cuda.memory_stats(dev)
        res["torch_stats"] = {k: ms_.get(k) for k in (
            "reserved_bytes.all.peak", "allocated_bytes.all.peak", "requested_bytes.all.peak",
            "segment.all.peak", "segment.all.current", "num_alloc_retries", "num_ooms",
            "num_device_alloc", "num_device_free", "allocation.all.allocated")}
        res["device_allocs"] = ms_.get("num_device_alloc", ms_.get("segment.all.allocated"))
        res["alloc_retries"] = ms_.get("num_alloc_retries")
        segs = torch.cuda.memory._snapshot().get("segments", [])
        res["segments_at_end"] = len(segs)
        res["expandable_in_effect"] = any(s.get("is_expandable") for s in segs)


def worker_cupy(args, res):
    import numpy as np
    import cupy
    res.update({"cupy": cupy.__version__, "numpy": np.__version__})
    lib = ctypes.CDLL(args.lib)
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value
    alloc = cupy.cuda.memory.CFunctionAllocator(0, addr(lib.mnemo_cupy_malloc), addr(lib.mnemo_cupy_free), lib)
    cupy.cuda.set_allocator(alloc.malloc)
    m = Mnemo(args.lib)
    res["stats_before"] = before = m.stats()
    rng = np.random.default_rng(0)
    live, made, checked, bad, nbytes_total = [], 0, 0, 0, 0
    for i in range(400):
        n = max(1, int(2 ** rng.uniform(6, 25)) // 4)  # 64 B .. 32 MiB of float32
        if i % 8 == 0:
            host = rng.standard_normal(n).astype(np.float32)
            d = cupy.asarray(host)
            checked += 1
            bad += not np.array_equal(cupy.asnumpy(d), host)
        else:
            d = cupy.empty(n, dtype=cupy.float32)
        live.append(d)
        made += 1
        nbytes_total += d.nbytes
        if len(live) > 24:
            live.pop(int(rng.integers(len(live))))
    res["memory_class"] = type(live[-1].data.mem).__name__
    a = rng.standard_normal((512, 768))
    b = rng.standard_normal((768, 256))
    c = cupy.asarray(a) @ cupy.asarray(b)
    ref = a @ b
    got = cupy.asnumpy(c)
    v = rng.standard_normal(1 << 22)
    s_gpu, s_cpu = float(cupy.asarray(v).sum()), float(v.sum())
    cupy.cuda.Device(0).synchronize()
    res.update({"arrays": made, "arrays_bytes": nbytes_total, "checked_roundtrips": checked, "bad_roundtrips": bad,
                "matmul_max_abs_err": float(np.max(np.abs(got - ref))),
                "matmul_ok": bool(np.allclose(got, ref, rtol=1e-9, atol=1e-9)),
                "sum_gpu": s_gpu, "sum_cpu": s_cpu, "sum_ok": abs(s_gpu - s_cpu) <= 1e-9 * max(1.0, abs(s_cpu))})
    res["stats_live"] = live_st = m.stats()
    del live, c, d
    res["stats_freed"] = m.stats()
    res["empty_cache_rc"] = rc = m.lib.mnemo_empty_cache(0)
    res["empty_cache_error"] = m.last_error() if rc else ""
    res["stats_after_empty_cache"] = after = m.stats()
    allocs = live_st["allocation"]["all"]["allocated"] - before["allocation"]["all"]["allocated"]
    res["mnemo_allocations"] = allocs
    problems = []
    if bad:
        problems.append(f"{bad} of {checked} host round trips differ")
    if not res["matmul_ok"]:
        problems.append(f"matmul differs from numpy by {res['matmul_max_abs_err']:.3g}")
    if not res["sum_ok"]:
        problems.append(f"sum {s_gpu!r} != numpy {s_cpu!r}")
    if allocs < made:
        problems.append(f"mnemo counted {allocs} allocations for {made} arrays")
    if live_st["reserved_bytes"]["all"]["peak"] <= 0:
        problems.append("mnemo's peak reserved is 0")
    if rc != 0:
        problems.append(f"mnemo_empty_cache(0) = {rc}: {res['empty_cache_error']}")
    if after["reserved_bytes"]["all"]["current"] > res["stats_freed"]["reserved_bytes"]["all"]["current"]:
        problems.append("reserved grew across mnemo_empty_cache")
    res["problems"] = problems
    say(f"cupy: {made} arrays ({nbytes_total / GIB:.2f} GiB in all), mnemo counted {allocs} allocations, "
        f"peak reserved {live_st['reserved_bytes']['all']['peak'] / GIB:.3f} GiB; reserved after "
        f"mnemo_empty_cache {after['reserved_bytes']['all']['current'] / GIB:.3f} GiB; "
        f"{'ok' if not problems else '; '.join(problems)}")


def worker_trace(args, res):
    import pickle
    import torch
    sys.path.insert(0, HERE)
    from record_traces import start_history, stop_history
    dev = torch.device("cuda:0")
    step, info = build_training(torch, dev, MODEL, 3)
    res.update(info)
    step(0)  # warm-up: the cache holds the steady state before recording
    sync(torch, dev)
    torch.cuda.reset_peak_memory_stats(dev)
    start_history(torch)
    losses = [float(step(k).item()) for k in (1, 2)]
    sync(torch, dev)
    snap = torch.cuda.memory._snapshot()
    stop_history(torch)
    stats = torch.cuda.memory_stats(dev)
    path = os.path.join(args.tmp, TRACE_NAME + ".pickle")
    with open(path, "wb") as f:
        pickle.dump(snap, f)
    traces = snap.get("device_traces", [])
    actions = {}
    for t in traces:
        for e in t:
            actions[e.get("action")] = actions.get(e.get("action"), 0) + 1
    res.update({
        "name": TRACE_NAME, "torch": torch.__version__, "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "warmup_steps": 1, "recorded_steps": 2, "stacks": "python", "recorded_losses": losses,
        "torch_peak_reserved": stats.get("reserved_bytes.all.peak"),
        "torch_peak_allocated": stats.get("allocated_bytes.all.peak"),
        "torch_peak_requested": stats.get("requested_bytes.all.peak"),
        "torch_num_alloc_retries": stats.get("num_alloc_retries"),
        "torch_segments_peak": stats.get("segment.all.peak"),
        "torch_segments_current": stats.get("segment.all.current"),
        "torch_num_device_alloc": stats.get("num_device_alloc"),
        "streams": sorted({e["stream"] for t in traces for e in t if "stream" in e}),
        "trace_events": actions, "snapshot_segments": len(snap.get("segments", [])),
        "recorded_by": "bench/gpu/torch_alloc.py",
    })
    say(f"trace: PyTorch peak reserved {res['torch_peak_reserved'] / GIB:.3f} GiB, allocated "
        f"{res['torch_peak_allocated'] / GIB:.3f} GiB over the recorded steps; "
        f"{sum(actions.values())} events; snapshot {os.path.getsize(path) / 1e6:.1f} MB")


def worker_main(args):
    res = {}
    rc = 0
    try:
        {"train": worker_train, "cupy": worker_cupy, "trace": worker_trace}[args.worker](args, res)
    except BaseException as e:  # reported by the parent with the traceback
        res["error"] = f"{type(e).__name__}: {e}"
        res["traceback"] = traceback.format_exc()
        say(res["traceback"])
        rc = 1
    with open(args.result, "w") as f:
        json.dump(res, f, indent=1, default=str)
    sys.stdout.flush()
    return rc


# ---- the parent: runs the workers, writes the report -------------------------------------------

class Budget:
    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def limit(self, want, reserve=10):
        return int(min(want, self.deadline - time.monotonic() - reserve))


def run_child(cmd, env, limit, tag):
    """Runs cmd in its own session, echoing its output with a prefix; kills its
    session when it passes `limit` seconds. {rc, timed_out, seconds, tail}."""
    if limit < 15:
        return {"rc": None, "timed_out": False, "seconds": 0.0, "tail": [],
                "error": "not run: the time budget is used up"}
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         errors="replace", start_new_session=True)
    lines = []

    def pump():
        for line in p.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            say(f"    [{tag}] {line}")

    th = threading.Thread(target=pump, daemon=True)
    th.start()
    timed_out = False
    try:
        rc = p.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)  # the session started above: the child and its children
        except ProcessLookupError:
            pass
        rc = p.wait()
    th.join(5)
    out = {"rc": rc, "timed_out": timed_out, "seconds": round(time.monotonic() - t0, 1), "tail": lines[-40:]}
    if timed_out:
        out["error"] = f"timed out after {limit} s"
    return out


def child_env(extra):
    env = dict(os.environ)
    for k in CLEARED_ENV:
        env.pop(k, None)
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_worker(args, kind, tag, limit, extra_env=None, extra_args=()):
    result = os.path.join(args.tmp, f"result-{tag}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--lib", args.lib, "--steps",
           str(args.steps), "--tmp", args.tmp, "--result", result] + list(extra_args)
    say(f"  {tag}: {' '.join(f'{k}={v}' for k, v in (extra_env or {}).items())} python3 torch_alloc.py "
        f"--worker {kind} (limit {limit} s)")
    run = run_child(cmd, child_env(extra_env or {}), limit, tag)
    res = {}
    if os.path.exists(result):
        with open(result) as f:
            res = json.load(f)
    wrote = bool(res)
    res["exit_status"] = run["rc"]
    res["seconds"] = run["seconds"]
    if run.get("error"):
        res.setdefault("error", run["error"])
    elif run["rc"] != 0 and "error" not in res:
        res["error"] = f"exit status {run['rc']}" + (" after writing its results" if wrote else "")
    if res.get("error"):
        res["output_tail"] = run["tail"]
    return res


def gib(v):
    return f"{v / GIB:.3f}" if isinstance(v, (int, float)) else "n/a"


def part_train(args, budget, report):
    say(f"== part 1: training, {args.steps} steps per allocator")
    runs = {}
    for name, _, env in TRAIN_CONFIGS:
        runs[name] = run_worker(args, "train", name, budget.limit(LIMITS["train"]), env,
                                ["--config", name])
    base = runs["torch"].get("losses")
    failures = []
    for name, r in runs.items():
        if r.get("error"):
            failures.append(f"{name}: {r['error']}")
            continue
        if base and r.get("losses"):
            diff = max(abs(x - y) for x, y in zip(r["losses"], base))
            r["max_loss_diff_vs_torch"] = diff
            finite = all(x == x and abs(x) != float("inf") for x in r["losses"])
            if not finite or diff > LOSS_TOL or len(r["losses"]) != len(base):
                failures.append(f"{name}: losses differ from torch's by {diff:.3g} (tolerance {LOSS_TOL})")
        if name.startswith("mnemo") and r.get("mnemo_stats", {}).get("allocation", {}).get("all", {}).get(
                "allocated", 0) <= 0:
            failures.append(f"{name}: mnemo's statistics show no allocations: not served by mnemo")
        if name == "mnemo_expandable" and not r.get("expandable_in_effect"):
            failures.append(f"{name}: MNEMO_ALLOC_CONF=expandable_segments:True not in effect (no expandable segment)")
    report["train"] = {"model": MODEL, "steps": args.steps, "loss_tolerance": LOSS_TOL, "runs": runs,
                       "failures": failures, "ok": not failures}
    return not failures


def part_cupy(args, budget, report):
    say("== part 2: CuPy through mnemo")
    r = run_worker(args, "cupy", "cupy", budget.limit(LIMITS["cupy"]))
    failures = []
    if r.get("error"):
        failures.append(r["error"])
    failures += r.get("problems", [])
    r["failures"], r["ok"] = failures, not failures
    report["cupy"] = r
    return not failures


def part_trace(args, budget, report):
    say(f"== part 3: {TRACE_NAME}: recorded with PyTorch's memory history, replayed by mnemo")
    r = run_worker(args, "trace", "trace", budget.limit(LIMITS["trace"]))
    report["trace"] = r
    if r.get("error"):
        r["failures"], r["ok"] = [r["error"]], False
        return False
    failures = []
    plain = os.path.join(args.tmp, TRACE_NAME + ".pickle")
    trace = os.path.join(args.tmp, TRACE_NAME + ".trace")
    try:
        p = subprocess.run([sys.executable, IMPORTER, plain, "-o", trace, "--device", "0"], capture_output=True,
                           text=True, timeout=max(5, budget.limit(LIMITS["import"], reserve=5)))
        r["importer"] = {"rc": p.returncode, "message": (p.stderr or "").strip()[-2000:]}
        say(f"  importer: exit {p.returncode}: {r['importer']['message']}")
        if p.returncode != 0:
            failures.append(f"import_torch_snapshot.py: exit {p.returncode}: {r['importer']['message']}")
    except subprocess.TimeoutExpired as e:
        failures.append(f"import_torch_snapshot.py: timed out after {e.timeout} s")
    if not failures:
        try:
            cmd = [args.mnemo, "replay", trace, "--json", "--no-progress", "--config", "",
                   "--config", "expandable_segments:True"]
            p = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=max(5, budget.limit(LIMITS["replay"], reserve=3)))
            if p.returncode == 0:
                rep = json.loads(p.stdout)
                r["mnemo_replay"] = rep if isinstance(rep, list) else [rep]
            else:
                r["mnemo_replay"] = {"error": p.stderr.strip()}
                failures.append(f"mnemo replay: exit {p.returncode}: {p.stderr.strip()[-1000:]}")
        except (subprocess.TimeoutExpired, ValueError, OSError) as e:
            r["mnemo_replay"] = {"error": str(e)}
            failures.append(f"mnemo replay: {e}")
    # NAME.json as record_traces.py writes it; the tarball holds it with the snapshot and trace.
    meta = {k: v for k, v in r.items() if k not in ("exit_status", "seconds", "importer", "params", "causal_hint")}
    meta["pytorch_cuda_alloc_conf"] = r.get("pytorch_cuda_alloc_conf", "")
    try:
        tar_path = os.path.join(args.out, TRACE_NAME + ".tar.gz")
        with open(plain, "rb") as f, gzip.open(os.path.join(args.tmp, TRACE_NAME + ".pickle.gz"), "wb") as g:
            shutil.copyfileobj(f, g)
        with open(os.path.join(args.tmp, TRACE_NAME + ".json"), "w") as f:
            json.dump(meta, f, indent=2)
            f.write("\n")
        with tarfile.open(tar_path, "w:gz") as tar:
            for ext in (".pickle.gz", ".trace", ".json"):
                src = os.path.join(args.tmp, TRACE_NAME + ext)
                if os.path.exists(src):
                    tar.add(src, arcname=TRACE_NAME + ext)
        r["archive"] = os.path.basename(tar_path)
        r["archive_bytes"] = os.path.getsize(tar_path)
    except OSError as e:
        failures.append(f"writing {TRACE_NAME}.tar.gz: {e}")
    r["failures"], r["ok"] = failures, not failures
    return not failures


def render_md(report):
    L = []
    m = report["meta"]
    L.append("# mnemo as PyTorch's and CuPy's allocator (bench/gpu/torch_alloc.py)")
    L.append("")
    L.append(f"{m['date']}; GPU {m.get('gpu', '?')}; torch {m.get('torch', '?')} (CUDA {m.get('cuda', '?')}); "
             f"cupy {report.get('cupy', {}).get('cupy', '?')}; libmnemo {m['lib']}"
             + (f" ({m['build']})" if m.get("build") else ""))
    L.append("")
    t = report.get("train")
    if t:
        L.append(f"## 1. Training: {'ok' if t['ok'] else 'FAILED'}")
        L.append("")
        first = next((r for r in t["runs"].values() if r.get("model")), {})
        L.append(f"{first.get('model', 'TransformerEncoder LM')}; {first.get('batch', '')}; {t['steps']} steps "
                 f"(the first is warm-up, not in the median), each allocator in its own process, same seed. "
                 f"Peaks cover the whole process (weights, AdamW state, activations). PyTorch's from "
                 f"torch.cuda.max_memory_reserved/allocated; mnemo's from mn_allocator_get_stats "
                 f"(reserved_bytes / allocated_bytes, pool all, peak).")
        L.append("")
        L.append("| config | exit | peak reserved GiB | peak allocated GiB | reserved / allocated | median step ms "
                 "| max \\|loss diff\\| vs torch | device allocs | expandable in effect |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for name, r in t["runs"].items():
            if r.get("error") and not r.get("losses"):
                L.append(f"| {name} | {r.get('exit_status')} | FAILED: {str(r['error'])[:200]} | | | | | | |")
                continue
            pr, pa = r.get("peak_reserved"), r.get("peak_allocated")
            ratio = f"{pr / pa:.3f}" if pr and pa else "n/a"
            d = r.get("max_loss_diff_vs_torch")
            L.append(f"| {name} | {r.get('exit_status')} | {gib(pr)} | {gib(pa)} | {ratio} | "
                     f"{r.get('median_step_ms', float('nan')):.1f} | {'n/a' if d is None else f'{d:.2e}'} | "
                     f"{r.get('device_allocs', 'n/a')} | {'yes' if r.get('expandable_in_effect') else 'no'} |")
        L.append("")
        L.append("Losses per step:")
        L.append("")
        for name, r in t["runs"].items():
            if r.get("losses"):
                L.append(f"- {name}: " + ", ".join(f"{x:.5f}" for x in r["losses"]))
        for f in t["failures"]:
            L.append(f"- **failure**: {f}")
        L.append("")
    c = report.get("cupy")
    if c:
        L.append(f"## 2. CuPy through mnemo: {'pass' if c['ok'] else 'FAIL'}")
        L.append("")
        if "arrays" in c:
            live = c["stats_live"]
            L.append(f"{c['arrays']} arrays of 64 B..32 MiB ({c['arrays_bytes'] / GIB:.2f} GiB in all, at most 25 "
                     f"alive), {c['checked_roundtrips']} host round trips checked ({c['bad_roundtrips']} bad); "
                     f"matmul 512x768 @ 768x256 (float64) max |err| vs numpy {c['matmul_max_abs_err']:.2e}; "
                     f"sum of 4M float64: {c['sum_gpu']:.10g} vs numpy {c['sum_cpu']:.10g}. CuPy memory class: "
                     f"{c.get('memory_class')}.")
            L.append("")
            L.append("| mnemo statistic | value |")
            L.append("|---|---|")
            L.append(f"| allocations counted by mnemo during the run | {c['mnemo_allocations']} |")
            L.append(f"| peak reserved | {gib(live['reserved_bytes']['all']['peak'])} GiB |")
            L.append(f"| peak allocated | {gib(live['allocated_bytes']['all']['peak'])} GiB |")
            L.append(f"| device allocations (num_device_alloc) | {live['num_device_alloc']} |")
            L.append(f"| live allocations after freeing the arrays | "
                     f"{c['stats_freed']['allocation']['all']['current']} |")
            L.append(f"| reserved before / after mnemo_empty_cache(0) (rc {c.get('empty_cache_rc')}) | "
                     f"{gib(c['stats_freed']['reserved_bytes']['all']['current'])} / "
                     f"{gib(c['stats_after_empty_cache']['reserved_bytes']['all']['current'])} GiB |")
            L.append("")
        for f in c["failures"]:
            L.append(f"- **failure**: {f}")
        if c["failures"]:
            L.append("")
    r = report.get("trace")
    if r:
        L.append(f"## 3. Trace {TRACE_NAME}: {'ok' if r['ok'] else 'FAILED'}")
        L.append("")
        if "torch_peak_reserved" in r:
            L.append(f"One warm-up step, then PyTorch's memory history (stacks=\"python\") over "
                     f"{r['recorded_steps']} steps of the same training; peaks over the recorded steps "
                     f"(reset_peak_memory_stats after the warm-up). Streams {r.get('streams')}; events "
                     f"{r.get('trace_events')}. Replayed on mnemo's SIM device.")
            L.append("")
            L.append("| source | peak reserved GiB | peak allocated GiB | reserved / allocated | segments | "
                     "reserved vs PyTorch |")
            L.append("|---|---|---|---|---|---|")
            pr, pa = r["torch_peak_reserved"], r["torch_peak_allocated"]
            L.append(f"| PyTorch, torch.cuda.memory_stats() | {gib(pr)} | {gib(pa)} | "
                     f"{pr / pa if pr and pa else float('nan'):.3f} | peak {r.get('torch_segments_peak')}, "
                     f"num_device_alloc {r.get('torch_num_device_alloc')}, retries "
                     f"{r.get('torch_num_alloc_retries')} | 1.000 |")
            rep = r.get("mnemo_replay")
            if isinstance(rep, list):
                tf = rep[0].get("torch", {}) if rep else {}
                if tf:
                    L.append(f"| PyTorch, rebuilt by the importer (trace meta) | {gib(tf.get('peak_reserved'))} | "
                             f"{gib(tf.get('peak_allocated'))} | | {tf.get('segment_allocs')} segment_alloc events | "
                             f"{tf.get('peak_reserved', 0) / pr if pr else float('nan'):.3f} |")
                for x in rep:
                    L.append(f"| mnemo replay, {x.get('config') or 'defaults'} | {gib(x.get('peak_reserved'))} | "
                             f"{gib(x.get('peak_allocated'))} | {x.get('ratio', float('nan')):.3f} | "
                             f"{x.get('device_allocs_events')} device allocs | "
                             f"{x.get('peak_reserved', 0) / pr if pr else float('nan'):.3f} |")
            L.append("")
            if r.get("archive"):
                L.append(f"Snapshot, trace and metadata: `{r['archive']}` ({r['archive_bytes'] / 1e6:.1f} MB).")
                L.append("")
        for f in r.get("failures", []):
            L.append(f"- **failure**: {f}")
        if r.get("failures"):
            L.append("")
    for part in ("train", "cupy", "trace"):
        for name, x in ([(part, report.get(part, {}))] if part != "train" else
                        list(report.get("train", {}).get("runs", {}).items())):
            if x.get("output_tail"):
                L.append(f"<details><summary>{name}: last output</summary>")
                L.append("")
                L.append("```")
                L.extend(x["output_tail"][-25:])
                L.append("```")
                L.append("</details>")
                L.append("")
    L.append("Parts: " + ", ".join(f"{k} {'ok' if report.get(k, {}).get('ok') else 'FAILED'}"
                                    for k in ("train", "cupy", "trace")) + f"; {report['meta']['seconds']:.0f} s.")
    return "\n".join(L) + "\n"


def dry_run(args):
    say("plan (each part in subprocesses, each with a time limit; whole run within --budget-s "
        f"{args.budget_s} s):")
    for name, use_mnemo, env in TRAIN_CONFIGS:
        how = (f"CUDAPluggableAllocator({args.lib}, mnemo_torch_alloc, mnemo_torch_free)" if use_mnemo
               else "PyTorch's caching allocator")
        say(f"  train/{name}: {' '.join(f'{k}={v}' for k, v in env.items()) or '(no allocator env)'}; {how}; "
            f"{args.steps} steps of {MODEL} (limit {LIMITS['train']} s)")
    say(f"  cupy: CFunctionAllocator(0, mnemo_cupy_malloc, mnemo_cupy_free) (limit {LIMITS['cupy']} s)")
    say(f"  trace: 1 warm-up + 2 recorded steps -> {IMPORTER} -> {args.mnemo} replay --json "
        f"(limits {LIMITS['trace']} + {LIMITS['import']} + {LIMITS['replay']} s)")
    say(f"  writes {args.out}/torch.md, torch.json, {TRACE_NAME}.tar.gz")
    say("checks:")

    def check(what, fn):
        try:
            say(f"  {what}: {fn() or 'ok'}")
        except Exception as e:
            say(f"  {what}: FAILED: {type(e).__name__}: {e}")

    for path in (args.lib, args.mnemo, IMPORTER, os.path.join(HERE, "record_traces.py")):
        say(f"  {path}: {'present' if os.path.exists(path) else 'MISSING'}")

    def torch_check():
        import torch
        has = hasattr(torch.cuda, "memory") and hasattr(torch.cuda.memory, "CUDAPluggableAllocator")
        return (f"torch {torch.__version__}, CUDA available: {torch.cuda.is_available()}, "
                f"CUDAPluggableAllocator: {'yes' if has else 'MISSING'}")

    def cupy_check():
        import cupy
        return f"cupy {cupy.__version__}, CFunctionAllocator: {hasattr(cupy.cuda.memory, 'CFunctionAllocator')}"

    def numpy_check():
        import numpy
        return f"numpy {numpy.__version__}"

    def record_traces_check():
        sys.path.insert(0, HERE)
        import record_traces
        missing = [f for f in ("start_history", "stop_history") if not hasattr(record_traces, f)]
        if missing:
            raise ImportError(f"record_traces.py lacks {missing}")
        return "start_history/stop_history importable"

    def ctypes_check():
        problems, s = sim_selfcheck(args.lib)
        if problems:
            raise RuntimeError("; ".join(problems))
        return (f"mn_alloc_stats_t mirror agrees on sim:0 ({s['allocator']}: 4 allocations, reserved "
                f"{s['reserved_bytes']['all']['current']} B, {s['segment']['all']['current']} segments)")

    def replay_check():
        trace = os.path.join(ROOT, "data", "traces", "ctx128_forward_mixed.trace")
        p = subprocess.run([args.mnemo, "replay", trace, "--json", "--no-progress", "--config", "",
                            "--config", "expandable_segments:True"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip())
        rep = json.loads(p.stdout)
        return f"mnemo replay --json parsed: {[(x['config'] or 'defaults', x['peak_reserved']) for x in rep]}"

    def cpu_step_check():
        import torch
        step, info = build_training(torch, torch.device("cpu"), TINY, 2)
        losses, _ = run_steps(torch, torch.device("cpu"), step, 2, "  tiny model on the CPU")
        return f"{info['params']} parameters, causal hint {info['causal_hint']}, losses {losses}"

    check("torch", torch_check)
    check("numpy", numpy_check)
    check("cupy", cupy_check)
    check("record_traces helpers", record_traces_check)
    check("ctypes statistics (SIM)", ctypes_check)
    check("mnemo replay", replay_check)
    check("training step (tiny, CPU)", cpu_step_check)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "cuda", "libmnemo.so"))
    ap.add_argument("--mnemo", default=os.path.join(ROOT, "build", "cuda", "tools", "mnemo"))
    ap.add_argument("--out", default=None, help="folder for torch.md, torch.json and the trace archive")
    ap.add_argument("--steps", type=int, default=6, help="training steps per allocator (the first is warm-up)")
    ap.add_argument("--budget-s", type=float, default=400, help="seconds for the whole run")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and check what works without a GPU")
    ap.add_argument("--worker", choices=("train", "cupy", "trace"), help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    args.mnemo = os.path.abspath(args.mnemo)
    if args.worker:
        return worker_main(args)
    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.dry_run:
        args.out = args.out or "OUTDIR"
        return dry_run(args)
    if not args.out:
        ap.error("--out is required")
    t0 = time.monotonic()
    budget = Budget(args.budget_s)
    os.makedirs(args.out, exist_ok=True)
    args.tmp = tempfile.mkdtemp(prefix="mnemo-torch-alloc-")
    report = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), "lib": args.lib,
                       "mnemo": args.mnemo, "python": sys.version.split()[0], "steps": args.steps}}
    info = os.path.join(os.path.dirname(args.lib), "mnemo-build-info.txt")
    if os.path.exists(info):
        with open(info) as f:
            kv = dict(line.strip().split("=", 1) for line in f if "=" in line)
        report["meta"]["build"] = f"commit {kv.get('commit', '?')}, {kv.get('date', '?')}"
    ok = {}
    try:
        for part, fn in (("train", part_train), ("cupy", part_cupy), ("trace", part_trace)):
            try:
                ok[part] = fn(args, budget, report)
            except Exception as e:  # a bug here must not cost the other parts
                report[part] = {"ok": False, "failures": [f"{type(e).__name__}: {e}"],
                                "traceback": traceback.format_exc()}
                ok[part] = False
                say(traceback.format_exc())
            say(f"== {part}: {'ok' if ok[part] else 'FAILED'} ({time.monotonic() - t0:.0f} s so far)")
    finally:
        for src in [report.get("trace", {})] + list(report.get("train", {}).get("runs", {}).values()):
            for k in ("gpu", "torch", "cuda"):
                if src.get(k) and k not in report["meta"]:
                    report["meta"][k] = src[k]
        report["meta"]["seconds"] = time.monotonic() - t0
        report["ok"] = all(ok.get(p) for p in ("train", "cupy", "trace"))
        md = render_md(report)
        with open(os.path.join(args.out, "torch.json"), "w") as f:
            json.dump(report, f, indent=1, default=str)
            f.write("\n")
        with open(os.path.join(args.out, "torch.md"), "w") as f:
            f.write(md)
        shutil.rmtree(args.tmp, ignore_errors=True)
    say("")
    say(md)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
