#!/usr/bin/env python3
# tests/python/test_indexing.py: advanced indexing (__getitem__/__setitem__ with
# lists, index views, masks and mixes), the index operations (index_select,
# gather, scatter, scatter_add, index_put_, take, masked_select), arange,
# quantized views and the seeded random fills of the Python package, each
# compared with PyTorch 1.13 (CPU) where torch has the same numbers, on the
# CPU and the SIM device.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_indexing.py
(exit 0 pass, 1 fail, 77 skip: numpy or torch missing). Labels cpu;sim."""
import copy
import pickle
import sys
import unittest

try:
    import numpy as np
    import torch
except ImportError:
    print("SKIPPED: numpy or torch is not installed")
    sys.exit(77)

import mnemo

DEVICES = ("cpu", "sim:0")
SHAPE = (4, 5, 6)


def base(device="cpu", shape=SHAPE, dtype="float32"):
    """The same values in torch and mnemo: 0, 1, 2, ... of ``shape``."""
    t = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape).to(getattr(torch, dtype))
    return t, mnemo.tensor(t.numpy(), device=device)


def as_torch(v):
    return torch.from_numpy(np.array(v.cpu()))


def key_for(key, kind):
    """A key for torch (kind "torch") or mnemo ("mnemo", "numpy", "torch-in-mnemo"):
    the index arrays of ``key`` (numpy arrays) as each side's objects."""
    def conv(k):
        if isinstance(k, np.ndarray):
            if kind == "torch":
                return torch.from_numpy(k)
            if kind == "mnemo":
                return mnemo.tensor(k)
            if kind == "numpy":
                return k
            return torch.from_numpy(k)
        return k
    if isinstance(key, tuple):
        return tuple(conv(k) for k in key)
    return conv(key)


I = lambda *x: np.array(x, dtype=np.int64)  # noqa: E731
MASK = np.array([True, False, True, True])
MASK2 = (np.arange(20).reshape(4, 5) % 3) == 0

# Keys for a (4, 5, 6) view, each run on torch and mnemo (and with numpy /
# torch index objects): lists, index arrays, masks, and mixes with ints,
# slices, None and Ellipsis, adjacent and not (PyTorch's dim placement).
KEYS = [
    [0, 2], [[0, 2], [1, 3]], [-1, 0, -4], I(3, 1), I(1, 2) .reshape(2, 1), [],
    (I(0, 1), I(2, 3)), (I(0, 1), slice(None), I(2, 3)), (slice(None), I(0, 4), I(5, 0)),
    (Ellipsis, I(1, 5)), (I(0, 3), Ellipsis), (None, I(1, 2)), (I(1, 2), None, slice(1, 3)),
    (slice(None), I(0, 1).reshape(2, 1), I(0, 1, 2)), (1, I(0, 2)), (I(0, 2), 1, I(3, 4)),
    (I(0, 2), slice(None), 1), (slice(1, 4, 2), I(4, 0), slice(None, None, 3)),
    MASK, (MASK,), MASK2, (MASK2, I(1, 2, 3, 4, 5, 0, 1)[:MASK2.sum()]), (slice(None), MASK2[0]),
    (Ellipsis, np.array([True, False, False, True, True, False])), (MASK, slice(None), I(0, 5, 1)),
    True, False, (True, 0), (0, False, slice(None)), (None, Ellipsis, None, I(1)),
    ([0, 1], [2, 3]), [[0, 1], [2, 3]], [0, slice(None)], (0, [1, 2], [3, 4]),
]


def label(key):
    return repr(key).replace("\n", "")[:120]


