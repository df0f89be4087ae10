#!/usr/bin/env python3
# tests/python/test_allocator.py: mnemo.CachingAllocator, PinnedAllocator,
# NaiveAllocator and the default-allocator functions on the SIM device: statistics
# against values computed by hand from docs/ALLOCATOR.md's rules, snapshots,
# configuration strings, errors that change nothing, set_default. Single-threaded.
"""Run: PYTHONPATH=<build>/python python3 tests/python/test_allocator.py"""
import unittest
import gc

import mnemo

MiB = 1 << 20
KiB = 1 << 10
DEV = "sim:0"


def rounded(n):
    """PyTorch's rounding: at least 512 B, a multiple of 512 B."""
    return max(512, (n + 511) // 512 * 512)


class CachingStats(unittest.TestCase):
    def setUp(self):
        self.a = mnemo.CachingAllocator(DEV)

    def tearDown(self):
        self.a.close()

    def test_small_pool(self):
        a = self.a
        sizes = [1, 1000, MiB]  # all <= 1 MiB after rounding: small pool, one 2 MiB segment
        ptrs = [a.alloc(n) for n in sizes]
        s = a.memory_stats()
        blocks = [rounded(n) for n in sizes]
        self.assertEqual(blocks, [512, 1024, MiB])
        self.assertEqual(s["allocated_bytes.all.current"], sum(blocks))
        self.assertEqual(s["allocated_bytes.small_pool.current"], sum(blocks))
        self.assertEqual(s["allocated_bytes.large_pool.current"], 0)
        self.assertEqual(s["requested_bytes.all.current"], sum(sizes))
        self.assertEqual(s["reserved_bytes.small_pool.current"], 2 * MiB)
        self.assertEqual(s["reserved_bytes.all.current"], 2 * MiB)
        self.assertEqual(s["segment.small_pool.current"], 1)
        self.assertEqual(s["allocation.all.current"], 3)
        self.assertEqual(s["active.all.current"], 3)
        # the rest of the segment is one free block of a split segment
        self.assertEqual(s["inactive_split.small_pool.current"], 1)
        self.assertEqual(s["inactive_split_bytes.small_pool.current"], 2 * MiB - sum(blocks))
        self.assertEqual(s["num_device_alloc"], 1)
        self.assertEqual(s["num_device_free"], 0)
        self.assertEqual(s["max_split_size"], -1)
        self.assertEqual(a.memory_allocated(), sum(blocks))
        self.assertEqual(a.memory_reserved(), 2 * MiB)
        # consecutive blocks of one segment
        self.assertEqual(ptrs[1] - ptrs[0], 512)
        self.assertEqual(ptrs[2] - ptrs[1], 1024)
        for p in ptrs:
            a.free(p)
        a.check_invariants()

    def test_large_pool(self):
        a = self.a
        p1 = a.alloc(MiB + 1)   # 1 MiB + 512: large pool, a new 20 MiB segment, split
        p2 = a.alloc(5 * MiB)   # same segment (more than 1 MiB remains after it)
        p3 = a.alloc(12 * MiB)  # still fits the 20 MiB segment's free rest: split again
        rest = 20 * MiB - (MiB + 512) - 5 * MiB - 12 * MiB
        self.assertGreater(rest, MiB)
        s = a.memory_stats()
        self.assertEqual(s["reserved_bytes.large_pool.current"], 20 * MiB)
        self.assertEqual(s["segment.large_pool.current"], 1)
        self.assertEqual(s["inactive_split_bytes.large_pool.current"], rest)
        # 15 MiB (>= 10 MiB) does not fit: a segment of 15 MiB rounded up to
        # 2 MiB = 16 MiB, whose 1 MiB rest is not split off (large blocks split
        # only when more than 1 MiB remains): the block is the whole 16 MiB.
        p4 = a.alloc(15 * MiB)
        s = a.memory_stats()
        self.assertEqual(s["reserved_bytes.large_pool.current"], 36 * MiB)
        self.assertEqual(s["segment.large_pool.current"], 2)
        self.assertEqual(s["allocated_bytes.large_pool.current"], (MiB + 512) + 5 * MiB + 12 * MiB + 16 * MiB)
        self.assertEqual(s["requested_bytes.large_pool.current"], (MiB + 1) + 5 * MiB + 12 * MiB + 15 * MiB)
        self.assertEqual(s["num_device_alloc"], 2)
        self.assertEqual(s["inactive_split.large_pool.current"], 1)
        for p in (p1, p2, p3, p4):
            a.free(p)
        s = a.memory_stats()
        self.assertEqual(s["allocated_bytes.all.current"], 0)
        self.assertEqual(s["allocated_bytes.all.peak"], (MiB + 512) + 5 * MiB + 12 * MiB + 16 * MiB)
        self.assertEqual(s["allocated_bytes.all.allocated"], s["allocated_bytes.all.freed"])
        self.assertEqual(s["reserved_bytes.all.current"], 36 * MiB)  # cached
        self.assertEqual(s["active.all.current"], 0)
        self.assertEqual(s["inactive_split.all.current"], 0)        # whole free segments are not "split"
        a.check_invariants()

    def test_reuse_from_cache(self):
        a = self.a
        p = a.alloc(4 * MiB)
        a.free(p)
        q = a.alloc(4 * MiB)
        self.assertEqual(p, q)  # best fit: the cached block
        s = a.memory_stats()
        self.assertEqual(s["num_device_alloc"], 1)
        self.assertEqual(s["allocation.all.allocated"], 2)
        self.assertEqual(s["allocation.all.freed"], 1)
        a.free(q)

    def test_empty_cache_returns_reserved(self):
        a = self.a
        ptrs = [a.alloc(n) for n in (1000, 3 * MiB, 30 * MiB)]
        self.assertEqual(a.memory_reserved(), 2 * MiB + 20 * MiB + 30 * MiB)
        keep = ptrs.pop()
        for p in ptrs:
            a.free(p)
        a.empty_cache()  # only whole free segments go back: the 30 MiB one stays
        self.assertEqual(a.memory_reserved(), 30 * MiB)
        a.free(keep)
        a.empty_cache()
        s = a.memory_stats()
        self.assertEqual(s["reserved_bytes.all.current"], 0)
        self.assertEqual(s["segment.all.current"], 0)
        self.assertEqual(s["num_device_free"], s["num_device_alloc"])
        self.assertEqual(s["num_device_alloc"], 3)
        self.assertEqual(a.memory_snapshot(), [])

    def test_reset_peak(self):
        a = self.a
        p = a.alloc(8 * MiB)
        a.free(p)
        self.assertEqual(a.max_memory_allocated(), 8 * MiB)
        self.assertEqual(a.max_memory_reserved(), 20 * MiB)
        a.empty_cache()
        a.reset_peak_memory_stats()
        s = a.memory_stats()
        self.assertEqual(a.max_memory_allocated(), 0)
        self.assertEqual(a.max_memory_reserved(), 0)
        for k, v in s.items():
            if k.endswith(".peak"):
                self.assertEqual(v, s[k[:-5] + ".current"], k)
        # totals are not peaks: they stay
        self.assertEqual(s["allocated_bytes.all.allocated"], 8 * MiB)

    def test_stats_keys(self):
        s = self.a.memory_stats()
        for name in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
                     "active_bytes", "inactive_split_bytes", "requested_bytes"):
            for pool in ("all", "small_pool", "large_pool"):
                for f in ("current", "peak", "allocated", "freed"):
                    self.assertIn(f"{name}.{pool}.{f}", s)
        for k in ("oversize_allocations.current", "oversize_segments.peak", "num_alloc_retries", "num_ooms",
                  "num_sync_all_streams", "num_device_alloc", "num_device_free", "max_split_size"):
            self.assertIn(k, s)
        self.assertEqual(len(s), 9 * 3 * 4 + 2 * 4 + 6)
        self.assertEqual(list(s), sorted(s))
        self.assertTrue(all(v == 0 for k, v in s.items() if k != "max_split_size"))

    def test_oom_counted_and_nothing_changes(self):
        a = self.a
        p = a.alloc(MiB)
        before = a.memory_stats()
        with self.assertRaises(mnemo.OutOfMemoryError) as cm:
            a.alloc(1 << 50)
        self.assertIn("out of memory", str(cm.exception))
        self.assertEqual(cm.exception.status_name, "out_of_memory")
        after = a.memory_stats()
        self.assertEqual(after["num_ooms"], 1)
        after["num_ooms"] = 0
        self.assertEqual(after, before)
        a.free(p)

    def test_summary(self):
        p = self.a.alloc(1000)
        text = self.a.memory_summary()
        self.assertIn("sim:0", text)
        self.assertIn("allocation", text)
        self.assertIn("from small pool", text)
        self.a.free(p)


