#!/usr/bin/env python3
# tests/data/torch/make_samples.py: writes the small hand-made PyTorch snapshot
# samples next to it (deterministic: plain dicts, fixed pickle protocols, gzip mtime 0).
"""Hand-made, not recorded: each sample has the fields the PyTorch version it
imitates writes, for one variant (tests/test_import.py checks their traces):
  multi_device.pickle  two devices; device 0 uses two streams (0 and 7)
  expandable.pickle    an expandable segment: 4 MiB mapped before recording,
                       segment_map / segment_unmap during it (the dump reports the
                       mapped range as PyTorch does: one segment per contiguous range)
  oom.pickle           an allocation that failed (oom event: 'device_free', as PyTorch)
  state_only.pickle    _snapshot() without _record_memory_history: segments with
                       live and pending-free blocks (with frames), an expandable
                       mapping, two devices, device_traces present but empty
  state_only.pickle.gz the same, gzip-compressed
  legacy_list.pickle   the bare list of torch.cuda.memory_snapshot() / PyTorch 1.13:
                       no block address, no requested_size, 'history' entries
  old_dict.pickle      the first dict form (PyTorch 2.0): no time_us, no
                       allocator_settings, blocks with 'history', 'cpp_frames'
  framed.pickle        the current form with stack frames (compile_context,
                       user_metadata, external_annotations, a 'snapshot' event,
                       frames with blanks, '%', non-ASCII, '??', a 5000-byte name,
                       a 144-frame stack), allocator settings, a second device
  empty_cache.pickle   segment_free runs: two from empty_cache(), one before an oom
  gc.pickle            garbage_collection_threshold 0.6: a run the collector caused
                       (a segment_alloc follows) and one from empty_cache()
  multi_device_oom.pickle  events on 3 GPUs (device 2 on stream 3), an oom on device 1
                       (its 'device_free'), segments per device at the dump
  torch214.pickle      PyTorch 2.14's additions: `annotate` events (a START/END range
                       and a point one, text in 'user_metadata', frames of the
                       annotation site), pinned host memory (host_segments shaped like
                       segments, host_traces a list of events with frames), an action
                       and a top-level key no PyTorch here knows (warned, not refused)
"""
import gzip
import os
import pickle

MiB = 1 << 20
GiB = 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))


def ev(action, addr, size, stream=0, t=0, frames=()):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": list(frames)}
    if action == "oom":   # PyTorch writes the device's free bytes in place of the address
        e["device_free"] = e.pop("addr")
    return e


