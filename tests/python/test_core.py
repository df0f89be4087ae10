#!/usr/bin/env python3
# tests/python/test_core.py: the core of the Python package (dtypes, storages,
# views, indexing, copies, fills, save/load, safetensors, errors) on the CPU and
# the SIM device, compared with numpy and PyTorch (CPU) results.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_core.py
(exit 0 pass, 1 fail, 77 skip: numpy missing). Labels cpu;sim. Comparisons
with PyTorch are skipped when torch is not installed."""
import gc
import json
import os
import struct
import sys
import tempfile
import unittest
import weakref

try:
    import numpy as np
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

import mnemo

try:
    import torch
except ImportError:
    torch = None

DEVICES = ("cpu", "sim:0")


def need_torch(test):
    if torch is None:
        test.skipTest("torch is not installed")


def arange(shape, device="cpu", dtype="float32"):
    n = int(np.prod(shape)) if shape else 1
    return mnemo.tensor(np.arange(n, dtype=np.float64).reshape(shape), dtype=dtype, device=device)


class Dtypes(unittest.TestCase):
    def test_table(self):
        expected = {"bool": (1, "bool"), "uint8": (1, "uint"), "int8": (1, "int"), "int16": (2, "int"),
                    "int32": (4, "int"), "int64": (8, "int"), "float16": (2, "float"), "bfloat16": (2, "float"),
                    "float32": (4, "float"), "float64": (8, "float"), "complex64": (8, "complex"),
                    "complex128": (16, "complex"), "float8_e4m3fn": (1, "float"), "float8_e5m2": (1, "float"),
                    "uint16": (2, "uint"), "uint32": (4, "uint"), "uint64": (8, "uint"),
                    "qint8": (1, "quantized"), "quint8": (1, "quantized"), "qint32": (4, "quantized"),
                    "quint4x2": (1, "quantized"), "quint2x4": (1, "quantized")}
        for name, (size, kind) in expected.items():
            d = getattr(mnemo, name)
            self.assertIsInstance(d, mnemo.dtype)
            self.assertEqual((d.name, d.itemsize, d.kind), (name, size, kind))
            self.assertEqual(d.is_floating_point, kind == "float")
            self.assertEqual(d.is_complex, kind == "complex")
            self.assertEqual(d.is_quantized, kind == "quantized")
            self.assertEqual(d.is_signed, kind in ("int", "float", "complex") or name in ("qint8", "qint32"))
            self.assertEqual(d.bits, {"quint4x2": 4, "quint2x4": 2}.get(name, 8 * size))
            self.assertIs(mnemo.dtype(name), d)
            self.assertEqual(repr(d), "mnemo." + name)
            if kind == "quantized":
                self.assertFalse(d.has_numpy)
                with self.assertRaises(TypeError):
                    d.numpy_dtype()
        self.assertEqual(set(mnemo.dtype._by_value[v].name for v in mnemo.dtype._by_value), set(expected))

    def test_parse(self):
        self.assertIs(mnemo.dtype("bf16"), mnemo.bfloat16)
        self.assertIs(mnemo.dtype("torch.half"), mnemo.float16)
        self.assertIs(mnemo.dtype("LONG"), mnemo.int64)
        self.assertIs(mnemo.dtype("fp8_e4m3"), mnemo.float8_e4m3fn)
        self.assertIs(mnemo.dtype("u8"), mnemo.uint8)
        self.assertIs(mnemo.dtype(mnemo.int16), mnemo.int16)
        self.assertIs(mnemo.half, mnemo.float16)
        self.assertIs(mnemo.long, mnemo.int64)
        self.assertNotEqual(mnemo.float32, mnemo.float64)
        with self.assertRaises(ValueError) as cm:
            mnemo.dtype("float33")
        self.assertIn("float33", str(cm.exception))
        with self.assertRaises(TypeError):
            mnemo.dtype(3.5)

    def test_numpy(self):
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
                     "complex64", "complex128", "uint16", "uint32", "uint64"):
            d = getattr(mnemo, name)
            self.assertEqual(d.numpy_dtype(), np.dtype(name))
            self.assertIs(mnemo.dtype(np.dtype(name)), d)
        self.assertIs(mnemo.dtype(np.float32), mnemo.float32)
        for name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            with self.assertRaises(TypeError) as cm:
                getattr(mnemo, name).numpy_dtype()
            self.assertIn("numpy has no " + name, str(cm.exception))
            self.assertFalse(getattr(mnemo, name).has_numpy)
        with self.assertRaises(TypeError):
            mnemo.dtype(np.dtype("U3"))
        with self.assertRaises(TypeError):
            mnemo.dtype(np.dtype(">f4"))

    def test_torch(self):
        need_torch(self)
        for name in ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                     "complex64", "complex128"):
            d = getattr(mnemo, name)
            self.assertIs(d.torch_dtype(), getattr(torch, name))
            self.assertIs(mnemo.dtype(getattr(torch, name)), d)
        if not hasattr(torch, "uint32"):
            with self.assertRaises(TypeError):
                mnemo.uint32.torch_dtype()


class Storages(unittest.TestCase):
    def test_basics(self):
        for dev in DEVICES:
            s = mnemo.Storage(16, dev)
            self.assertEqual((s.nbytes(), len(s), str(s.device), s.kind, s.refcount), (16, 16, dev, "allocator", 1))
            self.assertTrue(s.resizable())
            self.assertIsNone(s.filename)
            self.assertNotEqual(s.data_ptr(), 0)
            s.fill_(7)
            self.assertEqual(s.tolist(), [7] * 16)
            self.assertEqual(s.tobytes(), b"\x07" * 16)
            s.resize_(20)
            self.assertEqual(s.nbytes(), 20)
            self.assertEqual(s.tolist()[:16], [7] * 16)
            c = s.clone()
            self.assertNotEqual(c.data_ptr(), s.data_ptr())
            self.assertEqual(c.tolist()[:16], [7] * 16)
            src = mnemo.Storage.from_buffer(struct.pack("<5f", 1, 2, 3, 4, 5), dev)
            self.assertEqual(src.tolist("float32"), [1.0, 2.0, 3.0, 4.0, 5.0])
            c.copy_(src)
            self.assertEqual(c.tolist("float32"), [1.0, 2.0, 3.0, 4.0, 5.0])
            self.assertIn("20 bytes", c.describe())
            self.assertTrue(repr(c).endswith(f"[mnemo.UntypedStorage(device={dev}) of size 20]"))

    def test_to_and_pin(self):
        s = mnemo.Storage.from_buffer(bytes(range(10)))
        same = s.to("cpu")
        self.assertIs(same, s)  # already there: the storage itself, as PyTorch
        self.assertIs(s.cpu(), s)
        self.assertEqual(s.refcount, 1)
        d = s.to("sim")
        self.assertEqual(str(d.device), "sim:0")
        self.assertEqual(d.tolist(), list(range(10)))
        self.assertEqual(d.cpu().tolist(), list(range(10)))
        self.assertFalse(s.is_pinned())
        p = s.pin_memory("sim:0")
        self.assertTrue(p.is_pinned())
        self.assertEqual(p.tolist(), list(range(10)))
        with self.assertRaises(mnemo.MnemoError) as cm:
            d.pin_memory("sim:0")
        self.assertEqual(cm.exception.status_name, "invalid_argument")

    def test_files_and_shared_memory(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "s.bin")
            s = mnemo.Storage.from_file(path, shared=True, nbytes=8)
            self.assertEqual((s.kind, s.filename, s.nbytes(), s.is_shared()), ("file", path, 8, True))
            s.fill_(65)
            del s
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"A" * 8)
            p = mnemo.Storage.from_file(path)  # private: writes stay here
            self.assertFalse(p.is_shared())
            p.fill_(66)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), b"A" * 8)
            with self.assertRaises(mnemo.MnemoError) as cm:
                mnemo.Storage.from_file(os.path.join(tmp, "missing"))
            self.assertEqual(cm.exception.status_name, "not_found")
            self.assertIn("missing", cm.exception.message)
        m = mnemo.Storage.from_buffer(b"shared!!")
        m.share_memory_()
        self.assertEqual((m.kind, m.is_shared(), m.tobytes()), ("shared", True, b"shared!!"))
        h = m.shm_handle()
        self.assertTrue(h.startswith("mnemo-shm:"))
        other = mnemo.Storage.from_shm_handle(h)
        other.fill_(1)
        self.assertEqual(m.tobytes(), b"\x01" * 8)
        with self.assertRaises(mnemo.MnemoError) as cm:
            m.resize_(4)
        self.assertEqual(cm.exception.status_name, "invalid_state")
        self.assertIn("not resizable", cm.exception.message)
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.Storage(8, "sim").share_memory_()
        self.assertEqual(cm.exception.status_name, "not_supported")

    def test_allocator_lifetime(self):
        Naive = mnemo.NaiveAllocator  # any object with an mn_allocator_t * as _handle would do
        a = Naive("sim:0")
        gone = weakref.ref(a)
        s = mnemo.Storage(64, "sim:0", allocator=a)
        self.assertEqual(s.allocator_handle, a._handle)
        v = mnemo.View(s, mnemo.float32, (4, 4))
        w = v.t()[1:]
        del a, s, v
        gc.collect()
        self.assertIsNotNone(gone(), "views keep the allocator object alive")
        w.fill_(2.0)
        self.assertEqual(w.tolist(), [[2.0] * 4] * 3)
        del w
        gc.collect()
        self.assertIsNone(gone(), "the allocator goes with the last view")
        e = mnemo.ones(2, 3, device="sim", allocator=Naive("sim:0"))
        self.assertEqual(e.tolist(), [[1.0] * 3] * 2)
        with self.assertRaises(TypeError):
            mnemo.Storage(8, allocator=object())

    def test_resize_refused_under_a_view(self):
        # shrinking under a live view let writes through it run
        # past the end; any resize moves the bytes, so it waits for the views
        for dev in DEVICES:
            v = mnemo.zeros(1024, device=dev)
            s = v.untyped_storage()
            for n in (16, 8192):
                with self.assertRaises(mnemo.MnemoError) as cm:
                    s.resize_(n)
                self.assertEqual(cm.exception.status_name, "invalid_state")
                self.assertIn("1 live view(s)", cm.exception.message)
                self.assertEqual(s.nbytes(), 4096)
            v.fill_(2.0)
            self.assertEqual(v.tolist(), [2.0] * 1024)
            del v
            gc.collect()
            s.resize_(16)
            self.assertEqual(s.nbytes(), 16)


class Factories(unittest.TestCase):
    def test_factories(self):
        for dev in DEVICES:
            z = mnemo.zeros(2, 3, device=dev)
            self.assertEqual((z.shape, z.stride(), z.dtype, str(z.device)), ((2, 3), (3, 1), mnemo.float32, dev))
            self.assertEqual(z.tolist(), [[0.0] * 3] * 2)
            o = mnemo.ones((4,), dtype=mnemo.int8, device=dev)
            self.assertEqual(o.tolist(), [1] * 4)
            f = mnemo.full((2, 2), 2.5, device=dev)
            self.assertEqual((f.dtype, f.tolist()), (mnemo.float32, [[2.5, 2.5], [2.5, 2.5]]))
            self.assertIs(mnemo.full((1,), 7, device=dev).dtype, mnemo.int64)
            self.assertIs(mnemo.full((1,), True, device=dev).dtype, mnemo.bool)
            self.assertIs(mnemo.full((1,), 1j, device=dev).dtype, mnemo.complex64)
            s = mnemo.empty_strided((2, 3), (1, 2), dtype=mnemo.int32, device=dev)
            self.assertEqual((s.shape, s.stride(), s.untyped_storage().nbytes()), ((2, 3), (1, 2), 24))
            e = mnemo.empty(0, 5, device=dev)
            self.assertEqual((e.shape, e.numel(), e.tolist()), ((0, 5), 0, []))
            scalar = mnemo.zeros((), device=dev)
            self.assertEqual((scalar.shape, scalar.ndim, scalar.item()), ((), 0, 0.0))
            self.assertEqual(mnemo.zeros_like(f).tolist(), [[0.0, 0.0], [0.0, 0.0]])
            self.assertEqual(str(mnemo.ones_like(f).device), dev)

    def test_tensor(self):
        for dev in DEVICES:
            t = mnemo.tensor([[1.5, 2], [3, 4]], device=dev)
            self.assertEqual((t.dtype, t.shape, t.tolist()), (mnemo.float32, (2, 2), [[1.5, 2.0], [3.0, 4.0]]))
            self.assertIs(mnemo.tensor([1, 2], device=dev).dtype, mnemo.int64)
            self.assertIs(mnemo.tensor([True], device=dev).dtype, mnemo.bool)
            self.assertIs(mnemo.tensor([1j], device=dev).dtype, mnemo.complex64)
            self.assertIs(mnemo.tensor(np.zeros(2, np.float64), device=dev).dtype, mnemo.float64)
            self.assertIs(mnemo.tensor(np.zeros(2, np.uint16), device=dev).dtype, mnemo.uint16)
            s = mnemo.tensor(3.25, device=dev)
            self.assertEqual((s.shape, s.item()), ((), 3.25))
            b = mnemo.tensor([1.0, 1.00390625, 3e38, -0.0], dtype="bf16", device=dev)
            self.assertEqual(b.tolist(), [1.0, 1.0, 3.00405527047391e38, -0.0])  # round to nearest even
            f8 = mnemo.tensor([1.0, 500.0, -0.3], dtype=mnemo.float8_e4m3fn, device=dev)
            self.assertEqual(f8.tolist(), [1.0, 448.0, -0.3125])  # saturating RNE
            a = np.arange(6, dtype=np.int32).reshape(2, 3).T  # not contiguous
            t = mnemo.tensor(a, device=dev)
            self.assertEqual(t.tolist(), a.tolist())
            a[0, 0] = 100
            self.assertEqual(t[0, 0].item(), 0, "tensor() copies")
        with self.assertRaises(ValueError):
            mnemo.tensor([[1, 2], [3]])
        with self.assertRaises(TypeError):
            mnemo.tensor(["a"])


# (name, f(x, m)) with m the module (mnemo or torch): the same call on both.
OPS = [
    ("view", lambda x, m: x.view(4, 6)),
    ("view -1", lambda x, m: x.view(-1, 3)),
    ("view dtype same size", lambda x, m: x.view(m.int32)),
    ("view dtype smaller", lambda x, m: x.view(m.float16)),
    ("reshape copy", lambda x, m: x.transpose(0, 2).reshape(6, 4)),
    ("reshape view", lambda x, m: x.reshape(2, 12)),
    ("flatten", lambda x, m: x.flatten()),
    ("flatten 1", lambda x, m: x.flatten(1)),
    ("flatten transposed", lambda x, m: x.transpose(1, 2).flatten(0, 1)),
    ("transpose", lambda x, m: x.transpose(0, 2)),
    ("t", lambda x, m: x[0].t()),
    ("t 1d", lambda x, m: x[0, 0].t()),
    ("permute", lambda x, m: x.permute(2, 0, 1)),
    ("movedim", lambda x, m: x.movedim(0, -1)),
    ("movedim seq", lambda x, m: x.movedim((0, 1), (2, 0))),
    ("narrow", lambda x, m: x.narrow(2, 1, 2)),
    ("narrow negative", lambda x, m: x.narrow(-1, -3, 2)),
    ("select", lambda x, m: x.select(1, -1)),
    ("unsqueeze", lambda x, m: x.unsqueeze(1)),
    ("unsqueeze last", lambda x, m: x.unsqueeze(-1)),
    ("squeeze", lambda x, m: x.unsqueeze(0).unsqueeze(3).squeeze()),
    ("squeeze dim", lambda x, m: x.unsqueeze(0).squeeze(0)),
    ("squeeze dim not 1", lambda x, m: x.squeeze(1)),
    ("expand", lambda x, m: x[:, :1].expand(2, 3, 4)),
    ("expand new dims", lambda x, m: x[0, :1].expand(2, 3, -1)),
    ("unflatten", lambda x, m: x.unflatten(2, (2, 2))),
    ("unflatten -1", lambda x, m: x.unflatten(-1, (-1, 2))),
    ("diagonal", lambda x, m: x.diagonal(0, 1, 2)),
    ("diagonal offset", lambda x, m: x.diagonal(offset=1, dim1=1, dim2=2)),
    ("diagonal negative offset", lambda x, m: x.diagonal(-1, 2, 1)),
    ("unfold", lambda x, m: x.unfold(2, 2, 1)),
    ("unfold step", lambda x, m: x.unfold(1, 2, 2)),
    ("as_strided", lambda x, m: x.as_strided((3, 2), (1, 3), 1)),
    ("as_strided keep offset", lambda x, m: x[1].as_strided((2, 2), (4, 1))),
    ("contiguous copy", lambda x, m: x.transpose(0, 1).contiguous()),
    ("contiguous same", lambda x, m: x.contiguous()),
    ("clone keeps strides", lambda x, m: x.transpose(0, 2).clone()),
    ("clone of a slice", lambda x, m: x[:, ::2, 1:].clone()),
    ("index int", lambda x, m: x[1]),
    ("index negative", lambda x, m: x[-1, -2]),
    ("index slices", lambda x, m: x[1:, :, ::3]),
    ("index slice clamps", lambda x, m: x[:, -100:100:2, 5:]),
    ("index none ellipsis", lambda x, m: x[..., None, 1:3]),
    ("index ellipsis middle", lambda x, m: x[0, ..., 1]),
    ("index none first", lambda x, m: x[None]),
    ("index empty tuple", lambda x, m: x[()]),
    ("to dtype", lambda x, m: x.to(m.int16)),
    ("to dtype strided", lambda x, m: x.transpose(0, 1).to(dtype=m.float64)),
    ("real of real", lambda x, m: x.real),
]

SPLITS = [
    ("split", lambda x, m: x.split(2, dim=2)),
    ("split uneven", lambda x, m: x.split(2, 1)),
    ("split sections", lambda x, m: x.split([1, 3], dim=2)),
    ("chunk", lambda x, m: x.chunk(2, 1)),
    ("chunk many", lambda x, m: x.chunk(5, -1)),
    ("unbind", lambda x, m: x.unbind(1)),
]


class ViewOps(unittest.TestCase):
    def assertSame(self, got, want, what):
        self.assertEqual(got.shape, tuple(want.shape), what + ": shape")
        self.assertEqual(got.stride(), want.stride(), what + ": strides")
        self.assertEqual(got.storage_offset(), want.storage_offset(), what + ": offset")
        self.assertEqual(got.dtype.name, str(want.dtype).replace("torch.", ""), what + ": dtype")
        self.assertEqual(got.tolist(), want.tolist(), what + ": values")
        self.assertEqual(got.is_contiguous(), want.is_contiguous(), what + ": is_contiguous")

    def test_ops_against_torch(self):
        need_torch(self)
        ref = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
        for dev in DEVICES:
            x = arange((2, 3, 4), dev)
            for name, f in OPS:
                with self.subTest(op=name, device=dev):
                    got = f(x, mnemo)
                    self.assertEqual(str(got.device), dev)
                    self.assertSame(got, f(ref, torch), name)
                    got.check()
            for name, f in SPLITS:
                with self.subTest(op=name, device=dev):
                    got, want = f(x, mnemo), f(ref, torch)
                    self.assertIsInstance(got, tuple)
                    self.assertEqual(len(got), len(want))
                    for g, w in zip(got, want):
                        self.assertSame(g, w, name)

    def test_complex_views(self):
        need_torch(self)
        ref = torch.tensor([[1 + 2j, 3 - 4j], [5j, -6]], dtype=torch.complex64)
        for dev in DEVICES:
            x = mnemo.tensor(ref.numpy(), device=dev)
            for name, f in (("real", lambda v: v.real), ("imag", lambda v: v.imag),
                            ("imag of t", lambda v: v.t().imag), ("view float32", lambda v: v.view(torch.float32)
                                                                   if isinstance(v, torch.Tensor) else
                                                                   v.view(mnemo.float32))):
                with self.subTest(op=name, device=dev):
                    self.assertSame(f(x), f(ref), name)

    def test_queries(self):
        for dev in DEVICES:
            x = arange((2, 3, 4, 5), dev)
            cl = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)  # channels_last layout
            self.assertTrue(cl.is_contiguous(memory_format=mnemo.channels_last))
            self.assertFalse(cl.is_contiguous())
            self.assertTrue(cl.is_non_overlapping_and_dense())
            self.assertFalse(x.is_contiguous(memory_format="channels_last"))
            if torch is not None:
                self.assertTrue(cl.is_contiguous(memory_format=torch.channels_last))
            x5 = arange((1, 2, 2, 2, 2), dev)
            self.assertTrue(x5.permute(0, 2, 3, 4, 1).contiguous().permute(0, 4, 1, 2, 3)
                            .is_contiguous(memory_format=mnemo.channels_last_3d))
            self.assertFalse(x[:, :, :, ::2].is_non_overlapping_and_dense())
            self.assertTrue(x.shares_storage(x[1]))
            self.assertFalse(x.shares_storage(x.clone()))
            self.assertTrue(x.is_set_to(x[()]))
            self.assertEqual((x.ndim, x.dim(), x.numel(), x.nbytes, x.itemsize, len(x)), (4, 4, 120, 480, 4, 2))
            self.assertEqual((x.size(), x.size(-1), x.stride(1)), ((2, 3, 4, 5), 5, 20))
            self.assertEqual(x.view(np.int64(120)).shape, (120,))
            self.assertIs(x.view(np.int32).dtype, mnemo.int32)
            self.assertEqual(x[1].data_ptr(), x.data_ptr() + 60 * 4)
            with self.assertRaises(ValueError):
                x.is_contiguous(memory_format="sideways")
            with self.assertRaises(TypeError):
                len(x[0, 0, 0, 0])

    def test_squeeze_dims(self):
        for dev in DEVICES:
            x = mnemo.zeros(1, 3, 1, 2, device=dev)
            self.assertEqual(x.squeeze((0, 2)).shape, (3, 2))
            self.assertEqual(x.squeeze([0, 1]).shape, (3, 1, 2))
            self.assertEqual(x.squeeze(()).shape, (1, 3, 1, 2))

    def test_view_errors(self):
        x = arange((2, 3, 4))
        with self.assertRaises(mnemo.MnemoError) as cm:
            x.transpose(0, 1).view(24)
        self.assertEqual(cm.exception.status_name, "invalid_argument")
        self.assertIn("Use .reshape(...) instead", cm.exception.message)
        self.assertIn("mn_view_view", str(cm.exception))
        with self.assertRaises(mnemo.MnemoError) as cm:
            x.transpose(0, 7)
        self.assertIn("Dimension out of range", cm.exception.message)
        with self.assertRaises(mnemo.MnemoError):
            x.imag
        with self.assertRaises(mnemo.MnemoError):
            x.as_strided((10,), (10,))  # past the storage
        with self.assertRaises(TypeError):
            x.view(2.5, 12)
        with self.assertRaises(TypeError):
            x.permute("a")
        with self.assertRaises(ValueError):
            x.split([1, 2], dim=0)
        with self.assertRaises(ValueError):
            x.movedim((0, 1), 2)


class Indexing(unittest.TestCase):
    def test_errors(self):
        x = arange((2, 3))
        for step in (0, -1):
            with self.assertRaises(ValueError) as cm:
                x[::step]
            self.assertIn("step", str(cm.exception))
        with self.assertRaises(IndexError):
            x[2]
        with self.assertRaises(IndexError):
            x[0, -4]
        with self.assertRaises(IndexError):
            x[0, 0, 0]
        with self.assertRaises(IndexError):
            x[..., 0, ...]
        # advanced indexing (lists, views, bools) is tests/python/test_indexing.py's; a float
        # view is not an index (IndexError), nor a string (TypeError), as torch
        with self.assertRaises(IndexError):
            x[x]
        with self.assertRaises(TypeError):
            x["a"]

    def test_iteration_and_scalars(self):
        x = arange((3, 2), "sim:0")
        self.assertEqual([r.tolist() for r in x], [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]])
        self.assertEqual(float(x[2, 1]), 5.0)
        self.assertEqual(int(x[1, 1]), 3)
        self.assertTrue(bool(x[0, 1]))
        self.assertFalse(bool(x[0, 0]))
        self.assertEqual(mnemo.tensor([3 + 4j])[0].item(), 3 + 4j)
        self.assertEqual(mnemo.tensor([2**63 - 1])[0].item(), 2**63 - 1)
        self.assertEqual(mnemo.tensor(np.array([2**64 - 1], np.uint64)).item(), 2**64 - 1)
        with self.assertRaises(ValueError):
            x.item()
        with self.assertRaises(ValueError):
            bool(x)

    def test_setitem(self):
        for dev in DEVICES:
            x = mnemo.zeros(3, 4, device=dev)
            ref = np.zeros((3, 4), np.float32)
            x[0] = 5
            ref[0] = 5
            x[:, 1] = 2.5
            ref[:, 1] = 2.5
            x[1:, 2:] = mnemo.tensor([[7.0, 8.0], [9.0, 10.0]], device="cpu")  # across devices
            ref[1:, 2:] = [[7.0, 8.0], [9.0, 10.0]]
            x[2] = mnemo.tensor([1, 2, 3, 4], dtype=mnemo.int64, device=dev)  # cast
            ref[2] = [1, 2, 3, 4]
            x[..., 0] = mnemo.tensor(-1.0)  # 0-d broadcast
            ref[..., 0] = -1
            x[1, 3] = np.float32(0.5)
            ref[1, 3] = 0.5
            x[0, :2] = np.array([11, 12], np.float64)  # an array-like value
            ref[0, :2] = [11, 12]
            self.assertEqual(x.tolist(), ref.tolist())
            with self.assertRaises(mnemo.MnemoError):
                x[0] = mnemo.zeros(3)  # shapes that do not broadcast


class CopiesAndFills(unittest.TestCase):
    def test_to_across_devices_with_casts(self):
        src = np.array([[1.5, -2.25, 3.0], [100.75, -0.5, 7.0]], np.float32)
        x = mnemo.tensor(src)
        s = x.to("sim:0", mnemo.float16)
        self.assertEqual((str(s.device), s.dtype), ("sim:0", mnemo.float16))
        self.assertEqual(s.tolist(), src.astype(np.float16).astype(np.float64).tolist())
        back = s.t().to("cpu", mnemo.int32)
        self.assertEqual(back.tolist(), src.astype(np.float16).T.astype(np.int32).tolist())
        self.assertEqual(back.stride(), (1, 3), "to() keeps the strides of a dense view")
        same = x.to("cpu")
        self.assertTrue(same.is_set_to(x))
        forced = x.to("cpu", copy=True)
        self.assertFalse(forced.shares_storage(x))
        self.assertEqual(forced.tolist(), x.tolist())
        self.assertEqual(x.to(mnemo.float64).dtype, mnemo.float64)
        self.assertEqual(x.to(s).dtype, mnemo.float16)
        self.assertEqual(str(x.to(s).device), "sim:0")
        self.assertEqual(x.sim().cpu().tolist(), src.tolist())
        self.assertEqual(s.numpy().dtype, np.float16)

    def test_copy_broadcast_cast(self):
        for dst_dev in DEVICES:
            for src_dev in DEVICES:
                dst = mnemo.zeros(2, 3, dtype=mnemo.float64, device=dst_dev)
                row = mnemo.tensor([1, 2, 3], dtype=mnemo.int32, device=src_dev)
                dst.copy_(row)
                self.assertEqual(dst.tolist(), [[1.0, 2.0, 3.0]] * 2, f"{src_dev} -> {dst_dev}")
                dst.t().copy_(mnemo.tensor([[5.0, 6.0]], device=src_dev))
                self.assertEqual(dst.tolist(), [[5.0] * 3, [6.0] * 3])
                dst.copy_(np.arange(6, dtype=np.int16).reshape(2, 3))
                self.assertEqual(dst.tolist(), [[0, 1, 2], [3, 4, 5]])

    def test_copy_overlap(self):
        x = mnemo.tensor([1.0, 2.0, 3.0, 4.0])
        with self.assertRaises(mnemo.MnemoError) as cm:
            x[1:].copy_(x[:3])
        self.assertIn("refer to a single memory location", cm.exception.message)
        with self.assertRaises(mnemo.MnemoError) as cm:
            x[:1].expand(4).fill_(1.0)
        self.assertIn("more than one element", cm.exception.message)

    def test_fill(self):
        for dev in DEVICES:
            x = mnemo.empty(2, 2, dtype=mnemo.int8, device=dev)
            x.fill_(-7)
            self.assertEqual(x.tolist(), [[-7, -7], [-7, -7]])
            x.zero_()
            self.assertEqual(x.tolist(), [[0, 0], [0, 0]])
            x[0].fill_(True)
            self.assertEqual(x.tolist(), [[1, 1], [0, 0]])
            with self.assertRaises(mnemo.MnemoError) as cm:
                x.fill_(300)
            self.assertEqual(cm.exception.status_name, "invalid_argument")
            self.assertIn("without overflow", cm.exception.message)
            self.assertEqual(x.tolist(), [[1, 1], [0, 0]], "a refused fill changes nothing")
            c = mnemo.zeros(2, dtype=mnemo.complex128, device=dev).fill_(1.5 - 2j)
            self.assertEqual(c.tolist(), [1.5 - 2j, 1.5 - 2j])
            u = mnemo.zeros(1, dtype=mnemo.uint64, device=dev).fill_(2**64 - 1)
            self.assertEqual(u.tolist(), [2**64 - 1])
            with self.assertRaises(TypeError):
                x.fill_("1")
            with self.assertRaises(ValueError):
                x.fill_(2**70)

    def test_numpy_and_repr(self):
        x = arange((2, 2))
        a = x.numpy()
        a[0, 1] = 9
        self.assertEqual(x[0, 1].item(), 9.0, "numpy() of a CPU view shares memory")
        s = x.to("sim:0")
        b = s.numpy()
        b[0, 0] = 42
        self.assertEqual(s[0, 0].item(), 0.0, "numpy() of a SIM view is a copy")
        self.assertEqual(np.asarray(s).tolist(), [[0.0, 9.0], [2.0, 3.0]])
        self.assertEqual(repr(x.to("sim")), "tensor([[0., 9.],\n        [2., 3.]], device='sim:0')")
        self.assertEqual(repr(mnemo.tensor(2, dtype=mnemo.bfloat16)), "tensor(2., dtype=mnemo.bfloat16)")
        self.assertEqual(repr(mnemo.empty(0, 3)), "tensor([], size=(0, 3))")
        with self.assertRaises(TypeError) as cm:
            mnemo.zeros(2, dtype=mnemo.bfloat16).numpy()
        self.assertIn("numpy has no bfloat16", str(cm.exception))
        self.assertEqual(mnemo.zeros(2, dtype=mnemo.float8_e5m2).tolist(), [0.0, 0.0])


class SaveLoad(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_mnemo_format(self):
        for dev in DEVICES:
            base = arange((3, 4), dev)
            views = {"w": base, "w.T": base.t(), "row": base[1, 1:], "h": mnemo.tensor([1.5, -2.0], mnemo.float16),
                     "bf": mnemo.tensor([3.0], mnemo.bfloat16, dev)}
            path = os.path.join(self.tmp.name, "m.mnemo")
            mnemo.save(path, views)
            for load_dev in DEVICES:
                got = mnemo.load(path, device=load_dev)
                self.assertEqual(list(got), list(views))
                for k, v in views.items():
                    g = got[k]
                    self.assertEqual((g.shape, g.stride(), g.storage_offset(), g.dtype, str(g.device)),
                                     (v.shape, v.stride(), v.storage_offset(), v.dtype, load_dev), k)
                    self.assertEqual(g.tolist(), v.tolist(), k)
                self.assertTrue(got["w"].shares_storage(got["w.T"]) and got["w"].shares_storage(got["row"]))
                got["w"][1, 2] = -1
                self.assertEqual(got["row"][1].item(), -1.0, "sharing is kept")
            data = mnemo.save_bytes(views)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data)
            again = mnemo.load_bytes(data, "sim")
            self.assertEqual(again["w.T"].tolist(), base.t().tolist())
        mnemo.save(views, os.path.join(self.tmp.name, "torch-order"))  # torch.save's order works too
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.load_bytes(data[:-3])
        self.assertEqual(cm.exception.status_name, "format_error")
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.load(os.path.join(self.tmp.name, "missing"))
        self.assertEqual(cm.exception.status_name, "not_found")
        with self.assertRaises(TypeError):
            mnemo.save(path, {"a": np.zeros(2)})
        with self.assertRaises(ValueError):
            mnemo.save(path, {"": base})

    def test_load_flags(self):
        """mmap/verify keywords: the CPU default maps the file copy-on-write, mmap=False copies,
        verify=False skips the storages' checksums (so a corrupt data byte goes unnoticed)."""
        x = arange((64,))
        path = os.path.join(self.tmp.name, "flags")
        mnemo.save(path, {"x": x})
        with open(path, "rb") as f:
            before = f.read()
        for mmap in (None, True, False):
            got = mnemo.load(path, mmap=mmap)["x"]
            self.assertEqual(got.tolist(), x.tolist())
            got[0] = 12345
            self.assertEqual(got[0].item(), 12345.0)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), before, "a write to a loaded storage never reaches the file")
        bad = bytearray(before)
        bad[-1] ^= 0xFF  # the last byte of x's data
        with open(path, "wb") as f:
            f.write(bad)
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.load(path)
        self.assertEqual(cm.exception.status_name, "format_error")
        self.assertEqual(len(mnemo.load(path, verify=False)["x"].tolist()), 64)
        with self.assertRaises(TypeError):
            mnemo.load(path, mmap="yes")
        st = os.path.join(self.tmp.name, "flags.safetensors")
        mnemo.safetensors.save({"x": x}, st)
        for mmap in (None, False):
            self.assertEqual(mnemo.safetensors.load(st, mmap=mmap)["x"].tolist(), x.tolist())

    def test_load_frees_everything(self):
        x = arange((4,))
        s = x.untyped_storage()
        got = mnemo.load_bytes(mnemo.save_bytes({"a": x, "b": x[1:]}))
        st = got["a"].untyped_storage()
        self.assertEqual(st.refcount, 3, "two views + this Storage: the loader's list was freed")
        del got
        gc.collect()
        self.assertEqual(st.refcount, 1)
        self.assertEqual(s.refcount, 2)

    def test_safetensors(self):
        for dev in DEVICES:
            base = arange((2, 3), dev)
            tensors = {"w.T": base.t(), "h": mnemo.tensor([1.0, -2.5, 65504.0], mnemo.float16, dev),
                       "ids": mnemo.tensor([-7, 1 << 50], device=dev), "flags": mnemo.tensor([True, False], device=dev),
                       "bf": mnemo.tensor([1.5, -3.0], mnemo.bfloat16, dev)}
            path = os.path.join(self.tmp.name, "t.safetensors")
            mnemo.safetensors.save(tensors, path, metadata={"producer": "mnemo"})
            for load_dev in DEVICES:
                got, meta = mnemo.safetensors.load(path, device=load_dev, return_metadata=True)
                self.assertEqual(meta, {"producer": "mnemo"})
                self.assertEqual(set(got), set(tensors))
                for k, v in tensors.items():
                    g = got[k]
                    self.assertEqual((g.shape, g.dtype, str(g.device), g.is_contiguous()),
                                     (v.shape, v.dtype, load_dev, True))
                    self.assertEqual(g.tolist(), v.tolist(), k)
            data = mnemo.safetensors.save_bytes(tensors, {"producer": "mnemo"})
            with open(path, "rb") as f:
                self.assertEqual(f.read(), data)
            self.check_independently(data)
            self.assertEqual(mnemo.safetensors.load_bytes(data)["ids"].tolist(), [-7, 1 << 50])
        from mnemo.safetensors import load as st_load  # a real submodule
        self.assertIs(st_load, mnemo.safetensors.load)
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.safetensors.save({"a": base, "b": base[1]}, path)
        self.assertIn("share memory", cm.exception.message)
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.safetensors.save_bytes({"c": mnemo.zeros(1, dtype=mnemo.complex128)})
        self.assertEqual(cm.exception.status_name, "not_supported")
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.safetensors.load_bytes(b"\x08\0\0\0\0\0\0\0{bad}    ")
        self.assertEqual(cm.exception.status_name, "format_error")
        with self.assertRaises(TypeError):
            mnemo.safetensors.save_bytes({"a": base}, metadata={"k": 1})

    def check_independently(self, data):
        """Decodes the safetensors bytes with struct and json only."""
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        body = data[8 + n:]
        self.assertEqual(header.pop("__metadata__"), {"producer": "mnemo"})
        want = {"w.T": ("F32", [3, 2], "f", [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]), "h": ("F16", [3], "e", [1.0, -2.5, 65504.0]),
                "ids": ("I64", [2], "q", [-7, 1 << 50]), "flags": ("BOOL", [2], "?", [True, False]),
                "bf": ("BF16", [2], "H", [0x3FC0, 0xC040])}
        self.assertEqual(set(header), set(want))
        for k, (dt, shape, fmt, values) in want.items():
            b, e = header[k]["data_offsets"]
            self.assertEqual((header[k]["dtype"], header[k]["shape"]), (dt, shape), k)
            self.assertEqual(list(struct.unpack("<%d%s" % (len(values), fmt), body[b:e])), values, k)

    def test_load_file_written_independently(self):
        """A safetensors file written with struct and json alone loads with its values."""
        header = {"a": {"dtype": "I32", "shape": [2, 2], "data_offsets": [0, 16]},
                  "b": {"dtype": "F64", "shape": [], "data_offsets": [16, 24]},
                  "__metadata__": {"format": "pt"}}
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        blob = struct.pack("<Q", len(h)) + h + struct.pack("<4i", 1, -2, 3, 2**31 - 1) + struct.pack("<d", 0.125)
        path = os.path.join(self.tmp.name, "ind.safetensors")
        with open(path, "wb") as f:
            f.write(blob)
        for dev in DEVICES:
            got = mnemo.safetensors.load(path, dev)
            self.assertEqual((got["a"].dtype, got["a"].tolist()), (mnemo.int32, [[1, -2], [3, 2**31 - 1]]))
            self.assertEqual((got["b"].shape, got["b"].item()), ((), 0.125))