class Snapshot(unittest.TestCase):
    def test_shape_and_values(self):
        with mnemo.CachingAllocator(DEV) as a:
            p = a.alloc(1000)
            q = a.alloc(3 * MiB)
            snap = a.memory_snapshot()
            self.assertEqual(len(snap), 2)
            self.assertEqual([s["address"] for s in snap], sorted(s["address"] for s in snap))
            small = next(s for s in snap if s["segment_type"] == "small")
            large = next(s for s in snap if s["segment_type"] == "large")
            self.assertEqual(set(small), {"device", "address", "total_size", "allocated_size", "active_size",
                                          "requested_size", "stream", "segment_type", "is_expandable",
                                          "segment_pool_id", "blocks"})
            self.assertEqual(small["device"], 0)
            self.assertEqual(small["segment_pool_id"], (0, 0))
            self.assertEqual((small["total_size"], small["allocated_size"], small["active_size"],
                              small["requested_size"]), (2 * MiB, 1024, 1024, 1000))
            self.assertFalse(small["is_expandable"])
            self.assertEqual(small["blocks"], [
                {"address": p, "size": 1024, "requested_size": 1000, "state": "active_allocated"},
                {"address": p + 1024, "size": 2 * MiB - 1024, "requested_size": 0, "state": "inactive"}])
            self.assertEqual(small["address"], p)
            self.assertEqual(large["address"], q)
            self.assertEqual((large["total_size"], large["allocated_size"]), (20 * MiB, 3 * MiB))
            self.assertEqual([(b["size"], b["state"]) for b in large["blocks"]],
                             [(3 * MiB, "active_allocated"), (17 * MiB, "inactive")])
            self.assertEqual(small["stream"], large["stream"])
            self.assertGreater(small["stream"], 0)
            a.free(p)
            a.free(q)
            self.assertEqual({b["state"] for s in a.memory_snapshot() for b in s["blocks"]}, {"inactive"})

    def test_expandable(self):
        with mnemo.CachingAllocator(DEV, "expandable_segments:True") as a:
            p = a.alloc(1000)
            s = a.memory_stats()
            self.assertEqual(s["reserved_bytes.all.current"], 2 * MiB)  # one small page mapped
            self.assertEqual(s["segment.all.current"], 0)               # expandable ranges are not segments
            snap = a.memory_snapshot()
            self.assertEqual(len(snap), 1)
            self.assertTrue(snap[0]["is_expandable"])
            self.assertEqual(snap[0]["total_size"], 2 * MiB)
            a.free(p)


