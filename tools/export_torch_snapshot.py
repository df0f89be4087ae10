#!/usr/bin/env python3
# tools/export_torch_snapshot.py: converts a mnemo trace (docs/TRACE_FORMAT.md, versions
# 1-4) into a PyTorch memory snapshot pickle, for PyTorch's memory_viz and tools that read
# torch.cuda.memory._dump_snapshot files. Single-threaded command-line tool; standard
# library only.
"""Convert a mnemo trace into a PyTorch memory snapshot pickle.

Usage: export_torch_snapshot.py TRACE -o OUT.pickle [--device N]

The pickle (protocol 4) holds plain dicts, lists, ints, strings, floats, bools
and one tuple per segment (segment_pool_id, as PyTorch writes it), no class:
  * 'segments': the allocator's state at the trace's end, as PyTorch's
    _snapshot() reports it: each segment (the segment lines; for expandable
    segments, each contiguous mapped range, as PyTorch does) with its blocks
    tiling it: the allocations alive at the end ('active_allocated', or
    'active_pending_free' when freed but not completed) and the free gaps
    ('inactive'). A block's size is the trace's block size, else the request
    rounded up to 512 bytes (PyTorch's rounding), cut to fit.
  * 'device_traces': one list per CUDA device index (the trace's device index; for a
    one-device trace from a PyTorch snapshot, the CUDA index in `meta device`):
    every event line as {action, addr, size, stream, time_us, frames} (oom:
    'device_free' in place of 'addr', as PyTorch), time_us = `meta
    time_origin_us` + the line's time, frames [{name, filename, line}] from its
    stack (version 3), innermost first. `empty_cache` lines are kept as events
    of that action (PyTorch has none; its viewer lists them and skips them;
    tools/import_torch_snapshot.py reads them back). Pre lines are not events:
    as in a snapshot whose recording started late, allocations alive before
    the trace show in 'segments' (when alive at the end) or as frees without an
    alloc. Annotations (version 4 `annotate` lines) are `annotate` events in
    their places, as PyTorch 2.14 writes them: the text in 'name' and
    'user_metadata', 'stage' START or END for a range's ends (none for a
    point), frames from the line's stack.
  * 'host_segments' and 'host_traces': the device named by `meta host_device`
    (the pinned host memory of a PyTorch 2.14 snapshot), shaped like
    'segments' and one device's trace.
  * 'allocator_settings' from `meta config` (or `meta torch_alloc_conf`):
    PYTORCH_CUDA_ALLOC_CONF and the structured fields PyTorch writes
    (max_split_size in bytes, -1 unset; garbage_collection_threshold;
    expandable_segments; roundup_power2_divisions by interval).

PyTorch's viewer rebuilds earlier states by undoing events from the end, so
every block must lie in a segment and every free must find its block. Where a
trace does not give that, events marked 'mnemo_synthetic': True are added
(tools/import_torch_snapshot.py skips them): for an allocation outside every
segment (a trace without segment lines, e.g. an RMM log), a segment of its own
(segment_alloc before the alloc, segment_free after its free completes; alive
at the end, one segment per live allocation); for a free_requested never
completed (traces without free_completed lines, e.g. RMM logs; an address
reused before its free completed), a free_completed. The number added is
printed.

Exit status: 0 on success, 2 on bad usage or a malformed trace, 1 when a file
cannot be read or written.
"""

import argparse
import bisect
import os
import pickle
import re
import sys

# The importer beside this script (installed together in share/mnemo) holds the one
# reader of the config syntax and PyTorch's block rounding.
sys.dont_write_bytecode = True   # no __pycache__ in the install or source folder
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from import_torch_snapshot import _parse_conf, round_size, write_atomic  # noqa: E402