class Lifetimes(unittest.TestCase):
    def test_refcounts_return(self):
        for dev in DEVICES:
            x = arange((4, 6), dev)
            s = x.untyped_storage()
            base = s.refcount
            self.assertEqual(base, 2)
            views = [x.t(), x[1:, ::2], x.view(24), x.unsqueeze(0).expand(3, 4, 6), x.split(2), x.chunk(3, 1),
                     x.diagonal(), x.unfold(1, 2, 2), x.view(mnemo.int16), x.contiguous(), x[None, ..., 1]]
            self.assertGreater(s.refcount, base + 10)
            s2 = x.untyped_storage()
            self.assertEqual(s.refcount, s2.refcount)
            del views, s2
            gc.collect()
            self.assertEqual(s.refcount, base)
            for bad in (lambda: x.view(5), lambda: x.transpose(0, 9), lambda: x.narrow(0, 3, 5),
                        lambda: x[:, :1].expand(4, 6).fill_(0), lambda: x.as_strided((100,), (1,))):
                with self.assertRaises(mnemo.MnemoError):
                    bad()
            self.assertEqual(s.refcount, base, "refused calls retain nothing")
            x = None
            gc.collect()
            self.assertEqual(s.refcount, 1)

    def test_view_constructor(self):
        s = mnemo.Storage.from_buffer(struct.pack("<6i", 0, 1, 2, 3, 4, 5))
        v = mnemo.View(s, mnemo.int32, (2, 2), (1, 2), 1)
        self.assertEqual(v.tolist(), [[1, 3], [2, 4]])
        self.assertEqual(s.refcount, 2)
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.View(s, mnemo.int32, (3, 3))
        self.assertEqual(cm.exception.status_name, "invalid_argument")
        with self.assertRaises(TypeError):
            mnemo.View(b"bytes", mnemo.int32, (1,))
        with self.assertRaises(ValueError):
            mnemo.View(s, mnemo.int32, (2, 2), (1,))
        self.assertEqual(s.refcount, 2)
        del v
        self.assertEqual(s.refcount, 1)


