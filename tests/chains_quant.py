# tests/chains_quant.py: the quantized-views op family of tests/view_diff.py
# (FAMILY quant; docs/VIEW_CHAINS.md, mnemo/quantized.h). Single-threaded.
"""Ops: ``quantize SCALE ZERO_POINT DTYPE`` (torch.quantize_per_tensor),
``dequantize``, ``int_repr``. Roots are float32 tensors of random values with
halves (rounding ties), NaN, infinities and huge values; chains quantize with
random scales, zero points and dtypes, run random view ops on the quantized
view and end (mostly) with dequantize or int_repr. A quantized result is
described by its geometry, q_scale, q_zero_point and int_repr() values
(packed bytes for quint4x2 / quint2x4), compared bit for bit.

Known deviations (docs/VIEWS.md, "Quantized views"), checked as such:
  - mnemo refuses what torch 1.13 accepts without meaning: a scale that is not
    finite and > 0, a zero point outside the dtype's range (torch checks
    quint4x2 / quint2x4 zero points not at all), dequantize of a view that is
    not quantized (torch: identity), fill_ / copy_ of plain values into a
    quantized view (torch quantizes them; mnemo: quantize instead), dtype
    views and to(dtype) of a quantized view (torch 1.13 refuses, or makes
    broken tensors). mnemo must
    refuse those chains (view_diff's Deviation).
  - mnemo quantizes float16 / bfloat16 / float64 views read as float32; torch
    1.13 refuses all but float32: the torch side converts to float32 first.
  - torch 1.13 refuses to quantize a channels_last-like view into quint4x2 /
    quint2x4 ("required rank 4 tensor"), or makes a broken tensor; mnemo
    quantizes it row-major: not compared (KnownDeviation).
  - a cast ("to") of a float outside an integer dtype's range (the roots
    hold NaN, infinities and 1e10): undefined in torch (C++), defined in
    mnemo (docs/KERNELS.md): not compared (KnownDeviation).
  - torch 1.13's view ops on packed tensors are broken (setStorage counts
    elements as bytes; clone has no copy kernel): on a quint4x2 / quint2x4
    tensor only view, reshape, flatten, unflatten, real, contiguous and base
    are compared; a chain that applies another view op to a packed tensor is
    not compared (counted as skipped, KnownDeviation).
"""
import math
import struct

import torch

NAME = "quant"
QDTYPES = {"qint8": torch.qint8, "quint8": torch.quint8, "qint32": torch.qint32,
           "quint4x2": torch.quint4x2, "quint2x4": torch.quint2x4}
DTYPES = dict(QDTYPES)
RANGE = {"qint8": (-128, 127), "quint8": (0, 255), "qint32": (-2 ** 31, 2 ** 31 - 1),
         "quint4x2": (0, 15), "quint2x4": (0, 3)}
PACKED = (torch.quint4x2, torch.quint2x4)
# view ops torch 1.13 gets right on packed tensors
PACKED_OK = ("view", "reshape", "flatten", "unflatten", "real", "contiguous", "base", "quantize", "dequantize",
             "int_repr")


_INT_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-2 ** 15, 2 ** 15 - 1),
              "int32": (-2 ** 31, 2 ** 31 - 1), "int64": (-2 ** 63, 2 ** 63 - 1)}


class KnownDeviation(Exception):
    """A comparison torch 1.13 cannot make (view_diff.py skips the chain)."""


def _deviation():
    import __main__
    return __main__.Deviation()