class Config(unittest.TestCase):
    def test_defaults(self):
        with mnemo.CachingAllocator(DEV) as a:
            self.assertEqual(a.config_string(), "")
            self.assertEqual(a.config(), {})

    def test_round_trip(self):
        text = "expandable_segments:True,max_split_size_mb:512"
        with mnemo.CachingAllocator(DEV, text) as a:
            self.assertEqual(a.config(), {"max_split_size_mb": 512, "expandable_segments": True})
            self.assertEqual(a.memory_stats()["max_split_size"], 512 * MiB)
            with mnemo.CachingAllocator(DEV, a.config_string()) as b:
                self.assertEqual(b.config_string(), a.config_string())
            with mnemo.CachingAllocator(DEV, a.config()) as c:
                self.assertEqual(c.config_string(), a.config_string())
        d = {"garbage_collection_threshold": 0.5, "roundup_power2_divisions": {256: 1, 512: 2, ">": 8},
             "max_non_split_rounding_mb": 40}
        with mnemo.CachingAllocator(DEV, d) as a:
            cfg = a.config()
            self.assertEqual(cfg["garbage_collection_threshold"], 0.5)
            self.assertEqual(cfg["max_non_split_rounding_mb"], 40)
            div = cfg["roundup_power2_divisions"]
            self.assertEqual(len(div), 16)
            self.assertEqual((div[1], div[256], div[512], div[32768]), (1, 1, 8, 8))  # PyTorch's ">" quirk
            with mnemo.CachingAllocator(DEV, cfg) as b:
                self.assertEqual(b.config_string(), a.config_string())
        self.assertEqual(mnemo.allocator.caching_config_format({"expandable_segments": False}), "")

    def test_bad_config_creates_nothing(self):
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.CachingAllocator(DEV, "expandable_segments:True,foo:1")
        self.assertEqual(cm.exception.status_name, "invalid_argument")
        self.assertIn('unknown key "foo"', str(cm.exception))
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.CachingAllocator(DEV, {"max_split_size_mb": 2})
        self.assertIn("max_split_size_mb", str(cm.exception))
        self.assertIn(">= 20", str(cm.exception))
        with self.assertRaises(mnemo.MnemoError):
            mnemo.CachingAllocator(DEV, "expandable_segments:maybe")
        with self.assertRaises(TypeError):
            mnemo.CachingAllocator(DEV, 42)
        with self.assertRaises(TypeError):
            mnemo.CachingAllocator(DEV, {"expandable_segments": [1]})
        with self.assertRaises(mnemo.MnemoError):
            mnemo.CachingAllocator("sim:99")
        # the text is checked before anything is made; the same check alone:
        with self.assertRaises(mnemo.MnemoError):
            mnemo.allocator.caching_config_parse("foo:1")
        self.assertEqual(mnemo.allocator.caching_config_parse("expandable_segments:True"),
                         {"expandable_segments": True})


