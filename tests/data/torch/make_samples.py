#!/usr/bin/env python3
# tests/data/torch/make_samples.py: writes the small hand-made PyTorch snapshot
# samples next to it (deterministic: plain dicts, pickle protocol 4).
"""Hand-made, not recorded: each sample has the fields torch.cuda.memory._snapshot()
gives (segments with blocks, device_traces with events) for one variant:
  multi_device.pickle  two devices; device 0 uses two streams (0 and 7)
  expandable.pickle    an expandable segment: 4 MiB mapped before recording,
                       segment_map / segment_unmap during it
  oom.pickle           an allocation that failed (oom event: addr = free bytes)
"""
import os
import pickle

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def ev(action, addr, size, stream=0, t=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "frames": []}


def seg(device, addr, total, blocks, stream=0, kind="large", expandable=False):
    return {"device": device, "address": addr, "total_size": total, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def blk(addr, size, req, state):
    return {"address": addr, "size": size, "requested_size": req, "state": state, "frames": []}


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
    # At the dump: mapped 4 (before) + 2 + 2 - 2 = 6 MiB.
    segments = [seg(0, base, 6 * MiB, [blk(base + 2 * MiB, 2 * MiB, 0, "inactive"),
                                       blk(base + 4 * MiB, 2 * MiB, 2 * MiB, "active_allocated"),
                                       blk(base + 6 * MiB, 1 * MiB, 1 * MiB, "active_allocated"),
                                       blk(base + 7 * MiB, 1 * MiB, 0, "inactive")], expandable=True)]
    return {"segments": segments, "device_traces": [events],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}}


def oom():
    events = [ev("segment_alloc", 0x30000000, 20 * MiB, t=1), ev("alloc", 0x30000000, 10 * MiB, t=2),
              ev("oom", 1 * MiB, 40 * MiB, t=3), ev("free_requested", 0x30000000, 10 * MiB, t=4),
              ev("free_completed", 0x30000000, 10 * MiB, t=4)]
    segments = [seg(0, 0x30000000, 20 * MiB, [blk(0x30000000, 20 * MiB, 0, "inactive")])]
    return {"segments": segments, "device_traces": [events], "allocator_settings": {}}


if __name__ == "__main__":
    for name, make in (("multi_device", multi_device), ("expandable", expandable), ("oom", oom)):
        with open(os.path.join(HERE, name + ".pickle"), "wb") as f:
            pickle.dump(make(), f, protocol=4)
