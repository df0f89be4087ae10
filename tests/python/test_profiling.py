#!/usr/bin/env python3
# tests/python/test_profiling.py: mnemo.profiling: recording a caching allocator
# on the SIM device and reading the trace back; replay, import_snapshot and
# snapshot in this process (the same results as the CLI's `replay --json`, no
# CLI needed); report and diff through the mnemo CLI's --json objects (no text parsed), whose errors carry its
# message and exit status. Single-threaded.
"""Run: PYTHONPATH=<build>/python python3 tests/python/test_profiling.py"""
import gzip
import os
import tempfile
import unittest
import warnings

import mnemo
from mnemo import profiling as P

MiB = 1 << 20
SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TRACES = os.path.join(SRC, "data", "traces")
CTX = os.path.join(TRACES, "ctx128_forward_mixed.trace")
RESNET_PICKLE = os.path.join(TRACES, "resnet50_train.pickle.gz")
RESNET_TRACE = os.path.join(TRACES, "resnet50_train.trace")


def without_line(entries):
    return [{k: v for k, v in e.items() if k != "line"} for e in entries]


class Record(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="mnemo-test-profiling-")

    def tearDown(self):
        self.tmp.cleanup()

    def test_record_write_read(self):
        with mnemo.CachingAllocator("sim:0") as a:
            with P.record(a) as rec:
                self.assertTrue(rec.recording)
                p = a.alloc(1000)
                q = a.alloc(5 * MiB)
                a.free(p)
                a.free(q)
                a.empty_cache()
            self.assertFalse(rec.recording)
            a.free(a.alloc(64))  # after stop: not recorded
            st = rec.stats()
            self.assertEqual(st["recorded"], 11)
            self.assertEqual((st["held"], st["overwritten"], st["capacity"]), (11, 0, 1_000_000))
            tr = rec.trace()
            got = [(e["action"], e["size"], e["block_size"]) for e in tr["entries"]]
            self.assertEqual(got, [
                ("segment_alloc", 2 * MiB, 0), ("alloc", 1000, 1024),
                ("segment_alloc", 20 * MiB, 0), ("alloc", 5 * MiB, 5 * MiB),
                ("free_requested", 1000, 0), ("free_completed", 1000, 0),
                ("free_requested", 5 * MiB, 0), ("free_completed", 5 * MiB, 0),
                ("empty_cache", 0, 0), ("segment_free", 20 * MiB, 0), ("segment_free", 2 * MiB, 0)])
            e = tr["entries"]
            self.assertEqual(e[1]["address"], p)
            self.assertEqual(e[3]["address"], q)
            self.assertEqual(e[4]["address"], p)
            self.assertTrue(all(not x["pre"] and x["device"] == 0 and x["stack"] == 0 for x in e))
            self.assertEqual([x["time_us"] for x in e], sorted(x["time_us"] for x in e))
            path = rec.write(os.path.join(self.tmp.name, "run.trace"))
            back = P.read_trace(path)
            self.assertEqual(back["version"], tr["version"])
            self.assertEqual(back["meta"], tr["meta"])
            self.assertEqual(without_line(back["entries"]), without_line(tr["entries"]))
            self.assertEqual([x["line"] for x in back["entries"]][0] > 0, True)
            # the recorded run replays (through the CLI) to the same peaks
            r = P.replay(path)
            self.assertEqual(len(r), 1)
            self.assertEqual(r[0]["peak_allocated"], a.max_memory_allocated())
            self.assertEqual(r[0]["peak_reserved"], 22 * MiB)
            self.assertEqual(r[0]["device_allocs"], 2)
            rec.close()
            with self.assertRaises(ValueError):
                rec.stats()

    def test_bounded_and_default_allocator(self):
        d = mnemo.default_allocator("sim:0")
        rec = P.record("sim:0", capacity=4)
        try:
            ptrs = [d.alloc(100 * (i + 1)) for i in range(4)]
            for p in ptrs:
                d.free(p)
            rec.stop()
            st = rec.stats()
            self.assertEqual(st["held"], 4)
            self.assertEqual(st["overwritten"], st["recorded"] - 4)
            tr = rec.trace()
            # the 4 newest events are frees; the allocations they free became pre lines
            pre = [e for e in tr["entries"] if e["pre"]]
            self.assertEqual([e["action"] for e in pre], ["alloc"] * len(pre))
            self.assertEqual(len(tr["entries"]) - len(pre), 4)
            path = rec.write(os.path.join(self.tmp.name, "bounded.trace"))
            self.assertEqual(without_line(P.read_trace(path)["entries"]), without_line(tr["entries"]))
        finally:
            rec.close()
            d.empty_cache()

    def test_record_needs_a_caching_allocator(self):
        with mnemo.NaiveAllocator("sim:0") as n:
            with self.assertRaises(mnemo.MnemoError):
                P.record(n)
        with self.assertRaises(ValueError):
            P.record("sim:0", capacity=0)
        with self.assertRaises(ValueError):
            P.record("sim:0", stacks=-1)

    def test_stacks(self):
        with mnemo.CachingAllocator("sim:0") as a:
            with P.record(a, stacks=8) as rec:
                a.free(a.alloc(4096))
            tr = rec.trace()
            rec.close()
        self.assertEqual(tr["version"], 3)
        alloc = next(e for e in tr["entries"] if e["action"] == "alloc")
        self.assertGreater(alloc["stack"], 0)
        frames = tr["stacks"][alloc["stack"] - 1]
        self.assertTrue(1 <= len(frames) <= 8)
        self.assertTrue(all(1 <= f <= len(tr["frames"]) for f in frames))
        self.assertEqual(set(tr["frames"][0]), {"file", "name", "line"})