class Ownership(unittest.TestCase):
    def test_free_foreign_pointer(self):
        with mnemo.CachingAllocator(DEV) as a, mnemo.CachingAllocator(DEV) as b:
            p = a.alloc(4096)
            q = b.alloc(4096)
            before = a.memory_stats()
            for bad in (q, p + 512, 12345 * 4096):
                with self.assertRaises(mnemo.MnemoError) as cm:
                    a.free(bad)
                self.assertEqual(cm.exception.status_name, "invalid_argument")
            self.assertEqual(a.memory_stats(), before)
            a.free(p)
            with self.assertRaises(mnemo.MnemoError):  # twice
                a.free(p)
            a.free(0)  # a no-op, as free(NULL)
            b.free(q)
            with self.assertRaises(TypeError):
                a.free(-1)
            with self.assertRaises(TypeError):
                a.alloc(-1)
            self.assertEqual(a.alloc(0), 0)

    def test_close(self):
        a = mnemo.CachingAllocator(DEV)
        p = a.alloc(100)
        with self.assertRaises(mnemo.MnemoError) as cm:
            a.close()  # a live allocation: refused, nothing changes
        self.assertEqual(cm.exception.status_name, "invalid_state")
        self.assertIn("1 live allocation", str(cm.exception))
        self.assertEqual(a.memory_allocated(), 512)
        a.free(p)
        a.close()
        self.assertTrue(a.closed)
        a.close()  # twice: no-op
        with self.assertRaises(ValueError):
            a.alloc(10)
        self.assertIn("closed", repr(a))

    def test_set_default(self):
        builtin = mnemo.default_allocator(DEV)
        self.assertEqual(builtin.name, "caching")
        a = mnemo.CachingAllocator(DEV, "max_split_size_mb:100")
        a.set_default()
        try:
            self.assertTrue(a.is_default())
            self.assertIs(mnemo.default_allocator(DEV), a)
            p = a.alloc(3000)
            self.assertEqual(mnemo.memory_allocated(DEV), 3072)
            self.assertEqual(mnemo.memory_stats(DEV)["max_split_size"], 100 * MiB)
            self.assertEqual(mnemo.memory_reserved(DEV), 2 * MiB)
            self.assertEqual(mnemo.max_memory_allocated(DEV), 3072)
            self.assertEqual(len(mnemo.memory_snapshot(DEV)), 1)
            self.assertIn("sim:0", mnemo.memory_summary(DEV))
            with self.assertRaises(mnemo.MnemoError):  # live allocations: close refused
                a.close()
            self.assertTrue(a.is_default())
            a.free(p)
            mnemo.empty_cache(DEV)
            self.assertEqual(a.memory_reserved(), 0)
            mnemo.reset_peak_memory_stats(DEV)
            self.assertEqual(mnemo.max_memory_allocated(DEV), 0)
        finally:
            mnemo.set_default_allocator(DEV, None)
        self.assertFalse(a.is_default())
        d = mnemo.default_allocator(DEV)
        self.assertEqual(d._handle, builtin._handle)
        self.assertEqual(d.memory_stats()["max_split_size"], -1)
        a.close()

    def test_close_restores_default(self):
        a = mnemo.CachingAllocator(DEV)
        a.set_default()
        a.close()  # no live allocation: restores the built-in default, then destroys
        self.assertIsNot(mnemo.default_allocator(DEV), a)
        self.assertEqual(mnemo.default_allocator(DEV).name, "caching")
        with self.assertRaises(TypeError):
            mnemo.set_default_allocator(DEV, "caching")
        with mnemo.CachingAllocator("sim:0") as b:
            with self.assertRaises(mnemo.MnemoError):  # an allocator of another device
                mnemo.set_default_allocator("cpu", b)