MIB = 1 << 20
LINE_MAX = 4096
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "empty_cache", "oom")
PRE_ACTIONS = ("alloc", "segment_alloc", "segment_map")
SYNTHETIC_KEY = "mnemo_synthetic"
ROUNDUP_INTERVALS = 16
MAX_DEVICES = 1024
_META_KEY = re.compile(r"[A-Za-z0-9_.-]{1,63}\Z")
_DEC = re.compile(r"[0-9]{1,20}\Z")
_ADDR = re.compile(r"0[xX][0-9a-fA-F]{1,16}\Z")
_BLANKS = re.compile(r"[ \t]+")
_NOT_TEXT = re.compile(rb"[^\t\x20-\x7e]")   # what a line may hold outside comments and meta values


class TraceError(Exception):
    """The trace is malformed (exit status 2)."""


class Entry:
    __slots__ = ("pre", "time", "action", "stream", "addr", "size", "bs", "dev", "stack", "lineno", "name")

    def __init__(self, pre, time, action, stream, addr, size, bs, dev, stack, lineno):
        self.pre, self.time, self.action, self.stream, self.addr = pre, time, action, stream, addr
        self.size, self.bs, self.dev, self.stack, self.lineno = size, bs, dev, stack, lineno
        self.name = None


class Trace:
    """A parsed trace: version, meta {key: value}, frames [(file, line, name)]
    (frame id i+1), stacks [tuple of frame ids] (stack id i+1), entries,
    annotations (Entry objects: action 'annotate', size 0, addr 0, name set;
    the stage in 'stream': start, end or mark)."""

    def __init__(self):
        self.version = 0
        self.meta = {}
        self.frames = []
        self.stacks = []
        self.entries = []
        self.annotations = []

    def stack_frames(self, sid):
        """[(file, line, name)] of stack sid, innermost first; [] for 0."""
        return [self.frames[f - 1] for f in self.stacks[sid - 1]] if sid else []


def _decode_pct(text, what):
    """The format's percent-decoding (version 3 frame fields)."""
    if "%" not in text:
        return text
    out = bytearray()
    i = 0
    raw = text.encode("ascii")
    while i < len(raw):
        if raw[i] == 0x25:
            h = raw[i + 1:i + 3]
            if len(h) != 2 or not all(c in b"0123456789abcdefABCDEF" for c in h):
                raise ValueError(f"bad % escape in the frame's {what}")
            out.append(int(h, 16))
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return out.decode("utf-8", "surrogateescape")


def _num(tok, what, limit=1 << 64):
    if not _DEC.match(tok):
        raise ValueError(f"{what} '{tok:.40}' is not a decimal number")
    v = int(tok)
    if v >= limit:
        raise ValueError(f"{what} {v} out of range")
    return v


def _addr(tok):
    if not _ADDR.match(tok):
        raise ValueError(f"address '{tok:.40}' is not 0x followed by 1 to 16 hex digits")
    return int(tok, 16)