class ReadTrace(unittest.TestCase):
    def test_bundled(self):
        t = P.read_trace(CTX)
        self.assertEqual(t["version"], 3)
        self.assertEqual(t["meta"]["recorded_by"], "pytorch")
        self.assertEqual(t["meta"]["torch_peak_reserved"], "24245174272")
        self.assertEqual(len(t["entries"]), 6543)
        pre = [e for e in t["entries"] if e["pre"]]
        self.assertEqual(sum(e["action"] == "segment_alloc" for e in pre), int(t["meta"]["pre_segments"]))
        self.assertEqual(sum(e["action"] == "alloc" for e in pre), int(t["meta"]["pre_allocs"]))
        self.assertEqual(t["frames"][0]["name"], "torch::unwind::unwind()")
        used = {e["stack"] for e in t["entries"]} - {0}
        self.assertTrue(used and max(used) <= len(t["stacks"]))

    def test_annotations_v4(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus", "trace",
                            "v4_annotations.trace")
        t = P.read_trace(path)
        self.assertEqual(t["version"], 4)
        self.assertEqual(t["meta"]["host_device"], "2")
        self.assertEqual(len(t["entries"]), 7)
        a = t["annotations"]
        self.assertEqual([(x["stage"], x["entry"], x["device"], x["stack"]) for x in a],
                         [("start", 0, 0, 0), ("mark", 1, 1, 0), ("start", 3, 0, 1), ("end", 5, 0, 1),
                          ("mark", 7, 1, 0)])
        self.assertEqual(a[0]["name"], "whole run")
        self.assertEqual(a[1]["name"], "")
        self.assertEqual(a[2]["name"], "forward 100% caf\u00e9\tx")
        self.assertEqual(a[2]["time_us"], 2)
        self.assertEqual(P.read_trace(CTX)["annotations"], [])

    def test_errors(self):
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.read_trace("/nonexistent/x.trace")
        self.assertEqual(cm.exception.status_name, "io_error")
        self.assertIn("/nonexistent/x.trace", str(cm.exception))
        with tempfile.NamedTemporaryFile("w", suffix=".trace") as f:
            f.write("mnemo-trace 1\nalloc 0 0 0x10 100\n")
            f.flush()
            with self.assertRaises(mnemo.MnemoError) as cm:
                P.read_trace(f.name)
            self.assertEqual(cm.exception.status_name, "format_error")
            self.assertIn(":2:", str(cm.exception))
        with self.assertRaises(TypeError):
            P.read_trace(None)