@unittest.skipUnless(hasattr(mnemo, "Storage"), "mnemo.Storage is not in this package")
class WithStorages(unittest.TestCase):
    def test_storage_from_allocator(self):
        a = mnemo.CachingAllocator(DEV)
        s = mnemo.Storage(1000, DEV, allocator=a)
        self.assertEqual(a.memory_allocated(), 1024)
        self.assertEqual(s.allocator_handle, a._handle)
        with self.assertRaises(mnemo.MnemoError):  # the storage still uses it
            a.close()
        del s
        self.assertEqual(a.memory_allocated(), 0)
        a.close()

    def test_storage_uses_the_default(self):
        a = mnemo.CachingAllocator(DEV)
        a.set_default()
        try:
            s = mnemo.Storage(3000, DEV)
            self.assertEqual(s.allocator_handle, a._handle)
            self.assertEqual(mnemo.memory_allocated(DEV), 3072)
            del s
            self.assertEqual(mnemo.memory_allocated(DEV), 0)
        finally:
            mnemo.set_default_allocator(DEV, None)
        a.close()


class OtherAllocators(unittest.TestCase):
    def test_pinned(self):
        with mnemo.PinnedAllocator(DEV) as pa:
            self.assertEqual(pa.device, mnemo.cpu)
            self.assertEqual([pa.size_class(n) for n in (1, 4096, 4097, 9000)], [4096, 4096, 8192, 12288])
            p = pa.alloc(5000)
            s = pa.memory_stats()
            self.assertEqual(s["allocated_bytes.all.current"], 8192)
            self.assertEqual(s["allocation.all.current"], 1)
            found = mnemo.PinnedAllocator.lookup(p + 100)
            self.assertEqual(found._handle, pa._handle)
            pa.free(p)
            pa.empty_cache()
            self.assertEqual(pa.memory_stats()["reserved_bytes.all.current"], 0)
        self.assertIsNone(mnemo.PinnedAllocator.lookup(4096))
        self.assertEqual(mnemo.PinnedAllocator.get_default(DEV).name, "pinned")
        with self.assertRaises(mnemo.MnemoError):
            mnemo.PinnedAllocator(DEV, size_class_divisions=3)

    def test_naive(self):
        with mnemo.NaiveAllocator(DEV) as n:
            p = n.alloc(1000)
            with self.assertRaises(mnemo.MnemoError) as cm:
                n.memory_stats()
            self.assertEqual(cm.exception.status_name, "not_supported")
            with self.assertRaises(mnemo.MnemoError):
                n.free(p + 8)
            n.free(p)
        self.assertEqual(mnemo.default_allocator("cpu").name, "naive")



