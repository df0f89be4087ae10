#!/usr/bin/env python3
# tools/import_torch_snapshot.py: converts a PyTorch memory snapshot (pickle from
# torch.cuda.memory._dump_snapshot) into a mnemo trace (docs/TRACE_FORMAT.md).
"""Convert a PyTorch memory snapshot's device trace into a mnemo trace.

Usage: import_torch_snapshot.py SNAPSHOT.pickle -o TRACE [--device N|all]
       import_torch_snapshot.py SNAPSHOT.pickle --table [--blocks]

The snapshot is read with a restricted unpickler that refuses every global, so
a malicious file cannot run code. Only the Python standard library is used.

What it writes (see docs/TRACE_FORMAT.md):
  * `pre` lines for the state before recording began: segments that existed
    (in the dump but never allocated by the trace, or freed by the trace
    without being allocated in it) and live allocations (addresses the trace
    frees without allocating them, and blocks alive at dump time that the
    trace never allocated);
  * one line per trace event, times relative to the first event;
  * PyTorch's own figures for the run in `meta` lines: peak allocated (block
    bytes, from a reconstruction of the allocator's block layout), peak
    requested, peak reserved, reserved and allocated at the start, and the
    number of segment_alloc events.

Every snapshot variant: several devices (`--device all` writes a version 2
trace whose event lines carry the device index; figures per device in meta
keys `devN.torch_*`), several streams, expandable segments (segment_map /
segment_unmap; the mappings that existed before recording become `pre
segment_map` lines), and oom events (kept as `oom` lines, counted in
torch_ooms). `--table` prints the snapshot's segments instead (mnemo snapshot).

Exit status: 0 on success, 2 on bad usage or a malformed snapshot, 1 when a
file cannot be read or written.
"""

import argparse
import bisect
import io
import os
import pickle
import sys

FORMAT_VERSION = 1
MIN_BLOCK = 512            # PyTorch kMinBlockSize: rounding unit, small-pool split threshold
SMALL_SIZE = 1 << 20       # kSmallSize: requests up to this go to the small pool
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "empty_cache", "oom")
DROPPED_ACTIONS = ("snapshot", "user_defined")   # PyTorch actions with no mnemo meaning
LIVE_STATES = ("active_allocated", "active_pending_free")