class MetaDevice(unittest.TestCase):
    """The meta device: sizes without data (docs/STORAGE.md)."""

    def test_meta(self):
        m = mnemo.device("meta")
        self.assertEqual(m, mnemo.Device("meta"))
        self.assertEqual(m, mnemo.meta)
        self.assertEqual(str(m), "meta")
        self.assertEqual(mnemo.device_count("meta"), 1)
        p = m.properties()
        self.assertEqual(p["name"], "meta")
        self.assertFalse(p["is_host_accessible"])
        v = arange((2, 3)).to("meta")
        self.assertEqual(v.device, m)
        t = v.t().contiguous()
        self.assertEqual((t.shape, t.stride()), ((3, 2), (2, 1)))
        self.assertIn("size=(3, 2)", repr(t))
        with self.assertRaisesRegex(mnemo.MnemoError, "Cannot copy out of meta tensor; no data!"):
            t.to("cpu")
        with self.assertRaises(mnemo.MnemoError):
            t.tolist()
        t.fill_(2.0)  # checked, nothing written
        back = mnemo.empty_like(t, device="cpu")
        self.assertEqual(back.shape, (3, 2))



class BadInput(unittest.TestCase):
    """Refusals found by tests/python/fuzz_api.py: a clear exception of the
    documented type, and nothing changed."""

    def test_like_and_as_need_a_view(self):
        v = mnemo.tensor([1., 2.])
        for f in (mnemo.empty_like, mnemo.zeros_like, mnemo.ones_like, lambda x: mnemo.full_like(x, 1),
                  mnemo.rand_like, mnemo.randn_like, v.type_as, v.expand_as, v.view_as):
            for junk in (5, "cpu", mnemo.UntypedStorage(8), None):
                with self.subTest(f=f, junk=junk), self.assertRaisesRegex(TypeError, "must be a View"):
                    f(junk)

    def test_copy_checks_non_blocking_before_copying(self):
        v = mnemo.tensor([1., 2.])
        with self.assertRaises(ValueError):
            v.copy_(mnemo.tensor([7., 8.]), non_blocking=mnemo.tensor([1., 2.]))  # no truth value
        self.assertEqual(v.tolist(), [1., 2.])  # the copy did not happen

    def test_error_status_checked(self):
        with self.assertRaises(TypeError):
            mnemo.MnemoError(float("inf"), "mn_x: y")
        with self.assertRaises(ValueError):
            mnemo.OutOfMemoryError(2 ** 40, "mn_x: y")
        self.assertEqual(mnemo.MnemoError(1, "mn_x: y").status_name, "invalid_argument")

    def test_package_objects_are_no_allocator(self):
        # a View's or a storage's _handle is no mn_allocator_t*: passing one crashed the process
        for junk in (mnemo.UntypedStorage(4), mnemo.tensor([1.]), mnemo.FloatStorage(2)):
            with self.subTest(junk=type(junk).__name__), self.assertRaises(TypeError):
                mnemo.zeros(3, allocator=junk)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
