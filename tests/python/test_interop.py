#!/usr/bin/env python3
# tests/python/test_interop.py: zero-copy interchange of mnemo views with numpy
# and PyTorch (CPU): DLPack both ways (legacy and versioned capsules),
# __array_interface__, mnemo.asarray, lifetimes and capsule garbage collection.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_interop.py
(exit 0 pass, 1 fail, 77 skip: numpy missing). Label cpu. The torch round
trips are skipped when torch is not installed."""
import ctypes as C
import gc
import sys
import unittest
import weakref

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

import mnemo
from mnemo import _core

try:
    import torch
    import torch.utils.dlpack
except ImportError:
    torch = None

_is_valid = C.pythonapi["PyCapsule_IsValid"]
_is_valid.restype, _is_valid.argtypes = C.c_int, [C.py_object, C.c_char_p]


def capsule_name(cap):
    for name in (b"dltensor", b"used_dltensor", b"dltensor_versioned", b"used_dltensor_versioned"):
        if _is_valid(cap, name):
            return name.decode()
    return None


class NumpyRoundTrips(unittest.TestCase):
    def test_numpy_mnemo_numpy_shares_memory(self):
        a = np.arange(12, dtype=np.float64).reshape(3, 4)
        v = mnemo.from_dlpack(a)
        self.assertEqual((v.shape, v.stride(), v.dtype, str(v.device)), ((3, 4), (4, 1), mnemo.float64, "cpu"))
        self.assertEqual(v.data_ptr(), a.ctypes.data)
        self.assertEqual(v.untyped_storage().kind, "foreign")
        b = v.numpy()
        self.assertEqual(b.ctypes.data, a.ctypes.data)
        self.assertTrue(b.flags.writeable)
        b[1, 2] = -5
        self.assertEqual(a[1, 2], -5, "write through mnemo's numpy(), read through the original")
        a[0, 0] = 99
        self.assertEqual(v[0, 0].item(), 99.0, "write through the original, read through mnemo")
        v[2].fill_(7)
        self.assertEqual(a[2].tolist(), [7.0] * 4)

    def test_mnemo_to_numpy_dlpack(self):
        x = mnemo.tensor(np.arange(12, dtype=np.int64)).view(3, 4)
        s = x.untyped_storage()
        base = s.refcount
        t = x.t()
        arr = np.from_dlpack(t)
        self.assertEqual((arr.shape, arr.strides), ((4, 3), (8, 32)))
        self.assertEqual(arr.ctypes.data, t.data_ptr())
        self.assertEqual(arr.tolist(), np.arange(12).reshape(3, 4).T.tolist())
        self.assertEqual(s.refcount, base + 2, "t and the export hold references")
        x[0, 1] = -3
        self.assertEqual(arr[1, 0], -3, "mnemo's write seen by numpy")
        del t, x
        gc.collect()
        self.assertEqual(s.refcount, 2, "numpy's array keeps the storage")
        self.assertEqual(arr[1, 0], -3)
        del arr
        gc.collect()
        self.assertEqual(s.refcount, 1, "numpy called the deleter")

    def test_strided_0d_empty(self):
        base = np.arange(40, dtype=np.float32).reshape(5, 8)
        for a in (base[1:4, ::3], base.T, base[:, 2], np.array(3.5, np.float32), np.zeros((0, 3), np.int16),
                  np.zeros((2, 0), np.complex64), base[::2, 1::2].T):
            with self.subTest(shape=a.shape, strides=a.strides):
                v = mnemo.from_dlpack(a)
                self.assertEqual(v.shape, a.shape)
                if a.size:
                    self.assertEqual(tuple(s * a.itemsize for s in v.stride()), a.strides)
                    self.assertEqual(v.data_ptr(), a.ctypes.data)
                self.assertEqual(v.tolist(), a.tolist())
                back = np.from_dlpack(v)
                self.assertEqual((back.shape, back.dtype, back.tolist()), (a.shape, a.dtype, a.tolist()))
                if a.size:
                    self.assertEqual(back.ctypes.data, a.ctypes.data)
                via_ai = np.asarray(v)
                self.assertEqual(via_ai.tolist(), a.tolist())
                self.assertTrue(via_ai.flags.writeable)

    def test_dtypes(self):
        for name in ("uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                     "complex128"):
            a = (np.arange(6) * 3 - 5).astype(name)
            v = mnemo.from_dlpack(a)
            self.assertIs(v.dtype, getattr(mnemo, name))
            self.assertEqual(np.from_dlpack(v).tolist(), a.tolist())
            self.assertEqual(v.numpy().dtype, a.dtype)
            self.assertEqual(v.__array_interface__["typestr"], a.dtype.str)

    def test_lifetime_producer_deleted_first(self):
        a = np.arange(1000, dtype=np.int32)
        owner = weakref.ref(a)
        v = mnemo.from_dlpack(a[10:20])
        del a
        gc.collect()
        self.assertIsNotNone(owner(), "the imported tensor keeps numpy's array alive")
        self.assertEqual(v.tolist(), list(range(10, 20)))
        del v
        gc.collect()
        self.assertIsNone(owner(), "the last view gives numpy's array back")

    def test_array_interface(self):
        x = mnemo.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))[:, 1:]
        ai = x.__array_interface__
        self.assertEqual(ai, {"version": 3, "typestr": "<f4", "data": (x.data_ptr(), False), "shape": (2, 2),
                              "strides": (12, 4)})
        arr = np.asarray(x)
        self.assertIs(arr.base, x, "numpy keeps the view alive")
        arr[1, 1] = 50
        self.assertEqual(x[1, 1].item(), 50.0)
        self.assertEqual(mnemo.tensor([True, False]).__array_interface__["typestr"], "|b1")
        s = x.to("sim")
        with self.assertRaises(AttributeError) as cm:
            s.__array_interface__
        self.assertIn("only for CPU views", str(cm.exception))
        self.assertEqual(np.asarray(s).tolist(), [[1.0, 2.0], [4.0, 50.0]], "SIM views reach numpy as a copy")
        with self.assertRaises(AttributeError):
            mnemo.zeros(2, dtype=mnemo.bfloat16).__array_interface__
        with self.assertRaises(TypeError):
            np.asarray(mnemo.zeros(2, dtype=mnemo.bfloat16))
        with self.assertRaises(AttributeError):
            x.__cuda_array_interface__
        z = np.asarray(mnemo.tensor(5, dtype=mnemo.int16))
        self.assertEqual((z.shape, int(z)), ((), 5))
        self.assertEqual(np.asarray(mnemo.empty(0, 2)).shape, (0, 2))
        del arr
        base = mnemo.tensor([1.0, 2.0])
        arr = np.asarray(base[1:])
        del base
        gc.collect()
        self.assertEqual(arr.tolist(), [2.0], "numpy's array keeps the view (and storage) alive")


class Capsules(unittest.TestCase):
    def test_unconsumed_capsules_are_freed(self):
        x = mnemo.tensor([1.0, 2.0, 3.0])
        s = x.untyped_storage()
        base = s.refcount
        caps = [x.__dlpack__(), x.__dlpack__(max_version=(1, 0)), x[1:].__dlpack__(max_version=(1, 2))]
        self.assertEqual([capsule_name(c) for c in caps], ["dltensor", "dltensor_versioned", "dltensor_versioned"])
        self.assertEqual(s.refcount, base + 3)
        del caps
        gc.collect()
        self.assertEqual(s.refcount, base, "the capsule destructor called the deleter")
        cap = x.__dlpack__(max_version=(0, 8))
        self.assertEqual(capsule_name(cap), "dltensor")
        del cap
        self.assertEqual(s.refcount, base)

    def test_bad_dlpack_device(self):
        """A producer whose __dlpack_device__ is not (type, id) ints: TypeError naming it."""
        x = mnemo.tensor([1, 2])

        class Junk:
            def __init__(self, dev):
                self.dev = dev

            def __dlpack_device__(self):
                return self.dev

            def __dlpack__(self, **kwargs):
                return x.__dlpack__(**kwargs)

        for dev in (None, "ab", (1,), (1, 0, 0), ("cpu", 0), 7, (1.5, 0)):
            with self.subTest(dev=dev):
                if dev is None:  # no device said: taken as given
                    self.assertEqual(mnemo.from_dlpack(Junk(dev)).tolist(), [1, 2])
                    continue
                with self.assertRaises(TypeError) as cm:
                    mnemo.from_dlpack(Junk(dev))
                self.assertIn("Junk.__dlpack_device__()", str(cm.exception))
        self.assertEqual(mnemo.from_dlpack(Junk((1, 0))).tolist(), [1, 2])

    def test_consume_capsules(self):
        x = mnemo.tensor([[1, 2], [3, 4]], dtype=mnemo.int32)
        s = x.untyped_storage()
        for kwargs in ({}, {"max_version": (1, 0)}):
            cap = x.t().__dlpack__(**kwargs)
            v = mnemo.from_dlpack(cap)
            self.assertTrue(capsule_name(cap).startswith("used_"))
            self.assertEqual((v.tolist(), v.data_ptr()), ([[1, 3], [2, 4]], x.data_ptr()))
            with self.assertRaises(ValueError):
                mnemo.from_dlpack(cap)
            v[0, 1] = 30
            self.assertEqual(x[1, 0].item(), 30)
            x[1, 0] = 3
            del cap, v
            gc.collect()
            self.assertEqual(s.refcount, 2)
        sim = x.to("sim:0")
        self.assertEqual(sim.__dlpack_device__(), (12, 0))
        self.assertEqual(x.__dlpack_device__(), (1, 0))
        back = mnemo.from_dlpack(sim.__dlpack__())
        self.assertEqual((str(back.device), back.data_ptr(), back.tolist()), ("sim:0", sim.data_ptr(), x.tolist()))
        self.assertTrue(mnemo.from_dlpack(x).shares_storage(x))
        with self.assertRaises(TypeError):
            mnemo.from_dlpack([1, 2])

    def test_dl_device_and_copy(self):
        x = mnemo.tensor([1.0, 2.0])
        cap = x.__dlpack__(dl_device=(12, 0), max_version=(1, 0))
        v = mnemo.from_dlpack(cap)
        self.assertEqual((str(v.device), v.tolist()), ("sim:0", [1.0, 2.0]))
        with self.assertRaises(BufferError):
            x.__dlpack__(dl_device=(12, 0), copy=False)
        c = mnemo.from_dlpack(x.__dlpack__(copy=True))
        self.assertNotEqual(c.data_ptr(), x.data_ptr())
        self.assertEqual(c.tolist(), [1.0, 2.0])
        same = mnemo.from_dlpack(x.__dlpack__(dl_device=(1, 0), copy=False))
        self.assertEqual(same.data_ptr(), x.data_ptr())
        with self.assertRaises(BufferError):
            x.__dlpack__(dl_device=(4, 0))
        with self.assertRaises(TypeError):
            x.__dlpack__(stream="s")

    def test_refused_import_keeps_capsule(self):
        rev = np.arange(6, dtype=np.int64)[::-1]
        cap = rev.__dlpack__()
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.from_dlpack(cap)
        self.assertEqual(cm.exception.status_name, "not_supported")
        self.assertIn("negative", cm.exception.message)
        self.assertEqual(capsule_name(cap), "dltensor", "a refused capsule stays the producer's")
        del cap
        with self.assertRaises(mnemo.MnemoError):
            mnemo.from_dlpack(rev)

    def test_allocator_kept_alive_by_exports(self):
        lib = mnemo._lib.lib
        create = lib["mn_naive_allocator_create"]
        create.restype, create.argtypes = C.c_int, [mnemo._lib.Device, C.POINTER(C.c_void_p)]
        destroy = lib["mn_allocator_destroy"]
        destroy.restype, destroy.argtypes = None, [C.c_void_p]

        class Naive:
            def __init__(self):
                h = C.c_void_p()
                assert create(mnemo.cpu._c, C.byref(h)) == 0
                self._handle = h.value

            def __del__(self):
                destroy(self._handle)

        a = Naive()
        gone = weakref.ref(a)
        x = mnemo.full((4,), 2.5, allocator=a)
        s = x.untyped_storage()
        del a
        arr = np.from_dlpack(x)
        unconsumed = x.__dlpack__(max_version=(1, 0))
        del x
        gc.collect()
        self.assertIsNotNone(gone())
        self.assertEqual(arr.tolist(), [2.5] * 4)
        del arr
        gc.collect()
        self.assertIsNotNone(gone(), "the unconsumed capsule still holds it")
        del unconsumed
        gc.collect()
        self.assertEqual(s.refcount, 1, "mnemo's deleter ran for both exports")
        self.assertIsNotNone(gone(), "the Storage object still holds it")
        del s
        gc.collect()
        self.assertIsNone(gone(), "the allocator goes after the last export")


class AsArray(unittest.TestCase):
    def test_zero_copy_and_copies(self):
        kept = _core.kept_count()
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        v = mnemo.asarray(a)
        self.assertEqual(v.data_ptr(), a.ctypes.data)
        ro = a.copy()
        ro.flags.writeable = False
        c = mnemo.asarray(ro)
        self.assertNotEqual(c.data_ptr(), ro.ctypes.data, "read-only memory is copied")
        self.assertEqual(c.tolist(), ro.tolist())
        rev = np.arange(5, dtype=np.int64)[::-1]
        r = mnemo.asarray(rev)
        self.assertEqual(r.tolist(), [4, 3, 2, 1, 0])
        b = np.array([True, False, True])
        bv = mnemo.asarray(b)  # numpy 1.24 exports no bool DLPack: __array_interface__, zero-copy
        self.assertEqual((bv.dtype, bv.data_ptr(), bv.tolist()), (mnemo.bool, b.ctypes.data, [True, False, True]))
        bv[1] = True
        self.assertTrue(b[1])
        self.assertEqual(mnemo.asarray([[1, 2], [3, 4]]).tolist(), [[1, 2], [3, 4]])
        self.assertEqual(mnemo.asarray(2.5).item(), 2.5)
        self.assertEqual(mnemo.asarray(a, dtype=mnemo.int16).tolist(), [[0, 1, 2], [3, 4, 5]])
        self.assertEqual(str(mnemo.asarray(a, device="sim").device), "sim:0")
        self.assertIs(mnemo.asarray(v), v)
        self.assertNotEqual(mnemo.asarray(a, copy=True).data_ptr(), a.ctypes.data)
        with self.assertRaises(ValueError):
            mnemo.asarray([1, 2], copy=False)
        with self.assertRaises(ValueError):
            mnemo.asarray(a, dtype=mnemo.float64, copy=False)
        del bv
        gc.collect()
        self.assertEqual(_core.kept_count(), kept)

    def test_array_interface_objects(self):
        buf = (C.c_int32 * 6)(*range(6))

        class Producer:
            """Only __array_interface__ (no DLPack, no buffer protocol)."""
            @property
            def __array_interface__(self):
                return {"version": 3, "typestr": "<i4", "data": (C.addressof(buf), False), "shape": (3,),
                        "strides": (8,)}

        kept = _core.kept_count()
        p = Producer()
        alive = weakref.ref(p)
        v = mnemo.asarray(p)
        self.assertEqual((v.tolist(), v.stride(), v.data_ptr()), ([0, 2, 4], (2,), C.addressof(buf)))
        del p
        gc.collect()
        self.assertIsNotNone(alive(), "the C storage keeps the producer alive")
        exported = np.from_dlpack(v)
        del v
        gc.collect()
        self.assertIsNotNone(alive(), "so does a DLPack export of it")
        self.assertEqual(exported.tolist(), [0, 2, 4])
        del exported
        gc.collect()
        self.assertIsNone(alive())
        self.assertEqual(_core.kept_count(), kept)


@unittest.skipIf(torch is None, "torch is not installed")
class TorchRoundTrips(unittest.TestCase):
    def test_torch_mnemo_torch(self):
        t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        v = mnemo.from_dlpack(t)
        self.assertEqual((v.shape, v.stride(), v.data_ptr()), ((3, 4), (4, 1), t.data_ptr()))
        back = torch.from_dlpack(v)
        self.assertEqual(back.data_ptr(), t.data_ptr())
        back2 = torch.utils.dlpack.from_dlpack(v.t().__dlpack__())
        self.assertEqual((tuple(back2.shape), back2.stride()), ((4, 3), (1, 4)))
        self.assertTrue(torch.equal(back2, t.t()))
        v[1, 1] = -1
        self.assertEqual(t[1, 1].item(), -1.0)
        back[2, 3] = 100
        self.assertEqual(v[2, 3].item(), 100.0)

    def test_mnemo_to_torch_views(self):
        x = mnemo.tensor(np.arange(24, dtype=np.int64).reshape(2, 3, 4))
        s = x.untyped_storage()
        ref = torch.arange(24).reshape(2, 3, 4)
        for f in (lambda y: y.permute(2, 0, 1), lambda y: y[1, ::2, 1:], lambda y: y[0, 0, 0], lambda y: y[:, 1:1],
                  lambda y: y.diagonal(0, 1, 2), lambda y: y[:1].expand(3, 3, 4)):
            got = torch.from_dlpack(f(x))
            want = f(ref)
            self.assertEqual((tuple(got.shape), got.stride(), got.storage_offset() * 0), (tuple(want.shape),
                                                                                          want.stride(), 0))
            self.assertTrue(torch.equal(got, want))
        del got
        gc.collect()
        self.assertEqual(s.refcount, 2)

    def test_bfloat16(self):
        t = torch.tensor([[1.5, -2.0], [3.140625, 1e-3]], dtype=torch.bfloat16)
        v = mnemo.from_dlpack(t)
        self.assertIs(v.dtype, mnemo.bfloat16)
        self.assertEqual(v.tolist(), t.float().tolist())
        back = torch.from_dlpack(v.t())
        self.assertEqual(back.dtype, torch.bfloat16)
        self.assertEqual(back.data_ptr(), t.data_ptr())
        self.assertTrue(torch.equal(back, t.t()))
        m = mnemo.tensor([0.1, 2.7, -3.3], dtype=mnemo.bfloat16)
        self.assertTrue(torch.equal(torch.from_dlpack(m), torch.tensor([0.1, 2.7, -3.3]).bfloat16()))
        self.assertTrue(torch.equal(torch.from_dlpack(m.to("sim").to(mnemo.float32).cpu()),
                                    torch.tensor([0.1, 2.7, -3.3]).bfloat16().float()))

    def test_lifetimes(self):
        t = torch.arange(8, dtype=torch.int16)
        v = mnemo.from_dlpack(t[2:6])
        del t
        gc.collect()
        self.assertEqual(v.tolist(), [2, 3, 4, 5], "torch's memory stays while mnemo holds it")
        x = mnemo.tensor([1.0, 2.0, 3.0])
        s = x.untyped_storage()
        tt = torch.from_dlpack(x)
        del x
        gc.collect()
        self.assertEqual(s.refcount, 2)
        self.assertEqual(tt.tolist(), [1.0, 2.0, 3.0])
        del tt
        gc.collect()
        self.assertEqual(s.refcount, 1)

    def test_asarray_and_tensor_of_torch(self):
        t = torch.ones(2, 2)
        v = mnemo.asarray(t)
        self.assertEqual(v.data_ptr(), t.data_ptr())
        c = mnemo.tensor(t)
        self.assertNotEqual(c.data_ptr(), t.data_ptr())
        b = mnemo.asarray(torch.tensor([True, False]))  # torch 1.13 exports no bool DLPack: a copy
        self.assertEqual((b.dtype, b.tolist()), (mnemo.bool, [True, False]))
        dst = mnemo.zeros(2, 2, device="sim")
        dst.copy_(t * 3)
        self.assertEqual(dst.tolist(), [[3.0, 3.0], [3.0, 3.0]])



class BadDlpackArguments(unittest.TestCase):
    """Found by tests/python/fuzz_api.py: KeyError/OverflowError leaked."""

    def test_dl_device_and_max_version(self):
        v = mnemo.tensor([1., 2.])
        for dl in ({}, {"a": 1}, (float("inf"), 0)):
            with self.subTest(dl_device=dl), self.assertRaises(ValueError):
                v.__dlpack__(dl_device=dl)
        for mv in ([float("inf")], {}, (), "x"):
            with self.subTest(max_version=mv), self.assertRaises(TypeError):
                v.__dlpack__(max_version=mv)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
