#!/usr/bin/env python3
# tests/python/test_printing.py: a View prints as PyTorch prints the same
# tensor (mnemo._format, the rules of torch/_tensor_str.py): every dtype kind,
# sci/int modes, summarization, line wrapping, nested indentation, empty and
# meta views, device and dtype suffixes, set_printoptions/get_printoptions;
# and 0-d views reach numpy and torch as scalars.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_printing.py
(exit 0 pass, 1 fail, 77 skip: numpy missing). Label cpu;sim. The side-by-side
comparisons need torch (Debian's 1.13); without it they are skipped and the
fixed-text cases still run."""
import sys
import unittest

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

# (data, dtype name or None): each printed by torch.tensor and mnemo.tensor.
CASES = [
    ([1., 2., 3.], None), ([[1.5, 2.25], [3., 4.]], None), (3.5, None), ([0., 0.], None), ([1e-5, 1.], None),
    ([1e9, 1.], None), ([1., 2000.], None), ([float("inf"), float("nan"), 0., -1.], None), ([float("nan")], None),
    ([1, 2, 3], None), ([True, False], None), ([1, 2, 3], "int32"), ([1, 2, 3], "uint8"), ([-7, 2], "int8"),
    ([1.5, 2], "float16"), ([1.5, 2], "float64"), ([1.5, 2], "bfloat16"), ([1 + 2j, -3.5 - 1j], None),
    ([1 + 2j, 3 - 0j], "complex128"), ([0.1, 0.2, 123.456], None), ([-0.0, 1.0], None), (7, None), (True, None),
    (1 + 1j, None), ([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], "float32"), (list(range(2000)), None),
    ([[i * j for j in range(50)] for i in range(50)], "float32"),
    ([[i * j * 0.37 for j in range(30)] for i in range(3)], None), ([1.2345678e-3] * 30, None),
    ([[[i + j + k for k in range(12)] for j in range(12)] for i in range(12)], None),
    ([[1e-8 * i for i in range(1, 20)]] * 3, None), ([123456789.0, 1.5], "float64"),
]


def torch_repr(t):
    return repr(t).replace("torch.", "mnemo.")


class FixedText(unittest.TestCase):
    """Texts written out (so the test means something without torch too)."""

    def test_texts(self):
        self.assertEqual(repr(mnemo.tensor([1., 2., 3.])), "tensor([1., 2., 3.])")
        self.assertEqual(repr(mnemo.tensor([[0.1, 2.5], [3., 4.]])),
                         "tensor([[0.1000, 2.5000],\n        [3.0000, 4.0000]])")
        self.assertEqual(repr(mnemo.tensor(3.5)), "tensor(3.5000)")
        self.assertEqual(repr(mnemo.tensor([1, 2])), "tensor([1, 2])")
        self.assertEqual(repr(mnemo.tensor([1, 2], dtype=mnemo.int32)), "tensor([1, 2], dtype=mnemo.int32)")
        self.assertEqual(repr(mnemo.tensor([True])), "tensor([True])")
        self.assertEqual(repr(mnemo.tensor([1e-5, 1.])), "tensor([1.0000e-05, 1.0000e+00])")
        self.assertEqual(repr(mnemo.tensor([1 + 2j])), "tensor([1.+2.j])")
        self.assertEqual(repr(mnemo.tensor(list(range(10))).to("sim")), "tensor([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "
                                                                        "device='sim:0')")
        self.assertEqual(repr(mnemo.empty(0, 3, dtype=mnemo.int64)), "tensor([], size=(0, 3), dtype=mnemo.int64)")
        self.assertEqual(repr(mnemo.empty(3, 2, device="meta")), "tensor(..., device='meta', size=(3, 2))")
        self.assertEqual(repr(mnemo.tensor(list(range(2000)))), "tensor([   0,    1,    2,  ..., 1997, 1998, 1999])")
        v = mnemo.tensor([1.5, 2.0], dtype=mnemo.float16, device="sim")
        self.assertEqual(str(v), repr(v))
        self.assertEqual(repr(v), "tensor([1.5000, 2.0000], device='sim:0', dtype=mnemo.float16)")

    def test_strided_views(self):
        """Transposed, sliced and broadcast views print their own elements."""
        x = mnemo.tensor([[1, 2, 3], [4, 5, 6]])
        self.assertEqual(repr(x.t()), "tensor([[1, 4],\n        [2, 5],\n        [3, 6]])")
        self.assertEqual(repr(x[:, 1:]), "tensor([[2, 3],\n        [5, 6]])")
        self.assertEqual(repr(x[1, 0]), "tensor(4)")
        self.assertEqual(repr(mnemo.tensor([7]).expand(3)), "tensor([7, 7, 7])")

    def test_printoptions(self):
        try:
            self.assertEqual(mnemo.get_printoptions(), {"precision": 4, "threshold": 1000, "edgeitems": 3,
                                                        "linewidth": 80, "sci_mode": None})
            mnemo.set_printoptions(precision=2, sci_mode=True)
            self.assertEqual(repr(mnemo.tensor([1.5])), "tensor([1.50e+00])")
            mnemo.set_printoptions(threshold=5)  # sci_mode back to None, as torch
            self.assertEqual(repr(mnemo.tensor(list(range(10)))), "tensor([0, 1, 2,  ..., 7, 8, 9])")
            self.assertIsNone(mnemo.get_printoptions()["sci_mode"])
            for bad in (dict(profile="long"), dict(precision=-1), dict(precision=1.5), dict(threshold="x"),
                        dict(sci_mode=1)):
                with self.assertRaises(ValueError, msg=str(bad)):
                    mnemo.set_printoptions(**bad)
        finally:
            mnemo.set_printoptions(profile="default")
        self.assertEqual(mnemo.get_printoptions()["threshold"], 1000)

    def test_format(self):
        self.assertEqual(f"{mnemo.tensor(2.5):.2f}|{mnemo.tensor(7):>3}|{mnemo.tensor([1, 2])}",
                         "2.50|  7|tensor([1, 2])")
        with self.assertRaises(TypeError):
            f"{mnemo.tensor([1.0]):.2f}"

    def test_quantized_prints_without_crash(self):
        q = mnemo.empty(3, dtype=mnemo.quint8)
        text = repr(q)
        self.assertTrue(text.startswith("tensor("), text)
        self.assertIn("mnemo.quint8", text)


@unittest.skipIf(torch is None, "torch is not installed")
class AsTorch(unittest.TestCase):
    """Side by side with torch's own repr of the same values."""

    def test_values(self):
        for data, dt in CASES:
            with self.subTest(data=str(data)[:40], dtype=dt):
                t = torch.tensor(data, dtype=getattr(torch, dt) if dt else None)
                self.assertEqual(repr(mnemo.tensor(data, dtype=dt)), torch_repr(t))

    def test_huge_expanded_views(self):
        """A summarized print takes only the edge elements: an expanded view of
        up to 2^63 - 1 elements (one stored) prints as torch's (fuzz_api found
        the copy of a whole dim)."""
        for data, sizes in (([True], (2 ** 63 - 1,)), ([[1.5], [-2.0]], (2, 2 ** 59)),
                            ([[[7]]], (3, 5, 2 ** 40))):
            with self.subTest(sizes=sizes):
                self.assertEqual(repr(mnemo.tensor(data).expand(*sizes)),
                                 torch_repr(torch.tensor(data).expand(*sizes)))

    def test_random_values(self):
        """Seeded random shapes, dtypes, magnitudes, integral values, inf/nan
        and transposes (summarized ones included)."""
        rng = np.random.default_rng(34)
        names = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "int8", "bool", "complex64",
                 "complex128", "int16"]
        for i in range(150):
            nd = int(rng.integers(0, 4))
            shape = tuple(int(x) for x in rng.integers(1, 14 if nd < 3 else 12, size=nd))
            dt = names[i % len(names)]
            scale = 10.0 ** int(rng.integers(-9, 10))
            a = rng.standard_normal(shape) * scale
            if rng.random() < 0.3:
                a = np.round(a)
            if rng.random() < 0.1 and a.size:
                a.flat[0] = np.inf
            if rng.random() < 0.1 and a.size:
                a.flat[-1] = np.nan
            if dt.startswith("complex"):
                a = a + 1j * rng.standard_normal(shape) * scale
            elif dt.startswith(("int", "uint", "bool")):
                a = np.nan_to_num(np.clip(a, -100, 100))
            t = torch.tensor(a).to(getattr(torch, dt))
            if dt == "bfloat16":  # (numpy has no bfloat16: the bits through int16)
                v = mnemo.tensor(t.view(torch.int16).numpy()).view(mnemo.bfloat16)
            else:
                v = mnemo.tensor(t.numpy())
            if t.dim() == 2 and rng.random() < 0.3:
                t, v = t.t(), v.t()
            with self.subTest(i=i, dtype=dt, shape=shape):
                self.assertEqual(repr(v), torch_repr(t))

    def test_empty_and_meta(self):
        for shape in ((0,), (0, 3), (2, 0)):
            for dt in ("float32", "int64", "float16"):
                want = torch_repr(torch.empty(shape, dtype=getattr(torch, dt)))
                self.assertEqual(repr(mnemo.empty(shape, dtype=dt)), want)
        for dt in ("float32", "int64"):
            self.assertEqual(repr(mnemo.empty(3, 2, dtype=dt, device="meta")),
                             torch_repr(torch.empty(3, 2, dtype=getattr(torch, dt), device="meta")))

    def test_options(self):
        try:
            for opts in (dict(precision=2), dict(sci_mode=True), dict(sci_mode=False), dict(threshold=5),
                         dict(profile="short"), dict(profile="full"), dict(linewidth=30),
                         dict(edgeitems=1, threshold=3)):
                torch.set_printoptions(**opts)
                mnemo.set_printoptions(**opts)
                for data in ([1.12345, 22.5, 3.], list(range(10)), [[1.5] * 10] * 10, [1e-6, 2.0]):
                    with self.subTest(opts=opts, data=str(data)[:30]):
                        self.assertEqual(repr(mnemo.tensor(data)), repr(torch.tensor(data)))
        finally:
            torch.set_printoptions(profile="default")
            mnemo.set_printoptions(profile="default")