def seg(device, addr, total, blocks, stream=0, kind="large", expandable=False, frames=()):
    return {"device": device, "address": addr, "total_size": total, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": expandable, "frames": list(frames), "blocks": blocks}


def blk(addr, size, req, state, frames=()):
    return {"address": addr, "size": size, "requested_size": req, "state": state, "frames": list(frames)}


def fr(name, filename, line):
    return {"name": name, "filename": filename, "line": line}


SETTINGS_DEFAULT = {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                    "expandable_segments": False, "pinned_num_register_threads": 1,
                    "release_lock_on_cudamalloc": False, "pinned_use_cuda_host_register": False,
                    "roundup_power2_divisions": {str(1 << k): 0 for k in range(16)}}


def settings(**kw):
    s = dict(SETTINGS_DEFAULT)
    s.update(kw)
    return s


def multi_device():
    d0 = [ev("segment_alloc", 0x10000000, 20 * MiB, t=10), ev("alloc", 0x10000000, 6 * MiB, t=11),
          ev("segment_alloc", 0x20000000, 2 * MiB, stream=7, t=12), ev("alloc", 0x20000000, 4096, stream=7, t=13),
          ev("free_requested", 0x10000000, 6 * MiB, t=14), ev("free_completed", 0x10000000, 6 * MiB, t=14),
          ev("alloc", 0x10000000, 8 * MiB, t=15)]
    d1 = [ev("segment_alloc", 0x10000000, 20 * MiB, t=12), ev("alloc", 0x10000000, 3 * MiB, t=13),
          ev("alloc", 0x10300000, 5 * MiB, t=16), ev("free_requested", 0x10000000, 3 * MiB, t=17),
          ev("free_completed", 0x10000000, 3 * MiB, t=17)]
    segments = [
        seg(0, 0x10000000, 20 * MiB, [blk(0x10000000, 8 * MiB, 8 * MiB, "active_allocated"),
                                      blk(0x10800000, 12 * MiB, 0, "inactive")]),
        seg(0, 0x20000000, 2 * MiB, [blk(0x20000000, 4096, 4096, "active_allocated"),
                                     blk(0x20001000, 2 * MiB - 4096, 0, "inactive")], stream=7, kind="small"),
        seg(1, 0x10000000, 20 * MiB, [blk(0x10000000, 3 * MiB, 0, "inactive"),
                                      blk(0x10300000, 5 * MiB, 5 * MiB, "active_allocated"),
                                      blk(0x10800000, 12 * MiB, 0, "inactive")]),
    ]
    return {"segments": segments, "device_traces": [d0, d1], "allocator_settings": {}}


def expandable():
    base = 0x7f0000000000
    events = [ev("segment_map", base + 4 * MiB, 2 * MiB, t=1), ev("alloc", base + 4 * MiB, 2 * MiB, t=2),
              ev("free_requested", base, 4 * MiB, t=3), ev("free_completed", base, 4 * MiB, t=3),
              ev("segment_unmap", base, 2 * MiB, t=4),
              ev("segment_map", base + 6 * MiB, 2 * MiB, t=5), ev("alloc", base + 6 * MiB, 1 * MiB, t=6)]
    # At the dump: [base + 2 MiB, base + 8 MiB) mapped (4 before + 2 + 2 - 2 = 6 MiB), one range.
    segments = [seg(0, base + 2 * MiB, 6 * MiB, [blk(base + 2 * MiB, 2 * MiB, 0, "inactive"),
                                                 blk(base + 4 * MiB, 2 * MiB, 2 * MiB, "active_allocated"),
                                                 blk(base + 6 * MiB, 1 * MiB, 1 * MiB, "active_allocated"),
                                                 blk(base + 7 * MiB, 1 * MiB, 0, "inactive")], expandable=True)]
    return {"segments": segments, "device_traces": [events],
            "allocator_settings": settings(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                                           expandable_segments=True)}


def oom():
    events = [ev("segment_alloc", 0x30000000, 20 * MiB, t=1), ev("alloc", 0x30000000, 10 * MiB, t=2),
              ev("oom", 1 * MiB, 40 * MiB, t=3), ev("free_requested", 0x30000000, 10 * MiB, t=4),
              ev("free_completed", 0x30000000, 10 * MiB, t=4)]
    segments = [seg(0, 0x30000000, 20 * MiB, [blk(0x30000000, 20 * MiB, 0, "inactive")])]
    return {"segments": segments, "device_traces": [events], "allocator_settings": {}}


STATE_FRAMES = [fr("make_weights", "/src/model.py", 12), fr("<module>", "/src/train.py", 3)]


def state_only():
    x = 0x7f0000200000
    segments = [
        seg(0, 0x10000000, 20 * MiB, [blk(0x10000000, 4 * MiB, 4000000, "active_allocated", STATE_FRAMES),
                                      blk(0x10400000, 2 * MiB, 2 * MiB, "active_pending_free"),
                                      blk(0x10600000, 14 * MiB, 0, "inactive")], frames=STATE_FRAMES),
        seg(0, 0x20000000, 2 * MiB, [blk(0x20000000, 512, 100, "active_allocated",
                                         [fr("bias", "/src/model.py", 20)]),
                                     blk(0x20000200, 2 * MiB - 512, 0, "inactive")], stream=7, kind="small"),
        seg(0, x, 6 * MiB, [blk(x, 2 * MiB, 2 * MiB, "active_allocated"), blk(x + 2 * MiB, 4 * MiB, 0, "inactive")],
            expandable=True),
        seg(1, 0x10000000, 20 * MiB, [blk(0x10000000, MiB, MiB, "active_allocated"),
                                      blk(0x10100000, 19 * MiB, 0, "inactive")]),
    ]
    return {"segments": segments, "device_traces": [[], []],
            "allocator_settings": settings(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
                                           expandable_segments=True)}


def legacy_list():
    hist = [{"addr": 0x30000000, "real_size": 8000000, "frames": [fr("load", "/src/data.py", 5)]}]
    return [
        {"device": 0, "address": 0x30000000, "total_size": 20 * MiB, "allocated_size": 8 * MiB,
         "active_size": 8 * MiB, "stream": 0, "segment_type": "large",
         "blocks": [{"size": 8 * MiB, "state": "active_allocated", "history": hist},
                    {"size": 12 * MiB, "state": "inactive"}]},
        {"device": 1, "address": 0x40000000, "total_size": 2 * MiB, "allocated_size": MiB, "active_size": MiB,
         "stream": 0, "segment_type": "small",
         "blocks": [{"size": MiB, "state": "active_allocated"}, {"size": MiB, "state": "inactive"}]},
    ]


def old_dict():
    g = [fr("step", "/src/train.py", 30)]
    events = [{"action": "segment_alloc", "addr": 0x50000000, "size": 20 * MiB, "stream": 0, "frames": g},
              {"action": "alloc", "addr": 0x50000000, "size": 5 * MiB, "stream": 0, "frames": g,
               "cpp_frames": ["c10::cuda::CUDACachingAllocator::malloc"]},
              {"action": "oom", "device_free": 1234, "size": 80 * GiB, "stream": 0, "frames": g},
              {"action": "free_requested", "addr": 0x50000000, "size": 5 * MiB, "stream": 0},
              {"action": "free_completed", "addr": 0x50000000, "size": 5 * MiB, "stream": 0}]
    segments = [{"device": 0, "address": 0x50000000, "total_size": 20 * MiB, "allocated_size": 0,
                 "active_size": 0, "stream": 0, "segment_type": "large",
                 "blocks": [{"size": 20 * MiB, "state": "inactive",
                             "history": [{"addr": 0x50000000, "real_size": 5 * MiB, "frames": g}]}]}]
    return {"segments": segments, "device_traces": [events]}


def framed():
    fa = [fr("forward", "/src/model.py", 42), fr("<module>", "/src/train.py", 7)]
    fb = ([fr("c10::cuda::Foo<int, 2>::bar(unsigned long)", "??", 0),
           fr(" spaced  name ", "/dir with space/100%.py", 5), fr("caf\u00e9", "", 0), fr("dash", "-", 1)] +
          [fr("rec", "/src/deep.py", i) for i in range(140)])
    fc = [fr("x" * 5000, "/src/long.py", 1)]
    S = 0x60000000
    extra = {"compile_context": "N/A", "user_metadata": ""}
    d0 = [dict(ev("segment_alloc", S, 20 * MiB, t=1000, frames=fa), **extra),
          dict(ev("alloc", S, 3 * MiB, t=1001, frames=fa), **extra),
          dict(ev("alloc", S + 3 * MiB, MiB + 1, t=1002, frames=fb), **extra),
          dict(ev("free_requested", S, 3 * MiB, t=1003, frames=fc), **extra),
          dict(ev("free_completed", S, 3 * MiB, t=1004, frames=fc), **extra),
          {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 1005}]
    d1 = [dict(ev("segment_alloc", S, 2 * MiB, t=1001, frames=fa), **extra),
          dict(ev("alloc", S, 4096, t=1002, frames=fa), **extra)]
    segments = [
        seg(0, S, 20 * MiB, [blk(S, 3 * MiB, 0, "inactive"),
                             blk(S + 3 * MiB, MiB + 512, MiB + 1, "active_allocated", fb),
                             blk(S + 4 * MiB + 512, 16 * MiB - 512, 0, "inactive")], frames=fa),
        seg(1, S, 2 * MiB, [blk(S, 4096, 4096, "active_allocated", fa), blk(S + 4096, 2 * MiB - 4096, 0, "inactive")],
            kind="small", frames=fa),
    ]
    rd = {str(1 << k): (4 if k < 6 else 8) for k in range(16)}
    return {"segments": segments, "device_traces": [d0, d1],
            "allocator_settings": settings(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:512,"
                                                                   "roundup_power2_divisions:[64:4,>:8]",
                                           max_split_size=512 * MiB, roundup_power2_divisions=rd),
            "external_annotations": [{"stage": "START", "name": "step", "device": 0, "time_us": 999}]}


def empty_cache():
    A, B, C, E = 0x10000000, 0x20000000, 0x30000000, 0x40000000
    events = [ev("segment_alloc", A, 20 * MiB, t=1), ev("alloc", A, 10 * MiB, t=2),
              ev("free_requested", A, 10 * MiB, t=3), ev("free_completed", A, 10 * MiB, t=3),
              ev("segment_free", A, 20 * MiB, t=4),                           # empty_cache(): an alloc follows
              ev("segment_alloc", B, 2 * MiB, t=5), ev("alloc", B, 4096, t=5),
              ev("segment_alloc", C, 20 * MiB, t=6), ev("alloc", C, 8 * MiB, t=6),
              ev("free_requested", C, 8 * MiB, t=7), ev("free_completed", C, 8 * MiB, t=7),
              ev("segment_free", C, 20 * MiB, t=8), ev("oom", 0, 100 * GiB, t=8),   # freed for a failed alloc
              ev("segment_alloc", E, 20 * MiB, t=9), ev("alloc", E, 12 * MiB, t=9),
              ev("free_requested", E, 12 * MiB, t=10), ev("free_completed", E, 12 * MiB, t=10),
              ev("free_requested", B, 4096, t=10), ev("free_completed", B, 4096, t=10),
              ev("segment_free", B, 2 * MiB, t=11), ev("segment_free", E, 20 * MiB, t=11)]   # empty_cache()
    return {"segments": [], "device_traces": [events], "allocator_settings": settings()}


def gc():
    A, B = 0x10000000, 0x20000000
    events = [ev("segment_alloc", A, 20 * MiB, t=1), ev("alloc", A, 10 * MiB, t=2),
              ev("free_requested", A, 10 * MiB, t=3), ev("free_completed", A, 10 * MiB, t=3),
              ev("segment_free", A, 20 * MiB, t=4), ev("segment_alloc", B, 40 * MiB, t=4),   # the collector
              ev("alloc", B, 30 * MiB, t=5), ev("free_requested", B, 30 * MiB, t=6),
              ev("free_completed", B, 30 * MiB, t=6), ev("segment_free", B, 40 * MiB, t=7)]  # empty_cache()
    return {"segments": [], "device_traces": [events],
            "allocator_settings": settings(PYTORCH_CUDA_ALLOC_CONF="garbage_collection_threshold:0.6",
                                           garbage_collection_threshold=0.6)}


def multi_device_oom():
    A, B, C = 0x10000000, 0x7f0000000000, 0x20000000
    d0 = [ev("segment_alloc", A, 20 * MiB, t=10), ev("alloc", A, 8 * MiB, t=11),
          ev("free_requested", A, 8 * MiB, t=20), ev("free_completed", A, 8 * MiB, t=20),
          ev("alloc", A, 2 * MiB, t=21)]
    d1 = [ev("segment_alloc", B, 40 * MiB, t=12), ev("alloc", B, 30 * MiB, t=13),
          ev("oom", 6 * MiB, 64 * MiB, t=14),   # 64 MiB asked, 6 MiB free on the device
          ev("free_requested", B, 30 * MiB, t=15), ev("free_completed", B, 30 * MiB, t=15)]
    d2 = [ev("segment_alloc", C, 2 * MiB, stream=3, t=16), ev("alloc", C, 4096, stream=3, t=17)]
    segments = [
        seg(0, A, 20 * MiB, [blk(A, 2 * MiB, 2 * MiB, "active_allocated"), blk(A + 2 * MiB, 18 * MiB, 0, "inactive")]),
        seg(1, B, 40 * MiB, [blk(B, 40 * MiB, 0, "inactive")]),
        seg(2, C, 2 * MiB, [blk(C, 4096, 4096, "active_allocated"), blk(C + 4096, 2 * MiB - 4096, 0, "inactive")],
            stream=3, kind="small"),
    ]
    return {"segments": segments, "device_traces": [d0, d1, d2], "allocator_settings": settings()}


def torch214():
    A, H = 0x10000000, 0x7e0000000000
    site = [fr("pack_hook", "/src/train.py", 50), fr("<module>", "/src/train.py", 3)]
    hf = [fr("pin", "/src/data.py", 9), fr("<module>", "/src/train.py", 4)]
    meta = {"compile_context": "N/A", "user_metadata": ""}

    def ann(t, text, frames=(), **kw):
        e = {"action": "annotate", "addr": A, "size": 0, "stream": 0, "time_us": t, "frames": list(frames),
             "compile_context": "N/A", "user_metadata": text}
        e.update(kw)
        return e

    d0 = [dict(ev("segment_alloc", A, 20 * MiB, t=100, frames=site), **meta),
          ann(101, "", name="forward", stage="START"),
          dict(ev("alloc", A, 4 * MiB, t=102, frames=site), **meta),
          ann(103, "saved for backward", site),                       # a point: _annotate_memory's text
          {"action": "prefetch", "addr": A, "size": 4 * MiB, "stream": 0, "time_us": 104},   # unknown
          ann(105, "", name="forward", stage="END"),
          dict(ev("free_requested", A, 4 * MiB, t=106, frames=site), **meta),
          dict(ev("free_completed", A, 4 * MiB, t=106), **meta),
          {"action": "prefetch", "addr": A, "size": 1, "stream": 0, "time_us": 107}]
    host = [ev("segment_alloc", H, 4 * MiB, t=99, frames=hf), ev("alloc", H, 3 * MiB, t=100, frames=hf),
            ev("alloc", H + 3 * MiB, MiB, t=104, frames=hf),
            ev("free_requested", H, 3 * MiB, t=108, frames=hf), ev("free_completed", H, 3 * MiB, t=108)]
    segments = [seg(0, A, 20 * MiB, [blk(A, 20 * MiB, 0, "inactive")], frames=site)]
    host_segments = [seg(-1, H, 4 * MiB, [blk(H, 3 * MiB, 0, "inactive"),
                                          blk(H + 3 * MiB, MiB, MiB, "active_allocated", hf)], frames=hf)]
    return {"segments": segments, "device_traces": [d0], "allocator_settings": settings(),
            "external_annotations": [], "host_segments": host_segments, "host_traces": host,
            "stream_info": {"0": "default"}}


SAMPLES = (("multi_device", multi_device, 4), ("expandable", expandable, 4), ("oom", oom, 4),
           ("state_only", state_only, 4), ("legacy_list", legacy_list, 4), ("old_dict", old_dict, 2),
           ("framed", framed, 2), ("empty_cache", empty_cache, 4), ("gc", gc, 4),
           ("multi_device_oom", multi_device_oom, 4), ("torch214", torch214, 4))

if __name__ == "__main__":
    for name, make, protocol in SAMPLES:
        data = pickle.dumps(make(), protocol=protocol)
        with open(os.path.join(HERE, name + ".pickle"), "wb") as f:
            f.write(data)
        if name == "state_only":
            with open(os.path.join(HERE, name + ".pickle.gz"), "wb") as f:
                f.write(gzip.compress(data, mtime=0))