class TestGetitem(unittest.TestCase):
    def test_keys_against_torch(self):
        for device in DEVICES:
            t, v = base(device)
            for key in KEYS:
                expected = t[key_for(key, "torch")]
                for kind in ("mnemo", "numpy", "torch-in-mnemo"):
                    with self.subTest(device=device, key=label(key), kind=kind):
                        got = v[key_for(key, kind)]
                        self.assertEqual(tuple(got.shape), tuple(expected.shape))
                        self.assertEqual(str(got.device), device)
                        self.assertTrue(torch.equal(as_torch(got), expected))

    def test_advanced_result_is_a_copy(self):
        t, v = base()
        got = v[[0, 1]]
        self.assertFalse(got.shares_storage(v))
        got.fill_(-1)
        self.assertEqual(v[0, 0, 0].item(), 0.0)

    def test_zero_d_integer_index_selects(self):
        t, v = base()
        for idx in (mnemo.tensor(2), torch.tensor(2), np.int64(2)):
            got = v[idx, 1]
            self.assertTrue(got.shares_storage(v))  # a view, as PyTorch's select
            self.assertTrue(torch.equal(as_torch(got), t[2, 1]))

    def test_errors_as_torch(self):
        t, v = base()
        for key in ([4], [0, -5], (I(0), I(0), I(0), I(0)), (slice(None), [6]), np.array([True, False]),
                    np.array([1.0]), (I(0, 1), I(0, 1, 2))):
            with self.subTest(key=label(key)):
                with self.assertRaises(IndexError):
                    t[key_for(key, "torch")]
                with self.assertRaises(IndexError):
                    v[key_for(key, "mnemo")]
        with self.assertRaises(IndexError):
            v[..., [0], ...]
        with self.assertRaises(IndexError):  # torch 1.13 reads [0.5] as [0]; mnemo refuses floats
            v[[0.5]]
        for key, error in (("a", TypeError), (object(), IndexError), (2.0, IndexError)):  # as torch
            with self.assertRaises(error):
                t[key]
            with self.assertRaises(error):
                v[key]

    def test_on_a_stream(self):
        from mnemo._core import out_handle
        from mnemo._lib import Device as CDevice, declare
        import ctypes as C
        create = declare("mn_stream_create", "status", [CDevice, C.POINTER(C.c_void_p)])
        destroy = declare("mn_stream_destroy", "status", [C.c_void_p])
        dev = mnemo.device("sim:0")
        s = out_handle(create, dev._c)
        try:
            t, v = base("sim:0")
            got = v.index_select(1, [4, 0], stream=s)
            w = v.clone()
            mnemo.synchronize(dev)
            w.scatter_add_(0, [[[1]]], mnemo.tensor([[[5.0]]], device="sim:0"), stream=s)
            mnemo.synchronize(dev)
            self.assertTrue(torch.equal(as_torch(got), t.index_select(1, torch.tensor([4, 0]))))
            self.assertEqual(w[1, 0, 0].item(), t[1, 0, 0].item() + 5.0)
            g = mnemo.Generator().manual_seed(5)
            r = mnemo.rand(4, device="sim:0", generator=g, stream=s)
            mnemo.synchronize(dev)
            self.assertEqual(r.cpu().tolist(), mnemo.rand(4, generator=mnemo.Generator().manual_seed(5)).tolist())
        finally:
            destroy(s)

    def test_int32_and_uint8_indices(self):
        t, v = base()
        self.assertTrue(torch.equal(as_torch(v[np.array([3, 0], dtype=np.int32)]), t[[3, 0]]))
        m = np.array([1, 0, 1, 0], dtype=np.uint8)
        self.assertTrue(torch.equal(as_torch(v[mnemo.tensor(m)]), t[torch.tensor(m, dtype=torch.bool)]))