def parse_trace(data, name="trace"):
    """Parses trace bytes strictly (the rules of docs/TRACE_FORMAT.md, versions
    1 to 4); TraceError "<name>:<line>: <message>" on the first error."""
    t = Trace()
    lines = data.split(b"\n")
    if lines[-1] != b"":
        raise TraceError(f"{name}:{len(lines)}: truncated: the last line has no line feed")
    lines.pop()
    if not lines:
        raise TraceError(f"{name}:1: empty file, expected 'mnemo-trace <version>'")
    stage = 0      # 0 meta, 1 frames, 2 stacks, 3 pre, 4 events, 5 after end
    live = set()   # (device, address) alive
    count = 0
    for no, raw in enumerate(lines, 1):
        try:
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            if len(raw) > LINE_MAX:
                raise ValueError(f"line of {len(raw)} bytes, longer than {LINE_MAX}")
            if b"\0" in raw:
                raise ValueError("NUL byte")
            text = raw.decode("utf-8", "surrogateescape")
            body = text.strip(" \t")
            if no == 1:
                f = body.split()
                if len(f) != 2 or f[0] != "mnemo-trace" or not _DEC.match(f[1]):
                    raise ValueError("expected 'mnemo-trace <version>' on the first line")
                t.version = int(f[1])
                if t.version not in (1, 2, 3, 4):
                    raise ValueError(f"unsupported trace version {t.version}")
                continue
            if not body or body.startswith("#"):
                if body and stage == 5:
                    raise ValueError("a comment after the end line")
                continue
            if stage == 5:
                raise ValueError("a line after the end line")
            if b"\r" in raw or not raw.isascii() and not body.startswith("meta"):
                raise ValueError("a byte outside printable ASCII")
            f = _BLANKS.split(body)
            kind = f[0]
            if kind == "meta":
                if stage > 0:
                    raise ValueError("meta line after frame, stack, pre or event lines")
                if len(f) < 2 or not _META_KEY.match(f[1]):
                    raise ValueError("meta key missing or not 1 to 63 characters of [A-Za-z0-9_.-]")
                if f[1] in t.meta:
                    raise ValueError(f"duplicate meta key '{f[1]}'")
                parts = _BLANKS.split(body, 2)
                t.meta[f[1]] = parts[2] if len(parts) > 2 else ""
                continue
            if _NOT_TEXT.search(raw):
                raise ValueError("a byte outside printable ASCII")
            if kind == "frame":
                if t.version < 3:
                    raise ValueError(f"frame line in a version {t.version} trace")
                if stage > 1:
                    raise ValueError("frame line after stack, pre or event lines")
                stage = 1
                parts = _BLANKS.split(body, 4)
                if len(parts) < 4:
                    raise ValueError("frame line needs: frame <id> <line> <file> [<name>]")
                fid = _num(parts[1], "frame id")
                if fid != len(t.frames) + 1:
                    raise ValueError(f"frame id {fid}, expected {len(t.frames) + 1}")
                line = _num(parts[2], "source line", 1 << 32)
                file = "" if parts[3] == "-" else _decode_pct(parts[3], "file")
                t.frames.append((file, line, _decode_pct(parts[4] if len(parts) > 4 else "", "name")))
                continue
            if kind == "stack":
                if t.version < 3:
                    raise ValueError(f"stack line in a version {t.version} trace")
                if stage > 2:
                    raise ValueError("stack line after pre or event lines")
                stage = 2
                if len(f) < 3:
                    raise ValueError("stack line needs: stack <id> <frame_id>...")
                sid = _num(f[1], "stack id")
                if sid != len(t.stacks) + 1:
                    raise ValueError(f"stack id {sid}, expected {len(t.stacks) + 1}")
                ids = tuple(_num(x, "frame id") for x in f[2:])
                bad = [i for i in ids if not 1 <= i <= len(t.frames)]
                if bad:
                    raise ValueError(f"stack {sid}: unknown frame id {bad[0]}")
                t.stacks.append(ids)
                continue
            if kind == "end":
                if len(f) != 2:
                    raise ValueError("end line needs: end <count>")
                n = _num(f[1], "end count")
                if n != count:
                    raise ValueError(f"end count {n}, but the trace has {count} pre, event and annotate lines")
                stage = 5
                continue
            if kind == "annotate":
                if t.version < 4:
                    raise ValueError(f"annotate line in a version {t.version} trace")
                parts = _BLANKS.split(body, 5)
                if len(parts) < 5:
                    raise ValueError("annotate line needs: annotate <time_us> <device> <stage> <stack> [<name>]")
                if parts[3] not in ("start", "end", "mark"):
                    raise ValueError(f"annotation stage '{parts[3]:.40}' is not start, end or mark")
                stack = _num(parts[4], "stack id")
                if stack > len(t.stacks):
                    raise ValueError(f"unknown stack id {stack}")
                a = Entry(False, _num(parts[1], "time"), "annotate", parts[3], 0, 0, 0,
                          _num(parts[2], "device", 1 << 31), stack, no)
                if "\t" in (parts[5] if len(parts) > 5 else ""):
                    raise ValueError("tab inside the annotation's name")
                a.name = _decode_pct(parts[5], "name") if len(parts) > 5 else ""
                t.annotations.append(a)
                stage = max(stage, 3)
                count += 1
                continue
            pre = kind == "pre"
            if pre and stage > 3:
                raise ValueError("pre line after an event line")
            stage = 3 if pre else 4
            nmax = {1: 6, 2: 7, 3: 8, 4: 8}[t.version]
            if not 5 <= len(f) <= nmax:
                raise ValueError(f"{'pre' if pre else 'event'} line has {len(f)} fields, expected 5 to {nmax}")
            time = None if pre else _num(f[0], "time")
            action = f[1]
            if action not in (PRE_ACTIONS if pre else ACTIONS):
                raise ValueError(f"unknown {'pre ' if pre else ''}action '{action:.40}'")
            stream, addr, size = _num(f[2], "stream"), _addr(f[3]), _num(f[4], "size")
            bs = _num(f[5], "block size") if len(f) > 5 else 0
            dev = _num(f[6], "device", 1 << 31) if len(f) > 6 else 0
            stack = _num(f[7], "stack id") if len(f) > 7 else 0
            if stack > len(t.stacks):
                raise ValueError(f"unknown stack id {stack}")
            if action == "alloc":
                if size == 0:
                    raise ValueError("alloc of 0 bytes")
                if (dev, addr) in live:
                    raise ValueError(f"alloc at 0x{addr:x}, which is live")
                live.add((dev, addr))
            elif action == "free_requested":
                if (dev, addr) not in live:
                    raise ValueError(f"free_requested of 0x{addr:x}, which is not live")
                live.discard((dev, addr))
            t.entries.append(Entry(pre, time, action, stream, addr, size, bs, dev, stack, no))
            count += 1
        except ValueError as e:
            raise TraceError(f"{name}:{no}: {e}") from None
    if stage != 5:
        raise TraceError(f"{name}:{len(lines)}: truncated: no end line")
    return t