class ZeroDim(unittest.TestCase):
    """0-d views reach numpy and torch as scalars."""

    def test_numpy(self):
        for dev in ("cpu", "sim"):
            for dt, value in ((None, 2.5), ("int64", 3), ("bool", True), ("float16", 1.5)):
                with self.subTest(dev=dev, dtype=dt):
                    v = mnemo.tensor(value, dtype=dt, device=dev)
                    a = np.asarray(v)
                    self.assertEqual((a.shape, a.dtype.name, a.item()), ((), v.dtype.name, value))
                    self.assertEqual(np.array(v).item(), value)

    def test_len_and_iter_are_torch_errors(self):
        with self.assertRaisesRegex(TypeError, "^len\\(\\) of a 0-d tensor"):
            len(mnemo.tensor(1.0))
        with self.assertRaisesRegex(TypeError, "^iteration over a 0-d tensor"):
            iter(mnemo.tensor(1.0)).__next__()

    @unittest.skipIf(torch is None, "torch is not installed")
    def test_torch(self):
        """torch.as_tensor(numpy.asarray(v)) and torch.from_dlpack(v) give 0-d
        tensors. torch.tensor(v) itself reads only numbers, sequences, numpy
        arrays and tensors (torch 1.13's internal_new_from_data): where this
        torch refuses a view, the error must be a clean one naming the ways
        that work."""
        for dt, tdt, value in ((None, torch.float32, 2.5), ("int64", torch.int64, 7), ("bool", torch.bool, True),
                               ("float64", torch.float64, -1.25)):
            with self.subTest(dtype=dt):
                v = mnemo.tensor(value, dtype=dt)
                outs = [torch.as_tensor(np.asarray(v)), torch.tensor(np.asarray(v))]
                if dt != "bool":  # (torch 1.13's DLPack has no bool: "Unsupported code 6")
                    outs.append(torch.from_dlpack(v))
                for t in outs:
                    self.assertEqual((t.shape, t.dtype, t.item()), ((), tdt, value))
                for make in (torch.tensor, torch.as_tensor):
                    try:
                        t = make(v)
                    except (TypeError, RuntimeError) as e:
                        self.assertRegex(str(e), "Could not infer dtype of View|numpy.asarray\\(view\\)")
                    else:
                        self.assertEqual((t.shape, t.dtype, t.item()), ((), tdt, value))
        try:
            torch.tensor(mnemo.tensor([1, 2]))
        except (TypeError, RuntimeError) as e:
            self.assertIn("torch.from_dlpack(view)", str(e))



class BadOptions(unittest.TestCase):
    """Found by tests/python/fuzz_api.py: a refused set_printoptions changes nothing."""

    def test_refused_call_changes_nothing(self):
        before = mnemo.get_printoptions()
        try:
            for kwargs in ({"precision": 2, "edgeitems": 1, "linewidth": "x"}, {"profile": "short", "sci_mode": 1},
                           {"threshold": float("nan")}, {"precision": 7, "profile": "nope"}):
                with self.subTest(kwargs=kwargs), self.assertRaises(ValueError):
                    mnemo.set_printoptions(**kwargs)
                self.assertEqual(mnemo.get_printoptions(), before)
        finally:
            mnemo.set_printoptions(profile="default")


if __name__ == "__main__":
    unittest.main()