class TestSetitem(unittest.TestCase):
    SET_KEYS = [[0, 2], (I(0, 1), slice(None), I(2, 3)), (slice(None), I(0, 4), I(5, 0)), MASK, MASK2,
                (1, I(0, 2)), (Ellipsis, I(1, 5)), (I(0, 2), 1, I(3, 4)), (slice(1, 4, 2), I(4, 0))]

    def test_scalar_and_view_values(self):
        for device in DEVICES:
            for key in self.SET_KEYS:
                with self.subTest(device=device, key=label(key)):
                    t, v = base(device)
                    t[key_for(key, "torch")] = -7.5
                    v[key_for(key, "mnemo")] = -7.5
                    self.assertTrue(torch.equal(as_torch(v), t))
                    t, v = base(device)
                    shape = t[key_for(key, "torch")].shape
                    vals = torch.arange(float(np.prod(shape))).reshape(shape) + 100
                    t[key_for(key, "torch")] = vals
                    v[key_for(key, "numpy")] = mnemo.tensor(vals.numpy(), device=device)
                    self.assertTrue(torch.equal(as_torch(v), t))
                    t, v = base(device)  # broadcast values: one row
                    row = torch.arange(float(shape[-1])) if len(shape) else torch.tensor(3.0)
                    t[key_for(key, "torch")] = row
                    v[key_for(key, "mnemo")] = row.numpy()
                    self.assertTrue(torch.equal(as_torch(v), t))

    def test_duplicates_last_write_wins(self):
        t, v = base(shape=(5,))
        v[[1, 1, 1]] = mnemo.tensor([1.0, 2.0, 3.0])
        self.assertEqual(v[1].item(), 3.0)

    def test_refused_writes_change_nothing(self):
        t, v = base()
        before = as_torch(v).clone()
        with self.assertRaises(IndexError):
            v[[0, 9]] = 1.0
        with self.assertRaises(RuntimeError):  # dtypes must match (torch: RuntimeError too)
            v[[0, 1]] = mnemo.tensor([1, 2], dtype="int64")
        with self.assertRaises(RuntimeError):
            t[[0, 1]] = torch.tensor([1, 2])
        with self.assertRaises(RuntimeError):  # values that do not broadcast: RuntimeError in both
            t[[0, 1]] = torch.tensor([1.0, 2.0, 3.0])
        with self.assertRaises(RuntimeError):
            v[[0, 1]] = mnemo.tensor([1.0, 2.0, 3.0])
        self.assertTrue(torch.equal(as_torch(v), before))


