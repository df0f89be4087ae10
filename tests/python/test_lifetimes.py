#!/usr/bin/env python3
# tests/python/test_lifetimes.py: the ownership model of the Python package
# (docs/PYTHON.md "Object lifetimes") for every class that holds a C handle
# (View, Storage, Allocator and its subclasses, MemPool, profiling.record):
# copy, deepcopy, pickle, multiprocessing (spawn and fork), garbage cycles
# holding an allocator and what was made from it, close()/release() from
# several threads at once. Under the asan preset the library is sanitized and
# this runs with the ASan runtime preloaded (tests/CMakeLists.txt).
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_lifetimes.py
(exit 0 pass, 1 fail). Labels cpu;sim."""
import copy
import gc
import multiprocessing as mp
import pickle
import sys
import threading
import time
import unittest
import weakref

import mnemo
from mnemo import _owner
from mnemo.profiling import record

try:
    import numpy as np
except ImportError:  # the DLPack-export cases need numpy
    np = None
needs_numpy = unittest.skipIf(np is None, "numpy is not installed")

SIM = "sim:0"


def live_allocators():
    return _owner.live_allocator_count()


def make_resources():
    """One of every resource class, and what closes them (in order)."""
    caching = mnemo.CachingAllocator(SIM)
    naive = mnemo.NaiveAllocator(SIM)
    pinned = mnemo.PinnedAllocator("cpu")
    default = mnemo.default_allocator(SIM)
    pool = mnemo.MemPool(caching)
    rec = record(caching, capacity=16)
    objs = [caching, naive, pinned, default, pool, rec]
    return objs, [rec, pool, caching, naive, pinned, default]


def is_closed(o):
    if isinstance(o, mnemo.Allocator):
        return o.closed
    try:
        o._r() if isinstance(o, record) else o._h()
    except ValueError:
        return True
    return False


def storage_refcount(v):
    s = v.untyped_storage()
    return s.refcount - 1  # less the reference of the Storage object just made


class Copies(unittest.TestCase):
    """Defect 1: copy and deepcopy never duplicate a C handle."""

    def test_view_copy_shares_storage(self):
        for dev in ("cpu", SIM):
            base = mnemo.tensor([[float(i * 4 + j) for j in range(4)] for i in range(3)], device=dev)
            v = base.t()[1:]
            before = storage_refcount(base)
            c = copy.copy(v)  # PyTorch: copy.copy of a tensor shares its storage
            self.assertIsNot(c, v)
            self.assertTrue(c.is_set_to(v))
            self.assertEqual((c.shape, c.stride(), c.storage_offset()), (v.shape, v.stride(), v.storage_offset()))
            self.assertEqual(storage_refcount(base), before + 1, "the copy holds its own library reference")
            expected = v.tolist()
            del v, base
            gc.collect()
            self.assertEqual(c.tolist(), expected)
            c.fill_(7.0)
            self.assertEqual(c.tolist(), [[7.0] * 3] * 3)

    def test_view_deepcopy_clones(self):
        for dev in ("cpu", SIM):
            base = mnemo.tensor(list(range(12)), dtype=mnemo.float64, device=dev).reshape(3, 4)
            v = base.t()[1:]
            d = copy.deepcopy(v)  # PyTorch: a clone of the whole storage, same strides and offset
            self.assertFalse(d.shares_storage(v))
            self.assertEqual((d.shape, d.stride(), d.storage_offset(), d.dtype, d.device),
                             (v.shape, v.stride(), v.storage_offset(), v.dtype, v.device))
            self.assertEqual(d.untyped_storage().nbytes(), v.untyped_storage().nbytes())
            self.assertEqual(d.tolist(), v.tolist())
            d.fill_(-1.0)
            self.assertEqual(base.tolist(), [[float(i * 4 + j) for j in range(4)] for i in range(3)])
            # views of one storage stay one storage inside one deepcopy (PyTorch's memo)
            a, b, s = copy.deepcopy((base, base[1], base.untyped_storage()))
            self.assertTrue(a.shares_storage(b))
            self.assertEqual(a.untyped_storage().data_ptr(), s.data_ptr())
            self.assertNotEqual(s.data_ptr(), base.data_ptr())
            b.fill_(0.0)
            self.assertEqual(a.tolist()[1], [0.0] * 4)

    def test_storage_copy_and_deepcopy_clone(self):
        for dev in ("cpu", SIM):
            s = mnemo.Storage.from_buffer(bytes(range(16)), dev)
            for c in (copy.copy(s), copy.deepcopy(s)):  # PyTorch: both clone a storage
                self.assertNotEqual(c.data_ptr(), s.data_ptr())
                self.assertEqual(c.tobytes(), s.tobytes())
                self.assertEqual(c.refcount, 1)
                c.fill_(0)
                self.assertEqual(s.tobytes(), bytes(range(16)))
                c.release()
            self.assertEqual(s.refcount, 1)
            x, y = copy.deepcopy([s, s])
            self.assertIs(x, y)

    def test_copy_after_release(self):
        s = mnemo.Storage(8)
        s.release()
        with self.assertRaises(ValueError):
            copy.copy(s)
        with self.assertRaises(ValueError):
            pickle.dumps(s)

    def test_resources_are_not_duplicated(self):
        objs, order = make_resources()
        try:
            for o in objs:
                self.assertIs(copy.copy(o), o, type(o).__name__)
                self.assertIs(copy.deepcopy(o), o, type(o).__name__)
                self.assertIs(copy.deepcopy({"x": [o]})["x"][0], o)
        finally:
            for o in order:
                o.close()

    def test_views_from_an_allocator_deepcopy_into_it(self):
        a = mnemo.CachingAllocator(SIM)
        v = mnemo.ones(4, 4, device=SIM, allocator=a)
        d = copy.deepcopy(v)
        self.assertEqual(d.untyped_storage().allocator_handle, a._handle, "a clone comes from the same allocator")
        self.assertEqual(a.memory_stats()["allocation.all.current"], 2)
        del v, d
        gc.collect()
        self.assertEqual(a.memory_stats()["allocation.all.current"], 0)
        a.close()


class Pickles(unittest.TestCase):
    """Defect 1: pickle sends views and storages by value and refuses the rest."""

    def check_roundtrip(self, v, proto):
        w = pickle.loads(pickle.dumps(v, protocol=proto))
        self.assertFalse(w.shares_storage(v))
        self.assertEqual((w.shape, w.stride(), w.storage_offset(), w.dtype, w.device),
                         (v.shape, v.stride(), v.storage_offset(), v.dtype, v.device))
        self.assertEqual(w.untyped_storage().nbytes(), v.untyped_storage().nbytes())
        if v.device.type != "meta":
            self.assertEqual(w.untyped_storage().tobytes(), v.untyped_storage().tobytes())
        return w

    def test_views(self):
        for proto in range(pickle.HIGHEST_PROTOCOL + 1):
            for dev in ("cpu", SIM):
                base = mnemo.tensor([[1.5, -2.0, 3.25], [4.0, 5.0, 6.0]], device=dev)
                for v in (base, base.t(), base[:, 1:], base[1], base[0, 2], base.unsqueeze(0).expand(3, 2, 3),
                          mnemo.empty(0, 3, device=dev), mnemo.tensor([True, False], device=dev),
                          mnemo.tensor([1 + 2j, 3j], device=dev), base.view(mnemo.int32)):
                    w = self.check_roundtrip(v, proto)
                    self.assertEqual(w.tolist(), v.tolist())
            self.check_roundtrip(mnemo.empty(2, 3, device="meta"), proto)

    def test_quantized_view_keeps_its_parameters(self):
        lib = mnemo._lib.lib
        for dt in (mnemo.qint8, mnemo.quint8, mnemo.qint32, mnemo.quint4x2, mnemo.quint2x4):
            q = mnemo.empty(8, dtype=dt)
            for w in (pickle.loads(pickle.dumps(q)), copy.deepcopy(q), copy.copy(q)):
                self.assertEqual((w.dtype, w.shape, w.stride()), (dt, q.shape, q.stride()))
                self.assertTrue(lib.mn_view_is_quantized(w._handle))
                self.assertEqual(lib.mn_view_q_scale(w._handle), lib.mn_view_q_scale(q._handle))
                self.assertEqual(lib.mn_view_q_zero_point(w._handle), lib.mn_view_q_zero_point(q._handle))
                self.assertEqual(w.untyped_storage().tobytes(), q.untyped_storage().tobytes())

    def test_views_from_an_allocator(self):
        a = mnemo.CachingAllocator(SIM)
        v = mnemo.full((3,), 2.5, device=SIM, allocator=a)
        w = pickle.loads(pickle.dumps(v))
        self.assertEqual(w.tolist(), [2.5] * 3)
        self.assertNotEqual(w.untyped_storage().allocator_handle, a._handle,
                            "an unpickled view uses its device's default allocator (allocators do not travel)")
        del v
        gc.collect()
        a.close()
        self.assertEqual(w.tolist(), [2.5] * 3)

    def test_storages(self):
        for dev in ("cpu", SIM, "meta"):
            s = mnemo.Storage(24, dev)
            if dev != "meta":
                s.copy_(mnemo.Storage.from_buffer(bytes(range(24)), dev))
            t = pickle.loads(pickle.dumps(s))
            self.assertEqual((t.nbytes(), t.device), (s.nbytes(), s.device))
            self.assertNotEqual(t.data_ptr() or 1, s.data_ptr() or 2)
            if dev != "meta":
                self.assertEqual(t.tobytes(), bytes(range(24)))
        shared = mnemo.Storage.from_buffer(b"abc").share_memory_()
        t = pickle.loads(pickle.dumps(shared))
        self.assertEqual((t.tobytes(), t.kind), (b"abc", "allocator"))

    def test_bad_payloads_are_refused(self):
        from mnemo.storage import _rebuild_storage
        from mnemo.view import _rebuild_view
        with self.assertRaises(ValueError):
            _rebuild_storage("cpu", 8, b"abc")
        with self.assertRaises((TypeError, ValueError)):
            _rebuild_storage("cpu", 3, "abc")
        s = mnemo.Storage(8)
        with self.assertRaises(mnemo.MnemoError):  # past the storage's end: mn_view_create's check
            _rebuild_view(s, "float32", (4,), (1,), 0, None)
        with self.assertRaises(TypeError):
            _rebuild_view(b"x", "float32", (1,), (1,), 0, None)

    def test_resources_refuse(self):
        objs, order = make_resources()
        try:
            for o in objs:
                name = type(o).__name__
                for proto in range(pickle.HIGHEST_PROTOCOL + 1):
                    with self.assertRaises(TypeError) as cm:
                        pickle.dumps(o, protocol=proto)
                    self.assertIn("cannot pickle mnemo.", str(cm.exception))
                    self.assertIn(name, str(cm.exception))
                with self.assertRaises(TypeError):
                    mp.reduction.ForkingPickler.dumps(o)
        finally:
            for o in order:
                o.close()


# ---- multiprocessing: module-level targets (spawn imports this module) ------------------


def child_use_view(q, v):
    q.put((v.tolist(), v.stride(), v.storage_offset(), str(v.device)))
    v.fill_(9.0)  # the child's copy (spawn) or its own memory (fork): never the parent's
    q.put(v.tolist())


def child_use_storage(q, s):
    q.put(s.tobytes())


def child_use_allocator(q, a):
    v = mnemo.ones(8, device=SIM, allocator=a)
    q.put((v.tolist(), a.memory_stats()["allocation.all.current"]))


def child_send_back(q):
    q.put(mnemo.tensor([[1, 2], [3, 4]], device=SIM).t())


class Processes(unittest.TestCase):
    """Defect 2: a child gets a usable object or a clear error, never a raw pointer."""

    def run_child(self, method, target, *args):
        ctx = mp.get_context(method)
        q = ctx.Queue()
        p = ctx.Process(target=target, args=(q,) + args)
        p.start()
        try:
            out = [q.get(timeout=120)]
            if target is child_use_view:
                out.append(q.get(timeout=120))
        finally:
            p.join(120)
        self.assertEqual(p.exitcode, 0, f"{method} child of {target.__name__}")
        return out

    def test_views_and_storages(self):
        for method in ("spawn", "fork"):
            with self.subTest(method=method):
                base = mnemo.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=SIM)
                v = base.t()[:, 1:]
                seen, filled = self.run_child(method, child_use_view, v)
                self.assertEqual(seen, (v.tolist(), v.stride(), v.storage_offset(), "sim:0"))
                self.assertEqual(filled, [[9.0, 9.0]] * 2)
                self.assertEqual(base.tolist(), [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "the parent's data untouched")
                s = mnemo.Storage.from_buffer(b"mnemo", "cpu")
                self.assertEqual(self.run_child(method, child_use_storage, s), [b"mnemo"])
                ctx = mp.get_context(method)
                q = ctx.Queue()
                p = ctx.Process(target=child_send_back, args=(q,))
                p.start()
                back = q.get(timeout=120)
                p.join(120)
                self.assertEqual((back.tolist(), back.stride()), ([[1, 3], [2, 4]], (1, 2)))

    def test_allocators(self):
        a = mnemo.CachingAllocator(SIM)
        try:
            # fork: the child inherits the allocator (its own copy of the process)
            out = self.run_child("fork", child_use_allocator, a)
            self.assertEqual(out, [([1.0] * 8, 1)])
            self.assertEqual(a.memory_stats()["allocation.all.current"], 0)
            # spawn pickles the arguments: a clear error in the parent, no child
            ctx = mp.get_context("spawn")
            p = ctx.Process(target=child_use_allocator, args=(ctx.Queue(), a))
            with self.assertRaises(TypeError) as cm:
                p.start()
            self.assertIn("cannot pickle mnemo.CachingAllocator", str(cm.exception))
        finally:
            a.close()


class Cycles(unittest.TestCase):
    """Defect 3: a garbage cycle never destroys an allocator before what it allocated."""

    def test_cycles_with_views(self):
        gc.collect()
        base = live_allocators()
        for i in range(40):
            a = mnemo.CachingAllocator(SIM) if i % 2 == 0 else mnemo.NaiveAllocator(SIM)
            holder = {"a": a}
            vs = [mnemo.full((64,), float(k), device=SIM, allocator=a) for k in range(3)]
            vs.append(vs[0].t()[1:])
            s = mnemo.Storage(100, SIM, allocator=a)
            items = [vs, s, vs[1].untyped_storage(), holder] if i % 3 else [holder, s, vs]
            holder["items"] = items
            holder["self"] = holder
            a.cycle = holder  # the allocator object is part of the cycle
            for v in vs:
                holder.setdefault("views", []).append(v)
            del a, holder, vs, s, items, v
            gc.collect()
            self.assertEqual(live_allocators(), base, f"round {i}: the cycle's allocator was destroyed")

    def test_cycle_with_pool_and_recorder(self):
        gc.collect()
        base = live_allocators()
        for i in range(20):
            a = mnemo.CachingAllocator(SIM)
            pool = mnemo.MemPool(a)
            rec = record(a, capacity=8)
            with pool.use():
                v = mnemo.ones(1024, device=SIM, allocator=a)
            w = mnemo.ones(16, device=SIM, allocator=a)
            cyc = [a, pool, rec, v, w]
            cyc.append(cyc)
            a.cycle = cyc
            if i % 2:
                pool.cycle = cyc
            del a, pool, rec, v, w, cyc
            gc.collect()
            self.assertEqual(live_allocators(), base, f"round {i}")

    def test_cycle_goes_in_one_collection(self):
        # the allocator's finalizer must not make CPython count the cycle
        # resurrected (it did, by materializing the object's __dict__)
        gc.collect()
        a = mnemo.NaiveAllocator(SIM)
        v = mnemo.ones(4, device=SIM, allocator=a)
        cyc = [v, v[1:]]
        cyc.append(cyc)
        a.cycle = cyc
        cyc.append(a)
        gone = weakref.ref(a)
        del a, v, cyc
        gc.collect()
        self.assertIsNone(gone())

    @needs_numpy
    def test_export_in_a_cycle(self):
        # a DLPack export counts on the allocator's box; holding the allocator
        # object in interop's module-level table made such a cycle immortal
        gc.collect()
        base = live_allocators()
        a = mnemo.PinnedAllocator("cpu")
        v = mnemo.full((4,), 3.0, allocator=a)
        arr = np.from_dlpack(v)
        cyc = [v, arr]
        cyc.append(cyc)
        a.cycle = cyc
        gone = weakref.ref(a)
        del a, v, arr, cyc
        gc.collect()
        self.assertIsNone(gone())
        self.assertEqual(live_allocators(), base)

    @needs_numpy
    def test_exports_alive_at_exit(self):
        # numpy frees its DLPack imports during interpreter shutdown, after
        # mnemo's modules: the deleters must still be callable then
        script = ("import gc, numpy as np, mnemo\n"
                  "a = mnemo.PinnedAllocator('cpu')\n"
                  "v = mnemo.full((4,), 1.0, allocator=a)\n"
                  "x = np.from_dlpack(v)\n"
                  "y = np.from_dlpack(mnemo.ones(3))\n"
                  "c = [x, v]; c.append(c); a.cycle = c\n"
                  "del a, v, c\n"
                  "print('ok')\n")
        import subprocess
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "ok"), r.stderr[-2000:])

    def test_pool_collected_while_busy(self):
        a = mnemo.CachingAllocator(SIM)
        pool = mnemo.MemPool(a)
        with pool.use():
            v = mnemo.ones(1024, device=SIM, allocator=a)
        del pool
        gc.collect()
        self.assertEqual(len(a._box.orphans), 1, "busy: left to the allocator")
        self.assertEqual(v.tolist()[:2], [1.0, 1.0])
        del v
        gc.collect()
        self.assertEqual(a._box.orphans, [], "destroyed once its block went")
        a.empty_cache()
        self.assertEqual(a.memory_stats()["reserved_bytes.all.current"], 0, "the pool's cache was given back")
        a.close()

    def test_allocator_dropped_first(self):
        a = mnemo.CachingAllocator(SIM)
        v = mnemo.full((8,), 3.0, device=SIM, allocator=a)
        w = v[2:]
        del a
        gc.collect()
        self.assertEqual(w.tolist(), [3.0] * 6)
        del v, w
        gc.collect()


class CloseRules(unittest.TestCase):
    """Defect 4: close() refuses while something made from the allocator lives."""

    def test_naive_close_refuses_with_live_storage(self):
        a = mnemo.NaiveAllocator(SIM)
        s = mnemo.Storage(64, SIM, allocator=a)
        with self.assertRaises(mnemo.MnemoError) as cm:
            a.close()
        self.assertEqual(cm.exception.status_name, "invalid_state")
        self.assertFalse(a.closed)
        s.fill_(1)  # still usable
        s.release()
        p = a.alloc(32)  # a raw allocation too
        with self.assertRaises(mnemo.MnemoError):
            a.close()
        a.free(p)
        a.close()
        self.assertTrue(a.closed)

    def test_every_allocator_refuses_with_live_views(self):
        for make, dev in ((lambda: mnemo.CachingAllocator(SIM), SIM), (lambda: mnemo.NaiveAllocator(SIM), SIM),
                          (lambda: mnemo.NaiveAllocator("cpu"), "cpu"), (lambda: mnemo.PinnedAllocator("cpu"), "cpu")):
            a = make()
            v = mnemo.ones(4, device=dev, allocator=a)[1:]
            with self.assertRaises(mnemo.MnemoError):
                a.close()
            self.assertEqual(v.tolist(), [1.0] * 3)
            del v
            gc.collect()
            a.close()
            a.close()  # twice: a no-op

    @needs_numpy
    def test_exports_count(self):
        a = mnemo.NaiveAllocator("cpu")
        v = mnemo.full((4,), 2.0, allocator=a)
        arr = np.from_dlpack(v)
        del v
        gc.collect()
        with self.assertRaises(mnemo.MnemoError):
            a.close()  # numpy still holds the memory
        self.assertEqual(arr.tolist(), [2.0] * 4)
        del arr
        gc.collect()
        a.close()


def yield_after_c_calls(frame, event, arg):
    """A profile hook: gives the GIL away after every C call of the thread."""
    if event == "c_return":
        time.sleep(0)


class Threads(unittest.TestCase):
    """Defect 5: release()/close() from several threads at once run once."""

    def setUp(self):
        self.interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)

    def tearDown(self):
        sys.setswitchinterval(self.interval)

    def hammer(self, fn, n=8):
        barrier = threading.Barrier(n)
        errors = []

        def run():
            barrier.wait()
            sys.setprofile(yield_after_c_calls)  # interleave inside fn itself
            try:
                fn()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)
            finally:
                sys.setprofile(None)
        ts = [threading.Thread(target=run) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])

    def test_concurrent_storage_release(self):
        # Each worker gives the GIL away after every C call it makes (a
        # profile hook), so the threads interleave inside release() itself:
        # before the fix two of them read the same handle and released it twice.
        n, rounds = 4, 300
        start, done = threading.Barrier(n + 1), threading.Barrier(n + 1)
        box = {}

        def worker():
            for _ in range(rounds):
                start.wait()
                sys.setprofile(yield_after_c_calls)
                box["s"].release()
                sys.setprofile(None)
                done.wait()
        ts = [threading.Thread(target=worker) for _ in range(n)]
        for t in ts:
            t.start()
        bad = None
        for i in range(rounds):
            s = box["s"] = mnemo.Storage(64, SIM if i % 10 == 9 else "cpu")
            keep = mnemo.View(s, mnemo.uint8, (64,))
            start.wait()
            done.wait()
            if bad is None and (s._handle is not None or storage_refcount(keep) != 1):
                bad = (i, storage_refcount(keep))
            del s, keep
        for t in ts:
            t.join()
        self.assertIsNone(bad, "round, refcount: a storage released more than once")

    def test_concurrent_close(self):
        for i in range(100):
            objs, order = make_resources()
            for o in order:
                self.hammer(o.close, 4)
                self.assertTrue(is_closed(o), type(o).__name__)

    def test_close_races_release(self):
        base = live_allocators()
        for i in range(100):
            a = mnemo.CachingAllocator(SIM)
            ss = [mnemo.Storage(256, SIM, allocator=a) for _ in range(4)]
            fns = [s.release for s in ss]

            def closer():
                try:
                    a.close()
                except mnemo.MnemoError:
                    pass  # refused while a storage lives: fine
            self.hammer(lambda: [f() for f in fns] and None, 3)
            closer()
            self.assertTrue(a.closed)
        gc.collect()
        self.assertEqual(live_allocators(), base)



class AtExit(unittest.TestCase):
    """Found by tests/python/fuzz_api.py: allocators and pools collected late
    in interpreter shutdown (held by sys) raised in their finalizers (the
    module globals the destroy used were gone)."""

    def test_late_finalizers_are_quiet(self):
        import subprocess
        import textwrap
        code = textwrap.dedent("""
            import sys
            import mnemo
            a = mnemo.CachingAllocator("sim")
            sys.unraisablehook = lambda u, keep=[a, mnemo.MemPool(a), mnemo.NaiveAllocator("cpu")]: None
            """)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("Exception ignored", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
