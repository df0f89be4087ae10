#!/usr/bin/env python3
# tests/test_import.py: tests tools/import_torch_snapshot.py on synthetic PyTorch
# snapshots: pre-existing state, PyTorch's figures, refused globals, malformed input.
"""Usage: test_import.py IMPORTER [MNEMO_CLI]

IMPORTER is tools/import_torch_snapshot.py; MNEMO_CLI (optional) is the built
`mnemo` tool, used to check that the C reader accepts what the importer writes.
"""

import os
import pickle
import subprocess
import sys
import tempfile
import unittest

MiB = 1 << 20
IMPORTER = None
CLI = None


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
    assert lines[0] == "mnemo-trace 1", lines[0]
    assert text.endswith("\n")
    meta, pre, events, end = {}, [], [], None
    for line in lines[1:]:
        f = line.split()
        if not f or f[0].startswith("#"):
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
        text = open(out).read() if os.path.exists(out) else None
        return p, text

    def test_example(self):
        p, text = self.run_importer(example_snapshot())
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        S0, S1, S2 = 0x10000000, 0x20000000, 0x30000000
        # Pre-existing: S0 (20 MiB), P (alive at dump), Q (freed without an alloc).
        self.assertEqual(pre[0], ["segment_alloc", "0", hex(S0), str(20 * MiB)])
        self.assertEqual(pre[1], ["alloc", "0", hex(S0), "10000000", "10485760"])
        # Q's block size is rebuilt: 4 MiB request, and the 6 MiB gap after it
        # would have been split (> 1 MiB), so its block is 4 MiB.
        self.assertEqual(pre[2], ["alloc", "0", hex(S0 + 10485760), str(4 * MiB), str(4 * MiB)])
        self.assertEqual(len(pre), 3)
        self.assertEqual(meta["pre_segments"], "1")
        self.assertEqual(meta["pre_allocs"], "2")
        self.assertEqual(meta["device"], "0")
        self.assertEqual(meta["torch_alloc_conf"], "max_split_size_mb:512")
        self.assertEqual(meta["time_origin_us"], "100")
        # 9 events (the 'snapshot' entry is dropped); times relative to the first.
        self.assertEqual(len(events), 9)
        self.assertEqual(events[0], ["0", "segment_alloc", "0", hex(S1), str(20 * MiB)])
        self.assertEqual(events[1], ["1", "alloc", "0", hex(S1), "10240000", "10240000"])
        # B takes the unsplit remainder: block 20 MiB - 10,240,000 B.
        self.assertEqual(events[2], ["2", "alloc", "0", hex(S1 + 10240000), "10240000", str(20 * MiB - 10240000)])
        self.assertEqual(events[8], ["7", "alloc", "5", hex(S2), str(MiB), str(MiB)])
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
            r = subprocess.run([CLI, "replay", os.path.join(self.tmp, "out.trace"), "--allocator", "naive",
                                "--json"], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn('"pre_allocs": 2', r.stdout)
            self.assertIn('"allocs": 3', r.stdout)

    def test_device_choice(self):
        snap = example_snapshot()
        snap["device_traces"] = [[], snap["device_traces"][0]]
        for s in snap["segments"]:
            s["device"] = 1 - s["device"]
        p, text = self.run_importer(snap)  # default: the first device with events (1)
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual(meta["device"], "1")
        self.assertEqual(len(events), 9)
        p, text = self.run_importer(snap, args=("--device", "0"))
        self.assertEqual(p.returncode, 0, p.stderr)
        meta, pre, events = parse_trace(text)
        self.assertEqual((meta["device"], len(events), len(pre)), ("0", 0, 1))  # device 0's one segment
        p, _ = self.run_importer(snap, args=("--device", "2"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device 2", p.stderr)

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

    def test_malformed(self):
        good = example_snapshot()
        cases = [
            (None, b"not a pickle at all", "not a readable pickle"),
            (None, pickle.dumps({"segments": []})[:-3], "not a readable pickle"),
            ([1, 2], None, "top level is a list"),
            ({"segments": []}, None, "device_traces"),
            ({"segments": [], "device_traces": [[]]}, None, "no device has trace events"),
            ({"segments": [], "device_traces": [[{"action": "alloc", "addr": "x", "size": 1, "stream": 0}]]},
             None, "'addr'"),
            ({"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": -1, "stream": 0}]]},
             None, "'size'"),
            ({"segments": [], "device_traces": [[{"action": "teleport", "addr": 1, "size": 1, "stream": 0}]]},
             None, "unknown action 'teleport'"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 16), ev("alloc", 16, 16)]]},
             None, "already allocated"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 16), ev("free_requested", 16, 16),
                                                 ev("free_requested", 16, 16)]]}, None, "second free"),
            ({"segments": [], "device_traces": [[ev("alloc", 16, 0)]]}, None, "alloc of 0 bytes"),
            ({"segments": "x", "device_traces": good["device_traces"]}, None, "'segments' is not a list"),
            ({"segments": [segment(0, 100, [block(50, 100, 1, "active_allocated")])],
              "device_traces": good["device_traces"]}, None, "outside its segment"),
        ]
        for obj, raw, needle in cases:
            with self.subTest(needle=needle):
                p, text = self.run_importer(obj, raw=raw)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("malformed snapshot", p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertIsNone(text)

    def test_missing_file(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(self.tmp, "none.pickle"), "-o",
                            os.path.join(self.tmp, "o.trace")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("none.pickle", p.stderr)


SAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch")


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
            if not f or f[0].startswith("#"):
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
        # One device only: version 1, as before.
        one = self.convert("multi_device.pickle", "--device", "1")
        self.assertTrue(one.startswith("mnemo-trace 1\n"))

    def test_expandable(self):
        meta, rest = self.lines(self.convert("expandable.pickle"))
        self.assertIn(["pre", "segment_map", "0", "0x7f0000000000", str(4 * MiB)], rest)
        self.assertEqual(meta["torch_reserved_start"], str(4 * MiB))
        self.assertEqual(meta["torch_peak_reserved"], str(6 * MiB))
        self.assertTrue(meta["torch_allocated_method"].startswith("rounded"))
        acts = [f[1] for f in rest if f[0] not in ("pre", "end")]
        self.assertEqual(acts.count("segment_map"), 2)
        self.assertEqual(acts.count("segment_unmap"), 1)
        out = self.replay(self.convert("expandable.pickle"), "--config", "expandable_segments:True")
        if out:
            self.assertIn('"pre_allocs": 1', out)

    def test_oom(self):
        meta, rest = self.lines(self.convert("oom.pickle"))
        self.assertEqual(meta["torch_ooms"], "1")
        self.assertIn(["2", "oom", "0", "0x100000", str(40 * MiB)], rest)
        out = self.replay(self.convert("oom.pickle"))
        if out:
            self.assertIn('"ooms": 0', out)  # the replay itself had room

    def test_table(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, "multi_device.pickle"), "--table",
                            "--blocks"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("device 0: 2 segments, 4 blocks", p.stdout)
        self.assertIn("device 1: 1 segments, 3 blocks", p.stdout)
        self.assertIn("active_allocated", p.stdout)
        self.assertIn("20.0%", p.stdout)  # device 1: 15 MiB free, largest free block 12 MiB
        if CLI:
            r = subprocess.run([CLI, "snapshot", os.path.join(SAMPLES, "multi_device.pickle")], capture_output=True,
                               text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("device 1: 1 segments", r.stdout)

    def test_bad_device_arg(self):
        p = subprocess.run([sys.executable, IMPORTER, os.path.join(SAMPLES, "oom.pickle"), "-o", "-", "--device",
                            "first"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device must be an index or 'all'", p.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    IMPORTER = sys.argv[1]
    CLI = sys.argv[2] if len(sys.argv) > 2 else None
    unittest.main(argv=[sys.argv[0], "-v"])