class TestIndexOps(unittest.TestCase):
    def test_index_select(self):
        for device in DEVICES:
            t, v = base(device)
            for dim, idx in ((0, [3, 0, 3]), (1, [4]), (-1, [5, 0]), (2, [])):
                with self.subTest(device=device, dim=dim, idx=idx):
                    ti = torch.tensor(idx, dtype=torch.int64)
                    self.assertTrue(torch.equal(as_torch(v.index_select(dim, ti.numpy())), t.index_select(dim, ti)))
                    self.assertTrue(torch.equal(as_torch(mnemo.index_select(v, dim, mnemo.tensor(ti.numpy()))),
                                                torch.index_select(t, dim, ti)))
            with self.assertRaises(IndexError):
                t.index_select(0, torch.tensor([4]))
            with self.assertRaises(IndexError):
                v.index_select(0, [4])

    def test_take_and_masked_select(self):
        for device in DEVICES:
            t, v = base(device)
            idx = np.array([[0, 119], [-1, 7]])
            self.assertTrue(torch.equal(as_torch(v.take(idx)), t.take(torch.from_numpy(idx))))
            self.assertTrue(torch.equal(as_torch(mnemo.take(v, idx)), torch.take(t, torch.from_numpy(idx))))
            with self.assertRaises(IndexError):
                t.take(torch.tensor([120]))
            with self.assertRaises(IndexError):
                v.take([120])
            mask = (np.arange(6) % 2 == 0)  # broadcast over the last dim
            self.assertTrue(torch.equal(as_torch(v.masked_select(mask)), t.masked_select(torch.from_numpy(mask))))
            self.assertTrue(torch.equal(as_torch(mnemo.masked_select(v, torch.from_numpy(mask))),
                                        torch.masked_select(t, torch.from_numpy(mask))))

    def test_gather_scatter(self):
        rng = np.random.default_rng(34)
        for device in DEVICES:
            for dim in (0, 1, 2, -1):
                t, v = base(device)
                d = dim % 3
                ishape = [3, 4, 5]
                idx = rng.integers(0, SHAPE[d], size=ishape)
                ti = torch.from_numpy(idx)
                with self.subTest(device=device, dim=dim, op="gather"):
                    self.assertTrue(torch.equal(as_torch(v.gather(dim, idx)), t.gather(dim, ti)))
                    self.assertTrue(torch.equal(as_torch(mnemo.gather(v, dim, idx)), torch.gather(t, dim, ti)))
                src_t = torch.arange(60.0).reshape(ishape) + 1000
                src = mnemo.tensor(src_t.numpy(), device=device)
                # scatter with duplicates: torch leaves the winner undefined, so unique
                # rows for scatter, any for scatter_add
                uniq = np.stack([rng.permutation(SHAPE[d])[:ishape[d]] for _ in range(int(np.prod(ishape)) //
                                                                                    ishape[d])])
                uidx = np.moveaxis(uniq.reshape([s for i, s in enumerate(ishape) if i != d] + [ishape[d]]), -1, d)
                uidx = np.ascontiguousarray(uidx)
                with self.subTest(device=device, dim=dim, op="scatter"):
                    self.assertTrue(torch.equal(as_torch(v.scatter(dim, uidx, src)),
                                                t.scatter(dim, torch.from_numpy(uidx), src_t)))
                    self.assertTrue(torch.equal(as_torch(mnemo.scatter(v, dim, uidx, 2.5)),
                                                torch.scatter(t, dim, torch.from_numpy(uidx), 2.5)))
                    self.assertTrue(torch.equal(as_torch(v), t))  # out of place: unchanged
                with self.subTest(device=device, dim=dim, op="scatter_add"):
                    self.assertTrue(torch.equal(as_torch(mnemo.scatter_add(v, dim, idx, src)),
                                                torch.scatter_add(t, dim, ti, src_t)))
                    w = v.clone()
                    self.assertIs(w.scatter_add_(dim, idx, src), w)
                    self.assertTrue(torch.equal(as_torch(w), t.clone().scatter_add_(dim, ti, src_t)))
                    w = v.clone()
                    self.assertIs(w.scatter_(dim, uidx, src), w)
                    self.assertTrue(torch.equal(as_torch(w), t.clone().scatter_(dim, torch.from_numpy(uidx), src_t)))
            t, v = base(device)
            with self.assertRaises(RuntimeError):
                t.gather(0, torch.tensor([[[9]]]))
            with self.assertRaises(RuntimeError):
                v.gather(0, [[[9]]])

    def test_index_put(self):
        for device in DEVICES:
            t, v = base(device)
            idx = (torch.tensor([0, 0, 3]), torch.tensor([1, 1, 2]))
            vals = torch.full((3, 6), 2.0)
            for acc in (False, True):
                with self.subTest(device=device, accumulate=acc):
                    exp = t.index_put(idx, vals, accumulate=acc) if acc else t.index_put((idx[0][:1],), vals[:1, None])
                    if acc:
                        got = v.index_put(tuple(i.numpy() for i in idx), vals.numpy(), accumulate=True)
                    else:
                        got = mnemo.index_put(v, (idx[0].numpy()[:1],), mnemo.tensor(vals.numpy()[:1, None],
                                                                                    device=device))
                    self.assertTrue(torch.equal(as_torch(got), exp))
                    self.assertTrue(torch.equal(as_torch(v), t))
            w = v.clone()
            self.assertIs(w.index_put_((None, [1, 2]), 5.0), w)
            self.assertTrue(torch.equal(as_torch(w), _torch_put_none(t)))


def _torch_put_none(t):
    out = t.clone()
    out[:, [1, 2]] = 5.0
    return out