# ---- allocator settings ------------------------------------------------------------------

def allocator_settings(conf, raw_conf):
    """PyTorch's allocator_settings dict for a config string (PYTORCH_CUDA_ALLOC_CONF
    syntax), read by the importer's parser (one reader of that syntax). Keys it
    cannot read are left to the string."""
    s = {"PYTORCH_CUDA_ALLOC_CONF": raw_conf, "max_split_size": -1, "garbage_collection_threshold": 0.0,
         "expandable_segments": False,
         "roundup_power2_divisions": {str(1 << k): 0 for k in range(ROUNDUP_INTERVALS)}}
    keys = _parse_conf(conf, lambda msg: None)   # the string keeps what the structured fields cannot say
    if "max_split_size_mb" in keys:
        s["max_split_size"] = keys["max_split_size_mb"] * MIB
    if "garbage_collection_threshold" in keys:
        s["garbage_collection_threshold"] = keys["garbage_collection_threshold"]
    if "expandable_segments" in keys:
        s["expandable_segments"] = keys["expandable_segments"]
    if "roundup_power2_divisions" in keys:
        s["roundup_power2_divisions"] = {str(1 << k): d for k, d in enumerate(keys["roundup_power2_divisions"])}
    return s


# ---- the snapshot ------------------------------------------------------------------------

