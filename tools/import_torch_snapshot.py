#!/usr/bin/env python3
# tools/import_torch_snapshot.py: converts a PyTorch memory snapshot (pickle from
# torch.cuda.memory._dump_snapshot / _snapshot / memory_snapshot) into a mnemo trace
# (docs/TRACE_FORMAT.md). Single-threaded command-line tool; standard library only.
"""Convert a PyTorch memory snapshot into a mnemo trace.

Usage: import_torch_snapshot.py SNAPSHOT -o TRACE [--device N|all] [--max-decompressed-size BYTES]
       import_torch_snapshot.py SNAPSHOT --table [--blocks] [--max-decompressed-size BYTES]

SNAPSHOT is a pickle (or a gzip-compressed pickle, e.g. NAME.pickle.gz). It is
read with a restricted unpickler that refuses every global, so a malicious
file cannot run code. Only the Python standard library is used.

Every shape PyTorch writes is accepted:
  * the dict of torch.cuda.memory._snapshot() / _dump_snapshot(), from its
    first version (segments + device_traces, blocks with 'history', no time_us)
    to the current one (allocator_settings, external_annotations, segment_map /
    segment_unmap events, compile_context, user_metadata, segment_pool_id);
    missing optional fields take PyTorch's own defaults (see _segments and
    _events);
  * state-only snapshots (no trace events: _snapshot() without
    _record_memory_history) and the legacy bare list of segments
    (torch.cuda.memory_snapshot(), and what PyTorch 1.13's _snapshot() gave):
    the trace holds the state as `pre` lines and no events (`meta state_only 1`).

What it writes (see docs/TRACE_FORMAT.md):
  * `pre` lines for the state before recording began: segments that existed
    (in the dump but never allocated by the trace, or freed by the trace
    without being allocated in it; expandable mappings rebuilt by undoing the
    trace's map/unmap events from the dump's mapped ranges) and live
    allocations (addresses the trace frees without allocating them, and blocks
    alive at dump time that the trace never allocated);
  * one line per trace event, times relative to the first event, and one
    `empty_cache` line before each run of segment frees the program caused by
    emptying the cache (infer_empty_cache), not before a run that left a free
    segment cached (a partial release of PyTorch's out-of-memory path:
    drop_partial_releases);
  * with stack frames in the snapshot: trace format version 3 (frame and stack
    lines, the stack id as the 8th field of every pre and event line);
    without: version 1 (one device, index 0) or 2, as before; with
    annotations (PyTorch 2.14's `annotate` events, `external_annotations`):
    version 4, `annotate` lines among the events;
  * PyTorch's own figures for the run in `meta` lines (peak allocated from a
    reconstruction of the allocator's block layout, peak requested, peak
    reserved, reserved and allocated at the start, segment_alloc events,
    empty-cache points), the run's allocator settings as `meta config` in
    PYTORCH_CUDA_ALLOC_CONF syntax (what `mnemo replay` uses by default) and
    the raw string as `meta torch_alloc_conf`.

Every device by default (`--device all`, the same): one trace whose lines carry
the CUDA device index, figures per device in meta keys `devN.torch_*`; `--device
N` imports device N alone, its index kept. Pinned host memory (PyTorch 2.14's
`host_segments` / `host_traces`) is one more device, `meta host_device`, after
the CUDA ones. Several streams, expandable segments and oom events (kept as
`oom` lines, the device's free bytes as the address) are handled. Trace actions
and top-level keys this importer does not know (a later PyTorch's) are warned
about once per name, with a count, and the rest imported. `--table` prints the snapshot's segments
instead (mnemo snapshot). Events marked `mnemo_synthetic` (written by
tools/export_torch_snapshot.py to keep PyTorch's viewer consistent) are skipped.

Bounded work on hostile files: a .pickle.gz inflates to at most 4 GiB
(--max-decompressed-size raises or lowers it; inflating stops at the limit),
lists and dicts nest at most 100 deep, and what is written is checked to be a
trace the reader accepts (a NUL in a frame's file or name becomes U+FFFD, a
meta value is cut to the 4096-byte line).

Exit status: 0 on success, 2 on bad usage or a malformed snapshot (one over
these limits included), 1 when a file cannot be read or written.
"""

import argparse
import bisect
import contextlib
import errno
import gc as _gc
import gzip
import heapq
import io
import os
import pickle
import stat
import sys
import tempfile
import time
import zlib

FORMAT_VERSION = 1
MIN_BLOCK = 512            # PyTorch kMinBlockSize: rounding unit, small-pool split threshold
SMALL_SIZE = 1 << 20       # kSmallSize: requests up to this go to the small pool
MIB = 1 << 20
LARGE_BUFFER = 20 * MIB    # kLargeBuffer: the least max_split_size PyTorch (and mnemo) accept
ACTIONS = ("alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "empty_cache", "oom")
DROPPED_ACTIONS = ("snapshot", "user_defined")   # PyTorch actions with no mnemo meaning
ANNOTATE = "annotate"      # PyTorch 2.14's user annotations: annotate lines (trace format version 4)
# The top-level keys of a snapshot dict this importer reads; others are warned about.
KNOWN_KEYS = ("segments", "device_traces", "allocator_settings", "external_annotations", "host_segments",
              "host_traces")
STAGES = {"START": "start", "END": "end"}   # PyTorch's annotation stages; any other (or none): a mark
LIVE_STATES = ("active_allocated", "active_pending_free")
SYNTHETIC_KEY = "mnemo_synthetic"   # events tools/export_torch_snapshot.py made up
LINE_MAX = 4096            # MN_TRACE_LINE_MAX
STACK_FRAMES_MAX = 128     # frames kept per stack (the outermost are cut)
ROUNDUP_INTERVALS = 16     # PyTorch's roundup_power2_divisions intervals: 1 MiB ... 32 GiB
DEVICE_MAX = (1 << 31) - 1  # the trace format's largest device index
# The most bytes a compressed snapshot may inflate to (--max-decompressed-size
# raises it): 4 GiB, about 800 times the largest sample here (gpt2_infer_var,
# 5 MB inflated) and more than PyTorch's own viewer (a browser tab) can open;
# a 1 MiB .pickle.gz of zeros would otherwise inflate to 1 GiB.
MAX_DECOMPRESSED = 4 << 30
NESTING_MAX = 100          # lists/dicts/tuples deep; PyTorch's snapshots nest 7 deep


class _Progress:
    """A one-line progress display on stderr (--progress: mnemo passes it when its
    stderr is a terminal), shown once the import has run a second, redrawn at
    most 10 times a second; never a newline (the line is cleared at the end)."""

    def __init__(self):
        self.on = False
        self.start = self.last = 0.0
        self.shown = False

    def enable(self):
        self.on = True
        self.start = time.monotonic()

    def __call__(self, stage, done=None, total=None):
        if not self.on:
            return
        now = time.monotonic()
        if now - self.start < 1.0 or now - self.last < 0.1:
            return
        self.last = now
        pct = f" {100 * done // total:3d}%" if total else ""
        sys.stderr.write(f"\rimporting the snapshot: {stage}{pct}\033[K")
        sys.stderr.flush()
        self.shown = True

    def clear(self):
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self.shown = False


progress = _Progress()


class SnapshotError(Exception):
    """The snapshot is malformed or inconsistent (exit status 2)."""


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"refusing pickle global {module}.{name}: a memory snapshot "
                            "holds only plain dicts, lists and numbers")


def _head(data):
    """The first bytes of a file, for messages."""
    text = data[:24].decode("ascii", "backslashreplace")
    return repr(text + ("..." if len(data) > 24 else ""))