class TestArange(unittest.TestCase):
    CASES = [((5,), {}), ((2, 9), {}), ((1, 10, 3), {}), ((10, 1, -2), {}), ((0, 1, 0.1), {}),
             ((0.5, 4), {}), ((-3, 3, 0.7), {"dtype": "float64"}), ((0, 2.5, 1.5), {"dtype": "int64"}),
             ((0.2, 100, 0.37), {"dtype": "float64"}), ((1, -7.5, -0.3), {}),
             ((5,), {"dtype": "float16"}), ((3, 3), {}), ((0, 10, 3), {"dtype": "int32"})]

    def test_against_torch(self):
        for args, kw in self.CASES:
            for device in DEVICES:
                with self.subTest(args=args, kw=kw, device=device):
                    exp = torch.arange(*args, **{k: getattr(torch, x) for k, x in kw.items()})
                    got = mnemo.arange(*args, device=device, **kw)
                    self.assertEqual(got.dtype.name, str(exp.dtype).replace("torch.", ""))
                    self.assertEqual(str(got.device), device)
                    if exp.dtype.is_floating_point:
                        # torch's vectorized kernel rounds twice (a chunk's base, then base + j * step,
                        # chunks as wide as its CPU's vectors); mnemo rounds start + i * step once
                        np.testing.assert_array_max_ulp(np.array(got), exp.numpy(), maxulp=2)
                    else:
                        self.assertTrue(torch.equal(as_torch(got), exp), (got, exp))

    def test_errors(self):
        for args, kw in (((0, 5, 0), {}), ((5, 0, 1), {}), ((0, 5, -1), {}), ((0, 2.5, 0.5), {"dtype": "int64"})):
            with self.assertRaises(RuntimeError):
                torch.arange(*args, **{k: getattr(torch, x) for k, x in kw.items()})
            with self.assertRaises(RuntimeError):
                mnemo.arange(*args, **kw)
        with self.assertRaises(TypeError):
            mnemo.arange("5")