class _DeviceState:
    """The allocator state of one device while walking the trace."""

    def __init__(self):
        self.segs = {}       # start -> [size, stream, stack]   (non-expandable)
        self.starts = []     # sorted starts of segs
        self.mapped = []     # sorted [start, end, stream, stack] (expandable mappings)
        self.blocks = {}     # address -> dict(size, bs, stream, stack, pending, own)

    def add_seg(self, addr, size, stream, stack):
        if addr not in self.segs:
            bisect.insort(self.starts, addr)
        self.segs[addr] = [size, stream, stack]

    def free_seg(self, addr):
        if self.segs.pop(addr, None) is not None:
            self.starts.pop(bisect.bisect_left(self.starts, addr))

    def unmap(self, start, end):
        out = []
        for s, e, st, sk in self.mapped:
            if e <= start or s >= end:
                out.append([s, e, st, sk])
                continue
            if s < start:
                out.append([s, start, st, sk])
            if e > end:
                out.append([end, e, st, sk])
        self.mapped = out

    def map(self, start, end, stream, stack):
        self.unmap(start, end)
        bisect.insort(self.mapped, [start, end, stream, stack])

    def in_segment(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and addr < self.starts[i] + self.segs[self.starts[i]][0]:
            return True
        i = bisect.bisect_right(self.mapped, [addr, 1 << 65]) - 1
        return i >= 0 and addr < self.mapped[i][1]

    def merged_mappings(self):
        """Contiguous mappings of one stream joined (PyTorch reports each as a segment)."""
        out = []
        for s, e, st, sk in self.mapped:
            if out and out[-1][1] == s and out[-1][2] == st:
                out[-1][1] = e
            else:
                out.append([s, e, st, sk])
        return out


def _block_bytes(b):
    return b["bs"] or (b["size"] if b["own"] else round_size(b["size"]))


def build_snapshot(trace, device=None, note=lambda m: None):
    """The snapshot dict of a parsed trace (every device, or only `device`).
    Returns (snapshot, number of synthetic events added)."""
    devices = sorted({e.dev for e in trace.entries} | {a.dev for a in trace.annotations})
    md = trace.meta.get("host_device", "")
    host = int(md) if _DEC.match(md) and int(md) < 1 << 31 else None
    if device is not None:
        if device not in devices and (trace.entries or trace.annotations):
            raise TraceError(f"--device {device}: the trace has device index(es) "
                             f"{' '.join(map(str, devices)) or 'none'}")
        devices = [device]
    if not devices:
        devices = [0]
    # A one-device trace from a PyTorch snapshot keeps its CUDA index in `meta device`.
    torch_index = {d: d for d in devices}
    md = trace.meta.get("device", "")
    if all(e.dev == 0 for e in trace.entries) and _DEC.match(md) and int(md) < MAX_DEVICES and host is None:
        torch_index = {0: int(md)} if devices == [0] else torch_index
    origin = int(trace.meta["time_origin_us"]) if _DEC.match(trace.meta.get("time_origin_us", "")) else 0
    frames_of = {}

    def frames(sid):
        got = frames_of.get(sid)
        if got is None:
            got = frames_of[sid] = [{"name": n, "filename": f or "??", "line": ln}
                                    for f, ln, n in trace.stack_frames(sid)]
        return got

    def event(action, addr, size, stream, time, stack, synthetic=False):
        e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": origin + time,
             "frames": frames(stack)}
        if action == "oom":
            e["device_free"] = e.pop("addr")
        if synthetic:
            e[SYNTHETIC_KEY] = True
        return e

    def annotation(a):
        e = {"action": "annotate", "addr": 0, "size": 0, "stream": 0, "time_us": origin + a.time,
             "frames": frames(a.stack), "name": a.name, "user_metadata": a.name}
        if a.stream != "mark":
            e["stage"] = a.stream.upper()
        return e

    ntraces = max([v for d, v in torch_index.items() if d != host] or [-1]) + 1
    if ntraces > MAX_DEVICES:   # PyTorch keeps one list per device index
        raise TraceError(f"device index {ntraces - 1}: a PyTorch snapshot holds one trace list per device "
                         f"index, at most {MAX_DEVICES}")
    device_traces = [[] for _ in range(ntraces)]
    segments, host_segments, host_traces = [], [], []
    synthetic = 0
    for dev in devices:
        entries = [e for e in trace.entries if e.dev == dev]
        anns = [a for a in trace.annotations if a.dev == dev]
        k = 0   # the next annotation (they precede the entry after them in the file)
        st = _DeviceState()
        out = host_traces if dev == host else device_traces[torch_index[dev]]
        completes = any(e.action == "free_completed" for e in entries)

        def finish(addr, e, synth):
            """The block at addr is free: drop it, and its own segment."""
            nonlocal synthetic
            b = st.blocks.pop(addr)
            if synth:
                out.append(event("free_completed", addr, b["size"], b["stream"], e.time, b["stack"], True))
                synthetic += 1
            if b["own"]:
                out.append(event("segment_free", addr, _block_bytes(b), b["stream"], e.time, b["stack"], True))
                synthetic += 1

        def complete_in(start, end, e):
            """Frees still waiting for completion in memory given back: completed now."""
            for addr in [a for a, b in st.blocks.items() if start <= a < end and b["pending"] and not b["own"]]:
                finish(addr, e, True)

        pres = [e for e in entries if e.pre]
        for e in pres:   # segments first: allocations alive before the trace lie in them
            if e.action == "segment_alloc":
                st.add_seg(e.addr, e.size, e.stream, e.stack)
            elif e.action == "segment_map":
                st.map(e.addr, e.addr + e.size, e.stream, e.stack)
        for e in pres:
            if e.action == "alloc":
                st.blocks[e.addr] = {"size": e.size, "bs": e.bs, "stream": e.stream, "stack": e.stack,
                                     "pending": False, "own": not st.in_segment(e.addr)}
        for e in entries:
            if e.pre:
                continue
            while k < len(anns) and anns[k].lineno < e.lineno:
                out.append(annotation(anns[k]))
                k += 1
            a = e.action
            if a == "alloc":
                old = st.blocks.get(e.addr)
                if old is not None:   # reused before its free completed: complete it now
                    finish(e.addr, e, True)
                b = {"size": e.size, "bs": e.bs, "stream": e.stream, "stack": e.stack, "pending": False,
                     "own": not st.in_segment(e.addr)}
                if b["own"]:
                    out.append(event("segment_alloc", e.addr, _block_bytes(b), e.stream, e.time, e.stack, True))
                    synthetic += 1
                st.blocks[e.addr] = b
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
            elif a == "free_requested":
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
                st.blocks[e.addr]["pending"] = True
                if not completes:
                    finish(e.addr, e, True)
            elif a == "free_completed":
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
                b = st.blocks.get(e.addr)
                if b is not None and b["pending"]:
                    finish(e.addr, e, False)
            elif a == "segment_alloc":
                st.add_seg(e.addr, e.size, e.stream, e.stack)
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
            elif a == "segment_free":
                complete_in(e.addr, e.addr + st.segs.get(e.addr, [e.size])[0], e)
                st.free_seg(e.addr)
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
            elif a == "segment_map":
                st.map(e.addr, e.addr + e.size, e.stream, e.stack)
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
            elif a == "segment_unmap":
                complete_in(e.addr, e.addr + e.size, e)
                st.unmap(e.addr, e.addr + e.size)
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
            else:   # empty_cache, oom
                out.append(event(a, e.addr, e.size, e.stream, e.time, e.stack))
        out += [annotation(x) for x in anns[k:]]
        if dev == host:
            host_segments += _final_segments(st, -1, frames)
        else:
            segments += _final_segments(st, torch_index[dev], frames)
    if synthetic:
        note(f"{synthetic} events added for PyTorch's viewer (marked {SYNTHETIC_KEY}): segments of their own for "
             "allocations outside every segment, completions of frees never completed")
    conf = trace.meta.get("config", trace.meta.get("torch_alloc_conf", ""))
    raw = trace.meta.get("torch_alloc_conf", conf)
    snap = {"segments": segments, "device_traces": device_traces,
            "allocator_settings": allocator_settings(conf, raw), "external_annotations": []}
    if host in devices:
        snap["host_segments"], snap["host_traces"] = host_segments, host_traces
    return snap, synthetic


