#!/usr/bin/env python3
# tests/python/test_speedups.py: the compiled fast paths of the Python package
# (mnemo._speedups, python/mnemo/_speedups.c) give what the Python paths give:
# View indexing with ints, slices and tuples of them against View._getitem_slow,
# tolist() against View._tolist_slow (numpy) for every dtype numpy reads,
# mnemo.empty against the general path, storage element reads and writes
# against the Python functions, the same exceptions for bad input, and the
# lifetimes (the handle freed once, the allocator box counted, weak references,
# garbage cycles). Without the extension (not built, or MNEMO_PURE_PYTHON=1)
# it checks that the package runs on ctypes alone.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_speedups.py
(exit 0 pass, 1 fail, 77 skip: numpy missing). MNEMO_EXPECT_SPEEDUPS=1 (set by
CTest when the build has the extension): fail when it does not load. Labels cpu;sim."""
import gc
import itertools
import os
import sys
import unittest
import weakref

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

import mnemo
from mnemo import _core, _owner, storage as _storage

SP = _core.speedups
PURE = os.environ.get("MNEMO_PURE_PYTHON", "") not in ("", "0")


def layout(v):
    return (v.shape, v.stride(), v.storage_offset(), v.dtype, v.device, v.data_ptr())


class Loading(unittest.TestCase):
    def test_loaded_as_expected(self):
        if PURE:
            self.assertIsNone(SP)
            self.assertNotIn("ViewBase", [c.__name__ for c in mnemo.View.__mro__])
        elif os.environ.get("MNEMO_EXPECT_SPEEDUPS") == "1":
            self.assertIsNotNone(SP, "the build has mnemo._speedups but it did not load")
            self.assertIs(mnemo.View.__mro__[1], SP.ViewBase)

    def test_names_are_library_functions(self):
        if SP is None:
            self.skipTest("no mnemo._speedups")
        from mnemo._lib import lib
        for n in SP._names():
            self.assertTrue(n.startswith("mn_"), n)
            lib[n]  # exported by libmnemo

    def test_bind_refuses_bad_arguments(self):
        if SP is None:
            self.skipTest("no mnemo._speedups")
        with self.assertRaises(TypeError):
            SP._bind({}, int, None, None, None, {})
        with self.assertRaises(TypeError):
            SP._bind(1, 2)


class Indexing(unittest.TestCase):
    KEYS = [0, 1, -1, -3, 2, 3, -4, 100, slice(None), slice(1, None), slice(None, 2), slice(-2, None),
            slice(0, 3, 2), slice(5, 1), slice(None, None, 3), slice(-100, 100), slice(1 << 70, None),
            (0,), (1, 2), (slice(None), 1), (0, slice(1, 3)), (slice(None), slice(None), 1), (-1, -1, -1),
            (0, 0, 0, 0), (), True, None, Ellipsis, (None, 0), (Ellipsis, 1), 1.5, "a", slice(None, None, -1),
            slice(None, None, 0), (1 << 70,), 1 << 70, [0, 1], np.int64(1)]

    def check(self, v):
        for k in self.KEYS:
            with self.subTest(key=k, device=str(v.device)):
                try:
                    want = v._getitem_slow(k)
                except Exception as e:
                    with self.assertRaises(type(e)) as cm:
                        v[k]
                    self.assertEqual(str(cm.exception), str(e))
                    continue
                got = v[k]
                self.assertIsInstance(got, mnemo.View)
                if want.shares_storage(v):  # (advanced indexing copies: a new storage each time)
                    self.assertEqual(layout(got), layout(want))
                else:
                    self.assertEqual(layout(got)[:-1], layout(want)[:-1])
                if got.device.type != "meta":
                    self.assertEqual(got.tolist(), want.tolist())

    def test_cpu_sim_meta(self):
        for dev in ("cpu", "sim:0", "meta"):
            v = mnemo.arange(60, device=dev).view(3, 4, 5)
            self.check(v)
            self.check(v.transpose(0, 2))
            self.check(v[1:, ::2])

    def test_zero_dim_and_empty(self):
        self.check(mnemo.tensor(3.5))
        self.check(mnemo.empty(0, 3))

    def test_sequence_protocol(self):
        v = mnemo.arange(6).view(2, 3)
        self.assertEqual([x.tolist() for x in v], [[0, 1, 2], [3, 4, 5]])
        self.assertEqual(np.asarray(v).tolist(), [[0, 1, 2], [3, 4, 5]])
        with self.assertRaisesRegex(TypeError, "0-d"):
            len(mnemo.tensor(1))

    def test_results_share_and_keep_storage(self):
        v = mnemo.arange(10)
        s = v[2:5]
        s.fill_(7)
        self.assertEqual(v.tolist()[2:5], [7, 7, 7])
        ref = v.untyped_storage().refcount
        del v
        gc.collect()
        self.assertEqual(s.tolist(), [7, 7, 7])
        self.assertEqual(s.untyped_storage().refcount, ref - 1)


class ToList(unittest.TestCase):
    def test_every_numpy_dtype(self):
        vals = [0, 1, -2, 3, 127, -128, 5, 6, 7, 8, 9, 10]
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
                     "float32", "float64", "complex64", "complex128", "bfloat16", "float8_e4m3fn", "float8_e5m2"):
            try:
                dt = mnemo.dtype(name)
            except Exception:
                continue
            with self.subTest(dtype=name):
                if dt.kind in ("uint", "bool"):
                    base = mnemo.tensor([abs(x) for x in vals]).to(dtype=dt)
                else:
                    base = mnemo.tensor([x + 0.25 * (i % 3) for i, x in enumerate(vals)], dtype="float64").to(dtype=dt)
                for v in (base, base.view(3, 4), base.view(3, 4).t(), base.view(3, 4)[1:, ::2], base[5],
                          base.view(2, 2, 3).permute(2, 0, 1), base[:0]):
                    got, want = v.tolist(), v._tolist_slow()
                    self.assertEqual(got, want)
                    self.assertEqual(repr(got), repr(want))  # same Python types (bool, int, float, complex)

    def test_sim_and_quantized_go_through_python(self):
        v = mnemo.arange(6, device="sim:0", dtype="float32").view(2, 3)
        self.assertEqual(v.tolist(), [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
        q = mnemo.quantize_per_tensor(mnemo.tensor([0.0, 1.0, 2.0]), 0.5, 1, "quint8")
        try:
            want = q._tolist_slow()
        except Exception as e:
            with self.assertRaises(type(e)):
                q.tolist()
        else:
            self.assertEqual(q.tolist(), want)


class Methods(unittest.TestCase):
    def same(self, fast, slow, *args, **kwargs):
        try:
            want = slow(*args, **kwargs)
        except Exception as e:
            with self.assertRaises(type(e)) as cm:
                fast(*args, **kwargs)
            if "argument" not in str(e):  # (Python's arity messages name the function: _x_slow or x)
                self.assertEqual(str(cm.exception), str(e))
            return
        got = fast(*args, **kwargs)
        self.assertEqual(layout(got), layout(want))

    def test_t_transpose_view(self):
        for dev in ("cpu", "sim:0", "meta"):
            for v in (mnemo.arange(24, device=dev).view(2, 3, 4), mnemo.arange(6, device=dev).view(2, 3),
                      mnemo.arange(5, device=dev), mnemo.tensor(2.0).to(dev),
                      mnemo.arange(24, device=dev).view(2, 3, 4).transpose(0, 2)):
                with self.subTest(device=dev, shape=v.shape):
                    self.same(v.t, v._t_slow)
                    for args in ((0, 1), (-1, 0), (0, 5), (1, 1), (0,), (0, 1, 2), (np.int64(0), 1), (0.5, 1),
                                 (True, 0), (1 << 40, 0)):
                        self.same(v.transpose, v._transpose_slow, *args)
                    self.same(v.transpose, v._transpose_slow, dim0=0, dim1=-1)
                    for args in ((-1,), (24,), (4, 6), (4, -1), ((2, 12),), ([3, 8],), (5,), (-1, -1), (),
                                 ("float32",), (mnemo.int32,), (np.int64(24),), ((2, 3.0),), (1 << 70,),
                                 (mnemo.empty(2),)):
                        self.same(v.view, v._view_slow, *args)
                    self.same(v.swapaxes, v._transpose_slow, 0, -1)

    def test_dlpack_device(self):
        self.assertEqual(mnemo.empty(2).__dlpack_device__(), (1, 0))
        self.assertEqual(mnemo.empty(2, device="sim:0").__dlpack_device__(), (12, 0))
        with self.assertRaises(ValueError):
            mnemo.empty(2, device="meta").__dlpack_device__()


class DLPack(unittest.TestCase):
    def test_numpy_round_trips(self):
        for dtype in (np.float32, np.int64, np.uint8, np.complex64, np.float16):  # (numpy 1.x exports no bool)
            a = (np.arange(12) % 3).astype(dtype).reshape(3, 4)
            for src in (a, a[1:], a[:, ::2], a.T):
                with self.subTest(dtype=dtype, strides=src.strides):
                    for _ in range(2):  # (the first call learns that numpy 1.x takes no max_version)
                        v = mnemo.from_dlpack(src)
                        self.assertEqual(v.tolist(), src.tolist())
                        self.assertEqual(v.data_ptr(), src.__array_interface__["data"][0])
                        back = np.from_dlpack(v)
                        self.assertEqual(back.tolist(), src.tolist())
                        self.assertEqual(back.__array_interface__["data"][0], src.__array_interface__["data"][0])

    def test_refusal_and_unconsumed_capsules(self):
        a = np.arange(6, dtype=np.float32)
        mnemo.from_dlpack(a)
        with self.assertRaises(Exception):
            mnemo.from_dlpack(a[::-1])  # negative strides: numpy or mnemo refuses
        v = mnemo.arange(4)
        s = v.untyped_storage()
        r0 = s.refcount
        cap = v.__dlpack__()
        self.assertEqual(s.refcount, r0 + 1)
        del cap  # nobody consumed it: its destructor gives the reference back
        gc.collect()
        self.assertEqual(s.refcount, r0)
        cap = v.__dlpack__()
        w = mnemo.from_dlpack(cap)
        with self.assertRaises(ValueError):
            mnemo.from_dlpack(cap)  # consumed
        self.assertEqual(w.tolist(), v.tolist())
        del w, cap
        gc.collect()
        self.assertEqual(s.refcount, r0)

    def test_allocator_views_take_the_general_path(self):
        a = mnemo.CachingAllocator("cpu")
        box = _owner.box_of(a._handle)
        v = mnemo.empty(4, allocator=a).fill_(1)
        live = box.live
        t = np.from_dlpack(v)
        self.assertEqual(t.tolist(), [1.0] * 4)
        self.assertEqual(box.live, live + 1)  # the export counts on the allocator
        del t
        gc.collect()
        self.assertEqual(box.live, live)
        del v
        a.close()


class Empty(unittest.TestCase):
    def test_forms(self):
        for args, kw in [((2, 3), {}), (((2, 3),), {}), (([4],), {}), ((), {}), (((),), {}), ((0,), {}),
                         ((2, 3), {"dtype": mnemo.int8}), ((5,), {"device": mnemo.device("sim:0")}),
                         ((5,), {"device": "sim:0", "dtype": "float16"}), ((1,) * 25, {}),
                         ((3,), {"device": mnemo.device("meta"), "dtype": mnemo.complex64})]:
            with self.subTest(args=args, kw=kw):
                v = mnemo.empty(*args, **kw)
                shape = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args
                self.assertEqual(v.shape, tuple(shape))
                self.assertTrue(v.is_contiguous())
                self.assertEqual(v.dtype, mnemo.dtype(kw.get("dtype", "float32")))
                self.assertEqual(v.device, mnemo.device(kw.get("device", "cpu")))

    def test_errors(self):
        for args, kw, exc in [((-1,), {}, mnemo.MnemoError), ((1.5,), {}, TypeError), ((True,), {}, TypeError),
                              ((1 << 70,), {}, ValueError), (((2, -3),), {}, mnemo.MnemoError),
                              ((1,) * 26, {}, ValueError), ((2,), {"dtype": "nope"}, Exception),
                              ((2,), {"device": "nope"}, Exception), ((mnemo.empty(2),), {}, TypeError)]:
            with self.subTest(args=args, kw=kw):
                with self.assertRaises(exc):
                    mnemo.empty(*args, **kw)


class StorageElements(unittest.TestCase):
    def pairs(self):
        for dev in ("cpu", "sim:0"):
            for name in ("uint8", "int8", "int32", "int64", "float16", "float32", "float64", "bool", "complex64",
                         "bfloat16", "quint8"):
                dt = mnemo.dtype(name)
                yield dev, dt, mnemo.TypedStorage(6, dtype=dt, device=dev)

    def test_typed_matches_python(self):
        values = [0, 1, -1, 255, 256, 300, -129, 1 << 63, 1 << 64, 2.5, -0.5, float("nan"), True, False, 1 + 2j,
                  np.float32(1.5), "x", None]
        for dev, dt, s in self.pairs():
            s.zero_()
            twin = mnemo.TypedStorage(6, dtype=dt, device=dev)
            twin.zero_()
            for i, val in itertools.product((0, 5, -1, -6, 6, -7), values):
                with self.subTest(device=dev, dtype=dt.name, index=i, value=val):
                    try:
                        _storage._setitem(twin.untyped(), twin.dtype, i, val)
                    except Exception as e:
                        with self.assertRaises(type(e)):
                            s[i] = val
                    else:
                        s[i] = val
                    self.assertEqual(repr(s.tolist()), repr(twin.tolist()))
                    try:
                        want = _storage._getitem(twin.untyped(), twin.dtype, i)
                    except Exception as e:
                        with self.assertRaises(type(e)) as cm:
                            s[i]
                        self.assertEqual(str(cm.exception), str(e))
                    else:
                        self.assertEqual(repr(s[i]), repr(want))

    def test_untyped(self):
        for dev in ("cpu", "sim:0"):
            u = mnemo.UntypedStorage(4, device=dev)
            u.fill_(0)
            u[0] = 300
            u[-1] = -1
            u[1] = True
            self.assertEqual([u[0], u[1], u[2], u[3]], [44, 1, 0, 255])
            self.assertEqual(u.tolist(), [44, 1, 0, 255])
            for bad in (4, -5):
                with self.assertRaises(IndexError):
                    u[bad]
                with self.assertRaises(IndexError):
                    u[bad] = 1
            with self.assertRaises(TypeError):
                u[0] = 1.5
        u.release()
        with self.assertRaises(ValueError):
            u[0]
        with self.assertRaises(ValueError):
            u[0] = 1


class Lifetimes(unittest.TestCase):
    def test_box_counts_views_and_cycles(self):
        a = mnemo.CachingAllocator("sim:0")
        box = _owner.box_of(a._handle)
        self.assertIsNotNone(box)
        base = box.live
        v = mnemo.empty(8, device="sim:0", allocator=a)
        views = [v[1:3], v[0], v[(slice(2, None),)], v.view(2, 4)[1], v[2:][1:]]
        self.assertEqual(box.live, base + 1 + len(views))
        w = weakref.ref(views[0])
        del views
        self.assertIsNone(w())
        self.assertEqual(box.live, base + 1)
        cycle = [v[1:]]
        cycle.append(cycle)
        del cycle
        gc.collect()
        self.assertEqual(box.live, base + 1)
        del v
        gc.collect()
        self.assertEqual(box.live, base)
        a.close()
        self.assertEqual(_owner.live_allocator_count(), _owner.live_allocator_count())

    def test_handle_freed_once(self):
        v = mnemo.arange(4)
        s = v.untyped_storage()
        r0 = s.refcount
        x = v[1:]
        self.assertEqual(s.refcount, r0 + 1)
        h = x._take()
        self.assertIsNotNone(h)
        self.assertIsNone(x._take())
        mnemo._lib.lib.mn_view_destroy(h)
        del x  # its handle was given up: nothing freed twice
        gc.collect()
        self.assertEqual(s.refcount, r0)

    def test_weakref_and_subclass_attributes(self):
        v = mnemo.empty(3)
        r = weakref.ref(v)
        self.assertIs(r(), v)
        with self.assertRaises(AttributeError):
            v.some_new_attribute = 1
        del v
        self.assertIsNone(r())


if __name__ == "__main__":
    unittest.main(verbosity=1)