class TestQuantized(unittest.TestCase):
    def test_against_torch(self):
        x = torch.tensor([-1.0, 0.0, 0.05, 0.15, 0.25, 1.0, 30.0, float("nan")])
        for device in DEVICES:
            v = mnemo.tensor(x.numpy(), device=device)
            for dtype, scale, zp in (("quint8", 0.1, 10), ("qint8", 0.05, -3), ("qint32", 0.001, 7),
                                     ("quint4x2", 0.2, 2)):
                with self.subTest(device=device, dtype=dtype):
                    tq = torch.quantize_per_tensor(x, scale, zp, getattr(torch, dtype))
                    q = mnemo.quantize_per_tensor(v, scale, zp, getattr(mnemo, dtype))
                    self.assertTrue(q.is_quantized)
                    self.assertEqual(q.dtype.name, dtype)
                    self.assertEqual(q.q_scale(), tq.q_scale())
                    self.assertEqual(q.q_zero_point(), tq.q_zero_point())
                    self.assertEqual(mnemo.q_scale(q), tq.q_scale())
                    self.assertIs(q.qscheme(), mnemo.per_tensor_affine)
                    self.assertTrue(torch.equal(as_torch(q.int_repr()), tq.int_repr()))
                    self.assertTrue(torch.equal(as_torch(mnemo.int_repr(q)), tq.int_repr()))
                    self.assertTrue(torch.equal(as_torch(q.dequantize()), tq.dequantize()))
                    self.assertTrue(torch.equal(as_torch(mnemo.dequantize(q)), torch.dequantize(tq)))
                    if dtype != "quint4x2":  # index_select/advanced indexing keep the parameters
                        sel = q[[0, 5, 6]]
                        self.assertEqual(sel.dtype.name, dtype)
                        self.assertEqual(sel.q_scale(), tq.q_scale())
                        self.assertTrue(torch.equal(as_torch(sel.int_repr()), tq[[0, 5, 6]].int_repr()))
            self.assertIs(v.dequantize(), v)  # a float32 view: itself, as torch
            for dt in ("float16", "int64"):  # other views: cast to float32, as torch
                exp = torch.tensor([1, 2], dtype=getattr(torch, dt)).dequantize()
                got = mnemo.tensor([1, 2], dtype=dt, device=device).dequantize()
                self.assertEqual((got.dtype.name, got.tolist()), (str(exp.dtype)[6:], exp.tolist()))

    def test_repr(self):
        x = torch.tensor([1.0, 2.0, 3.0])
        tq = torch.quantize_per_tensor(x, 0.1, 10, torch.quint8)
        q = mnemo.quantize_per_tensor(mnemo.tensor(x.numpy()), 0.1, 10, mnemo.quint8)
        text = mnemo.quantized._repr(q)
        self.assertEqual(text, repr(tq).replace("torch.", "mnemo."))
        self.assertEqual(repr(q), text)  # View.__repr__ prints quantized views through it
        self.assertEqual(str(q), text)
        # several lines, another dtype, a negative zero point, on SIM (device= first, as torch's cuda:0)
        x = torch.linspace(-3, 3, 40).reshape(5, 8)
        tq = torch.quantize_per_tensor(x, 0.037, -5, torch.qint8)
        for device in DEVICES:
            q = mnemo.quantize_per_tensor(mnemo.tensor(x.numpy(), device=device), 0.037, -5, mnemo.qint8)
            exp = repr(tq).replace("torch.", "mnemo.")
            if device != "cpu":
                exp = exp.replace("size=(5, 8)", f"device='{device}', size=(5, 8)", 1)
            self.assertEqual(repr(q), exp)

    def test_errors(self):
        v = mnemo.tensor([1.0, 2.0])
        with self.assertRaises(RuntimeError):
            v.q_scale()
        with self.assertRaises(RuntimeError):
            v.int_repr()
        with self.assertRaises(RuntimeError):
            mnemo.quantize_per_tensor(v, -1.0, 0, mnemo.quint8)
        with self.assertRaises(RuntimeError):
            torch.quantize_per_tensor(torch.tensor([1.0]), 0.1, 0, torch.float32)
        with self.assertRaises(RuntimeError):
            mnemo.quantize_per_tensor(v, 0.1, 0, mnemo.float32)
        q = mnemo.quantize_per_tensor(v, 0.1, 0, mnemo.qint8)
        with self.assertRaises(RuntimeError):  # no quantized kernel for take, as torch 1.13
            q.take([0])
        with self.assertRaises(RuntimeError):
            q[[0]] = 1.0

    def test_copies(self):
        q = mnemo.quantize_per_tensor(mnemo.tensor([1.0, 2.0]), 0.5, 3, mnemo.qint8)
        for c in (copy.copy(q), copy.deepcopy(q), pickle.loads(pickle.dumps(q))):
            self.assertEqual((c.q_scale(), c.q_zero_point()), (0.5, 3))
            self.assertEqual(c.int_repr().tolist(), q.int_repr().tolist())
        self.assertIs(pickle.loads(pickle.dumps(mnemo.per_tensor_affine)), mnemo.per_tensor_affine)