def _final_segments(st, device, frames):
    """The segments at the end, PyTorch's way: blocks tiling each one."""
    segs = [(a, a + s[0], s[1], s[2], False) for a, s in st.segs.items()]
    segs += [(m[0], m[1], m[2], m[3], True) for m in st.merged_mappings()]
    segs += [(a, a + _block_bytes(b), b["stream"], b["stack"], False) for a, b in st.blocks.items() if b["own"]]
    segs.sort()
    live = sorted(st.blocks.items())
    out = []
    k = 0
    for start, end, stream, stack, expandable in segs:
        blocks = []
        p = start
        while k < len(live) and live[k][0] < start:
            k += 1   # a block outside every segment (overlapping ones): not shown
        while k < len(live) and live[k][0] < end:
            addr, b = live[k]
            k += 1
            if addr < p:
                continue   # overlaps the previous block: not shown
            if addr > p:
                blocks.append({"address": p, "size": addr - p, "requested_size": 0, "state": "inactive",
                               "frames": []})
            nxt = live[k][0] if k < len(live) else end
            size = min(_block_bytes(b), min(nxt, end) - addr)
            blocks.append({"address": addr, "size": size, "requested_size": min(b["size"], size),
                           "state": "active_pending_free" if b["pending"] else "active_allocated",
                           "frames": frames(b["stack"])})
            p = addr + size
        if p < end:
            blocks.append({"address": p, "size": end - p, "requested_size": 0, "state": "inactive",
                           "frames": []})
        alloc = [b for b in blocks if b["state"] == "active_allocated"]
        out.append({"device": device, "address": start, "total_size": end - start,
                    "allocated_size": sum(b["size"] for b in alloc),
                    "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
                    "requested_size": sum(b["requested_size"] for b in alloc), "stream": stream,
                    "segment_type": "small" if end - start <= 2 * MIB else "large",
                    "segment_pool_id": (0, 0), "is_expandable": expandable, "frames": frames(stack),
                    "blocks": blocks})
    return out