class SnapshotError(Exception):
    """The snapshot is malformed or inconsistent (exit status 2)."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"refusing pickle global {module}.{name}: a memory snapshot "
                            "holds only plain dicts, lists and numbers")


def load_snapshot(path):
    with open(path, "rb") as f:
        data = f.read()
    try:
        return _RestrictedUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except Exception as e:  # any unpickling failure means a malformed file
        raise SnapshotError(f"not a readable pickle: {type(e).__name__}: {e}") from None


def _int(d, key, where, minimum=0):
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(f"{where}: field '{key}' missing or not an integer (got {v!r})")
    if v < minimum or v >= 1 << 64:
        raise SnapshotError(f"{where}: field '{key}' = {v} out of range")
    return v


def round_size(n):
    return MIN_BLOCK if n < MIN_BLOCK else (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


def validate(snap, device):
    """Returns (events, segments) of `device` (None: first device with events)."""
    if not isinstance(snap, dict):
        raise SnapshotError(f"top level is a {type(snap).__name__}, expected a dict")
    traces = snap.get("device_traces")
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("'device_traces' missing or not a list of lists (was the snapshot "
                            "taken with torch.cuda.memory._record_memory_history enabled?)")
    segments = snap.get("segments", [])
    if not isinstance(segments, list):
        raise SnapshotError("'segments' is not a list")
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), None)
        if device is None:
            raise SnapshotError("no device has trace events")
    elif not 0 <= device < len(traces):
        raise SnapshotError(f"--device {device}: the snapshot has traces for {len(traces)} device(s)")
    events = []
    for i, e in enumerate(traces[device]):
        where = f"device_traces[{device}][{i}]"
        if not isinstance(e, dict):
            raise SnapshotError(f"{where}: not a dict")
        action = e.get("action")
        if not isinstance(action, str):
            raise SnapshotError(f"{where}: 'action' missing or not a string")
        if action in DROPPED_ACTIONS:
            continue
        if action not in ACTIONS:
            raise SnapshotError(f"{where}: unknown action '{action}'")
        t = e.get("time_us", 0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
            raise SnapshotError(f"{where}: 'time_us' is not a non-negative number (got {t!r})")
        ev = {"action": action, "addr": _int(e, "addr", where), "size": _int(e, "size", where),
              "stream": _int(e, "stream", where), "time_us": int(t), "index": i}
        if action == "alloc" and ev["size"] == 0:
            raise SnapshotError(f"{where}: alloc of 0 bytes")
        events.append(ev)
    segs = []
    for i, s in enumerate(segments):
        where = f"segments[{i}]"
        if not isinstance(s, dict):
            raise SnapshotError(f"{where}: not a dict")
        if _int(s, "device", where) != device:
            continue
        seg = {"address": _int(s, "address", where), "total_size": _int(s, "total_size", where),
               "stream": _int(s, "stream", where), "blocks": [],
               "expandable": bool(s.get("is_expandable", False))}
        blocks = s.get("blocks", [])
        if not isinstance(blocks, list):
            raise SnapshotError(f"{where}: 'blocks' is not a list")
        for j, b in enumerate(blocks):
            bw = f"{where}.blocks[{j}]"
            if not isinstance(b, dict) or not isinstance(b.get("state"), str):
                raise SnapshotError(f"{bw}: not a dict with a 'state' string")
            blk = {"address": _int(b, "address", bw), "size": _int(b, "size", bw, 1),
                   "requested_size": _int(b, "requested_size", bw), "state": b["state"]}
            # An expandable segment's blocks span its virtual range, which may
            # exceed the bytes mapped (total_size): only its start is checked.
            end = seg["address"] + seg["total_size"] if not seg["expandable"] else 1 << 64
            if not seg["address"] <= blk["address"] < blk["address"] + blk["size"] <= end:
                raise SnapshotError(f"{bw}: block lies outside its segment")
            seg["blocks"].append(blk)
        segs.append(seg)
    return device, events, segs


def reconstruct_pre(events, segs, warn):
    """The allocations and segments alive before the first event."""
    live = {}           # address -> its alloc event
    seen = set()        # addresses allocated or freed so far
    pre_allocs = {}     # address -> dict(size, block_size, stream, freed)
    for ev in events:
        a = ev["action"]
        if a == "alloc":
            if ev["addr"] in live:
                raise SnapshotError(f"device trace event {ev['index']}: alloc at 0x{ev['addr']:x}, "
                                    "which is already allocated")
            live[ev["addr"]] = ev
            seen.add(ev["addr"])
        elif a == "free_requested":
            if ev["addr"] in live:
                del live[ev["addr"]]
            elif ev["addr"] in seen:
                raise SnapshotError(f"device trace event {ev['index']}: second free of 0x{ev['addr']:x}")
            else:
                seen.add(ev["addr"])
                pre_allocs[ev["addr"]] = {"size": max(ev["size"], 1), "block_size": 0,
                                          "stream": ev["stream"], "freed": True}
    allocated_in_trace = {ev["addr"] for ev in events if ev["action"] == "alloc"}
    for s in segs:
        for b in s["blocks"]:
            if b["state"] not in LIVE_STATES or b["address"] in live:
                continue
            if b["address"] in pre_allocs or b["address"] in allocated_in_trace:
                warn(f"block 0x{b['address']:x} alive at dump time was freed by the trace; skipped")
                continue
            pre_allocs[b["address"]] = {"size": b["requested_size"] or b["size"],
                                        "block_size": b["size"], "stream": s["stream"], "freed": False}
    seg_by_addr = {s["address"]: s for s in segs if not s["expandable"]}
    exp_starts = sorted(s["address"] for s in segs if s["expandable"])

    def in_expandable(addr):
        i = bisect.bisect_right(exp_starts, addr) - 1
        return i >= 0

    seg_alive = {}
    pre_segs = {}
    for ev in events:
        a = ev["action"]
        if a in ("segment_map", "segment_unmap") and in_expandable(ev["addr"]):
            continue  # expandable segments: counted below from the dump's mapped size
        if a in ("segment_alloc", "segment_map"):
            seg_alive[ev["addr"]] = True
        elif a in ("segment_free", "segment_unmap"):
            if ev["addr"] not in seg_alive and ev["addr"] not in pre_segs:
                pre_segs[ev["addr"]] = {"size": ev["size"], "stream": ev["stream"],
                                        "kind": "segment_map" if a == "segment_unmap" else "segment_alloc"}
            seg_alive.pop(ev["addr"], None)
    traced_segs = {ev["addr"] for ev in events if ev["action"] in ("segment_alloc", "segment_map")}
    for addr, s in seg_by_addr.items():
        if addr not in traced_segs and addr not in pre_segs:
            pre_segs[addr] = {"size": s["total_size"], "stream": s["stream"], "kind": "segment_alloc"}
    # An expandable segment mapped P bytes before recording, mapped M and
    # unmapped U during it, and holds total_size = P + M - U at the dump.
    for k, start in enumerate(exp_starts):
        end = exp_starts[k + 1] if k + 1 < len(exp_starts) else 1 << 64
        s = next(x for x in segs if x["expandable"] and x["address"] == start)
        net = 0
        for ev in events:
            if start <= ev["addr"] < end:
                if ev["action"] == "segment_map":
                    net += ev["size"]
                elif ev["action"] == "segment_unmap":
                    net -= ev["size"]
        pre = s["total_size"] - net
        if pre < 0:
            raise SnapshotError(f"expandable segment 0x{start:x}: the trace maps {net} bytes net, more than "
                                f"the {s['total_size']} bytes mapped at the dump")
        if pre > 0:
            pre_segs[start] = {"size": pre, "stream": s["stream"], "kind": "segment_map"}
    return pre_allocs, pre_segs


class _Layout:
    """PyTorch's block layout inside segments (native allocator, no expandable
    segments): best-fit takes a free block at its start, splits it when the
    remainder is large enough, frees merge with free neighbours."""

    def __init__(self):
        self.starts = []
        self.segs = {}   # start -> {"size", "blocks": {addr: [size, allocated]}}

    def add_segment(self, addr, size, blocks):
        i = bisect.bisect_left(self.starts, addr)
        if i < len(self.starts) and self.starts[i] == addr:
            raise ValueError(f"segment 0x{addr:x} added twice")
        self.starts.insert(i, addr)
        self.segs[addr] = {"size": size, "blocks": blocks}

    def remove_segment(self, addr):
        seg = self.segs.pop(addr, None)
        if seg is None or any(b[1] for b in seg["blocks"].values()):
            raise ValueError(f"segment 0x{addr:x} freed while unknown or in use")
        self.starts.remove(addr)

    def _segment(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0:
            raise ValueError(f"0x{addr:x} is in no segment")
        start = self.starts[i]
        seg = self.segs[start]
        if addr >= start + seg["size"]:
            raise ValueError(f"0x{addr:x} is in no segment")
        return seg

    def alloc(self, addr, requested):
        """Returns the block size PyTorch gave this allocation."""
        blocks = self._segment(addr)["blocks"]
        b = blocks.get(addr)
        size = round_size(requested)
        if b is None or b[1] or b[0] < size:
            raise ValueError(f"alloc at 0x{addr:x} does not start a free block of {size} bytes")
        rem = b[0] - size
        if (size <= SMALL_SIZE and rem >= MIN_BLOCK) or (size > SMALL_SIZE and rem > SMALL_SIZE):
            blocks[addr + size] = [rem, False]
            b[0] = size
        b[1] = True
        return b[0]

    def free(self, addr):
        blocks = self._segment(addr)["blocks"]
        b = blocks.get(addr)
        if b is None or not b[1]:
            raise ValueError(f"free of 0x{addr:x}, which is not an allocated block")
        b[1] = False
        size = b[0]
        nxt = blocks.get(addr + size)
        if nxt is not None and not nxt[1]:
            b[0] += blocks.pop(addr + size)[0]
        prev = next((a for a, p in blocks.items() if a + p[0] == addr), None)
        if prev is not None and not blocks[prev][1]:
            blocks[prev][0] += blocks.pop(addr)[0]
        return size


def _pre_blocks(seg_addr, seg_size, allocs):
    """Blocks of a pre-existing segment at time 0: its live blocks and the free
    gaps between them (merged, as PyTorch leaves them)."""
    blocks = {}
    p, end = seg_addr, seg_addr + seg_size
    for addr, pa in sorted(allocs):
        if addr < p:
            raise ValueError(f"pre-existing blocks overlap at 0x{addr:x}")
        if addr > p:
            blocks[p] = [addr - p, False]
        blocks[addr] = [pa["block_size"], True]
        p = addr + pa["block_size"]
    if p > end:
        raise ValueError(f"pre-existing block overruns segment 0x{seg_addr:x}")
    if p < end:
        blocks[p] = [end - p, False]
    return blocks


def torch_figures(events, segs, pre_allocs, pre_segs):
    """PyTorch's own figures for the run, and the block size of every alloc event
    (index -> bytes) when the layout could be reconstructed."""
    fig = {}
    reserved = sum(s["size"] for s in pre_segs.values())
    fig["torch_reserved_start"] = reserved
    peak_res = reserved
    for ev in events:
        a = ev["action"]
        if a in ("segment_alloc", "segment_map"):
            reserved += ev["size"]
        elif a in ("segment_free", "segment_unmap"):
            reserved -= ev["size"]
        peak_res = max(peak_res, reserved)
    fig["torch_peak_reserved"] = peak_res
    fig["torch_segment_allocs"] = sum(ev["action"] == "segment_alloc" for ev in events)
    fig["torch_segment_frees"] = sum(ev["action"] == "segment_free" for ev in events)
    fig["torch_ooms"] = sum(ev["action"] == "oom" for ev in events)

    requested = sum(pa["size"] for pa in pre_allocs.values())
    peak_req = requested
    live_req = {}
    for ev in events:
        if ev["action"] == "alloc":
            live_req[ev["addr"]] = ev["size"]
            requested += ev["size"]
        elif ev["action"] == "free_requested":
            requested -= live_req.pop(ev["addr"], None) or pre_allocs[ev["addr"]]["size"]
        peak_req = max(peak_req, requested)
    fig["torch_peak_requested"] = peak_req

    block_sizes = {}
    try:
        if any(s["expandable"] for s in segs) or any(
                ev["action"] in ("segment_map", "segment_unmap") for ev in events):
            raise ValueError("expandable segments")
        layout = _Layout()
        seg_size = {addr: s["size"] for addr, s in pre_segs.items()}
        by_seg = {addr: [] for addr in pre_segs}
        starts = sorted(pre_segs)
        for addr, pa in pre_allocs.items():
            i = bisect.bisect_right(starts, addr) - 1
            if i < 0 or addr >= starts[i] + seg_size[starts[i]]:
                raise ValueError(f"pre-existing block 0x{addr:x} is in no pre-existing segment")
            if pa["block_size"] == 0:  # freed by the trace: size as PyTorch would round it
                pa["block_size"] = round_size(pa["size"])
            by_seg[starts[i]].append((addr, pa))
        for addr in starts:
            # A freed-only block with no known size may own the gap after it, as an unsplit remainder.
            allocs = sorted(by_seg[addr], key=lambda x: x[0])
            for k, (a, pa) in enumerate(allocs):
                nxt = allocs[k + 1][0] if k + 1 < len(allocs) else addr + seg_size[addr]
                gap = nxt - a - pa["block_size"]
                limit = MIN_BLOCK if pa["block_size"] <= SMALL_SIZE else SMALL_SIZE + 1
                if pa["freed"] and 0 < gap < limit:
                    pa["block_size"] += gap
            layout.add_segment(addr, seg_size[addr], _pre_blocks(addr, seg_size[addr], allocs))
        allocated = sum(pa["block_size"] for pa in pre_allocs.values())
        fig["torch_allocated_start"] = allocated
        peak = allocated
        for ev in events:
            a = ev["action"]
            if a == "segment_alloc":
                layout.add_segment(ev["addr"], ev["size"], {ev["addr"]: [ev["size"], False]})
            elif a == "segment_free":
                layout.remove_segment(ev["addr"])
            elif a == "alloc":
                block_sizes[ev["index"]] = layout.alloc(ev["addr"], ev["size"])
                allocated += block_sizes[ev["index"]]
            elif a == "free_completed":
                allocated -= layout.free(ev["addr"])
            peak = max(peak, allocated)
        fig["torch_peak_allocated"] = peak
        fig["torch_allocated_method"] = "blocks"
    except ValueError as e:
        # The layout cannot be rebuilt (expandable segments, a trace that lost
        # events): count rounded request sizes instead, and say so.
        block_sizes = {}
        allocated = sum(pa["block_size"] or round_size(pa["size"]) for pa in pre_allocs.values())
        fig["torch_allocated_start"] = allocated
        peak = allocated
        live = {}
        for ev in events:
            if ev["action"] == "alloc":
                live[ev["addr"]] = round_size(ev["size"])
                allocated += live[ev["addr"]]
            elif ev["action"] == "free_requested":
                pa = pre_allocs.get(ev["addr"])
                allocated -= live.pop(ev["addr"], None) or (pa["block_size"] or round_size(pa["size"]))
            peak = max(peak, allocated)
        fig["torch_peak_allocated"] = peak
        fig["torch_allocated_method"] = f"rounded ({e})"
    return fig, block_sizes


FIG_KEYS = ("torch_peak_allocated", "torch_peak_requested", "torch_peak_reserved", "torch_reserved_start",
            "torch_allocated_start", "torch_segment_allocs", "torch_segment_frees", "torch_ooms",
            "torch_allocated_method")


def _header(version, how, fields, source, snap, device_meta, origin):
    """The first lines every converted trace starts with: version, comments,
    source, recorder, devices (device_meta: meta lines), time origin, alloc conf."""
    settings = snap.get("allocator_settings") if isinstance(snap.get("allocator_settings"), dict) else {}
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF", "")
    conf = conf if isinstance(conf, str) else ""
    return ([f"mnemo-trace {version}",
             f"# converted by tools/import_torch_snapshot.py{how} from a PyTorch memory snapshot",
             f"# sizes in bytes; times in microseconds since the first event{fields}",
             f"meta source {os.path.basename(source)}",
             "meta recorded_by pytorch"] + device_meta +
            [f"meta time_origin_us {origin}",
             f"meta torch_alloc_conf {' '.join(conf.split())}".rstrip()])


def write_trace(out, source, device, snap, events, pre_allocs, pre_segs, fig, block_sizes):
    origin = events[0]["time_us"] if events else 0
    lines = _header(FORMAT_VERSION, "", "", source, snap, [f"meta device {device}"], origin)
    for key in FIG_KEYS:
        lines.append(f"meta {key} {fig[key]}")
    lines.append(f"meta pre_segments {len(pre_segs)}")
    lines.append(f"meta pre_allocs {len(pre_allocs)}")
    # Pre-existing segments, then pre-existing allocations grouped by segment
    # in address order (replay allocates them in this order).
    for addr in sorted(pre_segs):
        ps = pre_segs[addr]
        lines.append(f"pre {ps.get('kind', 'segment_alloc')} {ps['stream']} 0x{addr:x} {ps['size']}")
    for addr in sorted(pre_allocs):
        pa = pre_allocs[addr]
        extra = f" {pa['block_size']}" if pa["block_size"] else ""
        lines.append(f"pre alloc {pa['stream']} 0x{addr:x} {pa['size']}{extra}")
    nevents = len(pre_segs) + len(pre_allocs)
    for ev in events:
        t = max(ev["time_us"] - origin, 0)
        extra = f" {block_sizes[ev['index']]}" if ev["index"] in block_sizes else ""
        lines.append(f"{t} {ev['action']} {ev['stream']} 0x{ev['addr']:x} {ev['size']}{extra}")
        nevents += 1
    lines.append(f"end {nevents}")
    out.write("\n".join(lines) + "\n")


def write_trace_multi(out, source, snap, per_dev):
    """Version 2: every device's pre lines and events, events in time order,
    each line ending with its device index. per_dev: [(device, events, pre_allocs,
    pre_segs, fig, block_sizes)], lowest device first."""
    origin = min((d[1][0]["time_us"] for d in per_dev if d[1]), default=0)
    device_meta = [f"meta device {per_dev[0][0]}", "meta devices " + " ".join(str(d[0]) for d in per_dev)]
    lines = _header(2, " --device all", "; last field: device", source, snap, device_meta, origin)
    for key in FIG_KEYS:  # the plain keys describe the lowest device (what replay picks by default)
        lines.append(f"meta {key} {per_dev[0][4][key]}")
    for dev, _, _, _, fig, _ in per_dev:
        for key in FIG_KEYS:
            lines.append(f"meta dev{dev}.{key} {fig[key]}")
    lines.append(f"meta pre_segments {sum(len(d[3]) for d in per_dev)}")
    lines.append(f"meta pre_allocs {sum(len(d[2]) for d in per_dev)}")
    count = 0
    for dev, _, pre_allocs, pre_segs, _, _ in per_dev:
        for addr in sorted(pre_segs):
            ps = pre_segs[addr]
            lines.append(f"pre {ps.get('kind', 'segment_alloc')} {ps['stream']} 0x{addr:x} {ps['size']} 0 {dev}")
            count += 1
    for dev, _, pre_allocs, pre_segs, _, _ in per_dev:
        for addr in sorted(pre_allocs):
            pa = pre_allocs[addr]
            lines.append(f"pre alloc {pa['stream']} 0x{addr:x} {pa['size']} {pa['block_size']} {dev}")
            count += 1
    merged = []
    for dev, events, _, _, _, block_sizes in per_dev:
        for ev in events:
            merged.append((ev["time_us"], dev, ev["index"], ev, block_sizes.get(ev["index"], 0)))
    merged.sort(key=lambda m: (m[0], m[1], m[2]))
    for t, dev, _, ev, bs in merged:
        lines.append(f"{max(t - origin, 0)} {ev['action']} {ev['stream']} 0x{ev['addr']:x} {ev['size']} {bs} {dev}")
        count += 1
    lines.append(f"end {count}")
    out.write("\n".join(lines) + "\n")


def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024.0


def print_table(snap, blocks, out=sys.stdout):
    """The snapshot's segments, as `mnemo snapshot` prints its own."""
    if not isinstance(snap, dict) or not isinstance(snap.get("segments"), list):
        raise SnapshotError("'segments' missing or not a list")
    rows = []
    for i, s in enumerate(snap["segments"]):
        where = f"segments[{i}]"
        if not isinstance(s, dict):
            raise SnapshotError(f"{where}: not a dict")
        bl = s.get("blocks", [])
        if not isinstance(bl, list):
            raise SnapshotError(f"{where}: 'blocks' is not a list")
        seg = {"device": _int(s, "device", where), "address": _int(s, "address", where),
               "total_size": _int(s, "total_size", where), "stream": _int(s, "stream", where),
               "pool": str(s.get("segment_type", "?")), "expandable": bool(s.get("is_expandable", False)),
               "blocks": []}
        for j, b in enumerate(bl):
            bw = f"{where}.blocks[{j}]"
            if not isinstance(b, dict) or not isinstance(b.get("state"), str):
                raise SnapshotError(f"{bw}: not a dict with a 'state' string")
            seg["blocks"].append((_int(b, "address", bw), _int(b, "size", bw), _int(b, "requested_size", bw),
                                  b["state"]))
        rows.append(seg)
    rows.sort(key=lambda r: (r["device"], r["address"]))
    print(f"{'dev':>3} {'segment':<18} {'stream':<14} {'pool':<5} {'size':>12} {'allocated':>12} {'free':>12} "
          f"{'largest free':>12} {'blocks':>6} {'frag':>6}", file=out)
    tot = {}
    for r in rows:
        alloc = sum(b[1] for b in r["blocks"] if b[3] in LIVE_STATES)
        free = [b[1] for b in r["blocks"] if b[3] == "inactive"]
        fr, lf = sum(free), max(free, default=0)
        frag = 1 - lf / fr if fr else 0.0
        print(f"{r['device']:>3} 0x{r['address']:016x} {r['stream']:<14} {r['pool'][:5]:<5} "
              f"{_human(r['total_size']):>12} {_human(alloc):>12} {_human(fr):>12} {_human(lf):>12} "
              f"{len(r['blocks']):>6} {100 * frag:5.1f}%{' expandable' if r['expandable'] else ''}", file=out)
        if blocks:
            for b in r["blocks"]:
                print(f"    0x{b[0]:016x} {_human(b[1]):>12} {b[3]:<20} requested {_human(b[2])}", file=out)
        t = tot.setdefault(r["device"], [0, 0, 0, 0, 0])
        t[0] += 1
        t[1] += r["total_size"]
        t[2] += alloc
        t[3] += fr
        t[4] += len(r["blocks"])
    for dev in sorted(tot):
        n, size, alloc, fr, nb = tot[dev]
        print(f"device {dev}: {n} segments, {nb} blocks: reserved {_human(size)}, allocated {_human(alloc)}, "
              f"free {_human(fr)} ({100 * fr / size if size else 0:.1f}% of reserved)", file=out)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a PyTorch memory snapshot to a mnemo trace.")
    ap.add_argument("snapshot", help="pickle written by torch.cuda.memory._dump_snapshot")
    ap.add_argument("-o", "--output", help="trace file to write ('-' for stdout)")
    ap.add_argument("--device", default=None,
                    help="device index, or 'all' (default: the first device with trace events)")
    ap.add_argument("--table", action="store_true", help="print the snapshot's segments instead")
    ap.add_argument("--blocks", action="store_true", help="with --table: every block too")
    args = ap.parse_args(argv)
    if not args.table and not args.output:
        ap.error("-o/--output is required (or --table)")
    if args.device not in (None, "all"):
        try:
            args.device = int(args.device)
        except ValueError:
            ap.error(f"--device must be an index or 'all', not {args.device!r}")
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "import_torch_snapshot.py"

    def warn(msg):
        print(f"{prog}: warning: {msg}", file=sys.stderr)

    if args.table:
        return guarded(prog, args.snapshot, lambda: print_table(load_snapshot(args.snapshot), args.blocks))[0]
    if args.device == "all":
        return main_all(args, prog, warn)
    snap = None

    def read():
        nonlocal snap
        snap = load_snapshot(args.snapshot)
        return analyse(snap, args.device, warn)
    rc, got = guarded(prog, args.snapshot, read)
    if rc:
        return rc
    device, events, pre_allocs, pre_segs, fig, block_sizes = got
    rc = write_output(prog, args.output, lambda out: write_trace(out, args.snapshot, device, snap, events, pre_allocs,
                                                                 pre_segs, fig, block_sizes))
    if rc:
        return rc
    gib = float(1 << 30)
    print(f"{args.snapshot} (device {device}): {len(events)} events, {len(pre_allocs)} pre-existing "
          f"allocations in {len(pre_segs)} pre-existing segments; PyTorch: peak allocated "
          f"{fig['torch_peak_allocated'] / gib:.2f} GiB, peak reserved "
          f"{fig['torch_peak_reserved'] / gib:.2f} GiB "
          f"({fig['torch_peak_reserved'] / max(fig['torch_peak_allocated'], 1):.3f}), "
          f"{fig['torch_segment_allocs']} segment allocs", file=sys.stderr)
    return 0