class Tool(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="mnemo-test-profiling-")

    def tearDown(self):
        self.tmp.cleanup()

    def test_replay_as_recorded(self):
        r = P.replay(CTX)
        self.assertEqual(len(r), 1)
        r = r[0]
        self.assertTrue(r["as_recorded"])
        self.assertEqual(r["reserved_vs_torch"], 1.0)
        self.assertEqual(r["allocated_vs_torch"], 1.0)
        self.assertEqual(r["peak_reserved"], 24245174272)
        self.assertEqual(r["torch"]["peak_reserved"], 24245174272)
        self.assertEqual(r["pre_segments"], r["pre_segments_laid_out"])
        self.assertEqual(r["replay_device"], "sim:0")
        self.assertEqual(r["device"], 0)  # the recorded device

    def test_replay_configs(self):
        r = P.replay(CTX, configs=["", {"expandable_segments": True}, "max_split_size_mb:512"])
        self.assertEqual([x["config"] for x in r], ["", "expandable_segments:True", "max_split_size_mb:512"])
        self.assertFalse(any(x["as_recorded"] for x in r))
        self.assertEqual(r[0]["peak_reserved"], 24245174272)
        for x in r:
            self.assertGreaterEqual(x["peak_reserved"], x["peak_allocated"])
        # a small device runs out of memory; cold cache; no pre allocations
        small = P.replay(CTX, capacity="16G", pre_segments=False)[0]
        self.assertGreater(small["ooms"], 0)
        self.assertEqual(small["pre_segments"], 0)
        nopre = P.replay(CTX, pre=False)[0]
        self.assertEqual(nopre["pre_allocs"], 0)

    def test_import_snapshot(self):
        d = P.import_snapshot(RESNET_PICKLE)
        bundled = P.read_trace(RESNET_TRACE)
        self.assertEqual(d["meta"], bundled["meta"])
        self.assertEqual(without_line(d["entries"]), without_line(bundled["entries"]))
        out = os.path.join(self.tmp.name, "resnet.trace")
        self.assertEqual(P.import_snapshot(RESNET_PICKLE, out, device=0), out)
        self.assertEqual(P.read_trace(out)["meta"]["torch_peak_reserved"], bundled["meta"]["torch_peak_reserved"])
        # the pickle replays directly too, as recorded, to PyTorch's peak
        r = P.replay(RESNET_PICKLE)[0]
        self.assertEqual(r["reserved_vs_torch"], 1.0)
        self.assertEqual(r["peak_reserved"], int(bundled["meta"]["torch_peak_reserved"]))

    def test_report(self):
        out = os.path.join(self.tmp.name, "report.html")
        res = P.report(CTX, out, configs=["", "expandable_segments:True"], title="ctx128 test")
        self.assertEqual(res["path"], out)
        self.assertEqual(res["bytes"], os.path.getsize(out))
        self.assertGreater(res["bytes"], 10000)
        with open(out, encoding="utf-8") as f:
            page = f.read()
        self.assertIn("<html", page[:500].lower())
        self.assertIn("ctx128 test", page)
        self.assertEqual(res["configs"], 2)
        self.assertEqual(res["entries"], 6543)
        self.assertEqual(res["peak_reserved"], 24245174272)
        self.assertEqual(res["peak_allocated"], 24024505344)
        self.assertEqual(len(res["devices"]), 1)
        d = res["devices"][0]
        self.assertEqual((d["device"], d["label"], d["state_only"], d["replayed"]), (0, "cuda:0", False, True))
        # `mnemo report --json`'s numbers: every config's replay as replay() gives it, PyTorch's recorded peaks
        runs = P.replay(CTX, configs=["", "expandable_segments:True"])
        self.assertEqual([(r["config"], r["peak_reserved"], r["peak_allocated"], r["ooms"]) for r in d["results"]],
                         [(r["config"], r["peak_reserved"], r["peak_allocated"], r["ooms"]) for r in runs])
        self.assertEqual((d["capacity"], d["capacity_from"]), (runs[0]["capacity"], runs[0]["capacity_from"]))
        self.assertEqual(d["torch"], {"peak_reserved": 24245174272, "peak_allocated": 24024505344})
        self.assertEqual(d["segment_map"]["entry"], d["peak_reserved_entry"])
        self.assertGreater(d["live_at_peak_allocated"], 0)
        self.assertTrue(res["summary"].startswith(f"report {out}: 6543 entries, 2 configs, 1 device, "))
        # a 2.14 snapshot: a GPU and its pinned host memory (shown as recorded, not replayed)
        t214 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "torch",
                            "torch214.pickle")
        r2 = P.report(t214, os.path.join(self.tmp.name, "t214.html"))
        self.assertEqual([(x["device"], x["label"], x["replayed"]) for x in r2["devices"]],
                         [(0, "cuda:0", True), (1, "pinned host memory", False)])
        self.assertEqual(r2["devices"][1]["peak_allocated"], 4194304)
        self.assertEqual((r2["devices"][1]["capacity"], r2["devices"][1]["results"], r2["devices"][1]["torch"]),
                         (None, [], None))
        self.assertEqual(res["peak_entry"], d["peak_allocated_entry"])

    def test_snapshot(self):
        s = P.snapshot(CTX)
        rep = P.report(CTX, os.path.join(self.tmp.name, "r.html"))
        self.assertEqual(s["entry"], rep["peak_entry"])   # the peak of allocated bytes, as the CLI's
        self.assertEqual(s["stats"]["allocated_bytes.all.current"], rep["peak_allocated"])
        r = P.snapshot(CTX, at="reserved-peak")
        self.assertEqual(r["entry"], rep["devices"][0]["peak_reserved_entry"])
        self.assertEqual(r["stats"]["reserved_bytes.all.current"], rep["peak_reserved"])
        self.assertTrue(s["as_recorded"])
        self.assertEqual(s["stats"]["reserved_bytes.all.current"], 24245174272)
        self.assertEqual(sum(seg["total_size"] for seg in s["segments"]), 24245174272)
        self.assertEqual(sum(seg["allocated_size"] for seg in s["segments"]),
                         s["stats"]["allocated_bytes.all.current"])
        self.assertGreater(s["line"], 0)
        end = P.snapshot(CTX, at="end", config="")
        self.assertEqual(end["entry"], 6542)
        self.assertFalse(end["as_recorded"])
        first = P.snapshot(CTX, at=0)
        self.assertEqual(first["entry"], 0)
        with self.assertRaises(ValueError):
            P.snapshot(CTX, at=10 ** 9)
        with self.assertRaises(mnemo.MnemoError):
            P.snapshot(CTX, config="foo:1")
        pk = P.snapshot(RESNET_PICKLE, at="reserved-peak")  # a pickle is imported first
        self.assertEqual(pk["stats"]["reserved_bytes.all.current"], 3797942272)

    def test_diff(self):
        """diff(): the CLI's `diff --json` as a dict, and the page with out=."""
        full = os.path.join(os.path.dirname(CTX), "ctx128_fullstep.trace")
        page = os.path.join(self.tmp.name, "diff.html")
        d = P.diff(full, CTX, out=page, title="two runs")
        self.assertEqual(d["path"], page)
        self.assertEqual(d["bytes"], os.path.getsize(page))
        self.assertEqual(d["a"]["peak_reserved"], 61111009280)
        self.assertEqual(d["b"]["peak_reserved"], 24245174272)
        self.assertFalse(d["ranks"])
        self.assertEqual(sum(g["a_bytes"] for g in d["groups"]), d["a"]["live_bytes_at_peak"])
        self.assertEqual(sum(g["b_bytes"] for g in d["groups"]), d["b"]["live_bytes_at_peak"])
        with open(page, encoding="utf-8") as f:
            self.assertIn("two runs", f.read())
        same = P.diff(CTX, CTX)
        self.assertTrue(all(g["delta_bytes"] == 0 for g in same["groups"]))
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.diff(CTX, os.path.join(self.tmp.name, "missing.trace"))
        self.assertEqual(cm.exception.status_name, "io_error")
        self.assertIn("missing.trace", str(cm.exception))
        # the same numbers as the CLI's `diff --json`, and its notes as ReportWarning
        two = os.path.join(SRC, "tests", "data", "torch", "multi_device.pickle")
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            md = P.diff(two, CTX)
        notes = [str(w.message) for w in got if issubclass(w.category, P.ReportWarning)]
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("holds several devices; comparing device 0", notes[0])
        self.assertEqual(md["a"]["device"], 0)
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.diff(two, CTX, trace_device=7)
        self.assertEqual(cm.exception.status_name, "invalid_argument")
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.diff(CTX, CTX, config="bogus:1")
        self.assertEqual(cm.exception.status_name, "invalid_argument")

    def test_decompression_limit(self):
        """max_decompressed_size reaches the importer from every function that
        imports (resnet50_train.pickle.gz inflates to 247,057 bytes)."""
        out = os.path.join(self.tmp.name, "r.trace")
        html = os.path.join(self.tmp.name, "r.html")
        calls = [lambda m: P.import_snapshot(RESNET_PICKLE, out, max_decompressed_size=m),
                 lambda m: P.replay(RESNET_PICKLE, max_decompressed_size=m),
                 lambda m: P.report(RESNET_PICKLE, html, max_decompressed_size=m),
                 lambda m: P.snapshot(RESNET_PICKLE, max_decompressed_size=m)]
        for k, call in enumerate(calls):
            # in process: SnapshotError (format_error)
            with self.assertRaises(P.SnapshotError) as cm:
                call(100_000)
            self.assertEqual(cm.exception.status_name, "format_error")
            self.assertIn("inflates to more than 100000 bytes", str(cm.exception))
            call("1M")
        with self.assertRaises(TypeError):
            P.replay(RESNET_PICKLE, max_decompressed_size=1.5)

    def test_report_errors(self):
        """report() fails as the library does (MnemoError with its status and
        message, SnapshotError for a bad pickle) and leaves no page behind."""
        page = os.path.join(self.tmp.name, "m.html")
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.report(os.path.join(self.tmp.name, "missing.trace"), page)
        self.assertEqual(cm.exception.status_name, "io_error")
        self.assertIn("cannot open", str(cm.exception))
        for kw in ({"configs": "bogus:1"}, {"capacity": 1}, {"trace_device": 7}):
            with self.subTest(**kw):
                with self.assertRaises(mnemo.MnemoError) as cm:
                    P.report(CTX, page, **kw)
                self.assertEqual(cm.exception.status_name, "invalid_argument")
        with self.assertRaises(ValueError):
            P.report(CTX, page, configs=[""] * 17)
        with self.assertRaises(ValueError):
            P.report(CTX, page, trace_device=-1)
        bad = os.path.join(self.tmp.name, "bad.pickle.gz")
        with gzip.open(bad, "wb") as f:
            f.write(b"\x80\x04not really")
        with self.assertRaises(P.SnapshotError):
            P.report(bad, page)
        with self.assertRaises(mnemo.MnemoError) as cm:   # a page in a folder that does not exist
            P.report(CTX, os.path.join(self.tmp.name, "no", "such", "dir", "r.html"))
        self.assertEqual(cm.exception.status_name, "not_found")
        self.assertIn("r.html", str(cm.exception))
        self.assertFalse(os.path.exists(page))
        # the SIM device as it was: a report sized as recorded (or failing) leaves it unchanged
        before, after = P._SimConfig(), P._SimConfig()
        P.lib.mn_sim_get_config(P.C.byref(before))
        oom = os.path.join(SRC, "tests", "data", "torch", "oom.pickle")
        self.assertEqual(P.report(oom, page)["devices"][0]["capacity_from"], "oom")
        P.lib.mn_sim_get_config(P.C.byref(after))
        self.assertEqual(after.capacity, before.capacity)
        with self.assertRaises(mnemo.MnemoError):
            P.report(oom, page, configs=["", "bogus:1"])
        P.lib.mn_sim_get_config(P.C.byref(after))
        self.assertEqual(after.capacity, before.capacity)
        self.assertTrue(os.path.isfile(P.cli_path()))