def parse_size(text):
    """A byte count for --max-decompressed-size: a decimal, optionally with a
    K, M, G or T suffix (powers of 1024). ValueError otherwise."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if t[-1:] in ("K", "M", "G", "T"):
        mult = 1 << (10 * (1 + "KMGT".index(t[-1])))
        t = t[:-1]
    if not t.isdigit():
        raise ValueError(f"not a byte count: {text!r:.40}")
    return int(t) * mult


def _gunzip(data, cap):
    """data inflated (every gzip member), streamed: SnapshotError as soon as it
    passes cap bytes, so a small file cannot inflate to gigabytes."""
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            while True:
                chunk = g.read(1 << 20)
                if not chunk:
                    break
                out += chunk
                if len(out) > cap:
                    raise SnapshotError(f"the gzip data inflates to more than {cap} bytes (the limit; "
                                        "--max-decompressed-size raises it)")
    except (OSError, EOFError, zlib.error) as e:
        raise SnapshotError(f"truncated or damaged gzip data ({e})") from None
    return bytes(out)


_CONTAINERS = frozenset((list, tuple, dict, set, frozenset))


def _check_nesting(obj, limit=NESTING_MAX):
    """SnapshotError when lists, dicts, tuples or sets nest more than limit
    deep. Breadth first, without recursion however deep the input, each
    container visited once (by identity: a shared one counts at the shallowest
    place it is found, and a cycle ends the walk; whatever deeper path the
    importer then trips over is still a malformed snapshot, RecursionError
    being caught). Dict keys are not walked (hashing them was the unpickler's)."""
    if type(obj) not in _CONTAINERS:
        return
    level, seen = [obj], {id(obj)}
    for _ in range(limit):
        nxt = []
        for o in level:
            for k in (o.values() if type(o) is dict else o):
                if type(k) in _CONTAINERS and id(k) not in seen:
                    seen.add(id(k))
                    nxt.append(k)
        if not nxt:
            return
        level = nxt
    raise SnapshotError(f"lists and dicts nested more than {limit} deep")


def parse_bytes(data, max_decompressed=MAX_DECOMPRESSED):
    """The object pickled in data (gzip-compressed or not, inflating to at most
    max_decompressed bytes), its containers nested at most NESTING_MAX deep;
    SnapshotError otherwise."""
    progress("reading the pickle")
    obj = _unpickle(data, max_decompressed)
    progress("checking its structure")
    _check_nesting(obj)
    return obj


def _unpickle(data, max_decompressed):
    if not data:
        raise SnapshotError("empty file")
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, max_decompressed)
        if not data:
            raise SnapshotError("empty file (inside the gzip data)")
    try:
        # A damaged length field can make CPython's unpickler ask for an
        # impossible bytearray; CPython (3.11) may then print a stray internal
        # "SystemError: deallocated bytearray object has exported buffers"
        # before raising MemoryError: kept off the user's terminal.
        with contextlib.redirect_stderr(io.StringIO()):
            return _RestrictedUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except Exception as e:  # any unpickling failure means a malformed file
        if data[:1] != b"\x80":  # pickles of protocol 2 and later start with PROTO
            hint = " (a mnemo trace is used as it is)" if data.startswith(b"mnemo-trace") else ""
            raise SnapshotError(f"not a PyTorch snapshot pickle (it starts with {_head(data)}){hint}") from None
        if isinstance(e, EOFError) or "truncated" in str(e):
            raise SnapshotError(f"truncated pickle ({e or 'ran out of input'})") from None
        raise SnapshotError(f"damaged pickle: {type(e).__name__}: {e}") from None


def _int(d, key, where, minimum=0, default=None):
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise SnapshotError(f"{where}: field '{key}' missing or not an integer (got {v!r:.60})")
    if v < minimum or v >= 1 << 64:
        raise SnapshotError(f"{where}: field '{key}' = {v} out of range")
    return v