class TestRandom(unittest.TestCase):
    def test_same_numbers_every_device_and_layout(self):
        for fn in (mnemo.rand, mnemo.randn):
            for dtype in ("float32", "float64", "float16", "bfloat16"):
                with self.subTest(fn=fn.__name__, dtype=dtype):
                    mnemo.manual_seed(1234)
                    a = fn(3, 5, dtype=dtype)
                    mnemo.manual_seed(1234)
                    b = fn((3, 5), dtype=dtype, device="sim:0")
                    self.assertEqual(str(b.device), "sim:0")
                    self.assertEqual(a.tolist(), b.cpu().tolist())
                    c = fn(3, 5, dtype=dtype)  # the counter moved on: new numbers
                    self.assertNotEqual(a.tolist(), c.tolist())
                    g = mnemo.Generator().manual_seed(1234)
                    w = mnemo.empty(5, 3, dtype=dtype).t()  # any layout: row-major order of the shape
                    (w.uniform_ if fn is mnemo.rand else w.normal_)(generator=g)
                    self.assertEqual(w.tolist(), a.tolist())

    def test_distributions(self):
        mnemo.manual_seed(0)
        u = mnemo.rand(20000, dtype="float64").numpy()
        self.assertTrue(((u >= 0) & (u < 1)).all())
        self.assertLess(abs(u.mean() - 0.5), 0.01)
        n = mnemo.randn(20000).numpy()
        self.assertLess(abs(n.mean()), 0.03)
        self.assertLess(abs(n.std() - 1.0), 0.03)
        r = mnemo.randint(-3, 4, (20000,)).numpy()
        self.assertEqual(r.dtype, np.int64)
        self.assertEqual(sorted(set(r.tolist())), list(range(-3, 4)))
        r2 = mnemo.randint(10, (2, 3), dtype="int32", device="sim:0")
        self.assertEqual((r2.dtype.name, r2.shape, str(r2.device)), ("int32", (2, 3), "sim:0"))
        self.assertTrue(all(0 <= x < 10 for row in r2.tolist() for x in row))

    def test_seed_state(self):
        g = mnemo.manual_seed(77)
        self.assertIs(g, mnemo.random.default_generator)
        self.assertEqual(mnemo.initial_seed(), 77)
        state = g.get_state()
        a = mnemo.rand(4).tolist()
        g.set_state(state)
        self.assertEqual(mnemo.rand(4).tolist(), a)
        g2 = pickle.loads(pickle.dumps(mnemo.Generator().manual_seed(77)))
        self.assertEqual(mnemo.rand(4, generator=g2).tolist(), a)
        mnemo.manual_seed(-1)  # PyTorch takes negative seeds modulo 2**64
        self.assertEqual(mnemo.initial_seed(), (1 << 64) - 1)
        self.assertEqual(torch.manual_seed(-1).initial_seed(), (1 << 64) - 1)

    def test_errors(self):
        with self.assertRaises(TypeError):
            mnemo.rand(3, dtype="int64")
        with self.assertRaises(RuntimeError):
            mnemo.randint(5, 5, (2,))
        with self.assertRaises(RuntimeError):
            torch.randint(5, 5, (2,))
        # a size is ints or a tuple / list of them: not a storage, view or array (TypeError, as torch)
        for size in (mnemo.UntypedStorage([2, 3]), mnemo.tensor([2, 3]), np.array([2, 3]), iter([2, 3])):
            with self.subTest(size=type(size).__name__):
                with self.assertRaises(TypeError):
                    mnemo.randint(10, size)
                with self.assertRaises(TypeError):
                    mnemo.empty(size)
        for size in (torch.ByteStorage([2, 3]), torch.tensor([2, 3]), np.array([2, 3])):
            with self.assertRaises(TypeError):
                torch.randint(10, size)
        self.assertEqual(mnemo.randint(10, torch.Size([2, 3])).shape, (2, 3))


class TestBadInput(unittest.TestCase):
    """Refusals found by tests/python/fuzz_api.py."""

    def test_ops_need_a_view(self):
        for name, args in (("index_select", (0, [0])), ("take", ([0],)), ("gather", (0, [0])),
                           ("masked_select", ([True],)), ("scatter", (0, [0], 1.)), ("scatter_add", (0, [0], 1.)),
                           ("index_put", (([0],), 1.)), ("quantize_per_tensor", (0.1, 0, mnemo.quint8)),
                           ("dequantize", ()), ("int_repr", ()), ("q_scale", ()), ("q_zero_point", ())):
            for junk in (5, "x", [1.0, 2.0], None):
                with self.subTest(name=name, junk=junk), self.assertRaisesRegex(TypeError, "must be a View"):
                    getattr(mnemo, name)(junk, *args)
        with self.assertRaisesRegex(TypeError, "must be a View"):
            mnemo.quantized.qscheme(3)

    def test_stream_is_no_view(self):
        v = mnemo.tensor([1., 2., 3.], device="sim")
        with self.assertRaises(TypeError):
            mnemo.index_select(v, 0, [0], stream=mnemo.tensor([0]))

    def test_arange_too_big_or_out_of_int64(self):
        with self.assertRaises(mnemo.OutOfMemoryError):
            mnemo.arange(2 ** 50)
        with self.assertRaisesRegex(RuntimeError, "int64"):
            mnemo.arange(2 ** 70, 2 ** 70 + 3)


if __name__ == "__main__":
    unittest.main()