class InProcess(unittest.TestCase):
    """replay, import_snapshot and snapshot call the library (and the snapshot
    importer module) in this process: no CLI, no parsing of its text."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="mnemo-test-profiling-")
        self.old_cli = os.environ.get("MNEMO_CLI")

    def tearDown(self):
        if self.old_cli is None:
            os.environ.pop("MNEMO_CLI", None)
        else:
            os.environ["MNEMO_CLI"] = self.old_cli
        self.tmp.cleanup()

    def test_no_cli_needed(self):
        """With no usable CLI, every function still works (each of replay,
        import_snapshot, snapshot, report and diff ran the CLI once)."""
        os.environ["MNEMO_CLI"] = os.path.join(self.tmp.name, "no-such-mnemo")
        page = os.path.join(self.tmp.name, "r.html")
        self.assertEqual(P.report(RESNET_PICKLE, page)["peak_reserved"], 3797942272)
        self.assertEqual(P.diff(RESNET_PICKLE, CTX, out=page)["bytes"], os.path.getsize(page))
        self.assertEqual(P.replay(CTX)[0]["peak_reserved"], 24245174272)
        d = P.import_snapshot(RESNET_PICKLE)
        self.assertEqual(d["meta"], P.read_trace(RESNET_TRACE)["meta"])
        self.assertEqual(P.replay(RESNET_PICKLE)[0]["reserved_vs_torch"], 1.0)
        self.assertEqual(P.snapshot(RESNET_PICKLE, at="reserved-peak")["stats"]["reserved_bytes.all.current"],
                         3797942272)

    def test_same_as_the_cli(self):
        """replay() gives what `mnemo replay --json` prints (the CLI's ratios
        have 4 decimals; ns_per_op is a time): traces of several devices, a
        recorded OOM (the SIM device sized as recorded), pinned host memory,
        several configs, the naive allocator."""
        try:
            cli_path = P.cli_path()
        except P.ToolError:
            self.skipTest("no CLI to compare with")
        import json
        import math
        import subprocess
        import warnings
        corpus = os.path.join(SRC, "tests", "corpus", "trace")
        torch_dir = os.path.join(SRC, "tests", "data", "torch")
        cases = [(CTX, [], {}),
                 (CTX, ["--config", "", "--config", "expandable_segments:True"],
                  {"configs": ["", {"expandable_segments": True}]}),
                 (CTX, ["--capacity", "16G", "--no-pre-segments", "--retries", "1"],
                  {"capacity": "16G", "pre_segments": False, "retries": 1}),
                 (CTX, ["--allocator", "naive", "--no-pre", "--no-empty-cache"],
                  {"allocator": "naive", "pre": False, "empty_cache": False}),
                 (os.path.join(corpus, "v3_devices.trace"), [], {}),
                 (os.path.join(corpus, "v4_annotations.trace"), ["--trace-device", "1"], {"trace_device": 1}),
                 (os.path.join(torch_dir, "multi_device_oom.pickle"), [], {}),
                 (os.path.join(torch_dir, "oom.pickle"), [], {}),
                 (os.path.join(torch_dir, "torch214.pickle"), [], {}),
                 (RESNET_PICKLE, [], {})]
        for path, args, kw in cases:
            with self.subTest(path=os.path.basename(path), args=args):
                proc = subprocess.run([cli_path, "replay", path, "--json", "--no-progress", "--no-cache"] + args,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
                cli = json.loads(proc.stdout)
                cli = cli if isinstance(cli, list) else [cli]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", P.SnapshotWarning)
                    got = P.replay(path, **kw)
                self.assertEqual(len(got), len(cli))
                for c, g in zip(cli, got):
                    self.assertEqual(set(c), set(g))
                    for k, v in c.items():
                        if k == "ns_per_op":
                            continue
                        if isinstance(v, float):
                            self.assertTrue(math.isclose(v, g[k], abs_tol=6e-5), (k, v, g[k]))
                        else:
                            self.assertEqual(v, g[k], k)
        oom = P.replay(os.path.join(torch_dir, "oom.pickle"))[0]
        self.assertEqual(oom["capacity_from"], "oom")  # a recording that ran out: the SIM device sized as then
        self.assertTrue(oom["torch_ooms"] and oom["torch_ooms"][0]["reproduced"])

    def test_sim_device_restored(self):
        """A replay at another SIM size puts the SIM devices back as they were."""
        before = P._SimConfig()
        P.lib.mn_sim_get_config(P.C.byref(before))
        small = P.replay(CTX, capacity="16G")[0]
        self.assertEqual(small["capacity"], 16 << 30)
        self.assertGreater(small["ooms"], 0)
        after = P._SimConfig()
        P.lib.mn_sim_get_config(P.C.byref(after))
        self.assertEqual(after.capacity, before.capacity)
        self.assertEqual(P.replay(CTX)[0]["capacity"], before.capacity)
        # an error mid-way (a bad trace device) restores it too
        with self.assertRaises(mnemo.MnemoError):
            P.replay(os.path.join(SRC, "tests", "data", "torch", "oom.pickle"), capacity="1G", trace_device=0,
                     configs="bogus:1")
        P.lib.mn_sim_get_config(P.C.byref(after))
        self.assertEqual(after.capacity, before.capacity)

    def test_errors(self):
        missing = os.path.join(self.tmp.name, "missing.trace")
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.replay(missing)
        self.assertEqual(cm.exception.status_name, "io_error")
        self.assertIn("cannot open", str(cm.exception))
        self.assertIn(missing, str(cm.exception))
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.replay(CTX, configs="bogus:1")
        self.assertEqual(cm.exception.status_name, "invalid_argument")
        self.assertIn('unknown key "bogus"', str(cm.exception))
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.import_snapshot(os.path.join(self.tmp.name, "missing.pickle"))
        self.assertEqual(cm.exception.status_name, "io_error")
        self.assertIn("cannot open", str(cm.exception))
        out = os.path.join(self.tmp.name, "x.trace")
        with self.assertRaises(P.SnapshotError) as cm:  # a trace is not a pickle
            P.import_snapshot(CTX, out)
        self.assertIn("malformed snapshot", str(cm.exception))
        self.assertIn("a mnemo trace is used as it is", str(cm.exception))
        self.assertFalse(os.path.exists(out))
        with self.assertRaises(P.SnapshotError) as cm:
            P.import_snapshot(RESNET_PICKLE, device=5)
        self.assertIn("5", str(cm.exception))
        with self.assertRaises(mnemo.MnemoError) as cm:
            P.replay(CTX, trace_device=3)
        self.assertEqual(cm.exception.status_name, "not_found")
        self.assertIn("(it has: 0)", str(cm.exception))
        t214 = os.path.join(SRC, "tests", "data", "torch", "torch214.pickle")
        with self.assertRaises(ValueError):   # its pinned host memory is not replayed
            P.replay(t214, trace_device=1)
        for bad in ({"retries": -1}, {"retries": 1001}, {"repeat": 0}, {"trace_device": -1}, {"device": "tpu"},
                    {"allocator": "slab"}, {"allocator": "naive", "configs": ""}, {"device": "cuda", "capacity": 1 << 30},
                    {"capacity": 0}):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                P.replay(CTX, **bad)
        with self.assertRaises(TypeError):
            P.replay(CTX, capacity=1.5)
        with self.assertRaises(mnemo.MnemoError):
            P.replay(CTX, capacity="lots")

    def test_import_warnings_and_devices(self):
        """What the importer skips comes as SnapshotWarning; device picks one."""
        t214 = os.path.join(SRC, "tests", "data", "torch", "torch214.pickle")
        with self.assertWarns(P.SnapshotWarning) as cm:
            d = P.import_snapshot(t214)
        self.assertIn("stream_info", str(cm.warning))
        self.assertEqual(d["meta"]["host_device"], "1")
        multi = os.path.join(SRC, "tests", "data", "torch", "multi_device.pickle")
        both = P.import_snapshot(multi, device="all")
        one = P.import_snapshot(multi, device=1)
        self.assertEqual({e["device"] for e in both["entries"]}, {0, 1})
        self.assertEqual(len(one["entries"]), sum(e["device"] == 1 for e in both["entries"]))
        with self.assertRaises(ValueError):
            P.import_snapshot(multi, device=-1)


if __name__ == "__main__":
    unittest.main(verbosity=1)
