#!/usr/bin/env python3
# tests/test_import.py: tests tools/import_torch_snapshot.py and tools/export_torch_snapshot.py
# on synthetic PyTorch snapshots and the bundled traces: every snapshot shape, stacks
# (format version 3), allocator settings, empty-cache points, errors, the round trip
# through the exporter, PyTorch's viewers on exported snapshots, and a mutation fuzz.
"""Usage: test_import.py IMPORTER [MNEMO_CLI]

IMPORTER is tools/import_torch_snapshot.py (the exporter is found next to it);
MNEMO_CLI (optional) is the built `mnemo` tool, used to check that the C reader,
replay, report and snapshot accept what the importer writes. Deterministic;
torch (1.13 here) runs its _memory_viz functions on exported snapshots.
"""

import bisect
import contextlib
import gzip
import importlib.util
import io
import os
import pickle
import random
import subprocess
import sys
import tempfile
import unittest

MiB = 1 << 20
IMPORTER = None
EXPORTER = None
CLI = None
imp = None   # the importer, loaded as a module
exp = None   # the exporter, loaded as a module
HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "data", "torch")
TRACES = os.path.join(HERE, "..", "data", "traces")


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_sample(name):
    with open(os.path.join(SAMPLES, name), "rb") as f:
        return pickle.load(f)


def ev(action, addr, size, stream=0, t=0):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
            "frames": [{"name": "f", "filename": "x.py", "line": 1}]}


def block(addr, size, requested, state):
    return {"address": addr, "size": size, "requested_size": requested, "state": state, "frames": []}


def segment(addr, total, blocks, stream=0, device=0, kind="large"):
    return {"device": device, "address": addr, "total_size": total, "allocated_size": 0, "active_size": 0,
            "requested_size": 0, "stream": stream, "segment_type": kind, "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks}


def example_snapshot():
    """A run with state before recording began:
    - segment S0 (20 MiB at 0x10000000) existed: P (10 MB, alive at dump, never in
      the trace) and Q (4 MiB, freed by the trace without being allocated in it);
    - the trace allocates a new 20 MiB segment S1 and in it A (10,240,000 B) and
      B (10,240,000 B: its 491,520 B remainder is not split, so its block is
      10,731,520 B), frees A, allocates C (1 MiB small) on stream 5 in a 2 MiB segment.
    """
    S0, S1, S2 = 0x10000000, 0x20000000, 0x30000000
    P, P_size = S0, 10485760  # the dump says P's block is 10 MiB (request 10,000,000)
    Q = S0 + P_size
    events = [
        ev("segment_alloc", S1, 20 * MiB, t=100),
        ev("alloc", S1, 10240000, t=101),
        ev("alloc", S1 + 10240000, 10240000, t=102),
        ev("free_requested", Q, 4 * MiB, t=103),
        ev("free_completed", Q, 4 * MiB, t=103),
        ev("free_requested", S1, 10240000, t=104),
        ev("free_completed", S1, 10240000, t=105),
        ev("segment_alloc", S2, 2 * MiB, stream=5, t=106),
        ev("alloc", S2, MiB, stream=5, t=107),
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 108},
    ]
    segments = [
        segment(S0, 20 * MiB, [block(P, P_size, 10000000, "active_allocated"),
                               block(Q, 20 * MiB - P_size, 0, "inactive")]),
        segment(S1, 20 * MiB, [block(S1, 10240000, 0, "inactive"),
                               block(S1 + 10240000, 20 * MiB - 10240000, 10240000, "active_allocated")]),
        segment(S2, 2 * MiB, [block(S2, MiB, MiB, "active_allocated"), block(S2 + MiB, MiB, 0, "inactive")],
                stream=5, kind="small"),
        segment(0x90000000, 2 * MiB, [], device=1),
    ]
    return {"segments": segments, "device_traces": [events, []],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}}


def parse_trace(text):
    """A minimal independent reader of the format (what another language would do)."""
    lines = text.split("\n")
    assert lines[0].startswith("mnemo-trace "), lines[0]
    assert text.endswith("\n")
    meta, pre, events, end = {}, [], [], None
    for line in lines[1:]:
        f = line.split()
        if not f or f[0].startswith("#") or f[0] in ("frame", "stack"):
            continue
        if f[0] == "meta":
            meta[f[1]] = line.split(None, 2)[2] if len(f) > 2 else ""
        elif f[0] == "pre":
            pre.append(f[1:])
        elif f[0] == "end":
            end = int(f[1])
        else:
            events.append(f)
    assert end == len(pre) + len(events), (end, len(pre), len(events))
    return meta, pre, events


def body(text):
    """The lines after the meta lines (frames, stacks, pre, events, end)."""
    return [l for l in text.splitlines()[1:] if l and not l.startswith(("#", "meta "))]


def metas(text):
    return {l.split()[1]: l.split(None, 2)[2] if len(l.split()) > 2 else ""
            for l in text.splitlines() if l.startswith("meta ")}


def convert(name_or_bytes, device=None):
    """The importer in process: (text, devices, version, stacks, warnings)."""
    data = name_or_bytes
    if isinstance(data, str):
        with open(os.path.join(SAMPLES, data), "rb") as f:
            data = f.read()
    warnings = []
    text, devs, version, stacks = imp.convert(data, device, "snap.pickle", warnings.append)
    exp.parse_trace(text.encode(), "import")   # every written trace passes the strict reader
    return text, devs, version, stacks, warnings


def run_cli(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True)
    return r


# ---- the viewer's rules ------------------------------------------------------------------

def check_viewer(tc, snap):
    """PyTorch's memory_viz (torch/utils/viz/MemoryViz.js) draws the state at an
    event by undoing every later event from the final state: it computes block
    addresses by tiling each segment, merges a free_requested directly followed
    by its free_completed into 'free', needs the block of every free_requested
    undone, a segment for every block at every point, and for a segment_map
    undone a mapping that contains it. Checked here event by event."""
    live = ("active_allocated", "active_pending_free")
    for dev, trace in enumerate(snap["device_traces"]):
        evs = []
        for t in trace:
            tc.assertIn("frames", t)
            if t["action"] == "free_completed" and evs and evs[-1]["action"] == "free_requested" and \
                    evs[-1]["addr"] == t["addr"]:
                evs[-1] = dict(evs[-1], action="free")
                continue
            evs.append(t)
        segs = []
        blocks = {}
        for s in snap["segments"]:
            if s["device"] != dev:
                continue
            segs.append([s["address"], s["total_size"], s["stream"]])
            addr = s["address"]
            for b in s["blocks"]:
                tc.assertEqual(b["address"], addr, "blocks tile their segment")
                tc.assertGreater(b["size"], 0)
                if b["state"] in live:
                    blocks[addr] = b["state"] == "active_pending_free"
                addr += b["size"]
            tc.assertEqual(addr, s["address"] + s["total_size"], "blocks fill their segment")

        def in_seg(a):
            return any(s[0] <= a < s[0] + s[1] for s in segs)

        for a in blocks:
            tc.assertTrue(in_seg(a), f"device {dev}: block 0x{a:x} in no segment at the end")
        for i in range(len(evs) - 1, -1, -1):
            e = evs[i]
            a, where = e["action"], f"device {dev} event {i} {e['action']}"
            if a in ("free", "free_completed"):
                blocks[e["addr"]] = a == "free_completed"
                tc.assertTrue(in_seg(e["addr"]), f"{where}: block 0x{e['addr']:x} in no segment")
            elif a == "free_requested":
                tc.assertIn(e["addr"], blocks, f"{where}: no block to undo the free of")
                blocks[e["addr"]] = False
            elif a == "alloc":
                tc.assertIn(e["addr"], blocks, f"{where}: no block to undo")
                del blocks[e["addr"]]
            elif a in ("segment_free", "segment_unmap"):
                seg = [e["addr"], e["size"], e["stream"]]
                segs.append(seg)
                segs.sort()
                if a == "segment_unmap":   # merged with same-stream neighbours
                    k = segs.index(seg)
                    if k + 1 < len(segs) and seg[0] + seg[1] == segs[k + 1][0] and seg[2] == segs[k + 1][2]:
                        seg[1] += segs.pop(k + 1)[1]
                    if k > 0 and segs[k - 1][0] + segs[k - 1][1] == seg[0] and segs[k - 1][2] == seg[2]:
                        segs[k - 1][1] += segs.pop(k)[1]
            elif a in ("segment_alloc", "segment_map"):
                start, end = e["addr"], e["addr"] + e["size"]
                if a == "segment_alloc":
                    k = next((k for k, s in enumerate(segs) if s[0] == start), None)
                    tc.assertIsNotNone(k, f"{where}: no segment at 0x{start:x} to undo")
                    segs.pop(k)
                else:
                    k = next((k for k, s in enumerate(segs) if s[0] <= start and end <= s[0] + s[1]), None)
                    tc.assertIsNotNone(k, f"{where}: no mapping holds 0x{start:x}+{e['size']}")
                    s = segs.pop(k)
                    if s[0] < start:
                        segs.append([s[0], start - s[0], s[2]])
                    if end < s[0] + s[1]:
                        segs.append([end, s[0] + s[1] - end, s[2]])
                    segs.sort()
                for b in blocks:
                    tc.assertFalse(start <= b < end and not in_seg(b), f"{where}: block 0x{b:x} left without segment")


# ---- the importer ------------------------------------------------------------------------

class ImporterTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.tmp = self.dir.name

    def tearDown(self):
        self.dir.cleanup()

    def run_importer(self, obj=None, raw=None, args=()):
        src = os.path.join(self.tmp, "snap.pickle")
        with open(src, "wb") as f:
            f.write(raw if raw is not None else pickle.dumps(obj))
        out = os.path.join(self.tmp, "out.trace")
        if os.path.exists(out):
            os.remove(out)
        p = subprocess.run([sys.executable, IMPORTER, src, "-o", out, *args], capture_output=True, text=True)
        text = None
        if os.path.exists(out):
            with open(out) as f:
                text = f.read()
        return p, text

    def test_example(self):
        # every device by default: device 1's empty segment too, devices in the lines
        p, text = self.run_importer(example_snapshot())
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual((meta["devices"], meta["device"]), ("0 1", "0"))
        self.assertIn(["segment_alloc", "0", "0x90000000", str(2 * MiB), "0", "1", "0"], pre)
        self.assertEqual(meta["dev1.torch_peak_reserved"], str(2 * MiB))
        self.assertEqual(len(events), 9)
        p, text = self.run_importer(example_snapshot(), args=("--device", "0"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(text.startswith("mnemo-trace 3\n"))   # every event has frames
        meta, pre, events = parse_trace(text)
        S0, S1, S2 = 0x10000000, 0x20000000, 0x30000000
        # Pre-existing: S0 (20 MiB), P (alive at dump), Q (freed without an alloc).
        self.assertEqual(pre[0], ["segment_alloc", "0", hex(S0), str(20 * MiB), "0", "0", "0"])
        self.assertEqual(pre[1], ["alloc", "0", hex(S0), "10000000", "10485760", "0", "0"])
        # Q's block size is rebuilt: 4 MiB request, and the 6 MiB gap after it
        # would have been split (> 1 MiB), so its block is 4 MiB.
        self.assertEqual(pre[2], ["alloc", "0", hex(S0 + 10485760), str(4 * MiB), str(4 * MiB), "0", "0"])
        self.assertEqual(len(pre), 3)
        self.assertEqual(meta["pre_segments"], "1")
        self.assertEqual(meta["pre_allocs"], "2")
        self.assertEqual(meta["device"], "0")
        self.assertEqual(meta["torch_alloc_conf"], "max_split_size_mb:512")
        self.assertEqual(meta["config"], "max_split_size_mb:512")
        self.assertEqual(meta["time_origin_us"], "100")
        # 9 events (the 'snapshot' entry is dropped); times relative to the first.
        self.assertEqual(len(events), 9)
        self.assertEqual(events[0], ["0", "segment_alloc", "0", hex(S1), str(20 * MiB), "0", "0", "1"])
        self.assertEqual(events[1], ["1", "alloc", "0", hex(S1), "10240000", "10240000", "0", "1"])
        # B takes the unsplit remainder: block 20 MiB - 10,240,000 B.
        self.assertEqual(events[2][:6], ["2", "alloc", "0", hex(S1 + 10240000), "10240000", str(20 * MiB - 10240000)])
        self.assertEqual(events[8][:6], ["7", "alloc", "5", hex(S2), str(MiB), str(MiB)])
        # PyTorch's figures. Reserved: 20 MiB at start, 42 MiB after both segment allocs.
        self.assertEqual(int(meta["torch_reserved_start"]), 20 * MiB)
        self.assertEqual(int(meta["torch_peak_reserved"]), 42 * MiB)
        self.assertEqual(int(meta["torch_segment_allocs"]), 2)
        # Allocated (blocks): start P+Q = 14 MiB; after A and B: 14 MiB + 20 MiB = 34 MiB.
        self.assertEqual(int(meta["torch_allocated_start"]), 10485760 + 4 * MiB)
        self.assertEqual(int(meta["torch_peak_allocated"]), 10485760 + 4 * MiB + 20 * MiB)
        self.assertEqual(meta["torch_allocated_method"], "blocks")
        # Requested: 10,000,000 + 4 MiB + 2 x 10,240,000.
        self.assertEqual(int(meta["torch_peak_requested"]), 10000000 + 4 * MiB + 2 * 10240000)
        if CLI:
            r = run_cli("replay", os.path.join(self.tmp, "out.trace"), "--allocator", "naive", "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"pre_allocs": 2', r.stdout)
            self.assertIn('"allocs": 3', r.stdout)

    def test_no_frames_stays_version_1(self):
        snap = example_snapshot()
        for e in snap["device_traces"][0]:
            e.pop("frames", None)
        snap["segments"].pop()   # device 1's segment: one device (0) left
        p, text = self.run_importer(snap)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(text.startswith("mnemo-trace 1\n"))
        meta, pre, events = parse_trace(text)
        self.assertEqual(pre[0], ["segment_alloc", "0", "0x10000000", str(20 * MiB)])
        self.assertEqual(pre[1], ["alloc", "0", "0x10000000", "10000000", "10485760"])
        self.assertEqual(events[0], ["0", "segment_alloc", "0", "0x20000000", str(20 * MiB)])
        self.assertEqual(events[1], ["1", "alloc", "0", "0x20000000", "10240000", "10240000"])

    def test_device_choice(self):
        snap = example_snapshot()
        snap["device_traces"] = [[], snap["device_traces"][0]]
        for s in snap["segments"]:
            s["device"] = 1 - s["device"]
        p, text = self.run_importer(snap)  # default: every device (0: a segment, 1: events)
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual((meta["device"], meta["devices"]), ("0", "0 1"))
        self.assertEqual(len(events), 9)
        self.assertEqual({e[6] for e in events}, {"1"})
        p, text = self.run_importer(snap, args=("--device", "1"))   # one device: its own index kept
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual((meta["device"], meta["devices"]), ("1", "1"))
        self.assertEqual(len(events), 9)
        self.assertEqual({e[6] for e in events}, {"1"})
        p, text = self.run_importer(snap, args=("--device", "0"))
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual((meta["device"], len(events), len(pre)), ("0", 0, 1))  # device 0's one segment
        p, _ = self.run_importer(snap, args=("--device", "2"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device 2", p.stderr)
        # all: every device with events or segments
        p, text = self.run_importer(snap, args=("--device", "all"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(metas(text)["devices"], "0 1")

    def test_refuses_globals(self):
        marker = os.path.join(self.tmp, "pwned")

        class Evil:
            def __reduce__(self):
                return (os.system, (f"touch {marker}",))

        p, text = self.run_importer(raw=pickle.dumps({"segments": [], "device_traces": [[Evil()]]}))
        self.assertEqual(p.returncode, 2)
        self.assertIn("refusing pickle global", p.stderr)
        self.assertFalse(os.path.exists(marker))
        self.assertIsNone(text)
        p, _ = self.run_importer(raw=pickle.dumps(os.system))
        self.assertEqual(p.returncode, 2)
        self.assertIn("system", p.stderr)
        p, _ = self.run_importer(raw=gzip.compress(pickle.dumps([Evil()])))
        self.assertEqual(p.returncode, 2)
        self.assertFalse(os.path.exists(marker))

    def test_malformed(self):
        good = example_snapshot()
        state = pickle.dumps({"segments": [segment(0x1000, 2 * MiB, [])], "device_traces": [[]]})
        cases = [
            (None, b"", "empty file"),
            (None, state[:-7], "truncated pickle"),
            (None, state[:2], "truncated pickle"),
            (None, gzip.compress(state)[:-9], "truncated or damaged gzip"),
            (None, gzip.compress(b""), "empty file (inside the gzip data)"),
            (None, b"mnemo-trace 1\nend 0\n",
             "not a PyTorch snapshot pickle (it starts with 'mnemo-trace 1\\nend 0\\n')"),
            (None, b"not a pickle at all", "not a PyTorch snapshot pickle (it starts with 'not a pickle at all')"),
            (None, b"\x80\x04\xff", "damaged pickle"),
            (7, None, "top level is a int"),
            ("segments", None, "top level is a str"),
            ({"foo": 1, "bar": 2}, None, "a dict without 'segments' or 'device_traces' (keys: 'foo', 'bar')"),
            ([1, 2], None, "segments[0]: not a dict"),
            ({"segments": [], "device_traces": [7]}, None, "'device_traces' is not a list of lists"),
            ({"segments": [], "device_traces": [[{"action": "alloc", "addr": "x", "size": 1, "stream": 0}]]},
             None, "'addr'"),
            ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": -1, "stream": 0}]]},
             None, "'size'"),
            ({"segments": [], "device_traces": [[dict(ev("alloc", 16, 16), time_us=float("nan"))]]},
             None, "'time_us'"),
            ({"segments": [], "device_traces": [[dict(ev("alloc", 16, 16), frames=[{"name": 3}])]]},
             None, "'name' or 'filename' is not a string"),
            ({"segments": [], "device_traces": [[dict(ev("alloc", 16, 16), frames="f")]]},
             None, "'frames' is not a list"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 16), ev("alloc", 16, 16)]]},
             None, "already allocated"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 16), ev("free_requested", 16, 16),
                                                 ev("free_requested", 16, 16)]]}, None, "second free"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 0)]]}, None, "alloc of 0 bytes"),
            ({"segments": "x", "device_traces": good["device_traces"]}, None, "'segments' is not a list"),
            ({"segments": [segment(0, 100, [block(50, 100, 1, "active_allocated")])],
              "device_traces": good["device_traces"]}, None, "outside its segment"),
            ([{"address": 0, "total_size": 100, "blocks": [{"size": 10}]}], None, "not a dict with a 'state'"),
            ([{"address": 0, "total_size": 100, "device": -1}], None, "'device' = -1 out of range"),
        ]
        for obj, raw, needle in cases:
            with self.subTest(needle=needle):
                data = raw if raw is not None else pickle.dumps(obj)
                with self.assertRaises(imp.SnapshotError) as cm:
                    imp.convert(data, None, "snap.pickle")
                self.assertIn(needle, str(cm.exception))
        # Through the command line: exit status 2, the message, no output file.
        for obj, raw, needle in cases[:3] + cases[5:6] + cases[8:11]:
            with self.subTest(cli=needle):
                p, text = self.run_importer(obj, raw=raw)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("malformed snapshot: ", p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertNotIn("Traceback", p.stderr)
                self.assertIsNone(text)

    # ---- hostile snapshots: bounded work, and what is written is read back -------------

    def deep_pickle(self, field, depth=100_000):
        """A snapshot whose event field `field` is a list nested depth deep (built
        as opcodes: pickle.dumps itself would recurse that deep)."""
        marker = 0x7EADBEEF
        e = dict(ev("alloc", 16, 16))
        e[field] = marker
        data = pickle.dumps({"segments": [], "device_traces": [[e]]}, protocol=2)
        op = b"J" + marker.to_bytes(4, "little")
        self.assertEqual(data.count(op), 1)
        return data.replace(op, b"]" * depth + b"a" * (depth - 1))

    def test_deep_nesting(self):
        """A field nested 100,000 lists deep (or any structure too deep to walk):
        'malformed snapshot', exit status 2, no traceback, nothing written."""
        for field in ("addr", "size", "stream", "time_us", "frames"):
            with self.subTest(field=field):
                data = self.deep_pickle(field)
                with self.assertRaises(imp.SnapshotError) as cm:
                    imp.convert(data, None, "deep.pickle")
                self.assertIn("nested more than 100 deep", str(cm.exception))
                p, text = self.run_importer(raw=data)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("malformed snapshot: lists and dicts nested more than 100 deep", p.stderr)
                self.assertNotIn("Traceback", p.stderr)
                self.assertIsNone(text)
        # within the limit (PyTorch's own snapshots nest 7 deep): the usual message
        with self.assertRaises(imp.SnapshotError) as cm:
            imp.convert(self.deep_pickle("addr", 50), None, "deep.pickle")
        self.assertIn("'addr' missing or not an integer", str(cm.exception))
        # a deep field the importer ignores (user_metadata) counts too; a list holding itself
        chain = []
        node = chain
        for _ in range(120):
            node.append([])
            node = node[0]
        snap = {"segments": [], "device_traces": [[dict(ev("alloc", 16, 16), user_metadata=chain)]]}
        with self.assertRaises(imp.SnapshotError):
            imp.convert(pickle.dumps(snap), None, "deep.pickle")
        loop = []
        loop.append(loop)
        snap = {"segments": [], "device_traces": [[dict(ev("alloc", 16, 16), addr=loop)]]}
        with self.assertRaises(imp.SnapshotError) as cm:
            imp.convert(pickle.dumps(snap), None, "loop.pickle")
        self.assertIn("'addr'", str(cm.exception))

    def test_decompression_cap(self):
        """A .pickle.gz inflates at most to the limit (4 GiB by default;
        --max-decompressed-size sets it, through the importer and every mnemo
        command that imports): over it, exit 2 with the limit named, and the
        inflating stops there (a 3 MiB pickle against a 1 MiB limit here)."""
        snap = {"segments": [segment(0x1000, 2 * MiB, [])], "device_traces": [[]], "pad": b"\0" * (3 * MiB)}
        data = gzip.compress(pickle.dumps(snap, protocol=4), mtime=0)
        self.assertLess(len(data), 64 * 1024)
        self.assertEqual(imp.MAX_DECOMPRESSED, 4 << 30)
        with self.assertRaises(imp.SnapshotError) as cm:
            imp.convert(data, None, "bomb.pickle.gz", max_decompressed=MiB)
        self.assertIn(f"inflates to more than {MiB} bytes", str(cm.exception))
        text, _, _, _, _ = convert(data)   # the default limit: converted
        self.assertIn("meta state_only 1", text)
        # several gzip members count together
        with self.assertRaises(imp.SnapshotError):
            imp.convert(data + gzip.compress(b"\0" * MiB), None, "bomb.pickle.gz", max_decompressed=3 * MiB)
        for flag, rc in (("1M", 2), ("1048576", 2), ("8MiB", 0), (str(8 * MiB), 0)):
            with self.subTest(flag=flag):
                p, text = self.run_importer(raw=data, args=("--max-decompressed-size", flag))
                self.assertEqual(p.returncode, rc, p.stderr)
                self.assertNotIn("Traceback", p.stderr)
                if rc:
                    self.assertIn("malformed snapshot: the gzip data inflates to more than 1048576 bytes", p.stderr)
                    self.assertIn("--max-decompressed-size", p.stderr)
                    self.assertIsNone(text)
        p, _ = self.run_importer(raw=data, args=("--max-decompressed-size", "lots"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--max-decompressed-size", p.stderr)
        if not CLI:
            return
        src = os.path.join(self.tmp, "bomb.pickle.gz")
        with open(src, "wb") as f:
            f.write(data)
        out = os.path.join(self.tmp, "bomb.trace")
        for cmd in (["import", "--from", "torch", src, "-o", out], ["replay", src, "--no-progress"],
                    ["report", src, "-o", os.path.join(self.tmp, "bomb.html")], ["snapshot", src]):
            with self.subTest(cmd=cmd[0]):
                r = run_cli(*cmd, "--max-decompressed-size", "1M")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn("inflates to more than 1048576 bytes", r.stderr)
                r = run_cli(*cmd, "--max-decompressed-size", "8M")
                self.assertEqual(r.returncode, 0, r.stderr)
        r = run_cli("replay", src, "--max-decompressed-size")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--max-decompressed-size needs a value", r.stderr)
        r = run_cli("replay", src, "--max-decompressed-size=12Q")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--max-decompressed-size needs a byte count (e.g. 8G), not \"12Q\"", r.stderr)

    def test_hostile_strings_round_trip(self):
        """Every string the importer copies into the trace (frame files and names,
        the allocator settings, the source's name) with NULs, control bytes, line
        breaks, '%', blanks, lone surrogates, non-ASCII and 10,000 bytes: the trace
        written is one the C reader (mnemo replay) and the strict Python reader
        accept, or the importer refuses it (exit 2): never a trace the reader refuses."""
        hostile = ["a\0b", "\0", "x" * 10000, "é\u2028\x85" * 1500, "\ud800", "%00", "%", " lead", "trail ",
                   "tab\there", "new\nline", "cr\rret", "\x7f\x01\x1b", "-", "??", "", "   ", "%2D", "\0" * 3000]
        frames = [{"name": n, "filename": f, "line": i} for i, (n, f) in
                  enumerate(zip(hostile, reversed(hostile)))]
        frames += [{"name": n, "filename": n, "line": 2**40} for n in hostile]
        events = [dict(ev("alloc", 0x1000 + 0x1000 * i, 512, t=i), frames=frames[i:] + frames[:i])
                  for i in range(len(frames))]
        conf = ("max_split_size_mb:128, " + "junk\0\r\n\t" * 1200 + "é" * 3000)
        snap = {"segments": [segment(0x1000, 64 * MiB, [], stream=2**64 - 1)], "device_traces": [events],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": conf}}
        name = "snap\nname é\r%.pickle"
        src = os.path.join(self.tmp, name)
        with open(src, "wb") as f:
            f.write(pickle.dumps(snap))
        out = os.path.join(self.tmp, "hostile.trace")
        p = subprocess.run([sys.executable, IMPORTER, src, "-o", out], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(out, "rb") as f:
            raw = f.read()
        self.assertNotIn(b"\0", raw)
        self.assertNotIn(b"\r", raw)
        self.assertLessEqual(max(len(l) for l in raw.split(b"\n")), imp.LINE_MAX)
        exp.parse_trace(raw, "hostile")
        text = raw.decode("utf-8", "surrogateescape")
        self.assertIn("a%EF%BF%BDb", text)   # the NUL became U+FFFD
        self.assertIn("meta torch_alloc_conf max_split_size_mb:128,", text)
        if CLI:
            r = run_cli("replay", out, "--json", "--no-progress")
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run_cli("replay", src, "--json", "--no-progress")   # imported on the fly
            self.assertEqual(r.returncode, 0, r.stderr)
        # what the format cannot hold is refused (exit 2), not written
        refused = [
            ({"segments": [segment(0x1000, 2 * MiB, [], device=2**40)], "device_traces": []}, ("--device", "all"),
             "out of range"),
            ({"segments": [segment(0x1000 * (d + 1), 2 * MiB, [], device=2**31 - 1 - d) for d in range(400)],
              "device_traces": []}, ("--device", "all"), "do not fit"),
        ]
        for obj, args, needle in refused:
            with self.subTest(needle=needle):
                p, text = self.run_importer(obj, args=args)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertIsNone(text)

    def test_output_keeps_mode_and_links(self):
        """-o (of the importer and the exporter) as mnemo's own writer
        (docs/SAVE_FORMAT.md): a file replaced keeps its mode, a new one gets
        0666 less the umask, a symbolic link (dangling too) is written through
        and stays a link; no temporary file is left."""
        src = os.path.join(self.tmp, "snap.pickle")
        with open(src, "wb") as f:
            f.write(pickle.dumps(example_snapshot()))
        out = os.path.join(self.tmp, "t.trace")
        link = os.path.join(self.tmp, "link.trace")
        dangling = os.path.join(self.tmp, "dangling.trace")

        def imp_to(dst):
            p = subprocess.run([sys.executable, IMPORTER, src, "-o", dst], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)

        old = os.umask(0o027)
        try:
            imp_to(out)
            self.assertEqual(os.stat(out).st_mode & 0o7777, 0o640)
            os.chmod(out, 0o600)
            imp_to(out)
            self.assertEqual(os.stat(out).st_mode & 0o7777, 0o600)
            os.symlink("t.trace", link)
            with open(out, "w") as f:
                f.write("old")
            imp_to(link)
            self.assertTrue(os.path.islink(link))
            with open(out) as f:
                self.assertTrue(f.read().startswith("mnemo-trace "))
            self.assertEqual(os.stat(out).st_mode & 0o7777, 0o600)
            os.symlink("made.trace", dangling)
            imp_to(dangling)
            self.assertTrue(os.path.islink(dangling))
            self.assertEqual(os.stat(os.path.join(self.tmp, "made.trace")).st_mode & 0o7777, 0o640)
            # the exporter writes its pickle by the same rule
            pk, pk_link = os.path.join(self.tmp, "x.pickle"), os.path.join(self.tmp, "x-link.pickle")
            with open(pk, "w") as f:
                f.write("old")
            os.chmod(pk, 0o600)
            os.symlink("x.pickle", pk_link)
            p = subprocess.run([sys.executable, EXPORTER, out, "-o", pk_link], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(os.path.islink(pk_link))
            self.assertEqual(os.stat(pk).st_mode & 0o7777, 0o600)
            with open(pk, "rb") as f:
                self.assertIn("device_traces", pickle.load(f))
        finally:
            os.umask(old)
        self.assertEqual([n for n in os.listdir(self.tmp) if ".tmp" in n], [])

    def test_missing_file(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(self.tmp, "none.pickle"), "-o",
                            os.path.join(self.tmp, "o.trace")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("none.pickle", p.stderr)


class TestSamples(unittest.TestCase):
    """The committed hand-made samples of each snapshot variant (tests/data/torch)."""

    def convert(self, name, *args):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, name), "-o", "-"] + list(args),
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def lines(self, text):
        meta, rest = {}, []
        for line in text.splitlines()[1:]:
            f = line.split()
            if not f or f[0].startswith("#") or f[0] in ("frame", "stack"):
                continue
            if f[0] == "meta":
                meta[f[1]] = " ".join(f[2:])
            else:
                rest.append(f)
        return meta, rest

    def replay(self, text, *args):
        if not CLI:
            return None
        with tempfile.NamedTemporaryFile("w", suffix=".trace", delete=False) as f:
            f.write(text)
        try:
            r = subprocess.run([CLI, "replay", f.name, "--json", "--no-progress"] + list(args), capture_output=True,
                               text=True)
        finally:
            os.unlink(f.name)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def test_multi_device_all(self):
        text = self.convert("multi_device.pickle", "--device", "all")
        self.assertTrue(text.startswith("mnemo-trace 2\n"))
        meta, rest = self.lines(text)
        self.assertEqual(meta["devices"], "0 1")
        self.assertEqual(meta["dev1.torch_peak_reserved"], str(20 * MiB))
        self.assertEqual(meta["dev0.torch_peak_reserved"], str(22 * MiB))
        events = [f for f in rest if f[0] != "end"]
        self.assertTrue(all(len(f) == 7 for f in events), events)
        self.assertEqual(sorted({f[6] for f in events}), ["0", "1"])
        self.assertEqual({f[2] for f in events if f[6] == "0"}, {"0", "7"})  # two streams on device 0
        times = [int(f[0]) for f in events]
        self.assertEqual(times, sorted(times))
        self.assertEqual(rest[-1], ["end", str(len(events))])
        out = self.replay(text, "--trace-device", "1")
        if out:
            self.assertIn('"trace_device": 1', out)
            self.assertIn('"trace_devices": 2', out)
            self.assertIn('"allocs": 2', out)
            self.assertIn('"peak_requested": %d' % (8 * MiB), out)
        out = self.replay(text)
        if out:
            self.assertIn('"trace_device": 0', out)
            self.assertIn('"streams": 2', out)
        # every device is the default
        self.assertEqual(self.convert("multi_device.pickle"), text)
        # One device only: its own index kept (version 2), so --trace-device 1 finds it.
        one = self.convert("multi_device.pickle", "--device", "1")
        self.assertTrue(one.startswith("mnemo-trace 2\n"))
        meta, rest = self.lines(one)
        self.assertEqual((meta["device"], meta["devices"]), ("1", "1"))
        self.assertEqual({f[6] for f in rest if f[0] != "end"}, {"1"})
        zero = self.convert("multi_device.pickle", "--device", "0")   # device 0 alone: version 1, as before
        self.assertTrue(zero.startswith("mnemo-trace 1\n"))

    def test_multi_device_oom(self):
        """Events on 3 GPUs, an oom on device 1: every device imported by default,
        each with its own figures; --device N keeps N; --trace-device N on the pickle."""
        text, devs, version, _, warnings = convert("multi_device_oom.pickle")
        self.assertEqual((version, warnings), (2, []))
        self.assertEqual([d.device for d in devs], [0, 1, 2])
        meta, rest = self.lines(text)
        self.assertEqual((meta["devices"], meta["device"]), ("0 1 2", "0"))
        self.assertNotIn("host_device", meta)
        events = [f for f in rest if f[0] != "end"]
        self.assertEqual({f[6] for f in events}, {"0", "1", "2"})
        self.assertEqual(len(events), 5 + 5 + 2)
        oom = [f for f in events if f[1] == "oom"]
        self.assertEqual(oom, [["4", "oom", "0", hex(6 * MiB), str(64 * MiB), "0", "1"]])   # device_free, asked
        self.assertEqual({f[2] for f in events if f[6] == "2"}, {"3"})
        self.assertEqual([meta[f"dev{d}.torch_ooms"] for d in range(3)], ["0", "1", "0"])
        self.assertEqual([int(meta[f"dev{d}.torch_peak_reserved"]) for d in range(3)], [20 * MiB, 40 * MiB, 2 * MiB])
        self.assertEqual([int(meta[f"dev{d}.torch_peak_allocated"]) for d in range(3)],
                         [8 * MiB, 30 * MiB, 4096])
        self.assertEqual(meta["torch_peak_reserved"], meta["dev0.torch_peak_reserved"])   # plain keys: the lowest
        one = convert("multi_device_oom.pickle", 1)[0]
        m1, r1 = self.lines(one)
        self.assertEqual((m1["device"], m1["devices"], m1["torch_ooms"]), ("1", "1", "1"))
        self.assertEqual(m1["torch_peak_reserved"], str(40 * MiB))
        self.assertEqual({f[6] for f in r1 if f[0] != "end"}, {"1"})
        with self.assertRaises(imp.SnapshotError) as cm:
            convert("multi_device_oom.pickle", 3)
        self.assertIn("--device 3", str(cm.exception))
        if CLI:   # the tools load the pickle with the device asked for
            path = os.path.join(SAMPLES, "multi_device_oom.pickle")
            r = run_cli("replay", path, "--trace-device", "1", "--json", "--no-progress")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"trace_device": 1', r.stdout)
            self.assertIn('"peak_requested": %d' % (30 * MiB), r.stdout)
            r = run_cli("replay", path, "--trace-device", "2", "--json", "--no-progress")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"trace_device": 2', r.stdout)
            r = run_cli("replay", path, "--json", "--no-progress")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"trace_devices": 3', r.stdout)
            with tempfile.TemporaryDirectory() as d:
                r = run_cli("report", path, "--trace-device", "1", "-o", os.path.join(d, "r.html"))
                self.assertEqual(r.returncode, 0, r.stderr)
            r = run_cli("snapshot", path)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_torch214(self):
        """PyTorch 2.14: annotate events (a START/END range, a point), pinned host
        memory, an unknown action and top-level key (warned about, not refused)."""
        text, devs, version, stacks, warnings = convert("torch214.pickle")
        self.assertEqual(version, 4)
        self.assertEqual(len(warnings), 2, warnings)   # once per name, with a count
        self.assertIn("unknown snapshot key 'stream_info'", warnings[0])
        self.assertIn("unknown trace action 'prefetch' in 2 event(s)", warnings[1])
        self.assertTrue(all("the rest is imported" in w for w in warnings))
        self.assertEqual([(d.device, d.host) for d in devs], [(0, False), (1, True)])
        meta, rest = self.lines(text)
        self.assertEqual((meta["devices"], meta["host_device"]), ("0", "1"))
        lines = body(text)
        self.assertEqual(lines[lines.index("stack 2 3 4") + 1:], [
            "0 segment_alloc 0 0x7e0000000000 4194304 0 1 1",   # the host memory: device 1
            "1 segment_alloc 0 0x10000000 20971520 0 0 2",
            "1 alloc 0 0x7e0000000000 3145728 0 1 1",
            "annotate 2 0 start 0 forward",                       # a range's start...
            "3 alloc 0 0x10000000 4194304 4194304 0 2",
            "annotate 4 0 mark 2 saved for backward",             # _annotate_memory: a point, with its stack
            "5 alloc 0 0x7e0000300000 1048576 0 1 1",
            "annotate 6 0 end 0 forward",                         # ...and its end
            "7 free_requested 0 0x10000000 4194304 0 0 2",
            "7 free_completed 0 0x10000000 4194304 0 0 0",
            "9 free_requested 0 0x7e0000000000 3145728 0 1 1",
            "9 free_completed 0 0x7e0000000000 3145728 0 1 0",
            "end 12"])
        self.assertEqual(lines[:2], ["frame 1 9 /src/data.py pin", "frame 2 4 /src/train.py <module>"])
        # the host device's figures, like any device's
        self.assertEqual(int(meta["dev1.torch_peak_reserved"]), 4 * MiB)
        self.assertEqual(int(meta["dev1.torch_peak_requested"]), 4 * MiB)
        self.assertEqual(meta["dev1.torch_segment_allocs"], "1")
        self.assertEqual(int(meta["dev0.torch_peak_reserved"]), 20 * MiB)
        self.assertEqual(meta["torch_peak_reserved"], meta["dev0.torch_peak_reserved"])
        self.assertNotIn("state_only", meta)
        # --device: the CUDA device alone (its annotations kept), or the host memory alone
        t0, d0, v0, _, _ = convert("torch214.pickle", 0)
        self.assertEqual((v0, [d.device for d in d0]), (4, [0]))
        self.assertEqual(sum(l.startswith("annotate ") for l in body(t0)), 3)
        self.assertNotIn("host_device", metas(t0))
        th, dh, vh, _, _ = convert("torch214.pickle", 1)
        self.assertEqual((vh, [(d.device, d.host) for d in dh]), (3, [(1, True)]))
        self.assertEqual(metas(th)["host_device"], "1")
        self.assertEqual(sum(l.split()[-2:-1] == ["1"] for l in body(th) if l[0].isdigit()), 5)
        # the host memory after a state-only dump of it: pre lines on its device
        snap = load_sample("torch214.pickle")
        snap["host_traces"] = [[]]   # a list of lists (one per host allocator), here empty
        text2 = convert(pickle.dumps(snap))[0]
        self.assertIn("pre segment_alloc 0 0x7e0000000000 4194304 0 1 1", body(text2))
        self.assertIn("pre alloc 0 0x7e0000300000 1048576 1048576 1 1", body(text2))
        # the C reader takes what is written; replay per device
        if CLI:
            path = os.path.join(SAMPLES, "torch214.pickle")
            # pinned host memory is not replayed on a device allocator (PyTorch's host allocator
            # is another allocator): asking for it is refused with the reason, exit 2
            r = run_cli("replay", path, "--trace-device", "1", "--json", "--no-progress")
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("pinned host memory", r.stderr)
            self.assertEqual(r.stdout, "")
            r = run_cli("replay", path, "--json", "--no-progress")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"trace_device": 0', r.stdout)
            self.assertIn("unknown trace action 'prefetch'", r.stderr)   # the importer's warning reaches the user
        # a host_traces given as several lists merges them by time
        snap = load_sample("torch214.pickle")
        h = snap["host_traces"]
        snap["host_traces"] = [[h[0], h[1], h[3], h[4]], [h[2]]]
        self.assertEqual(body(convert(pickle.dumps(snap))[0]), body(text))
        # malformed 2.14 fields are refused as any malformed field
        for key, val, needle in (("host_segments", 3, "'host_segments' is not a list of dicts"),
                                 ("host_traces", {"a": 1}, "'host_traces' is not a list"),
                                 ("external_annotations", [1], "'external_annotations' is not a list of dicts")):
            bad = load_sample("torch214.pickle")
            bad[key] = val
            with self.subTest(key=key), self.assertRaises(imp.SnapshotError) as cm:
                convert(pickle.dumps(bad))
            self.assertIn(needle, str(cm.exception))
        bad = load_sample("torch214.pickle")
        bad["device_traces"][0][1]["time_us"] = -1
        with self.assertRaises(imp.SnapshotError) as cm:
            convert(pickle.dumps(bad))
        self.assertIn("device_traces[0][1]: 'time_us'", str(cm.exception))

    def test_external_annotations(self):
        """The older external_annotations ({device, name, stage, time_us}) become
        annotate lines of their device, placed by time among its events."""
        snap = load_sample("multi_device.pickle")
        snap["external_annotations"] = [
            {"device": 1, "name": "step 1", "stage": "START", "time_us": 13},
            {"device": 0, "name": "opt", "stage": "END", "time_us": 14},
            {"device": 1, "name": "step 1", "stage": "END", "time_us": 100},
            {"device": 5, "name": "elsewhere", "stage": "START", "time_us": 1},   # no such device: left out
            {"device": 0, "name": "no stage", "time_us": 10}]
        text, devs, version, _, warnings = convert(pickle.dumps(snap))
        self.assertEqual((version, warnings), (4, []))
        ann = [l for l in body(text) if l.startswith("annotate")]
        self.assertEqual(ann, ["annotate 0 0 mark 0 no stage", "annotate 3 1 start 0 step 1",
                               "annotate 4 0 end 0 opt", "annotate 90 1 end 0 step 1"])
        lines = body(text)
        i = lines.index("annotate 3 1 start 0 step 1")
        self.assertEqual(lines[i - 1], "3 alloc 0 0x10000000 3145728 3145728 1 0")   # after device 1's t=13 alloc
        self.assertEqual(lines[-2:], ["annotate 90 1 end 0 step 1", "end %d" % (12 + 4)])

    def test_expandable(self):
        meta, rest = self.lines(self.convert("expandable.pickle"))
        # The mapping before recording, rebuilt by undoing the trace's map/unmap from the dump's range.
        self.assertIn(["pre", "segment_map", "0", "0x7f0000000000", str(4 * MiB)], rest)
        self.assertEqual(meta["torch_reserved_start"], str(4 * MiB))
        self.assertEqual(meta["torch_peak_reserved"], str(6 * MiB))
        self.assertTrue(meta["torch_allocated_method"].startswith("rounded"))
        self.assertEqual(meta["config"], "expandable_segments:True")
        acts = [f[1] for f in rest if f[0] not in ("pre", "end")]
        self.assertEqual(acts.count("segment_map"), 2)
        self.assertEqual(acts.count("segment_unmap"), 1)
        # the unmap run is an empty_cache point (no oom after it, no garbage collector)
        self.assertEqual(acts[acts.index("segment_unmap") - 1], "empty_cache")
        self.assertEqual(meta["torch_empty_cache_points"], "1")
        out = self.replay(self.convert("expandable.pickle"), "--config", "expandable_segments:True")
        if out:
            self.assertIn('"pre_allocs": 1', out)

    def test_oom(self):
        meta, rest = self.lines(self.convert("oom.pickle"))
        self.assertEqual(meta["torch_ooms"], "1")
        # PyTorch writes the device's free bytes as 'device_free': the address field
        self.assertIn(["2", "oom", "0", "0x100000", str(40 * MiB)], rest)
        out = self.replay(self.convert("oom.pickle"))
        if out:
            self.assertIn('"ooms": 0', out)  # the replay itself had room
        # the older hand-made form with 'addr' reads the same
        snap = load_sample("oom.pickle")
        snap["device_traces"][0][2]["addr"] = snap["device_traces"][0][2].pop("device_free")
        self.assertEqual(body(convert(pickle.dumps(snap))[0]), body(convert("oom.pickle")[0]))

    def test_state_only(self):
        text, devs, version, stacks, warnings = convert("state_only.pickle", 0)
        self.assertEqual(version, 3)   # the dump's blocks have frames
        self.assertEqual(body(text), [
            "frame 1 12 /src/model.py make_weights",
            "frame 2 3 /src/train.py <module>",
            "frame 3 20 /src/model.py bias",
            "stack 1 1 2",
            "stack 2 3",
            "pre segment_alloc 0 0x10000000 20971520 0 0 1",   # the segment's own frames
            "pre segment_alloc 7 0x20000000 2097152 0 0 0",
            "pre segment_map 0 0x7f0000200000 6291456 0 0 0",  # expandable: a mapping
            "pre alloc 0 0x10000000 4000000 4194304 0 1",
            "pre alloc 0 0x10400000 2097152 2097152 0 0",        # active_pending_free: still live
            "pre alloc 7 0x20000000 100 512 0 2",
            "pre alloc 0 0x7f0000200000 2097152 2097152 0 0",
            "end 7"])
        m = metas(text)
        self.assertEqual(m["state_only"], "1")
        self.assertEqual(m["config"], "expandable_segments:True")
        self.assertEqual(int(m["torch_peak_reserved"]), 28 * MiB)
        self.assertEqual(int(m["torch_reserved_start"]), 28 * MiB)
        self.assertEqual(int(m["torch_peak_allocated"]), 4 * MiB + 2 * MiB + 512 + 2 * MiB)
        self.assertEqual(int(m["torch_peak_requested"]), 4000000 + 2 * MiB + 100 + 2 * MiB)
        self.assertTrue(m["torch_allocated_method"].startswith("state"))
        self.assertEqual(m["torch_segment_allocs"], "0")
        # device 1, and every device
        text1 = convert("state_only.pickle", 1)[0]   # its own index in the lines
        self.assertEqual(body(text1), ["pre segment_alloc 0 0x10000000 20971520 0 1",
                                       "pre alloc 0 0x10000000 1048576 1048576 1", "end 2"])
        self.assertEqual(metas(text1)["device"], "1")
        alltext = convert("state_only.pickle", "all")[0]
        self.assertEqual(convert("state_only.pickle")[0], alltext)   # every device: the default
        self.assertTrue(alltext.startswith("mnemo-trace 3\n"))
        self.assertEqual(metas(alltext)["devices"], "0 1")
        self.assertIn("pre alloc 0 0x10000000 1048576 1048576 1 0", body(alltext))
        self.assertIn("pre alloc 0 0x10000000 4000000 4194304 0 1", body(alltext))
        # gzip-compressed: the same trace
        gz = convert("state_only.pickle.gz", 0)[0]
        self.assertEqual(body(gz), body(text))
        # device_traces missing altogether, or no device_traces and no segments
        snap = load_sample("state_only.pickle")
        del snap["device_traces"]
        self.assertEqual(body(convert(pickle.dumps(snap), 0)[0]), body(text))
        self.assertEqual(body(convert(pickle.dumps({"segments": []}))[0]), ["end 0"])
        with self.assertRaises(imp.SnapshotError) as cm:
            convert("state_only.pickle", 2)
        self.assertIn("--device 2", str(cm.exception))
        if CLI:   # replay, report and snapshot take a trace of pre lines only
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "state.trace")
                with open(path, "w") as f:
                    f.write(text)
                r = run_cli("replay", path, "--json", "--no-progress")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn('"pre_allocs": 4', r.stdout)
                self.assertIn('"allocs": 0', r.stdout)
                r = run_cli("report", path, "-o", os.path.join(d, "r.html"))
                self.assertEqual(r.returncode, 0, r.stderr)
                r = run_cli("snapshot", path, "--at", "end")
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn("segments", r.stdout)

    def test_legacy_list(self):
        text, devs, version, _, _ = convert("legacy_list.pickle", 0)
        self.assertEqual(body(text), ["frame 1 5 /src/data.py load", "stack 1 1",
                                      "pre segment_alloc 0 0x30000000 20971520 0 0 0",
                                      "pre alloc 0 0x30000000 8000000 8388608 0 1",   # history[0]: size and frames
                                      "end 2"])
        self.assertEqual(metas(text)["state_only"], "1")
        text1 = convert("legacy_list.pickle", 1)[0]   # no history: requested = block size
        self.assertTrue(text1.startswith("mnemo-trace 2\n"))   # device 1 keeps its index
        self.assertEqual(body(text1), ["pre segment_alloc 0 0x40000000 2097152 0 1",
                                       "pre alloc 0 0x40000000 1048576 1048576 1", "end 2"])
        alltext = convert("legacy_list.pickle")[0]
        self.assertEqual(metas(alltext)["devices"], "0 1")
        self.assertEqual(body(alltext)[-3:], ["pre alloc 0 0x30000000 8000000 8388608 0 1",
                                              "pre alloc 0 0x40000000 1048576 1048576 1 0", "end 4"])
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, "legacy_list.pickle"), "--table"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("device 1: 1 segments, 2 blocks", p.stdout)

    def test_old_dict(self):
        text, devs, version, _, _ = convert("old_dict.pickle")
        self.assertEqual(body(text), [
            "frame 1 30 /src/train.py step", "stack 1 1",
            "0 segment_alloc 0 0x50000000 20971520 0 0 1",   # no time_us: all at 0, in order
            "0 alloc 0 0x50000000 5242880 5242880 0 1",
            "0 oom 0 0x4d2 85899345920 0 0 1",               # device_free 1234
            "0 free_requested 0 0x50000000 5242880 0 0 0",   # no 'frames': no stack
            "0 free_completed 0 0x50000000 5242880 0 0 0",
            "end 5"])
        self.assertEqual(metas(text)["config"], "")
        self.assertEqual(metas(text)["time_origin_us"], "0")

    def test_frames_v3(self):
        text, devs, version, stacks, _ = convert("framed.pickle", 0)
        self.assertEqual(version, 4)   # its external_annotations entry: an annotate line
        lines = body(text)
        deep = [f"frame {7 + i} {i} /src/deep.py rec" for i in range(124)]   # 128 frames kept per stack
        self.assertEqual(lines[:6], [
            "frame 1 42 /src/model.py forward",
            "frame 2 7 /src/train.py <module>",
            "frame 3 0 - c10::cuda::Foo<int, 2>::bar(unsigned long)",          # '??': unknown
            "frame 4 5 /dir%20with%20space/100%25.py %20spaced  name%20",     # blanks, '%' encoded
            "frame 5 0 - caf%C3%A9",                                          # UTF-8 encoded, '' unknown
            "frame 6 1 %2D dash"])                                            # a file named '-'
        self.assertEqual(lines[6:130], deep)
        long_frame = lines[130]
        self.assertTrue(long_frame.startswith("frame 131 1 /src/long.py xxxx"))
        self.assertLessEqual(len(long_frame), 4096)   # the 5000-byte name cut to fit a line
        self.assertEqual(lines[131:134], ["stack 1 1 2", "stack 2 " + " ".join(str(i) for i in range(3, 131)),
                                          "stack 3 131"])
        self.assertEqual(lines[134:], [
            "annotate 0 0 start 0 step",   # time 999, before the first event (1000): first, at time 0
            "0 segment_alloc 0 0x60000000 20971520 0 0 1",
            "1 alloc 0 0x60000000 3145728 3145728 0 1",
            "2 alloc 0 0x60300000 1048577 1049088 0 2",
            "3 free_requested 0 0x60000000 3145728 0 0 3",
            "4 free_completed 0 0x60000000 3145728 0 0 3",
            "end 6"])
        # the strict reader decodes the frames back
        t = exp.parse_trace(text.encode())
        self.assertEqual(t.stack_frames(2)[:4], [("", 0, "c10::cuda::Foo<int, 2>::bar(unsigned long)"),
                                                 ("/dir with space/100%.py", 5, " spaced  name "),
                                                 ("", 0, "caf\u00e9"), ("-", 1, "dash")])
        m = metas(text)
        self.assertEqual(m["config"], "max_split_size_mb:512,roundup_power2_divisions:[" + ",".join(
            f"{1 << k}:{4 if k < 6 else 8}" for k in range(16)) + "]")
        # several devices: the device field is the CUDA index, stacks shared
        alltext = convert("framed.pickle")[0]
        self.assertEqual(convert("framed.pickle", "all")[0], alltext)
        self.assertIn("1 segment_alloc 0 0x60000000 2097152 0 1 1", body(alltext))
        self.assertIn("2 alloc 0 0x60000000 4096 4096 1 1", body(alltext))
        if CLI:
            for t in (text, alltext):
                self.replay(t)

    def test_config(self):
        cfg = lambda s: imp.alloc_config(s, lambda m: None)   # noqa: E731
        rd0 = {str(1 << k): 0 for k in range(16)}
        self.assertEqual(cfg({}), "")
        self.assertEqual(cfg({"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                              "garbage_collection_threshold": 0.0, "expandable_segments": False,
                              "roundup_power2_divisions": rd0}), "")
        self.assertEqual(cfg({"max_split_size": (1 << 64) - 1}), "")
        self.assertEqual(cfg({"expandable_segments": True}), "expandable_segments:True")
        self.assertEqual(cfg({"max_split_size": 300 * MiB}), "max_split_size_mb:300")
        self.assertEqual(cfg({"max_split_size": 300 * MiB + 1}), "max_split_size_mb:301")
        self.assertEqual(cfg({"garbage_collection_threshold": 0.6}), "garbage_collection_threshold:0.6")
        self.assertEqual(cfg({"roundup_power2_divisions": dict(rd0, **{k: 4 for k in rd0})}),
                         "roundup_power2_divisions:4")
        self.assertEqual(cfg({"roundup_power2_divisions": dict(rd0, **{"256": 2})}),
                         "roundup_power2_divisions:[" + ",".join(
                             f"{1 << k}:{2 if k == 8 else 0}" for k in range(16)) + "]")
        # the string fills in what the structured fields lack; pinned_*/backend do not change the device allocator
        self.assertEqual(cfg({"PYTORCH_CUDA_ALLOC_CONF": "backend:native, max_non_split_rounding_mb:40,"
                                                         "expandable_segments:True,max_split_size_mb:256,"
                                                         "pinned_num_register_threads:8"}),
                         "max_split_size_mb:256,max_non_split_rounding_mb:40,expandable_segments:True")
        self.assertEqual(cfg({"PYTORCH_CUDA_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:4]"}),
                         "roundup_power2_divisions:[" + ",".join(
                             f"{1 << k}:{1 if k <= 8 else 4}" for k in range(16)) + "]")   # '>': from 512 on
        self.assertEqual(cfg({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512", "max_split_size": -1}), "")
        warned = []
        self.assertEqual(imp.alloc_config({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:lots,"
                                                                      "expandable_segments:True"}, warned.append),
                         "expandable_segments:True")
        self.assertIn("max_split_size_mb", warned[0])
        # mnemo's own parser takes every form (and replay uses it by default)
        if CLI:
            for conf in ("max_split_size_mb:301,garbage_collection_threshold:0.6,roundup_power2_divisions:[" +
                         ",".join(f"{1 << k}:{2 if k == 8 else 0}" for k in range(16)) + "],expandable_segments:True",
                         "max_non_split_rounding_mb:40,roundup_power2_divisions:4"):
                r = run_cli("replay", os.path.join(HERE, "corpus", "trace", "small.trace"), "--json",
                            "--no-progress", "--config", conf)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(f'"config_effective": "{conf}"', r.stdout)

    def test_empty_cache_points(self):
        text = convert("empty_cache.pickle")[0]
        _, _, events = parse_trace(text)
        acts = [e[1] for e in events]
        self.assertEqual(metas(text)["torch_empty_cache_points"], "2")
        self.assertEqual(acts.count("empty_cache"), 2)
        # before the first run (an alloc follows), not before the one an oom follows,
        # one for the final run of two segment frees
        self.assertEqual(events[4], ["3", "empty_cache", "0", "0x0", "0"])
        self.assertEqual(acts[4:6], ["empty_cache", "segment_free"])
        i = acts.index("oom")
        self.assertEqual(acts[i - 2:i + 1], ["free_completed", "segment_free", "oom"])
        self.assertEqual(acts[-3:], ["empty_cache", "segment_free", "segment_free"])
        # garbage collector on: a run followed by a segment_alloc is the collector's
        text = convert("gc.pickle")[0]
        _, _, events = parse_trace(text)
        acts = [e[1] for e in events]
        self.assertEqual(metas(text)["config"], "garbage_collection_threshold:0.6")
        self.assertEqual(metas(text)["torch_empty_cache_points"], "1")
        self.assertEqual(acts[4:6], ["segment_free", "segment_alloc"])
        self.assertEqual(acts[-2:], ["empty_cache", "segment_free"])
        # the same run with the collector off is an empty_cache point
        snap = load_sample("gc.pickle")
        snap["allocator_settings"] = {}
        self.assertEqual(metas(convert(pickle.dumps(snap))[0])["torch_empty_cache_points"], "2")
        # an explicit empty_cache event (mnemo's recorder, the exporter) is not doubled
        e = lambda a, addr=0, size=0: {"action": a, "addr": addr, "size": size, "stream": 0}   # noqa: E731
        evs, n = imp.infer_empty_cache([dict(e("empty_cache"), index=0, time_us=0, frames=()),
                                        dict(e("segment_free", 16, 16), index=1, time_us=0, frames=())], False)
        self.assertEqual((n, [x["action"] for x in evs]), (0, ["empty_cache", "segment_free"]))
        if CLI:
            out = self.replay(text)
            self.assertIn('"empty_caches": 1', out)

    def test_table(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, "multi_device.pickle"), "--table",
                            "--blocks"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("device 0: 2 segments, 4 blocks", p.stdout)
        self.assertIn("device 1: 1 segments, 3 blocks", p.stdout)
        self.assertIn("active_allocated", p.stdout)
        self.assertIn("20.0%", p.stdout)  # device 1: 15 MiB free, largest free block 12 MiB
        if CLI:
            r = run_cli("snapshot", os.path.join(SAMPLES, "multi_device.pickle"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("device 1: 1 segments", r.stdout)

    def test_bad_device_arg(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, "oom.pickle"), "-o", "-", "--device",
                            "first"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device must be an index or 'all'", p.stderr)

    def test_real_snapshots(self):
        """The bundled recorded snapshots (data/traces/*.pickle.gz): the events and
        pre lines are those of the committed traces; stacks come with them."""
        for name in sorted(os.listdir(TRACES)):
            if not name.endswith(".pickle.gz"):
                continue
            with self.subTest(name=name):
                with open(os.path.join(TRACES, name), "rb") as f:
                    text, devs, version, stacks, _ = convert(f.read())
                self.assertEqual(version, 4 if any(d.annotations for d in devs) else 3)
                self.assertGreater(len(stacks.stack_lines), 0)
                trace = os.path.join(TRACES, name[:-len(".pickle.gz")] + ".trace")
                if os.path.exists(trace):
                    with open(trace) as f:
                        committed = f.read()
                    a, b = exp.parse_trace(committed.encode()), exp.parse_trace(text.encode())
                    key = lambda e: (e.pre, e.time, e.action, e.stream, e.addr, e.size, e.bs)   # noqa: E731
                    self.assertEqual([key(e) for e in a.entries], [key(e) for e in b.entries])


# ---- the exporter ------------------------------------------------------------------------

def canonical(text, segments=True):
    """What a round trip keeps of a trace: every pre and event line with times
    from the first event, block sizes, devices, and stacks as frames."""
    t = exp.parse_trace(text.encode())
    t0 = next((e.time for e in t.entries if not e.pre), 0)
    out = []
    for e in t.entries:
        if not segments and e.action.startswith("segment"):
            continue
        out.append((e.pre, None if e.pre else e.time - t0, e.action, e.stream, e.addr, e.size, e.bs, e.dev,
                    tuple(t.stack_frames(e.stack))))
    pre = sorted(x for x in out if x[0])   # the importer writes pre lines in address order
    return pre + [x for x in out if not x[0]], t


def annotations(t):
    """What a round trip keeps of a parsed trace's annotate lines: for each, how
    many pre and event lines come before it, its time from the first event,
    device, stage, name and stack as frames."""
    t0 = next((e.time for e in t.entries if not e.pre), 0)
    lines = [e.lineno for e in t.entries]
    return [(bisect.bisect_left(lines, a.lineno), max(a.time - t0, 0), a.dev, a.stream, a.name,
             tuple(t.stack_frames(a.stack))) for a in t.annotations]


class TestExport(unittest.TestCase):
    def export(self, text, device=None):
        notes = []
        blob, snap, synthetic = exp.export_bytes(text.encode(), device, "t", notes.append)
        self.assertEqual(pickle.loads(blob), snap)
        self.assertEqual(bool(notes), synthetic > 0)
        check_viewer(self, snap)
        return blob, snap, synthetic

    def round_trip(self, text, device=None, segments=True):
        blob, snap, synthetic = self.export(text, device)
        back = convert(blob, "all" if device is None and "meta devices" in text else device)[0]
        a, ta = canonical(text, segments)
        b, tb = canonical(back, segments)
        self.assertEqual(len(a), len(b))
        for x, y in zip(a, b):
            if not (x[6] and y[6]):   # block sizes unknown on one side (expandable segments: not rebuilt)
                x, y = x[:6] + x[7:], y[:6] + y[7:]
            self.assertEqual(x, y)
        for key in ("config", "time_origin_us", "torch_peak_allocated", "torch_peak_reserved",
                    "torch_peak_requested", "torch_ooms", "torch_empty_cache_points"):
            if key in ta.meta:
                self.assertEqual(ta.meta[key], tb.meta[key], key)
            for dkey in [k for k in ta.meta if k.startswith("dev") and k.endswith("." + key)]:
                self.assertEqual(ta.meta[dkey], tb.meta[dkey], dkey)   # every device's figures
        for key in ("devices", "host_device"):
            self.assertEqual(ta.meta.get(key), tb.meta.get(key), key)
        self.assertEqual(annotations(ta), annotations(tb))
        return snap, synthetic

    def test_bundled_traces(self):
        """data/traces/*.trace (version 1, from PyTorch) and the version 3 traces of the
        bundled snapshots: import(export(trace)) is the trace."""
        for name in sorted(os.listdir(TRACES)):
            path = os.path.join(TRACES, name)
            with self.subTest(name=name):
                if name.endswith(".trace"):
                    with open(path) as f:
                        snap, synthetic = self.round_trip(f.read())
                elif name.endswith(".pickle.gz"):
                    with open(path, "rb") as f:
                        text = convert(f.read())[0]
                    snap, synthetic = self.round_trip(text)
                    self.assertTrue(any(e["frames"] for e in snap["device_traces"][0]))
                else:
                    continue
                self.assertEqual(synthetic, 0)

    def test_samples(self):
        for name in sorted(os.listdir(SAMPLES)):
            if not name.endswith((".pickle", ".pickle.gz")):
                continue
            with self.subTest(name=name):
                text = convert(name)[0]
                self.round_trip(text)
                alltext = convert(name, "all")[0]
                self.round_trip(alltext)

    def test_annotations_and_host_memory(self):
        """A 2.14 trace's annotate lines go back as annotate events in their places
        (START/END stages, text, stack) and its host device as host_segments and
        host_traces; imported again, the same trace (round_trip compares)."""
        text = convert("torch214.pickle")[0]
        snap, synthetic = self.round_trip(text)
        self.assertEqual(synthetic, 0)
        d0 = snap["device_traces"]
        self.assertEqual(len(d0), 1)   # the host memory is not a CUDA device
        anns = [e for e in d0[0] if e["action"] == "annotate"]
        self.assertEqual([(e["name"], e.get("stage")) for e in anns],
                         [("forward", "START"), ("saved for backward", None), ("forward", "END")])
        self.assertEqual([e["action"] for e in d0[0]][:4], ["segment_alloc", "annotate", "alloc", "annotate"])
        self.assertEqual(anns[1]["frames"][0], {"name": "pack_hook", "filename": "/src/train.py", "line": 50})
        self.assertEqual([e["action"] for e in snap["host_traces"]],
                         ["segment_alloc", "alloc", "alloc", "free_requested", "free_completed"])
        self.assertEqual(len(snap["host_segments"]), 1)
        self.assertEqual([b["state"] for b in snap["host_segments"][0]["blocks"]], ["inactive", "active_allocated"])
        self.assertFalse(any(s["address"] == 0x7e0000000000 for s in snap["segments"]))
        # only the host device, or only device 0
        self.assertNotIn("host_traces", self.export(text, 0)[1])
        host_only = self.export(text, 1)[1]
        self.assertEqual((host_only["device_traces"], len(host_only["host_traces"])), ([], 5))

    def test_without_segments_or_completions(self):
        """An RMM log (no segment lines, no free_completed): each allocation gets a
        segment of its own, each free a completion, all marked synthetic."""
        with open(os.path.join(HERE, "corpus", "trace", "small.trace")) as f:
            small = f.read()
        # (the segments of their own alive at the end come back as segments of the dump)
        snap, synthetic = self.round_trip(small, segments=False)
        self.assertGreater(synthetic, 0)
        rmm = ("mnemo-trace 1\nmeta recorded_by rmm\nmeta time_origin_us 5\npre alloc 0 0x7000 4096\n"
               "0 alloc 0 0x1000 100\n1 alloc 0 0x1064 2048\n2 free_requested 0 0x1000 100\n"
               "3 free_requested 0 0x7000 4096\n4 oom 0 0x0 1099511627776\nend 6\n")
        blob, snap, synthetic = self.export(rmm)
        evs = snap["device_traces"][0]
        self.assertEqual([(e["action"], e.get(imp.SYNTHETIC_KEY, False)) for e in evs], [
            ("segment_alloc", True), ("alloc", False), ("segment_alloc", True), ("alloc", False),
            ("free_requested", False), ("free_completed", True), ("segment_free", True),
            ("free_requested", False), ("free_completed", True), ("segment_free", True), ("oom", False)])
        self.assertEqual(evs[0]["size"], 100)   # a segment the allocation's size: no overlap at 0x1064
        self.assertEqual(evs[-1]["device_free"], 0)
        self.assertEqual(evs[0]["time_us"], 5)
        # one segment per allocation alive at the end
        self.assertEqual([(s["address"], s["total_size"], [b["state"] for b in s["blocks"]])
                          for s in snap["segments"]], [(0x1064, 2048, ["active_allocated"])])
        self.round_trip(rmm, segments=False)

    def test_mnemo_recordings(self):
        """Traces mnemo records itself (MNEMO_TRACE): plain and expandable segments, empty_cache."""
        if not CLI:
            self.skipTest("no mnemo CLI given")
        with tempfile.TemporaryDirectory() as d:
            for conf in ("", "expandable_segments:True"):
                with self.subTest(conf=conf):
                    rec = os.path.join(d, "rec.trace")
                    env = dict(os.environ, MNEMO_TRACE=rec)
                    args = [CLI, "replay", os.path.join(HERE, "corpus", "trace", "small.trace"), "--json",
                            "--no-progress"] + (["--config", conf] if conf else [])
                    r = subprocess.run(args, capture_output=True, text=True, env=env)
                    self.assertEqual(r.returncode, 0, r.stderr)
                    with open(rec) as f:
                        text = f.read()
                    self.assertIn("empty_cache", text)
                    snap, synthetic = self.round_trip(text)
                    self.assertEqual(synthetic, 0)
                    self.assertEqual(any(s["is_expandable"] for s in snap["segments"]) or
                                     any(e["action"] == "segment_map" for e in snap["device_traces"][0]), bool(conf))

    def test_pending_free_and_expandable_state(self):
        """Frees not completed at the end stay 'active_pending_free'; expandable
        mappings are one segment per contiguous range."""
        text = ("mnemo-trace 1\nmeta config expandable_segments:True\npre segment_map 0 0x100000 2097152\n"
                "pre alloc 0 0x100000 1000\n0 segment_map 0 0x300000 2097152\n1 alloc 0 0x300000 4096 4096\n"
                "2 free_requested 0 0x300000 4096\n3 segment_map 0 0x900000 2097152\n"
                "4 free_requested 0 0x100000 1000\n5 free_completed 0 0x100000 1000\nend 8\n")
        blob, snap, synthetic = self.export(text)
        self.assertEqual(synthetic, 0)
        segs = [(s["address"], s["total_size"], s["is_expandable"], [(b["state"], b["size"]) for b in s["blocks"]])
                for s in snap["segments"]]
        self.assertEqual(segs, [(0x100000, 4 * MiB, True, [("inactive", 2 * MiB), ("active_pending_free", 4096),
                                                           ("inactive", 2 * MiB - 4096)]),
                                (0x900000, 2 * MiB, True, [("inactive", 2 * MiB)])])
        self.assertEqual(snap["allocator_settings"]["expandable_segments"], True)
        self.assertEqual(snap["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True")

    def test_torch_viewers(self):
        """torch.cuda._memory_viz of the installed PyTorch runs on exported snapshots."""
        try:
            import torch.cuda._memory_viz as viz
        except Exception as e:  # noqa: BLE001
            print(f"test_torch_viewers: skipped: torch is not importable ({e})")
            self.skipTest("torch is not importable")
        names = [n for n in ("segments", "memory", "compare", "stats", "segsum", "trace") if hasattr(viz, n)]
        print(f"torch {getattr(sys.modules.get('torch'), '__version__', '?')}: _memory_viz has {names}")
        self.assertIn("segments", names)
        ident = lambda s: s   # noqa: E731  (format_flamegraph would download flamegraph.pl)
        inputs = [convert("framed.pickle", "all")[0], convert("state_only.pickle", "all")[0],
                  convert("expandable.pickle")[0]]
        with open(os.path.join(TRACES, "ctx128_forward_mixed.trace")) as f:
            inputs.append(f.read())
        with open(os.path.join(TRACES, "resnet50_train.pickle.gz"), "rb") as f:
            inputs.append(convert(f.read())[0])
        for i, text in enumerate(inputs):
            with self.subTest(input=i):
                blob, _, _ = self.export(text)
                snap = pickle.loads(blob)   # what PyTorch's tools read: pickle.load of the file
                segs = snap["segments"]
                total = sum(s["total_size"] for s in segs)
                # PyTorch 1.13's functions take the list of segments (its snapshot was
                # one); later versions (those with segsum) the dict.
                arg = snap if "segsum" in names else segs
                lines = viz.segments(arg, format_flamegraph=ident).splitlines()
                self.assertEqual(len(lines), sum(len(s["blocks"]) for s in segs))
                sizes = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
                if hasattr(viz, "_block_extra"):   # later versions count requested bytes
                    self.assertLessEqual(sizes, total)
                else:                              # 1.13: block sizes, which tile the segments
                    self.assertEqual(sizes, total)
                viz.memory(arg, format_flamegraph=ident)
                if "stats" in names:
                    st = viz.stats(arg)
                    self.assertEqual(st["total_size"].value, total)
                    self.assertEqual(st["segments"], len(segs))
                if "segsum" in names:
                    viz.segsum(snap)
                if "trace" in names:
                    viz.trace(snap)
                with contextlib.redirect_stdout(io.StringIO()):
                    viz.compare(segs, [], format_flamegraph=ident)

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "t.trace")
            with open(src, "w") as f:
                f.write(convert("framed.pickle", "all")[0])
            out = os.path.join(d, "x.pickle")
            p = subprocess.run([sys.executable, EXPORTER, src, "-o", out], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out, "rb") as f:
                snap = imp.Snapshot(imp.parse_bytes(f.read()))   # the restricted unpickler reads it
            self.assertEqual(len(snap.traces), 2)
            p = subprocess.run([sys.executable, EXPORTER, src, "-o", out, "--device", "1"], capture_output=True,
                               text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(out, "rb") as f:
                one = pickle.load(f)
            self.assertEqual([len(t) for t in one["device_traces"]], [0, 2])
            self.assertEqual({s["device"] for s in one["segments"]}, {1})
            for args, needle, rc in (([src, "-o", out, "--device", "5"], "--device 5", 2),
                                     ([os.path.join(d, "none.trace"), "-o", out], "none.trace", 1)):
                p = subprocess.run([sys.executable, EXPORTER, *args], capture_output=True, text=True)
                self.assertEqual(p.returncode, rc, p.stderr)
                self.assertIn(needle, p.stderr)
            bad = os.path.join(d, "bad.trace")
            with open(bad, "w") as f:
                f.write("mnemo-trace 1\n0 alloc 0 0x10 16\n0 alloc 0 0x10 16\nend 2\n")
            p = subprocess.run([sys.executable, EXPORTER, bad, "-o", out], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2)
            self.assertIn("bad.trace:3: alloc at 0x10, which is live", p.stderr)

    def test_strict_reader(self):
        ok = "mnemo-trace 3\nframe 1 3 a.py f\nstack 1 1\n0 alloc 0 0x10 16 16 0 1\nend 1\n"
        exp.parse_trace(ok.encode())
        cases = [
            ("", "empty file"),
            ("mnemo-trace 1\nend 0", "no line feed"),
            ("mnemo-trace 5\nend 0\n", "unsupported trace version 5"),
            ("mnemo-trace 1\n", "no end line"),
            ("mnemo-trace 1\nend 1\n", "end count 1"),
            ("mnemo-trace 1\nend 0\n# late\n", "after the end line"),
            ("mnemo-trace 1\nmeta a 1\nmeta a 2\nend 0\n", "duplicate meta key"),
            ("mnemo-trace 1\n0 alloc 0 0x10 16\nmeta a 1\nend 1\n", "meta line after"),
            ("mnemo-trace 1\nframe 1 0 - f\nend 0\n", "frame line in a version 1 trace"),
            ("mnemo-trace 3\nframe 2 0 - f\nend 0\n", "frame id 2, expected 1"),
            ("mnemo-trace 3\nframe 1 0 a%2 f\nend 0\n", "bad % escape"),
            ("mnemo-trace 3\nstack 1 1\nend 0\n", "unknown frame id 1"),
            ("mnemo-trace 3\n0 alloc 0 0x10 16 16 0 1\nend 1\n", "unknown stack id 1"),
            ("mnemo-trace 2\n0 alloc 0 0x10 16 16 0 1\nend 1\n", "has 8 fields, expected 5 to 7"),
            ("mnemo-trace 1\n0 alloc 0 0x10 0\nend 1\n", "alloc of 0 bytes"),
            ("mnemo-trace 1\n0 free_requested 0 0x10 16\nend 1\n", "not live"),
            ("mnemo-trace 1\n0 alloc 0 10 16\nend 1\n", "is not 0x"),
            ("mnemo-trace 1\n0 teleport 0 0x10 16\nend 1\n", "unknown action"),
            ("mnemo-trace 3\nannotate 0 0 mark 0 x\nend 1\n", "annotate line in a version 3 trace"),
            ("mnemo-trace 4\nannotate 0 0 begin 0 x\nend 1\n", "annotation stage 'begin'"),
            ("mnemo-trace 4\nannotate 0 0 mark 1 x\nend 1\n", "unknown stack id 1"),
            ("mnemo-trace 4\nannotate 0 0 mark 0 a%zz\nend 1\n", "bad % escape"),
            ("mnemo-trace 4\nannotate 0 0 mark\nend 1\n", "annotate line needs"),
            ("mnemo-trace 4\nannotate 0 0 mark 0 x\nend 0\n", "end count 0, but the trace has 1"),
            ("mnemo-trace 4\nannotate 0 0 mark 0 x\nmeta k v\nend 1\n", "meta line after"),
            ("mnemo-trace 1\npre free_requested 0 0x10 16\nend 1\n", "unknown pre action"),
            ("mnemo-trace 1\n0 alloc 0 0x10 16\npre alloc 0 0x20 16\nend 2\n", "pre line after an event"),
            ("mnemo-trace 1\n0 alloc 0 0x10 99999999999999999999999\nend 1\n", "is not a decimal"),
            ("mnemo-trace 1\n" + "#" * 5000 + "\nend 0\n", "longer than 4096"),
            ("mnemo-trace 1\n0 alloc\x01 0 0x10 16\nend 1\n", "outside printable ASCII"),
        ]
        for text, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(exp.TraceError) as cm:
                    exp.parse_trace(text.encode(), "t")
                self.assertIn(needle, str(cm.exception))
                self.assertTrue(str(cm.exception).startswith("t:"))


# ---- fuzz --------------------------------------------------------------------------------

class _CliCase(unittest.TestCase):
    """A test that runs the mnemo CLI (skipped without one) in a temporary folder."""

    def setUp(self):
        if not CLI:
            self.skipTest("no mnemo CLI given")
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        for f in os.listdir(self.tmp):
            os.unlink(os.path.join(self.tmp, f))
        os.rmdir(self.tmp)


class TestReplayDevices(_CliCase):
    """`mnemo replay` on snapshots of several devices and with recorded OOMs:
    every device replayed on its own and compared with its own PyTorch figures;
    --trace-device on a pickle; the capacity as recorded reproduces an OOM at its
    entry; the JSON shape (one object for one device and one config, else an
    array of objects with device and config)."""

    def replay_json(self, path, *args, rc=0):
        r = run_cli("replay", path, "--json", "--no-progress", *args)
        self.assertEqual(r.returncode, rc, r.stderr)
        import json
        return json.loads(r.stdout) if rc == 0 else r

    def write(self, name, data):
        path = os.path.join(self.tmp, name)
        with open(path, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return path

    def test_every_device_with_its_own_figures(self):
        # PyTorch: device 0 peaked at 22 MiB reserved, device 1 at 20 MiB
        want = {0: 22 * MiB, 1: 20 * MiB}
        text = convert("multi_device.pickle", "all")[0]
        for path in (os.path.join(SAMPLES, "multi_device.pickle"), self.write("all.trace", text)):
            out = self.replay_json(path)
            self.assertIsInstance(out, list)
            self.assertEqual([o["device"] for o in out], [0, 1])
            for o in out:
                self.assertEqual(o["torch"]["peak_reserved"], want[o["device"]])
                self.assertEqual(o["peak_reserved"], want[o["device"]])
                self.assertEqual(o["reserved_vs_torch"], 1.0)
                self.assertEqual(o["segments_vs_torch"], 1.0)
                self.assertEqual(o["replay_device"], "sim:0")
        # the table: one block per device, each with its own res/torch
        r = run_cli("replay", os.path.join(SAMPLES, "multi_device.pickle"), "--no-progress")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("device 0: 7 entries", r.stdout)
        self.assertIn("device 1: 5 entries", r.stdout)
        self.assertNotIn("0.909", r.stdout)   # device 1 against device 0's figures, before

    def test_trace_device_on_a_pickle(self):
        pk = os.path.join(SAMPLES, "multi_device.pickle")
        one = self.replay_json(pk, "--trace-device", "1")
        self.assertIsInstance(one, dict)   # one device, one config: one object, as before
        self.assertEqual(one["device"], 1)
        self.assertEqual(one["torch"]["peak_reserved"], 20 * MiB)
        self.assertEqual(one["reserved_vs_torch"], 1.0)
        # the same on the --device all trace, and on a one-device import of device 1
        for text in (convert("multi_device.pickle", "all")[0], convert("multi_device.pickle", 1)[0]):
            o = self.replay_json(self.write("t.trace", text), "--trace-device", "1")
            self.assertEqual((o["device"], o["torch"]["peak_reserved"], o["reserved_vs_torch"]), (1, 20 * MiB, 1.0))
        r = self.replay_json(self.write("t.trace", convert("multi_device.pickle", "all")[0]), "--trace-device", "3",
                             rc=1)
        self.assertIn("--trace-device 3: the trace has no entries on that device (it has: 0 1)", r.stderr)

    def test_several_configs_and_devices(self):
        out = self.replay_json(os.path.join(SAMPLES, "multi_device.pickle"), "--config", "",
                               "--config", "max_split_size_mb:512")
        self.assertEqual([(o["device"], o["config"]) for o in out],
                         [(0, ""), (0, "max_split_size_mb:512"), (1, ""), (1, "max_split_size_mb:512")])

    def test_oom_as_recorded(self):
        # oom.pickle: 20 MiB reserved when PyTorch failed to get 40 MiB with 1 MiB free
        o = self.replay_json(os.path.join(SAMPLES, "oom.pickle"))
        self.assertEqual((o["capacity"], o["capacity_from"]), (20 * MiB, "oom"))
        self.assertEqual(o["torch_ooms"], [{"entry": 2, "time_us": 2, "size": 40 * MiB, "device_free": MiB,
                                            "reproduced": True}])
        self.assertTrue(o["oom_reproduced"])
        self.assertEqual((o["ooms"], o["oom_entries"], o["ooms_reproduced"]), (0, [], 1))
        # --capacity overrides: 1 GiB has room for it
        o = self.replay_json(os.path.join(SAMPLES, "oom.pickle"), "--capacity", "1G")
        self.assertEqual((o["capacity"], o["capacity_from"]), (1 << 30, "option"))
        self.assertFalse(o["torch_ooms"][0]["reproduced"])
        self.assertFalse(o["oom_reproduced"])
        # with 16 MiB the recorded allocation of 10 MiB fails (the replay's own OOM)
        o = self.replay_json(os.path.join(SAMPLES, "oom.pickle"), "--capacity", "8M")
        self.assertEqual(o["oom_entries"], [{"entry": 1, "size": 10 * MiB}])
        self.assertEqual(o["ooms"], 1)
        r = run_cli("replay", os.path.join(SAMPLES, "oom.pickle"), "--no-progress")
        self.assertIn("recorded OOM at entry 2 (2 us): asked 40.00 MiB, the device had 1.00 MiB free", r.stdout)
        self.assertIn("out of memory there too", r.stdout)

    def test_oom_on_the_second_device(self):
        # device 1 runs out of memory (30 MiB asked, 4 MiB free at 20 MiB reserved);
        # device 0 does not: only device 1 takes its capacity from the snapshot
        snap = load_sample("multi_device.pickle")
        d1 = snap["device_traces"][1]
        d1.insert(3, {"action": "oom", "device_free": 4 * MiB + 12345, "size": 30 * MiB, "stream": 0,
                      "time_us": 16, "frames": []})
        path = self.write("oom2.pickle", pickle.dumps(snap, protocol=4))
        out = self.replay_json(path)
        self.assertEqual([(o["device"], o["capacity_from"]) for o in out], [(0, "default"), (1, "oom")])
        self.assertEqual(out[0]["torch_ooms"], [])
        self.assertNotIn("oom_reproduced", out[0])
        self.assertEqual(out[1]["capacity"], 24 * MiB)   # 20 MiB reserved + 4 MiB free (2 MiB granules)
        self.assertEqual(len(out[1]["torch_ooms"]), 1)
        self.assertEqual(out[1]["torch_ooms"][0]["device_free"], 4 * MiB + 12345)
        self.assertTrue(out[1]["oom_reproduced"])
        self.assertEqual(out[1]["reserved_vs_torch"], 1.0)

    def test_pinned_host_device_is_not_replayed(self):
        text = ("mnemo-trace 2\nmeta devices 0\nmeta host_device 1\n"
                "1 alloc 0 0x1000 1048576 1048576 0\n2 alloc 0 0x1000 4096 4096 1\n"
                "3 free_requested 0 0x1000 1048576 0 0\nend 3\n")
        path = self.write("host.trace", text)
        r = run_cli("replay", path, "--json", "--no-progress")
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        o = json.loads(r.stdout)
        self.assertEqual((o["device"], o["allocs"]), (0, 1))
        self.assertIn("device 1 holds pinned host memory (meta host_device): not replayed", r.stderr)
        r = run_cli("replay", path, "--json", "--no-progress", "--trace-device", "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("pinned host memory", r.stderr)


def empty_cache_cycles_workload(cycles=28):
    """A training-like loop of `cycles` empty_cache() cycles as a trace of allocs,
    frees and empty_cache lines (no segments: the allocator makes them). Each
    cycle caches ten oversize blocks (max_split_size_mb:64), then a 300 MiB
    allocation that does not fit the device makes PyTorch's out-of-memory path
    free only the largest two (release_available_cached_blocks), then the ten
    sizes again (eight reuse their cached blocks), then torch.cuda.empty_cache()."""
    lines, live, t, nxt = ["mnemo-trace 1"], {}, 0, 0x100000000

    def alloc(size):
        nonlocal t, nxt
        t += 1
        lines.append(f"{t} alloc 0 0x{nxt:x} {size}")
        live[nxt] = size
        nxt += 1 << 32
        return nxt - (1 << 32)

    def free(a):
        nonlocal t
        t += 1
        lines.append(f"{t} free_requested 0 0x{a:x} {live.pop(a)}")

    weights = [alloc(256 * MiB) for _ in range(4)]
    for c in range(cycles):
        for a in [alloc((80 + 20 * k) * MiB + 4096 * c) for k in range(10)]:
            free(a)
        big = alloc(300 * MiB)
        small = [alloc((k + 1) * 100000) for k in range(8)]
        free(big)
        for a in [alloc((80 + 20 * k) * MiB + 4096 * c) for k in range(10)] + small:
            free(a)
        t += 1
        lines.append(f"{t} empty_cache 0 0x0 0")
    for a in weights:
        free(a)
    lines.append(f"end {len(lines) - 1}")
    return "\n".join(lines) + "\n"


class TestEmptyCacheFidelity(_CliCase):
    """Replay of empty_cache-heavy runs: a PyTorch-shaped snapshot made by
    running a workload on mnemo's caching allocator (PyTorch's rules) on a device
    too small for it, recorded (MNEMO_TRACE) and exported in PyTorch's form
    without mnemo's empty_cache events (PyTorch records none); its replay must
    give PyTorch's peak reserved and segment count (the bound is 2%; it is exact).
    Before: every run of segment frees became a full empty_cache, so the partial
    releases of PyTorch's out-of-memory path freed the whole cache in the replay
    (676 segment allocations against 452)."""

    def test_drop_partial_releases(self):
        # two free 20 MiB segments; a run frees one (a segment stays free: partial),
        # then a run frees the other (none left: a full release)
        e = lambda a, addr, size, i: {"action": a, "addr": addr, "size": size, "stream": 0,  # noqa: E731
                                      "time_us": i, "index": i, "frames": ()}
        evs = [e("segment_alloc", 0x1000000, 20 * MiB, 0), e("segment_alloc", 0x3000000, 20 * MiB, 1),
               e("alloc", 0x3000000, MiB, 2), e("free_requested", 0x3000000, MiB, 3),
               e("segment_free", 0x1000000, 20 * MiB, 4), e("segment_alloc", 0x5000000, 40 * MiB, 5),
               e("alloc", 0x5000000, 40 * MiB, 6), e("segment_free", 0x3000000, 20 * MiB, 7)]
        inferred, n = imp.infer_empty_cache(evs, False)
        self.assertEqual(n, 2)
        kept, dropped = imp.drop_partial_releases(inferred, {}, {})
        self.assertEqual(dropped, 1)
        self.assertEqual([x["action"] for x in kept if x["action"] in ("empty_cache", "segment_free")],
                         ["segment_free", "empty_cache", "segment_free"])

    def make_snapshot(self, capacity_mib):
        work = os.path.join(self.tmp, "work.trace")
        with open(work, "w") as f:
            f.write(empty_cache_cycles_workload())
        rec = os.path.join(self.tmp, "rec.trace")
        env = dict(os.environ, MNEMO_TRACE=rec)
        r = subprocess.run([CLI, "replay", work, "--json", "--no-progress", "--no-pre-segments", "--capacity",
                            f"{capacity_mib}M", "--config", "max_split_size_mb:64"], capture_output=True,
                           text=True, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        import json
        live = json.loads(r.stdout)
        r = subprocess.run([sys.executable, EXPORTER, rec, "-o", os.path.join(self.tmp, "rec.pickle")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        snap = load_sample(os.path.join(self.tmp, "rec.pickle"))
        snap["allocator_settings"].update(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64", max_split_size=64 * MiB)
        for tr in snap["device_traces"]:
            tr[:] = [x for x in tr if x["action"] != "empty_cache"]
        path = os.path.join(self.tmp, "cycles.pickle")
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=4)
        return live, path

    def test_empty_cache_cycles_replay_within_two_percent(self):
        import json
        live, path = self.make_snapshot(2900)
        self.assertEqual(live["ooms"], 0)
        r = run_cli("replay", path, "--json", "--no-progress")
        self.assertEqual(r.returncode, 0, r.stderr)
        o = json.loads(r.stdout)
        torch = o["torch"]
        self.assertEqual((torch["peak_reserved"], torch["segment_allocs"]),
                         (live["peak_reserved"], live["device_allocs_events"]))
        self.assertGreaterEqual(o["empty_caches"], 28)
        self.assertLessEqual(abs(o["reserved_vs_torch"] - 1), 0.02)
        self.assertLessEqual(abs(o["segments_vs_torch"] - 1), 0.02)
        # exact: the partial releases replay as PyTorch made them, on a device of the
        # size they imply (capacity as recorded, "releases")
        self.assertEqual(o["capacity_from"], "releases")
        self.assertEqual((o["peak_reserved"], o["device_allocs_events"]),
                         (torch["peak_reserved"], torch["segment_allocs"]))
        r = run_cli("replay", path, "--no-progress")
        self.assertIn("as recorded: the least that PyTorch's partial cache releases allow", r.stdout)

    def test_real_snapshots_exact(self):
        """The bundled recorded snapshots and, when present, the shared ones
        ($MNEMO_SHARED_TRACES, else ../shared/traces next to the repository): peak reserved equal to
        PyTorch's to the byte, and the same segment count, on every device."""
        import json
        paths = [os.path.join(TRACES, n) for n in sorted(os.listdir(TRACES)) if n.endswith(".pickle.gz")]
        shared = os.environ.get("MNEMO_SHARED_TRACES") or os.path.join(HERE, "..", "..", "shared", "traces")
        if os.path.isdir(shared):
            paths += [os.path.join(shared, n) for n in sorted(os.listdir(shared)) if n.endswith(".pickle")]
        self.assertGreaterEqual(len(paths), 4)
        for path in paths:
            with self.subTest(path=os.path.basename(path)):
                r = run_cli("replay", path, "--json", "--no-progress")
                self.assertEqual(r.returncode, 0, r.stderr)
                out = json.loads(r.stdout)
                for o in out if isinstance(out, list) else [out]:
                    self.assertEqual(o["peak_reserved"], o["torch"]["peak_reserved"])
                    self.assertEqual(o["device_allocs_events"], o["torch"]["segment_allocs"])


def _mutate_obj(rng, obj):
    """A random structural change somewhere in a snapshot object: a field deleted,
    a value of another type, a list cut, an element repeated."""
    nodes = []

    def walk(x, depth):
        if depth > 8:
            return
        if isinstance(x, dict):
            nodes.append(x)
            for v in x.values():
                walk(v, depth + 1)
        elif isinstance(x, list):
            nodes.append(x)
            for v in x:
                walk(v, depth + 1)
    walk(obj, 0)
    node = rng.choice(nodes)
    weird = [None, -1, 0, 1 << 70, 2.5, float("nan"), float("inf"), True, "x", "", [], {}, (0, 0), b"b",
             [{"name": 1}], {"a": 1}, 1 << 64, -(1 << 63)]
    if isinstance(node, dict) and node:
        key = rng.choice(list(node))
        r = rng.random()
        if r < 0.35:
            del node[key]
        elif r < 0.85:
            node[key] = rng.choice(weird)
        else:
            node[rng.choice(weird[:9] + ["action", "addr"]) if rng.random() < 0.5 else f"{key}_x"] = node.pop(key)
    elif isinstance(node, list) and node:
        r = rng.random()
        if r < 0.4:
            del node[rng.randrange(len(node)):]
        elif r < 0.7:
            node[rng.randrange(len(node))] = rng.choice(weird)
        else:
            node.append(node[rng.randrange(len(node))])
    return obj


class TestFuzz(unittest.TestCase):
    def test_mutations(self):
        """Thousands of mutated snapshots (fields deleted, types swapped, pickle bytes
        cut or changed): the importer writes a valid trace or raises SnapshotError
        (exit status 2 with its message), never anything else."""
        rng = random.Random(20261123)
        seeds = {}
        for name in ("state_only.pickle", "legacy_list.pickle", "framed.pickle", "empty_cache.pickle",
                     "expandable.pickle", "old_dict.pickle", "multi_device.pickle"):
            with open(os.path.join(SAMPLES, name), "rb") as f:
                seeds[name] = f.read()
        seeds["example"] = pickle.dumps(example_snapshot(), protocol=2)
        names = sorted(seeds)
        outcomes = {"ok": 0, "error": 0}
        for i in range(3000):
            name = rng.choice(names)
            data = seeds[name]
            kind = rng.random()
            if kind < 0.5:
                obj = pickle.loads(data)
                for _ in range(rng.randint(1, 3)):
                    obj = _mutate_obj(rng, obj)
                data = pickle.dumps(obj, protocol=rng.choice((0, 2, 4)))
            elif kind < 0.7:
                data = data[:rng.randrange(len(data))]
            elif kind < 0.9:
                b = bytearray(data)
                for _ in range(rng.randint(1, 4)):
                    b[rng.randrange(len(b))] = rng.randrange(256)
                data = bytes(b)
            else:
                data = gzip.compress(data, mtime=0)
                data = data[:rng.randrange(len(data))] if rng.random() < 0.5 else data
            device = rng.choice((None, None, "all", 0, 1, 3))
            try:
                text, _, _, _ = imp.convert(data, device, "fuzz.pickle")
            except imp.SnapshotError as e:
                self.assertTrue(str(e), f"mutation {i}: empty message")
                outcomes["error"] += 1
                continue
            except Exception as e:  # noqa: BLE001
                self.fail(f"mutation {i} of {name} (device {device}): {type(e).__name__}: {e}\n"
                          f"input: {data[:200]!r}")
            try:
                exp.parse_trace(text.encode(), "written")
            except exp.TraceError as e:
                self.fail(f"mutation {i} of {name}: the importer wrote an invalid trace: {e}")
            outcomes["ok"] += 1
        print(f"fuzz: {outcomes['ok']} converted, {outcomes['error']} refused with a message")
        self.assertGreater(outcomes["ok"], 300)
        self.assertGreater(outcomes["error"], 300)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    IMPORTER = os.path.abspath(sys.argv[1])
    EXPORTER = os.path.join(os.path.dirname(IMPORTER), "export_torch_snapshot.py")
    CLI = sys.argv[2] if len(sys.argv) > 2 else None
    imp = load_module("import_torch_snapshot", IMPORTER)
    exp = load_module("export_torch_snapshot", EXPORTER)
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[3:])