def round_size(n):
    return MIN_BLOCK if n < MIN_BLOCK else (n + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK


# ---- the snapshot's shape ---------------------------------------------------------------

class Snapshot:
    """A loaded snapshot, whatever its shape: traces (list of per-device event
    lists, possibly empty), segments (list), settings (dict), state_only;
    external_annotations (list of dicts), host_segments and host_traces (the
    pinned host memory of PyTorch 2.14: a list of segments, a list of events);
    unknown_keys and unknown_actions (name -> count), warned about."""

    trace_label = "device_traces[{}]"
    seg_label = "segments"

    def __init__(self, obj):
        self.settings = {}
        self.external_annotations, self.host_segments, self.host_traces = [], [], []
        self.unknown_keys, self.unknown_actions = [], {}
        if isinstance(obj, list):  # torch.cuda.memory_snapshot(): the segments alone
            self.legacy, self.traces, self.segments = True, [], obj
        elif isinstance(obj, dict):
            self.legacy = False
            if "segments" not in obj and "device_traces" not in obj:
                keys = ", ".join(repr(k) for k in list(obj)[:6])
                raise SnapshotError(f"a dict without 'segments' or 'device_traces' (keys: {keys or 'none'}): "
                                    "not a PyTorch memory snapshot")
            self.traces = obj.get("device_traces", [])
            if not isinstance(self.traces, list) or not all(isinstance(t, list) for t in self.traces):
                raise SnapshotError("'device_traces' is not a list of lists")
            self.segments = obj.get("segments", [])
            if not isinstance(self.segments, list):
                raise SnapshotError("'segments' is not a list")
            if isinstance(obj.get("allocator_settings"), dict):
                self.settings = obj["allocator_settings"]
            self._read_2_14(obj)
        else:
            raise SnapshotError(f"top level is a {type(obj).__name__}, expected a dict "
                                "(torch.cuda.memory._snapshot()) or a list of segments "
                                "(torch.cuda.memory_snapshot())")
        self.state_only = not any(self.traces)
        self.seg_devices = set()
        for i, s in enumerate(self.segments):
            if not isinstance(s, dict):
                raise SnapshotError(f"segments[{i}]: not a dict")
            dev = _int(s, "device", f"segments[{i}]", default=0)
            if dev > DEVICE_MAX:
                raise SnapshotError(f"segments[{i}]: field 'device' = {dev} out of range (a trace holds 0 to "
                                    f"{DEVICE_MAX})")
            self.seg_devices.add(dev)

    def release_events(self):
        """Drops the pickle's event dicts once every Device has read its own
        (the biggest part of a big snapshot's memory); which devices had events
        is kept (event_devices)."""
        self.traces = [[None] if t else [] for t in self.traces]

    def _read_2_14(self, obj):
        """external_annotations, host_segments, host_traces; the unknown keys."""
        self.unknown_keys = [k for k in obj if k not in KNOWN_KEYS]
        ann = obj.get("external_annotations", [])
        if not isinstance(ann, list) or not all(isinstance(a, dict) for a in ann):
            raise SnapshotError("'external_annotations' is not a list of dicts")
        self.external_annotations = ann
        hs = obj.get("host_segments", [])
        if not isinstance(hs, list) or not all(isinstance(x, dict) for x in hs):
            raise SnapshotError("'host_segments' is not a list of dicts (segments)")
        self.host_segments = hs
        ht = obj.get("host_traces", [])
        if not isinstance(ht, list):
            raise SnapshotError("'host_traces' is not a list")
        if ht and all(isinstance(x, list) for x in ht):   # one list per host allocator: merged by time
            ht = [e for _, _, e in heapq.merge(*[[(_time_key(e), i, e) for i, e in enumerate(t)] for t in ht],
                                               key=lambda x: (x[0], x[1]))]
        self.host_traces = ht

    def has_host(self):
        return bool(self.host_segments or self.host_traces)

    def cuda_devices(self):
        """The CUDA device indices with events or segments, lowest first."""
        return sorted(set(self.event_devices()) | self.seg_devices)

    def host_device(self):
        """The trace device index of the pinned host memory: the largest CUDA index + 1 (0 without one)."""
        cuda = self.cuda_devices()
        return cuda[-1] + 1 if cuda else 0

    def host_view(self):
        """The host memory as a one-device snapshot (device 0) that Device reads."""
        view = Snapshot.__new__(Snapshot)
        view.settings, view.legacy = {}, False
        view.traces = [self.host_traces]
        view.segments = [dict(x, device=0) for x in self.host_segments]
        view.state_only = not self.host_traces
        view.external_annotations, view.host_segments, view.host_traces = [], [], []
        view.unknown_keys, view.unknown_actions = [], self.unknown_actions
        view.trace_label, view.seg_label = "host_traces", "host_segments"
        return view

    def event_devices(self):
        return [i for i, t in enumerate(self.traces) if t]

    def default_device(self):
        evd = self.event_devices()
        if evd:
            return evd[0]
        return min(self.seg_devices, default=0)

    def check_device(self, device):
        if device in self.seg_devices or 0 <= device < len(self.traces) or (
                device == 0 and not self.traces and not self.seg_devices and not self.has_host()) or (
                self.has_host() and device == self.host_device()):
            return
        host = f" and host memory as device {self.host_device()}" if self.has_host() else ""
        raise SnapshotError(f"--device {device}: the snapshot has traces for {len(self.traces)} device(s) and "
                            f"segments on device(s) {sorted(self.seg_devices) or 'none'}{host}")

    def all_devices(self):
        """The CUDA devices to import (all: [0] for an empty snapshot without host memory)."""
        devs = self.cuda_devices()
        return devs or ([] if self.has_host() else [0])


# ---- stack frames ------------------------------------------------------------------------

class _FrameParser:
    """PyTorch frame lists -> tuples of (file, line, name), innermost first.
    Snapshots share frame lists and dicts between events: both are cached by
    identity (the snapshot keeps them alive)."""

    def __init__(self):
        self.lists = {}
        self.dicts = {}

    def frame(self, f, where):
        got = self.dicts.get(id(f))
        if got is not None:
            return got[1]
        if not isinstance(f, dict):
            raise SnapshotError(f"{where}: a frame is not a dict")
        name, filename, line = f.get("name", ""), f.get("filename", ""), f.get("line", 0)
        if not isinstance(name, str) or not isinstance(filename, str):
            raise SnapshotError(f"{where}: a frame's 'name' or 'filename' is not a string")
        if isinstance(line, bool) or not isinstance(line, int):
            raise SnapshotError(f"{where}: a frame's 'line' is not an integer")
        if not 0 <= line < 1 << 32:
            line = 0  # unknown
        # a NUL cannot be written (C strings; the format refuses %00): U+FFFD instead
        name, filename = name.replace("\0", "\ufffd"), filename.replace("\0", "\ufffd")
        fr = ("" if filename == "??" else filename, line, name)
        self.dicts[id(f)] = (f, fr)
        return fr

    def frames(self, frames, where):
        """frames: a list of frame dicts or None (absent)."""
        if frames is None:
            return ()
        got = self.lists.get(id(frames))
        if got is not None:
            return got[1]
        if not isinstance(frames, list):
            raise SnapshotError(f"{where}: 'frames' is not a list")
        fr = tuple(self.frame(f, where) for f in frames)
        self.lists[id(frames)] = (frames, fr)
        return fr


def _pct(text, encode_blank):
    """Percent-encoding of the format (version 3): every byte that is a control
    byte, '%', >= 0x7f (UTF-8 of non-ASCII) or, when encode_blank, a blank."""
    if text.isascii() and text.isprintable() and "%" not in text and not (encode_blank and " " in text):
        return text
    out = []
    for b in text.encode("utf-8", "surrogatepass"):
        if b < 0x20 or b >= 0x7f or b == 0x25 or (b == 0x20 and encode_blank):
            out.append("%%%02X" % b)
        else:
            out.append(chr(b))
    return "".join(out)


def _cut(enc, room):
    """enc cut to at most room characters, never inside a %XX escape."""
    if len(enc) <= room:
        return enc
    enc = enc[:max(room, 0)]
    pct = enc.rfind("%", max(len(enc) - 2, 0))
    return enc[:pct] if pct >= 0 else enc


class Stacks:
    """Interned frame and stack lines, ids from 1 in the order first used."""

    def __init__(self):
        self.frame_ids = {}
        self.by_frame = {}   # (file, line, name) as given -> frame id
        self.frame_lines = []
        self.stack_ids = {}
        self.stack_lines = []
        self.by_tuple = {}   # id(frames tuple) -> (tuple, stack id)
        self.by_frames = {}  # frames tuple -> stack id

    def _frame_id(self, fr):
        fid = self.by_frame.get(fr)
        if fid is None:
            fid = self.by_frame[fr] = self._new_frame_id(fr)
        return fid

    def _new_frame_id(self, fr):
        filename, line, name = fr
        if filename == "":
            f = "-"
        elif filename == "-":
            f = "%2D"
        else:
            f = _pct(filename, True)
        n = _pct(name, False)
        if n[:1] == " ":   # leading and trailing blanks would be lost to the line's field rules
            n = "%20" + n[1:]
        if n[-1:] == " ":
            n = n[:-1] + "%20"
        head = f"frame {'9' * 10} {line} "   # the longest id: cuts do not depend on the count
        if len(head) + len(f) + 1 + len(n) > LINE_MAX:   # keep the line within the format's limit
            f = _cut(f, LINE_MAX - len(head) - 1) or "-"
            n = _cut(n, LINE_MAX - len(head) - len(f) - 1)
        key = (f, line, n)
        fid = self.frame_ids.get(key)
        if fid is None:
            fid = len(self.frame_lines) + 1
            self.frame_ids[key] = fid
            self.frame_lines.append(f"frame {fid} {line} {f} {n}".rstrip())
        return fid

    def stack_id(self, frames):
        """The stack id of a frames tuple (innermost first); 0 when empty."""
        if not frames:
            return 0
        got = self.by_tuple.get(id(frames))
        if got is not None:
            return got[1]
        sid = self.by_frames.get(frames)
        if sid is None:
            sid = self.by_frames[frames] = self._new_stack_id(frames)
        self.by_tuple[id(frames)] = (frames, sid)
        return sid

    def _new_stack_id(self, frames):
        ids = [self._frame_id(fr) for fr in frames[:STACK_FRAMES_MAX]]
        head = len(f"stack {len(self.stack_lines) + 1}")
        length = head + sum(len(str(i)) + 1 for i in ids)
        while length > LINE_MAX:   # cut the outermost frames
            length -= len(str(ids.pop())) + 1
        key = tuple(ids)
        sid = self.stack_ids.get(key)
        if sid is None:
            sid = len(self.stack_lines) + 1
            self.stack_ids[key] = sid
            self.stack_lines.append(f"stack {sid} " + " ".join(map(str, ids)))
        return sid


# ---- validation --------------------------------------------------------------------------

def _time_key(e):
    """An event's time_us for ordering, 0 when absent or not a number (checked later)."""
    t = e.get("time_us", 0) if isinstance(e, dict) else 0
    return t if isinstance(t, (int, float)) and not isinstance(t, bool) and t == t else 0


def _annotation(e, key, where, fp):
    """An annotation (dict: key, time_us, stage, name, frames) from PyTorch's
    `annotate` trace event (2.14: the text in 'user_metadata', frames of the
    annotation site) or an external_annotations entry ('name', 'stage' START or
    END). key orders it among its device's events."""
    name = e.get("name") or e.get("user_metadata") or ""
    name = name if isinstance(name, str) else repr(name)
    t = e.get("time_us", 0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1 << 63 or t != t:
        raise SnapshotError(f"{where}: 'time_us' is not a non-negative number (got {t!r:.40})")
    stage = e.get("stage")
    return {"key": key, "time_us": int(t), "stage": STAGES.get(stage, "mark") if isinstance(stage, str) else "mark",
            "name": name.replace("\0", "\ufffd"), "frames": fp.frames(e.get("frames"), where)}


def _events(snap, device, fp, annotations=None):
    """The kept events of one device, each a dict: action, addr, size, stream,
    time_us, index (position in the device's list), frames.
    Defaults for what older PyTorch versions did not write: time_us 0 (the
    first dict snapshots had no times; line order is kept), stream 0. oom
    events carry the device's free bytes in 'device_free' (every PyTorch
    version); they become the address field. 'frames' is absent on events
    recorded without context; 'cpp_frames' (C++ frames as strings, early
    versions), 'compile_context' and 'user_metadata' are ignored. `annotate`
    events go to annotations (a list, when given); unknown actions are counted
    in snap.unknown_actions and skipped."""
    events = []
    append = events.append
    trace = snap.traces[device] if device < len(snap.traces) else []
    lists, frames_of = fp.lists, fp.frames
    actions, dropped = frozenset(ACTIONS), frozenset(DROPPED_ACTIONS)
    top = 1 << 64
    label = snap.trace_label.format(device)
    for i, e in enumerate(trace):
        if not i & 0xFFFF:
            progress("reading events", i, len(trace))
        if type(e) is not dict:
            raise SnapshotError(f"{label}[{i}]: not a dict")
        action = e.get("action")
        # the common case checked inline (type() is int: no bool); anything else
        # takes the checks below, with their messages
        if type(action) is str and action in actions and action != "oom" and SYNTHETIC_KEY not in e:
            addr, size, stream, t = e.get("addr"), e.get("size"), e.get("stream", 0), e.get("time_us", 0)
            if (type(addr) is int and type(size) is int and type(stream) is int and type(t) is int and
                    0 <= addr < top and 0 <= size < top and 0 <= stream < top and 0 <= t < 1 << 63 and
                    (size or action != "alloc")):
                fr = e.get("frames")
                got = lists.get(id(fr)) if fr is not None else None
                append({"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t, "index": i,
                        "frames": got[1] if got is not None else frames_of(fr, f"{label}[{i}]")})
                continue
        where = f"{label}[{i}]"
        if not isinstance(action, str):
            raise SnapshotError(f"{where}: 'action' missing or not a string")
        if action in dropped or e.get(SYNTHETIC_KEY) is True:
            continue
        if action not in actions:
            if action == ANNOTATE:
                if annotations is not None:
                    annotations.append(_annotation(e, i, where, fp))
            else:   # a later PyTorch's action: warned about (convert), the rest imported
                snap.unknown_actions[action] = snap.unknown_actions.get(action, 0) + 1
            continue
        t = e.get("time_us", 0)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < 1 << 63 or t != t:
            raise SnapshotError(f"{where}: 'time_us' is not a non-negative number (got {t!r:.40})")
        if action == "oom" and "addr" not in e:
            addr = _int(e, "device_free", where, default=0)
        else:
            addr = _int(e, "addr", where)
        ev = {"action": action, "addr": addr, "size": _int(e, "size", where),
              "stream": _int(e, "stream", where, default=0), "time_us": int(t), "index": i,
              "frames": fp.frames(e.get("frames"), where)}
        if action == "alloc" and ev["size"] == 0:
            raise SnapshotError(f"{where}: alloc of 0 bytes")
        append(ev)
    return events


def _block_extras(b, bw, fp):
    """(requested_size, frames) of a block. Blocks of the early dict snapshots
    and of PyTorch 1.13 have neither field: a 'history' list (most recent
    allocation first, {addr, real_size, frames}) when recorded, else nothing;
    as PyTorch's viewer does, the first history entry then gives them, and
    without it the requested size is the block size."""
    hist = b.get("history")
    h0 = hist[0] if isinstance(hist, list) and hist and isinstance(hist[0], dict) else None
    if "requested_size" in b:
        req = _int(b, "requested_size", bw)
    elif h0 is not None and "real_size" in h0:
        req = _int(h0, "real_size", bw + ".history[0]")
    else:
        req = b.get("size", 0)
    if "frames" in b:
        frames = fp.frames(b["frames"], bw)
    elif h0 is not None:
        frames = fp.frames(h0.get("frames"), bw + ".history[0]")
    else:
        frames = ()
    return req, frames


def _segments(snap, device, fp):
    """The segments of one device, with their blocks. Defaults for older
    versions: 'device' 0 (absent: one device), 'stream' 0, 'is_expandable'
    False (before expandable segments existed), block 'address' counted from
    the segment's address (blocks tile their segment in order; PyTorch wrote
    no block address before 2.1), 'frames' [] (recorded without context)."""
    segs = []
    for i, s in enumerate(snap.segments):
        where = f"{snap.seg_label}[{i}]"
        if _int(s, "device", where, default=0) != device:
            continue
        seg = {"address": _int(s, "address", where), "total_size": _int(s, "total_size", where),
               "stream": _int(s, "stream", where, default=0), "blocks": [],
               "expandable": bool(s.get("is_expandable", False)),
               "frames": fp.frames(s.get("frames"), where), "pool": str(s.get("segment_type", "?"))[:16]}
        blocks = s.get("blocks", [])
        if not isinstance(blocks, list):
            raise SnapshotError(f"{where}: 'blocks' is not a list")
        addr = seg["address"]
        for j, b in enumerate(blocks):
            bw = f"{where}.blocks[{j}]"
            if not isinstance(b, dict) or not isinstance(b.get("state"), str):
                raise SnapshotError(f"{bw}: not a dict with a 'state' string")
            req, frames = _block_extras(b, bw, fp)
            blk = {"address": _int(b, "address", bw, default=addr), "size": _int(b, "size", bw, 1),
                   "requested_size": req, "state": b["state"], "frames": frames}
            if isinstance(req, bool) or not isinstance(req, int) or not 0 <= req < 1 << 64:
                raise SnapshotError(f"{bw}: requested size {req!r:.40} is not a byte count")
            # An expandable segment's blocks span its virtual range, which may
            # exceed the bytes mapped (total_size): only its start is checked.
            end = seg["address"] + seg["total_size"] if not seg["expandable"] else 1 << 64
            if not seg["address"] <= blk["address"] < blk["address"] + blk["size"] <= end:
                raise SnapshotError(f"{bw}: block lies outside its segment")
            addr = blk["address"] + blk["size"]
            seg["blocks"].append(blk)
        segs.append(seg)
    return segs


def infer_empty_cache(events, gc_enabled):
    """Inserts an `empty_cache` event before every run of consecutive
    segment_free / segment_unmap events that the program caused by emptying
    the cache: torch.cuda.empty_cache(), or PyTorch freeing its cache to retry
    a failed cudaMalloc (which leaves the same state). A run is not one when
      * an oom event follows it before any alloc/free event (the cache was
        freed for an allocation that failed anyway: the oom line records it),
      * garbage_collection_threshold is on and a segment_alloc (segment_map)
        follows it directly (the garbage collector freed idle blocks to make
        room for that allocation),
      * an empty_cache event is right before it (already explicit).
    Returns (events, number inserted)."""
    out = []
    n = 0
    i = 0
    frees = ("segment_free", "segment_unmap")
    while i < len(events):
        ev = events[i]
        if ev["action"] not in frees:
            out.append(ev)
            i += 1
            continue
        j = i
        while j < len(events) and events[j]["action"] in frees:
            j += 1
        explicit = bool(out) and out[-1]["action"] == "empty_cache"
        oom = False
        for k in range(j, len(events)):
            a = events[k]["action"]
            if a == "oom":
                oom = True
                break
            if a in ("alloc", "free_requested", "free_completed"):
                break
        gc = gc_enabled and j < len(events) and events[j]["action"] in ("segment_alloc", "segment_map")
        if not (explicit or oom or gc):
            out.append({"action": "empty_cache", "addr": 0, "size": 0, "stream": 0, "time_us": ev["time_us"],
                        "index": ev["index"] - 0.5, "frames": ()})
            n += 1
        out.extend(events[i:j])
        i = j
    return out, n


def drop_partial_releases(events, pre_allocs, pre_segs):
    """Removes the inferred `empty_cache` events (infer_empty_cache) before the
    runs of segment frees that left a segment of the device entirely free: a
    full release (torch.cuda.empty_cache(), or release_cached_blocks on PyTorch's
    out-of-memory path) frees every free segment that holds no allocation, in
    every pool and stream, so such a run freed only some of the cache: PyTorch's
    out-of-memory path with max_split_size set (release_available_cached_blocks:
    only enough of the largest free blocks for the allocation that failed), or
    the garbage collector. Replaying it as a full empty_cache would free more
    than PyTorch did (and make segments again later). An allocation is live from
    its alloc to its free_requested (a pending free is settled by a full release).
    Runs with expandable segments (segment_unmap) are left as they are.
    Returns (events, number dropped)."""
    starts = sorted(a for a, ps in pre_segs.items() if ps.get("kind", "segment_alloc") == "segment_alloc")
    size = {a: pre_segs[a]["size"] for a in starts}
    count = {a: 0 for a in starts}
    where = {}   # live allocation address -> its segment's start

    def seg_of(addr):
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and addr < starts[i] + size[starts[i]]:
            return starts[i]
        return None

    nfree = len(starts)   # segments holding no allocation

    def add(addr):
        nonlocal nfree
        sa = seg_of(addr)
        if sa is not None:
            where[addr] = sa
            nfree -= count[sa] == 0
            count[sa] += 1

    for addr in pre_allocs:
        add(addr)
    out, dropped = [], 0
    pending = None   # index in out of an inferred empty_cache whose run is being applied
    for ev in events:
        a = ev["action"]
        if pending is not None and a not in ("segment_free", "segment_unmap"):
            if nfree:
                del out[pending]
                dropped += 1
            pending = None
        if a == "empty_cache" and ev["index"] != int(ev["index"]):
            pending = len(out)
        elif a == "segment_unmap":
            pending = None
        elif a == "segment_alloc":
            if ev["addr"] in size:
                nfree -= count[ev["addr"]] == 0
            else:
                bisect.insort(starts, ev["addr"])
            size[ev["addr"]] = ev["size"]
            count[ev["addr"]] = 0
            nfree += 1
        elif a == "segment_free" and ev["addr"] in size:
            del starts[bisect.bisect_left(starts, ev["addr"])]
            nfree -= count.pop(ev["addr"]) == 0
            del size[ev["addr"]]
        elif a == "alloc":
            add(ev["addr"])
        elif a == "free_requested" and ev["addr"] in where:
            sa = where.pop(ev["addr"])
            if sa in count:
                count[sa] -= 1
                nfree += count[sa] == 0
        out.append(ev)
    if pending is not None and nfree:
        del out[pending]
        dropped += 1
    return out, dropped


# ---- allocator settings -> meta config -----------------------------------------------------

def _lex_conf(text):
    """PYTORCH_CUDA_ALLOC_CONF tokens: , : [ ] each alone, blanks dropped."""
    toks, cur = [], ""
    for ch in text:
        if ch in ",:[]":
            if cur:
                toks.append(cur)
            toks.append(ch)
            cur = ""
        elif not ch.isspace():
            cur += ch
    if cur:
        toks.append(cur)
    return toks


def _pow2(v):
    return v > 0 and v & (v - 1) == 0


def _divisions_list(toks, i):
    """roundup_power2_divisions value at toks[i]: a number, or [mb:div,...,>:div]
    with PyTorch's semantics (the first listed interval also covers the smaller
    ones, '>' every interval from the last listed one). (16 divisions, next i)."""
    pt = [0] * ROUNDUP_INTERVALS
    if toks[i] != "[":
        d = int(toks[i])
        if d and not _pow2(d):
            raise ValueError("divisions must be 0 or a power of two")
        return [d] * ROUNDUP_INTERVALS, i + 1
    first, last = True, 0
    i += 1
    while toks[i] != "]":
        iv, colon, dv = toks[i], toks[i + 1], toks[i + 2]
        d = int(dv)
        if colon != ":" or (d and not _pow2(d)):
            raise ValueError("expected size_mb:divisions, divisions 0 or a power of two")
        if iv == ">":
            for k in range(last, ROUNDUP_INTERVALS):
                pt[k] = d
        else:
            mb = int(iv)
            if not _pow2(mb):
                raise ValueError("interval sizes must be powers of two (MiB)")
            idx = min(mb.bit_length() - 1, ROUNDUP_INTERVALS - 1)
            if first:
                for k in range(idx):
                    pt[k] = d
                first = False
            pt[idx] = d
            last = idx
        i += 3
        if toks[i] == ",":
            i += 1
    return pt, i + 1


def _parse_conf(text, warn):
    """The device-allocator keys of a PYTORCH_CUDA_ALLOC_CONF string that
    mnemo's parser accepts: {key: value}. Other keys (backend, pinned_*,
    release_lock_on_cudamalloc, ...) are skipped; a bad value is warned about
    and skipped (PyTorch would have refused it at startup)."""
    out = {}
    toks = _lex_conf(text) + ["", "", ""]
    i = 0
    while i < len(toks) and toks[i]:
        key = toks[i]
        if key == ",":
            i += 1
            continue
        try:
            if toks[i + 1] != ":":
                raise ValueError("expected key:value")
            v = toks[i + 2]
            if key in ("max_split_size_mb", "max_non_split_rounding_mb"):
                if not v.isdigit():
                    raise ValueError("expected a whole number of MiB")
                out[key] = max(int(v), LARGE_BUFFER // MIB)
                i += 3
            elif key == "garbage_collection_threshold":
                d = float(v)
                if not 0.0 < d < 1.0:
                    raise ValueError("must be in (0, 1)")
                out[key] = d
                i += 3
            elif key == "expandable_segments":
                if v not in ("True", "true", "1", "False", "false", "0"):
                    raise ValueError("expected True or False")
                out[key] = v in ("True", "true", "1")
                i += 3
            elif key == "roundup_power2_divisions":
                out[key], i = _divisions_list(toks, i + 2)
            else:   # a key with no effect on the device allocator's layout: skip its value
                i += 3
                if toks[i - 1] == "[":
                    while i < len(toks) and toks[i] not in ("]", ""):
                        i += 1
                    i += 1
        except (ValueError, IndexError) as e:
            warn(f"allocator settings: PYTORCH_CUDA_ALLOC_CONF '{text:.80}': key '{key:.40}' ignored ({e})")
            while i < len(toks) and toks[i] not in (",", ""):
                i += 1
    return out


def _fmt_double(v):
    """The shortest %g form that reads back to v (as mn_caching_config_format)."""
    for prec in range(6, 18):
        s = "%.*g" % (prec, v)
        if float(s) == v:
            return s
    return repr(v)


def alloc_config(settings, warn):
    """PyTorch's allocator settings -> mnemo's config string (PYTORCH_CUDA_ALLOC_CONF
    syntax, mn_caching_config_format's key order), holding only the keys that
    change the device allocator: max_split_size_mb, max_non_split_rounding_mb,
    garbage_collection_threshold, roundup_power2_divisions, expandable_segments.
    "" for PyTorch's defaults. The structured fields of allocator_settings
    (the values in effect) win over the PYTORCH_CUDA_ALLOC_CONF string, which
    fills in what they lack: max_split_size is in bytes (-1, i.e. SIZE_MAX,
    when unset), roundup_power2_divisions a dict of interval (MiB, '1' ..
    '32768') -> divisions (all 0: unset)."""
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF", "")
    vals = _parse_conf(conf if isinstance(conf, str) else "", warn)

    def num(key):
        v = settings.get(key)
        return None if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v else v

    mss = num("max_split_size")
    if isinstance(mss, int):
        vals.pop("max_split_size_mb", None)
        if 0 <= mss < (1 << 63) - 1:
            vals["max_split_size_mb"] = max(-(-mss // MIB), LARGE_BUFFER // MIB)
    mnsr = num("max_non_split_rounding")   # not in any snapshot yet; bytes if a version adds it
    if isinstance(mnsr, int) and 0 <= mnsr < (1 << 63) - 1:
        vals["max_non_split_rounding_mb"] = max(-(-mnsr // MIB), LARGE_BUFFER // MIB)
    gc = num("garbage_collection_threshold")
    if gc is not None:
        vals.pop("garbage_collection_threshold", None)
        if 0.0 < gc < 1.0:
            vals["garbage_collection_threshold"] = float(gc)
        elif gc != 0:
            warn(f"allocator settings: garbage_collection_threshold {gc} is outside (0, 1); ignored")
    exp = settings.get("expandable_segments")
    if isinstance(exp, (bool, int)):
        vals["expandable_segments"] = bool(exp)
    rd = settings.get("roundup_power2_divisions")
    if isinstance(rd, dict):
        pt = [0] * ROUNDUP_INTERVALS
        try:
            for k, v in rd.items():
                k = int(k)
                if not _pow2(k) or k > 1 << (ROUNDUP_INTERVALS - 1):
                    raise ValueError(f"interval {k}")
                if isinstance(v, bool) or not isinstance(v, int) or (v and not _pow2(v)):
                    raise ValueError(f"divisions {v!r:.20}")
                pt[k.bit_length() - 1] = v
            vals["roundup_power2_divisions"] = pt
        except (ValueError, TypeError, OverflowError) as e:
            warn(f"allocator settings: roundup_power2_divisions ignored ({e})")
    parts = []
    if "max_split_size_mb" in vals:
        parts.append(f"max_split_size_mb:{vals['max_split_size_mb']}")
    if vals.get("max_non_split_rounding_mb", LARGE_BUFFER // MIB) != LARGE_BUFFER // MIB:
        parts.append(f"max_non_split_rounding_mb:{vals['max_non_split_rounding_mb']}")
    if "garbage_collection_threshold" in vals:
        parts.append("garbage_collection_threshold:" + _fmt_double(vals["garbage_collection_threshold"]))
    pt = vals.get("roundup_power2_divisions")
    if pt and any(pt):
        if all(d == pt[0] for d in pt):
            parts.append(f"roundup_power2_divisions:{pt[0]}")
        else:
            parts.append("roundup_power2_divisions:[" + ",".join(f"{1 << k}:{d}" for k, d in enumerate(pt)) + "]")
    if vals.get("expandable_segments"):
        parts.append("expandable_segments:True")
    return ",".join(parts)


def gc_enabled(settings):
    """Whether the run's garbage collector was on (garbage_collection_threshold > 0)."""
    gc = settings.get("garbage_collection_threshold")
    if isinstance(gc, (int, float)) and not isinstance(gc, bool):
        return gc > 0
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return "garbage_collection_threshold" in _parse_conf(conf if isinstance(conf, str) else "", lambda m: None)


# ---- the state before recording ----------------------------------------------------------

class _Ranges:
    """Disjoint address ranges [start, end) with a stream and frames each."""

    def __init__(self):
        self.r = []   # sorted [start, end, stream, frames]

    def add(self, start, end, stream, frames):
        self.remove(start, end)
        bisect.insort(self.r, [start, end, stream, frames])

    def remove(self, start, end):
        """Returns the bytes of [start, end) that were in the set."""
        removed = 0
        out = []
        for s, e, st, fr in self.r:
            if e <= start or s >= end:
                out.append([s, e, st, fr])
                continue
            removed += min(e, end) - max(s, start)
            if s < start:
                out.append([s, start, st, fr])
            if e > end:
                out.append([end, e, st, fr])
        self.r = out
        return removed

    def merged(self):
        """Contiguous ranges of one stream joined: [start, end, stream, frames]."""
        out = []
        for s, e, st, fr in self.r:
            if out and out[-1][1] == s and out[-1][2] == st:
                out[-1][1] = e
            else:
                out.append([s, e, st, fr])
        return out


def reconstruct_pre(events, segs, warn):
    """The allocations and segments alive before the first event."""
    live = {}           # address -> its alloc event
    seen = set()        # addresses allocated or freed so far
    pre_allocs = {}     # address -> dict(size, block_size, stream, freed, frames)
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
                                          "stream": ev["stream"], "freed": True, "frames": ()}
    allocated_in_trace = {ev["addr"] for ev in events if ev["action"] == "alloc"}
    for s in segs:
        for b in s["blocks"]:
            if b["state"] not in LIVE_STATES or b["address"] in live:
                continue
            if b["address"] in pre_allocs or b["address"] in allocated_in_trace:
                warn(f"block 0x{b['address']:x} alive at dump time was freed by the trace; skipped")
                continue
            pre_allocs[b["address"]] = {"size": b["requested_size"] or b["size"],
                                        "block_size": b["size"], "stream": s["stream"], "freed": False,
                                        "frames": b["frames"]}
    seg_by_addr = {s["address"]: s for s in segs if not s["expandable"]}

    seg_alive = {}
    pre_segs = {}
    for ev in events:
        a = ev["action"]
        if a == "segment_alloc":
            seg_alive[ev["addr"]] = True
        elif a == "segment_free":
            if ev["addr"] not in seg_alive and ev["addr"] not in pre_segs:
                pre_segs[ev["addr"]] = {"size": ev["size"], "stream": ev["stream"], "kind": "segment_alloc",
                                        "frames": ()}
            seg_alive.pop(ev["addr"], None)
    traced_segs = {ev["addr"] for ev in events if ev["action"] == "segment_alloc"}
    for addr, s in seg_by_addr.items():
        if addr not in traced_segs and addr not in pre_segs:
            pre_segs[addr] = {"size": s["total_size"], "stream": s["stream"], "kind": "segment_alloc",
                              "frames": s["frames"]}
    # Expandable segments: the dump holds each contiguous mapped range as a
    # segment; undoing the trace's map/unmap events from the last to the first
    # gives the ranges mapped before recording.
    mapped = _Ranges()
    for s in segs:
        if s["expandable"] and s["total_size"]:
            mapped.add(s["address"], s["address"] + s["total_size"], s["stream"], s["frames"])
    for ev in reversed(events):
        a = ev["action"]
        if a == "segment_map":
            got = mapped.remove(ev["addr"], ev["addr"] + ev["size"])
            if got != ev["size"]:
                warn(f"device trace event {ev['index']}: segment_map of 0x{ev['addr']:x} (+{ev['size']}) "
                     f"is not mapped at the dump nor unmapped later ({got} of its bytes are)")
        elif a == "segment_unmap":
            mapped.add(ev["addr"], ev["addr"] + ev["size"], ev["stream"], ())
    for start, end, stream, frames in mapped.merged():
        if start in pre_segs:
            raise SnapshotError(f"0x{start:x} is both a segment and an expandable mapping")
        pre_segs[start] = {"size": end - start, "stream": stream, "kind": "segment_map", "frames": frames}
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
        # ends: block end -> block start, to find a freed block's left neighbour
        self.segs[addr] = {"size": size, "blocks": blocks, "ends": {a + b[0]: a for a, b in blocks.items()}}

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
        seg = self._segment(addr)
        blocks = seg["blocks"]
        b = blocks.get(addr)
        size = round_size(requested)
        if b is None or b[1] or b[0] < size:
            raise ValueError(f"alloc at 0x{addr:x} does not start a free block of {size} bytes")
        rem = b[0] - size
        if (size <= SMALL_SIZE and rem >= MIN_BLOCK) or (size > SMALL_SIZE and rem > SMALL_SIZE):
            blocks[addr + size] = [rem, False]
            ends = seg["ends"]
            ends[addr + b[0]] = addr + size
            ends[addr + size] = addr
            b[0] = size
        b[1] = True
        return b[0]

    def free(self, addr):
        seg = self._segment(addr)
        blocks, ends = seg["blocks"], seg["ends"]
        b = blocks.get(addr)
        if b is None or not b[1]:
            raise ValueError(f"free of 0x{addr:x}, which is not an allocated block")
        b[1] = False
        size = b[0]
        nxt = blocks.get(addr + size)
        if nxt is not None and not nxt[1]:
            del ends[addr + size]
            b[0] += blocks.pop(addr + size)[0]
            ends[addr + b[0]] = addr
        prev = ends.get(addr)
        if prev is not None and not blocks[prev][1]:
            del ends[addr]
            p = blocks[prev]
            p[0] += blocks.pop(addr)[0]
            ends[prev + p[0]] = prev
        return size


def _pre_blocks(seg_addr, seg_size, allocs):
    """Blocks of a pre-existing segment at time 0: its live blocks and the free
    gaps between them (merged, as PyTorch leaves them)."""
    blocks = {}
    p, end = seg_addr, seg_addr + seg_size
    for addr, pa in sorted(allocs, key=lambda x: x[0]):
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
    progress("PyTorch's figures")
    reserved = sum(s["size"] for s in pre_segs.values())
    fig["torch_reserved_start"] = reserved
    peak_res = reserved
    requested = sum(pa["size"] for pa in pre_allocs.values())
    peak_req = requested
    live_req = {}
    nsa = nsf = nooms = 0
    for ev in events:   # one pass: reserved, requested, counts (peaks move only when they grow)
        a = ev["action"]
        if a == "alloc":
            live_req[ev["addr"]] = ev["size"]
            requested += ev["size"]
            if requested > peak_req:
                peak_req = requested
        elif a == "free_requested":
            requested -= live_req.pop(ev["addr"], None) or pre_allocs[ev["addr"]]["size"]
        elif a == "segment_alloc" or a == "segment_map":
            reserved += ev["size"]
            nsa += a == "segment_alloc"
            if reserved > peak_res:
                peak_res = reserved
        elif a == "segment_free" or a == "segment_unmap":
            reserved -= ev["size"]
            nsf += a == "segment_free"
        elif a == "oom":
            nooms += 1
    fig["torch_peak_reserved"] = peak_res
    fig["torch_segment_allocs"] = nsa
    fig["torch_segment_frees"] = nsf
    fig["torch_ooms"] = nooms
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
        progress("PyTorch's block layout")
        lalloc, lfree = layout.alloc, layout.free
        for ev in events:
            a = ev["action"]
            if a == "alloc":
                bs = block_sizes[ev["index"]] = lalloc(ev["addr"], ev["size"])
                allocated += bs
                if allocated > peak:
                    peak = allocated
            elif a == "free_completed":
                allocated -= lfree(ev["addr"])
            elif a == "segment_alloc":
                layout.add_segment(ev["addr"], ev["size"], {ev["addr"]: [ev["size"], False]})
            elif a == "segment_free":
                layout.remove_segment(ev["addr"])
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
            "torch_allocated_method", "torch_empty_cache_points")


class Device:
    """One device of a snapshot, analysed: what the trace writers take."""

    def __init__(self, snap, device, fp, warn, index=None):
        """index: the trace device index to write (device by default; the host
        memory's view is device 0 of its own snapshot)."""
        self.device = device if index is None else index
        self.host = index is not None
        self.annotations = []
        events = _events(snap, device, fp, self.annotations)
        segs = _segments(snap, device, fp)
        self.events, _ = infer_empty_cache(events, gc_enabled(snap.settings))
        self.pre_allocs, self.pre_segs = reconstruct_pre(self.events, segs, warn)
        self.events, _ = drop_partial_releases(self.events, self.pre_allocs, self.pre_segs)
        self.fig, self.block_sizes = torch_figures(self.events, segs, self.pre_allocs, self.pre_segs)
        # empty_cache lines: inferred here, or explicit (mnemo recordings exported to PyTorch's form)
        self.fig["torch_empty_cache_points"] = sum(ev["action"] == "empty_cache" for ev in self.events)
        if snap.state_only:
            # No events: reserved = the dump's segments, allocated = its live blocks' sizes.
            self.fig["torch_allocated_method"] = "state (live block sizes of the dump; no trace events)"

    def add_external(self, anns, fp):
        """external_annotations entries of this device: placed after its events of
        the same or an earlier time (they carry no position in the trace)."""
        times = [ev["time_us"] for ev in self.events]
        for i, a in anns:
            got = _annotation(a, 0, f"external_annotations[{i}]", fp)
            k = bisect.bisect_right(times, got["time_us"])
            got["key"] = self.events[k - 1]["index"] + 0.25 if k else -1
            self.annotations.append(got)
        self.annotations.sort(key=lambda a: a["key"])

    def annotation_items(self, origin):
        """(position, annotation) pairs: position = how many of this device's
        events (self.events order) come before it."""
        keys = [ev["index"] for ev in self.events]
        return [(bisect.bisect_right(keys, a["key"]), a) for a in self.annotations]

    def pre_records(self, dev):
        """(kind, record) of the pre lines, segments then allocations, address order."""
        segs = [("pre", ps.get("kind", "segment_alloc"), ps["stream"], addr, ps["size"], None, 0, dev, ps["frames"])
                for addr, ps in sorted(self.pre_segs.items())]
        allocs = [("pre", "alloc", pa["stream"], addr, pa["size"], pa["block_size"] or None, pa["block_size"], dev,
                   pa["frames"]) for addr, pa in sorted(self.pre_allocs.items())]
        return segs, allocs

    def event_records(self, dev, origin):
        get = self.block_sizes.get
        return [(t if t > 0 else 0, ev["action"], ev["stream"], ev["addr"], ev["size"], bs, bs or 0, dev, ev["frames"])
                for ev in self.events for t, bs in ((ev["time_us"] - origin, get(ev["index"])),)]


# ---- writing ---------------------------------------------------------------------------

def _header(version, how, fields, source, snap, device_meta, origin, warn):
    """The first lines every converted trace starts with: version, comments,
    source, recorder, devices (device_meta: meta lines), time origin, alloc conf."""
    conf = snap.settings.get("PYTORCH_CUDA_ALLOC_CONF", "")
    conf = conf if isinstance(conf, str) else ""
    lines = ([f"mnemo-trace {version}",
              f"# converted by tools/import_torch_snapshot.py{how} from a PyTorch memory snapshot",
              f"# sizes in bytes; times in microseconds since the first event{fields}",
              _meta_line("source", os.path.basename(source)),
              "meta recorded_by pytorch"] + device_meta +
             [f"meta time_origin_us {origin}",
              _meta_line("torch_alloc_conf", " ".join(conf.split()), warn),
              f"meta config {alloc_config(snap.settings, warn)}".rstrip()])
    if snap.state_only and not snap.host_traces:
        lines.append("meta state_only 1")
    return lines


def _meta_value(s):
    """A meta value: any byte but NUL and CR/LF (the format's rule; those are
    dropped), as UTF-8 (what cannot be encoded is written as a backslash escape)."""
    s = "".join(ch for ch in s if ch not in "\0\r\n")
    return s.encode("utf-8", "backslashreplace").decode("utf-8")


def _meta_line(key, value, warn=None):
    """`meta <key> <value>` within the format's LINE_MAX bytes: a longer value
    (a huge allocator-settings string, say) is cut at a character boundary,
    with a warning when warn is given."""
    line = f"meta {key} {_meta_value(value)}".rstrip()
    raw = line.encode("utf-8")
    if len(raw) <= LINE_MAX:
        return line
    if warn:
        warn(f"meta {key}: the value ({len(raw) - len(key) - 6} bytes) is cut to the trace line's {LINE_MAX} bytes")
    return raw[:LINE_MAX].decode("utf-8", "ignore").rstrip()


def _check_lines(lines):
    """The trace text of lines, checked to stay within the format
    (docs/TRACE_FORMAT.md): no line over LINE_MAX bytes, no NUL or CR;
    SnapshotError (nothing is written) otherwise: never a trace the reader refuses."""
    if max(map(len, lines), default=0) > LINE_MAX // 4:   # a UTF-8 character is at most 4 bytes
        for n, line in enumerate(lines, 1):
            if len(line) > LINE_MAX // 4 and len(line.encode("utf-8", "surrogatepass")) > LINE_MAX:
                raise SnapshotError(f"line {n} of the trace would be over {LINE_MAX} bytes ({line[:40]!r}...)")
    text = "\n".join(lines) + "\n"
    if "\0" in text or "\r" in text:
        raise SnapshotError("the trace would hold a NUL byte or a carriage return")
    return text


def _format_records(records, version, stacks):
    """Trace lines of (time|'pre', action, stream, addr, size, bs_v1, bs, dev, frames)
    records. Version 1: block size only where known; 2: block size and device;
    3: block size, device and stack id."""
    progress("writing the trace")
    if version == 1:
        return [f"{tag} {action} {stream} 0x{addr:x} {size}" + (f" {bs1}" if bs1 else "")
                for tag, action, stream, addr, size, bs1, bs, dev, frames in records]
    if version == 2:
        return [f"{tag} {action} {stream} 0x{addr:x} {size} {bs} {dev}"
                for tag, action, stream, addr, size, bs1, bs, dev, frames in records]
    sid = stacks.stack_id
    return [f"{tag} {action} {stream} 0x{addr:x} {size} {bs} {dev} {sid(frames)}"
            for tag, action, stream, addr, size, bs1, bs, dev, frames in records]


def _with_stacks(records):
    """A Stacks table interning every record's frames (empty: no frames anywhere)."""
    stacks = Stacks()
    sid = stacks.stack_id
    for r in records:
        sid(r[8])
    return stacks


def _merge_events(devs, origin):
    """The event records of several devices interleaved by time (ties: lowest
    device first); each device's events stay in their own order even where its
    times go backwards."""
    per_dev = [[(ev["time_us"], d.device, rec) for ev, rec in zip(d.events, d.event_records(d.device, origin))]
               for d in devs]
    return [m[2] for m in heapq.merge(*per_dev, key=lambda m: (m[0], m[1]))]


def _merge_annotated(devs, origin, multi):
    """(event records, [(position among the event records, device, annotation)]):
    _merge_events with each device's annotations carried along in their places."""
    per_dev = []
    for d in devs:
        dev = d.device if multi else 0
        ann, j, items = d.annotation_items(origin), 0, []
        for i, (ev, rec) in enumerate(zip(d.events, d.event_records(dev, origin))):
            while j < len(ann) and ann[j][0] <= i:
                items.append((ann[j][1]["time_us"], d.device, 1, (dev, ann[j][1])))
                j += 1
            items.append((ev["time_us"], d.device, 0, rec))
        items += [(a["time_us"], d.device, 1, (dev, a)) for _, a in ann[j:]]
        per_dev.append(items)
    evs, anns = [], []
    for _, _, kind, x in heapq.merge(*per_dev, key=lambda m: (m[0], m[1])):
        if kind:
            anns.append((len(evs), x[0], x[1]))
        else:
            evs.append(x)
    return evs, anns


def _annotation_line(t, dev, a, stacks):
    """`annotate <time_us> <device> <stage> <stack> <name>`, the name encoded as
    a frame name and cut to the line's LINE_MAX bytes."""
    head = f"annotate {t} {dev} {a['stage']} {stacks.stack_id(a['frames'])}"
    n = _pct(a["name"], False)
    if n[:1] == " ":
        n = "%20" + n[1:]
    if n[-1:] == " ":
        n = n[:-1] + "%20"
    n = _cut(n, LINE_MAX - len(head) - 1)
    return f"{head} {n}".rstrip()


def trace_text(source, snap, devs, multi, warn):
    """The trace of analysed devices (Device objects, lowest first, the host
    memory last): version 1 (one device, index 0) or 2 (multi), 3 when any line
    has frames, 4 when there are annotations."""
    origin = min((d.events[0]["time_us"] for d in devs if d.events), default=0)
    pre_s, pre_a, evs = [], [], []
    for d in devs:
        s, a = d.pre_records(d.device if multi else 0)
        pre_s += s
        pre_a += a
    anns = []
    if any(d.annotations for d in devs):
        evs, anns = _merge_annotated(devs, origin, multi)
    elif multi:
        evs = _merge_events(devs, origin)
    else:
        evs = devs[0].event_records(0, origin)
    records = pre_s + pre_a + evs
    stacks = _with_stacks(records)
    for _, _, a in anns:
        stacks.stack_id(a["frames"])
    version = 4 if anns else 3 if stacks.stack_lines else (2 if multi else FORMAT_VERSION)
    fields = "; last fields: block size, device, stack" if version >= 3 else (
        "; last field: device" if multi else "")
    cuda = [d for d in devs if not d.host]
    if multi:
        device_meta = [f"meta device {devs[0].device}", "meta devices " + " ".join(str(d.device) for d in cuda)]
        if len(device_meta[1]) > LINE_MAX:
            raise SnapshotError(f"{len(devs)} devices do not fit the trace's one 'meta devices' line "
                                f"({LINE_MAX} bytes); import them one --device at a time")
        device_meta[1] = device_meta[1].rstrip()
        device_meta += [f"meta host_device {d.device}" for d in devs if d.host]
        lines = _header(version, "", fields, source, snap, device_meta, origin, warn)
        for key in FIG_KEYS:  # the plain keys describe the lowest device (what replay picks by default)
            lines.append(f"meta {key} {devs[0].fig[key]}")
        for d in devs:
            for key in FIG_KEYS:
                lines.append(f"meta dev{d.device}.{key} {d.fig[key]}")
    else:
        lines = _header(version, "", fields, source, snap, [f"meta device {devs[0].device}"], origin, warn)
        for key in FIG_KEYS:
            lines.append(f"meta {key} {devs[0].fig[key]}")
    lines.append(f"meta pre_segments {len(pre_s)}")
    lines.append(f"meta pre_allocs {len(pre_a)}")
    lines += stacks.frame_lines + stacks.stack_lines
    body = _format_records(records, version, stacks)
    if anns:   # annotate lines in their places (positions among the event records)
        npre, out, k = len(pre_s) + len(pre_a), body[:len(pre_s) + len(pre_a)], 0
        for pos, dev, a in anns:
            out += body[npre + k:npre + pos]
            k = pos
            out.append(_annotation_line(max(a["time_us"] - origin, 0), dev, a, stacks))
        body = out + body[npre + k:]
    lines += body
    lines.append(f"end {len(records) + len(anns)}")
    return _check_lines(lines), version, stacks


def convert(data, device=None, source="snapshot.pickle", warn=lambda m: None, max_decompressed=MAX_DECOMPRESSED):
    """Snapshot bytes -> (trace text, [Device], version, Stacks). device: an
    index (one device; the host memory's index, the largest CUDA index + 1,
    picks it), or 'all' / None (every device with events or segments, and the
    pinned host memory). max_decompressed: the most bytes a gzip'ed snapshot
    may inflate to. SnapshotError on bad input; what this importer does not
    know (top-level keys, trace actions of a later PyTorch) goes to warn."""
    try:
        return _convert(data, device, source, warn, max_decompressed)
    except RecursionError:   # a structure deep enough to defeat a check: still malformed input
        raise SnapshotError("structure nested too deeply to process") from None


def _convert(data, device, source, warn, max_decompressed):
    snap = Snapshot(parse_bytes(data, max_decompressed))
    fp = _FrameParser()
    host = snap.host_device() if snap.has_host() else None
    if device in (None, "all"):
        devs = [Device(snap, d, fp, warn) for d in snap.all_devices()]
        if host is not None:
            devs.append(Device(snap.host_view(), 0, fp, warn, index=host))
    else:
        snap.check_device(device)
        devs = [Device(snap.host_view(), 0, fp, warn, index=host) if device == host else
                Device(snap, device, fp, warn)]
    by_dev = {d.device: d for d in devs if not d.host}
    ext = {}
    for i, a in enumerate(snap.external_annotations):
        dv = a.get("device", 0)
        if isinstance(dv, int) and not isinstance(dv, bool) and dv in by_dev:
            ext.setdefault(dv, []).append((i, a))
    for dv, anns in ext.items():
        by_dev[dv].add_external(anns, fp)
    for k in snap.unknown_keys:
        warn(f"unknown snapshot key {str(k)!r:.60} (a later PyTorch's?): ignored; the rest is imported")
    for name, n in sorted(snap.unknown_actions.items()):
        warn(f"unknown trace action {name!r:.60} in {n} event(s) (a later PyTorch's?): skipped; "
             "the rest is imported")
    # One CUDA device 0 stays version 1 as before; any other index is written as it is.
    multi = len(devs) > 1 or devs[0].device != 0 or devs[0].host
    snap.release_events()   # every Device has read its events
    text, version, stacks = trace_text(source, snap, devs, multi, warn)
    return text, devs, version, stacks


# ---- --table ---------------------------------------------------------------------------

def _human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024.0


def print_table(obj, blocks, out=sys.stdout):
    """The snapshot's segments, as `mnemo snapshot` prints its own."""
    snap = Snapshot(obj)
    fp = _FrameParser()
    rows = []
    for dev in sorted(snap.seg_devices):
        for s in _segments(snap, dev, fp):
            s["device"] = dev
            rows.append(s)
    rows.sort(key=lambda r: (r["device"], r["address"]))
    print(f"{'dev':>3} {'segment':<18} {'stream':<14} {'pool':<5} {'size':>12} {'allocated':>12} {'free':>12} "
          f"{'largest free':>12} {'blocks':>6} {'frag':>6}", file=out)
    tot = {}
    for r in rows:
        alloc = sum(b["size"] for b in r["blocks"] if b["state"] in LIVE_STATES)
        free = [b["size"] for b in r["blocks"] if b["state"] == "inactive"]
        fr, lf = sum(free), max(free, default=0)
        frag = 1 - lf / fr if fr else 0.0
        print(f"{r['device']:>3} 0x{r['address']:016x} {r['stream']:<14} {r['pool'][:5]:<5} "
              f"{_human(r['total_size']):>12} {_human(alloc):>12} {_human(fr):>12} {_human(lf):>12} "
              f"{len(r['blocks']):>6} {100 * frag:5.1f}%{' expandable' if r['expandable'] else ''}", file=out)
        if blocks:
            for b in r["blocks"]:
                print(f"    0x{b['address']:016x} {_human(b['size']):>12} {b['state']:<20} "
                      f"requested {_human(b['requested_size'])}", file=out)
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


# ---- command line ----------------------------------------------------------------------

def guarded(prog, path, fn):
    """(0, fn()), or (2, None) for a malformed snapshot and (1, None) for an
    I/O error, with the message printed."""
    try:
        return 0, fn()
    except SnapshotError as e:
        progress.clear()
        print(f"{prog}: {path}: malformed snapshot: {e}", file=sys.stderr)
        return 2, None
    except RecursionError:
        progress.clear()
        print(f"{prog}: {path}: malformed snapshot: structure nested too deeply to process", file=sys.stderr)
        return 2, None
    except OSError as e:
        progress.clear()
        print(f"{prog}: {e}", file=sys.stderr)
        return 1, None


def write_atomic(path, data):
    """Writes data (bytes) to path as mnemo's own writer does (docs/SAVE_FORMAT.md):
    through a symbolic link to the file it names (the link stays a link), a file
    replaced keeps its mode (and owner and group where allowed), a new file gets
    0666 less the umask; an unpredictable temporary file beside the target,
    fsync'd and renamed into place. OSError on failure (the temporary file removed)."""
    target = os.path.realpath(path)   # a dangling link: the file it names
    try:
        old = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None and not stat.S_ISREG(old.st_mode):
        raise OSError(errno.EINVAL, f"'{path}' is not a regular file")
    folder, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=base + ".tmp", dir=folder or ".")
    try:
        if old is not None:
            with contextlib.suppress(OSError):
                os.fchown(fd, old.st_uid, old.st_gid)
            mode = old.st_mode & 0o777
        else:
            mask = os.umask(0o22)   # read it back (single-threaded tool)
            os.umask(mask)
            mode = 0o666 & ~mask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_output(prog, path, text):
    """text to stdout ('-') or to path (write_atomic); 0, or 1 on an I/O error."""
    def to_file():
        if path == "-":
            sys.stdout.write(text)
            return
        write_atomic(path, text.encode("utf-8"))
    return guarded(prog, path, to_file)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a PyTorch memory snapshot to a mnemo trace.")
    ap.add_argument("snapshot", help="pickle (or .pickle.gz) written by torch.cuda.memory._dump_snapshot")
    ap.add_argument("-o", "--output", help="trace file to write ('-' for stdout)")
    ap.add_argument("--device", default=None,
                    help="one device index (the pinned host memory's is the largest CUDA index + 1), or 'all' "
                         "(the default: every device with events or segments, and the host memory)")
    ap.add_argument("--table", action="store_true", help="print the snapshot's segments instead")
    ap.add_argument("--blocks", action="store_true", help="with --table: every block too")
    ap.add_argument("--max-decompressed-size", metavar="BYTES", default=None,
                    help="the most bytes a .pickle.gz may inflate to (default 4G; K, M, G, T suffixes)")
    ap.add_argument("--progress", action="store_true",
                    help="show progress on stderr (one line, redrawn) once the import takes over a second")
    args = ap.parse_args(argv)
    if args.progress:
        progress.enable()
    # A snapshot is millions of small dicts and no reference cycles: the cyclic
    # garbage collector would walk them again and again for nothing.
    _gc.disable()
    cap = MAX_DECOMPRESSED
    if args.max_decompressed_size is not None:
        try:
            cap = parse_size(args.max_decompressed_size)
        except ValueError as e:
            ap.error(f"--max-decompressed-size: {e}")
    if not args.table and not args.output:
        ap.error("-o/--output is required (or --table)")
    if args.device not in (None, "all"):
        try:
            args.device = int(args.device)
        except ValueError:
            ap.error(f"--device must be an index or 'all', not {args.device!r}")
        if args.device < 0:
            ap.error(f"--device must be an index or 'all', not {args.device}")
    prog = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "import_torch_snapshot.py"

    def warn(msg):
        progress.clear()
        print(f"{prog}: warning: {msg}", file=sys.stderr)

    def read():
        with open(args.snapshot, "rb") as f:
            return f.read()

    if args.table:
        return guarded(prog, args.snapshot, lambda: print_table(parse_bytes(read(), cap), args.blocks))[0]
    rc, got = guarded(prog, args.snapshot,
                      lambda: convert(read(), args.device, args.snapshot, warn, cap))
    if rc:
        progress.clear()
        return rc
    text, devs, version, stacks = got
    progress("writing the trace")
    rc = write_output(prog, args.output, text)
    progress.clear()
    if rc:
        return rc
    gib = float(1 << 30)
    for d in devs:
        fig = d.fig
        what = f"host memory, device {d.device}" if d.host else f"device {d.device}"
        print(f"{args.snapshot} ({what}): {len(d.events)} events, {len(d.pre_allocs)} pre-existing "
              f"allocations in {len(d.pre_segs)} pre-existing segments; PyTorch: peak allocated "
              f"{fig['torch_peak_allocated'] / gib:.2f} GiB, peak reserved "
              f"{fig['torch_peak_reserved'] / gib:.2f} GiB "
              f"({fig['torch_peak_reserved'] / max(fig['torch_peak_allocated'], 1):.3f}), "
              f"{fig['torch_segment_allocs']} segment allocs, {fig['torch_empty_cache_points']} empty-cache points"
              + (f", {len(d.annotations)} annotations" if d.annotations else ""), file=sys.stderr)
    print(f"trace version {version}: {len(stacks.frame_lines)} frames, {len(stacks.stack_lines)} stacks",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