def _f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def _channels_last_like(t):
    """c10's is_channels_last_strides_2d / _3d (suggest_memory_format)."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(t.dim())
    if order is None or t.stride(1) == 0:
        return False
    lo = 0
    for d in order:
        if t.shape[d] == 0 or t.stride(d) < lo or (d == 0 and lo == t.stride(1)):
            return False
        lo = t.stride(d) * (t.shape[d] if t.shape[d] > 1 else 1)
    return True


def apply(t, root, tok):
    n, a = tok[0], tok[1:]
    if n == "values":
        return torch.tensor([float(x) for x in a], dtype=torch.float32)
    if n == "quantize":
        scale, zp, dt = float(a[0]), int(a[1]), a[2]
        if dt not in QDTYPES:
            raise ValueError("not a quantized dtype")
        lo, hi = RANGE[dt]
        if t.is_quantized or not t.is_floating_point():
            raise RuntimeError("Quantize only works on Float Tensor")
        if not (math.isfinite(scale) and scale > 0) or not lo <= zp <= hi:
            raise _deviation()
        if QDTYPES[dt] in PACKED and _channels_last_like(t):
            raise KnownDeviation("packed quantize of a channels_last-like view")
        return torch.quantize_per_tensor(t.to(torch.float32), scale, zp, QDTYPES[dt])
    if n == "dequantize":
        if not t.is_quantized:
            raise _deviation()
        return t.dequantize()
    if n == "int_repr":
        return t.int_repr()
    if n == "to" and not t.is_quantized and t.is_floating_point() and a and a[0] in _INT_RANGE:
        lo, hi = _INT_RANGE[a[0]]
        v = t.detach().to(torch.float64)
        if t.numel() and not bool(((v >= float(lo)) & (v < float(hi) + 1.0)).all()):
            # a float outside the int dtype (NaN, inf, 1e10): C++ leaves torch's cast undefined;
            # mnemo's is defined (docs/KERNELS.md: truncate to int64, saturate, wrap)
            raise KnownDeviation("out-of-range float to %s" % a[0])
    if t.is_quantized:
        if t.dtype in PACKED and n not in PACKED_OK:
            raise KnownDeviation(n)
        if n in ("fill", "copy", "view_dtype", "to") or (n == "copy_self" and not root.is_quantized):
            raise _deviation()
    return NotImplemented


def describe(t):
    if not t.is_quantized:
        return None
    d = {"dtype": [k for k, v in QDTYPES.items() if v == t.dtype][0], "sizes": list(t.shape),
         "strides": list(t.stride()), "offset": t.storage_offset(), "contiguous": t.is_contiguous(),
         "channels_last": (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or
                          (t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d))}
    d["q_scale"] = t.q_scale()
    d["q_zero_point"] = t.q_zero_point()
    d["values"] = t.int_repr().reshape(-1).tolist()
    return d


def _value(rng):
    r = rng.random()
    if r < 0.04:
        return "nan"
    if r < 0.08:
        return rng.choice(["inf", "-inf"])
    if r < 0.14:
        return repr(rng.choice([1e10, -1e10, 3e38, -3e38, 2.5e9, -2.2e9, 1e-30]))
    if r < 0.6:  # halves and quarters: ties of value / scale
        return repr(rng.randint(-600, 600) / rng.choice([2, 4]))
    return repr(_f32(rng.uniform(-300, 300)))


def gen_root(rng):
    """Random float32 values (the family's op "values V...": torch.tensor)."""
    if rng.random() < 0.1:  # NHWC / NDHWC memory seen as NCHW / NCDHW
        nd = rng.choice([4, 5])
        shape = [9] * nd
        while math.prod(shape) > 48:  # "values" takes at most 63 numbers
            shape = [rng.randint(1, 3) for _ in range(nd)]
        perm = [0] + list(range(2, nd)) + [1]
        back = [0, nd - 1] + list(range(1, nd - 1))
        n = math.prod(shape)
        return "arange %d float32 | values %s | view %s | contiguous | permute %s" % (
            n, " ".join(_value(rng) for _ in range(n)), " ".join(str(shape[i]) for i in perm),
            " ".join(str(x) for x in back))
    n = rng.choice([0, 1, 2, 3, 5, 6, 7, 8, 12, 15, 24])
    line = "arange %d float32 | values %s" % (n, " ".join(_value(rng) for _ in range(n)))
    if n and rng.random() < 0.1:  # a root of another float dtype (read as float32 by mnemo)
        line += " | to " + rng.choice(["float16", "bfloat16", "float64"])
    return line


def _scale(rng):
    r = rng.random()
    if r < 0.03:
        return rng.choice(["0", "-0.5", "inf", "nan"])
    return repr(rng.choice([1.0, 0.5, 0.25, 0.1, 0.3, 2.0, 3.0, 1e-3, 7.5, 1e-6, 0.0625, 100.0]))


def gen_op(rng, t):
    if not t.is_quantized:
        if rng.random() < 0.05:
            return rng.choice(["dequantize", "int_repr"])
        dt = rng.choice(list(QDTYPES))
        lo, hi = RANGE[dt]
        zp = rng.choice([lo, hi, (lo + hi) // 2, rng.randint(lo, hi), rng.randint(lo, hi)])
        if rng.random() < 0.03:
            zp = rng.choice([lo - 1, hi + 1])
        return "quantize %s %d %s" % (_scale(rng), zp, dt)
    r = rng.random()
    if r < 0.4:
        return rng.choice(["dequantize", "int_repr"])
    if r < 0.5:
        return "quantize 0.5 0 qint8"  # on a quantized view: refused by both
    return None  # a view op