def export_bytes(data, device=None, name="trace", note=lambda m: None):
    """Trace bytes -> (pickle bytes, snapshot dict, synthetic events added)."""
    snap, synthetic = build_snapshot(parse_trace(data, name), device, note)
    return pickle.dumps(snap, protocol=4), snap, synthetic


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a mnemo trace to a PyTorch memory snapshot pickle.")
    ap.add_argument("trace", help="mnemo trace (docs/TRACE_FORMAT.md)")
    ap.add_argument("-o", "--output", required=True, help="pickle to write ('-' for stdout)")
    ap.add_argument("--device", type=int, default=None, help="only this device index of the trace")
    args = ap.parse_args(argv)
    if args.device is not None and args.device < 0:
        ap.error("--device must be a device index")
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "export_torch_snapshot.py"
    try:
        with open(args.trace, "rb") as f:
            data = f.read()
    except OSError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    try:
        blob, snap, _ = export_bytes(data, args.device, args.trace,
                                     lambda m: print(f"{prog}: note: {m}", file=sys.stderr))
    except TraceError as e:
        print(f"{prog}: malformed trace: {e}", file=sys.stderr)
        return 2
    try:
        if args.output == "-":
            sys.stdout.buffer.write(blob)
        else:
            write_atomic(args.output, blob)   # mode kept, links written through, as mnemo's saves
    except OSError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 1
    nev = sum(len(t) for t in snap["device_traces"])
    print(f"{args.trace}: {nev} events on {sum(1 for t in snap['device_traces'] if t)} device(s), "
          f"{len(snap['segments'])} segments at the end -> {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
