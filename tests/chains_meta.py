# tests/chains_meta.py: the meta-device op family of view_diff.py (FAMILY meta).
"""Chains that move to the meta device ("to meta [DTYPE]") and go on with the
view ops there; torch runs them on device='meta'. A meta tensor describes as
its metadata with "values": None (view_driver prints "values": null).

"to cpu" out of meta is refused by both ("Cannot copy out of meta tensor; no
data!"). Writes into meta (copy, copy_self, fill, zero): mnemo checks their
arguments as it does on the CPU (broadcast shapes, internal overlap, values
that overflow the dtype) and then writes nothing; torch 1.13's meta kernels
skip those checks, so the torch side runs the same write on a CPU tensor of
the same sizes and strides to know whether it is refused (docs/STORAGE.md,
"The meta device"). Single thread (view_diff.py's).
"""
import math
import sys

import torch

NAME = "meta"
DTYPES = {}

_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
           "complex64", "complex128"]


def _main():
    """view_diff.py's module (the script run): its DTYPES and helpers."""
    return sys.modules["__main__"]


def _cpu_like(t):
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype)


def apply(t, root, tok):
    n, a = tok[0], tok[1:]
    vd = _main()
    if n == "to" and ("meta" in a or "cpu" in a):
        dev = "meta" if "meta" in a else "cpu"
        dts = [x for x in a if x in vd.DTYPES]
        return t.to(dev, vd.DTYPES[dts[0]]) if dts else t.to(dev)
    if not t.is_meta or n not in ("copy", "copy_self", "fill", "zero"):
        return NotImplemented
    if n in ("fill", "zero") and torch._debug_has_internal_overlap(t) == 1:
        raise vd.Deviation()  # refused by mnemo, allowed by PyTorch (view_diff.py's known deviation)
    c = _cpu_like(t)  # the CPU's checks of the same write
    if n == "copy":
        shape = vd.parse_list(a[0])
        c.copy_(vd.arange(math.prod(shape), shape, a[1]))
    elif n == "copy_self":
        c.copy_(root.to("cpu") if not root.is_meta else torch.empty_strided(root.size(), root.stride(),
                                                                            dtype=root.dtype))
    elif n == "fill":
        c.fill_(vd.parse_scalar(a[0]))
    return t


def gen_op(rng, t):
    if not t.is_meta:
        return "to meta" if rng.random() < 0.7 else "to meta " + rng.choice(_DTYPES)
    r = rng.random()
    if r < 0.05:
        return "to cpu"
    if r < 0.5:
        return "to meta " + rng.choice(_DTYPES)
    return None  # a view op of view_diff.py's own


def gen_root(rng):
    return None  # creation on the CPU; the family's ops move to meta


def describe(t):
    if not t.is_meta:
        return None
    vd = _main()
    return {
        "dtype": vd.TNAME[t.dtype], "sizes": list(t.shape), "strides": list(t.stride()),
        "offset": t.storage_offset(), "contiguous": t.is_contiguous(),
        "channels_last": (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or
                         (t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d)),
        "values": None,
    }