def analyse(snap, device, warn):
    """One device of a loaded snapshot: (device, events, pre_allocs, pre_segs,
    fig, block_sizes), what the trace writers take."""
    device, events, segs = validate(snap, device)
    pre_allocs, pre_segs = reconstruct_pre(events, segs, warn)
    fig, block_sizes = torch_figures(events, segs, pre_allocs, pre_segs)
    return device, events, pre_allocs, pre_segs, fig, block_sizes


def guarded(prog, path, fn):
    """(0, fn()), or (2, None) for a malformed snapshot and (1, None) for an
    I/O error, with the message printed."""
    try:
        return 0, fn()
    except SnapshotError as e:
        print(f"{prog}: {path}: malformed snapshot: {e}", file=sys.stderr)
        return 2, None
    except OSError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1, None


def write_output(prog, path, write):
    """write(stream) to stdout ('-') or to path through a temporary file; 0, or 1 on an I/O error."""
    def to_file():
        if path == "-":
            write(sys.stdout)
            return
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="ascii", newline="\n") as out:
            write(out)
        os.replace(tmp, path)
    return guarded(prog, path, to_file)[0]


def main_all(args, prog, warn):
    snap = None

    def read():
        nonlocal snap
        snap = load_snapshot(args.snapshot)
        validate(snap, None)  # the top level, and that some device has events
        return [analyse(snap, d, warn) for d, tr in enumerate(snap["device_traces"]) if tr]
    rc, per_dev = guarded(prog, args.snapshot, read)
    if rc:
        return rc
    rc = write_output(prog, args.output, lambda out: write_trace_multi(out, args.snapshot, snap, per_dev))
    if rc:
        return rc
    for device, events, pre_allocs, pre_segs, fig, _ in per_dev:
        print(f"{args.snapshot} (device {device}): {len(events)} events, {len(pre_allocs)} pre-existing "
              f"allocations in {len(pre_segs)} pre-existing segments; PyTorch: peak reserved "
              f"{fig['torch_peak_reserved'] / float(1 << 30):.2f} GiB", file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main())