class MemPools(unittest.TestCase):
    def test_pool_routing_stats_and_lifetime(self):
        with mnemo.CachingAllocator(DEV) as a:
            pool = mnemo.MemPool(a, no_split=True)
            self.assertGreater(pool.id, 0)
            outside = a.alloc(1000)
            with mnemo.use_mem_pool(pool) as used:
                self.assertIs(used, pool)
                p = a.alloc(1000)
                with pool.use():  # nested: the same pool again
                    q = a.alloc(1000)
            self.assertNotEqual(p + 1024, q)  # no_split: a segment each
            s = pool.memory_stats()
            self.assertEqual((s["allocation.all.current"], s["segment.all.current"]), (2, 2))
            self.assertEqual(s["reserved_bytes.all.current"], 4 * MiB)
            self.assertEqual(a.memory_stats()["allocation.all.current"], 3)
            self.assertEqual({seg["segment_pool_id"] for seg in a.memory_snapshot()}, {(0, 0), (0, pool.id)})
            self.assertEqual([seg["segment_pool_id"] for seg in pool.memory_snapshot()], [(0, pool.id)] * 2)
            with self.assertRaises(mnemo.MnemoError) as cm:
                pool.close()  # live blocks: refused, nothing changed
            self.assertEqual(cm.exception.status_name, "busy")
            self.assertEqual(pool.memory_stats()["allocation.all.current"], 2)
            with self.assertRaises(mnemo.MnemoError) as cm:
                a.close()  # a pool of it is open
            self.assertEqual(cm.exception.status_name, "invalid_state")
            for x in (p, q, outside):
                a.free(x)
            a.empty_cache()  # the pool keeps its cache (PyTorch's rule)
            self.assertEqual(pool.memory_stats()["reserved_bytes.all.current"], 4 * MiB)
            pool.empty_cache()
            self.assertEqual(pool.memory_stats()["reserved_bytes.all.current"], 0)
            pool.close()
            pool.close()  # twice: a no-op
            with self.assertRaises(ValueError):
                pool.id
        with self.assertRaises(TypeError):
            mnemo.MemPool("sim:0")
        with self.assertRaises(TypeError):
            mnemo.use_mem_pool(None)
        with mnemo.NaiveAllocator(DEV) as n:
            with self.assertRaises(mnemo.MnemoError) as cm:
                mnemo.MemPool(n)
            self.assertEqual(cm.exception.status_name, "not_supported")



class BadInput(unittest.TestCase):
    """Refusals found by tests/python/fuzz_api.py."""

    def test_no_allocator_from_a_raw_int(self):
        # Allocator(int) wrapped any int as an mn_allocator_t* (a wrong one crashed; owned=True of a
        # live one destroyed it twice)
        a = mnemo.CachingAllocator("sim")
        for args in ((12345,), (-2 ** 63, True), (a._handle, True), (a._handle,)):
            with self.subTest(args=args), self.assertRaisesRegex(TypeError, "does not wrap"):
                mnemo.Allocator(*args)
        self.assertEqual(mnemo.empty(4, device="sim", allocator=a).shape, (4,))
        self.assertEqual(mnemo.default_allocator("cpu").name, "naive")
        self.assertIsInstance(mnemo.PinnedAllocator.get_default(), mnemo.PinnedAllocator)

    def test_package_objects_are_no_stream(self):
        # a View's, a storage's or an allocator's _handle is no mn_stream_t*: passing one crashed
        a = mnemo.CachingAllocator("sim")
        for junk in (mnemo.tensor([1.]), mnemo.UntypedStorage(4), a):
            with self.subTest(junk=type(junk).__name__), self.assertRaises(TypeError):
                a.alloc(16, stream=junk)
        self.assertEqual(a.memory_stats()["allocation.all.current"], 0)

    def test_mempool_with_a_wrong_argument_collects_quietly(self):
        import sys
        seen = []
        old, sys.unraisablehook = sys.unraisablehook, seen.append
        try:
            with self.assertRaises(TypeError):
                mnemo.MemPool(no_such_argument=1)
            gc.collect()
        finally:
            sys.unraisablehook = old
        self.assertEqual(seen, [], "the finalizer of a MemPool whose __init__ never ran raised")


if __name__ == "__main__":
    unittest.main(verbosity=1)
