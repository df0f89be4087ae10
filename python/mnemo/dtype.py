"""mnemo.dtype: the element types (PyTorch's dtypes) of mnemo's storages and
views, read from libmnemo's dtype table, with conversion to and from numpy and
torch dtypes.

``mnemo.float32``, ``mnemo.bfloat16``, ``mnemo.float8_e4m3fn``, ... are the
objects (one per dtype, compared by identity or ==); ``mnemo.dtype("bf16")``
parses any name libmnemo accepts (canonical, PyTorch's with or without
"torch.", short forms) and also takes a numpy dtype, a numpy scalar type or a
torch dtype. bfloat16, float8_e4m3fn and float8_e5m2 have no numpy dtype:
``numpy_dtype`` raises TypeError for them (view the bytes as uint16/uint8 or
cast to float32 first). The quantized dtypes (qint8, quint8, qint32, quint4x2,
quint2x4: kind "quantized", mnemo/quantized.h) have none either.

Threading: dtype objects are immutable values made once at import; any thread
may use them.
"""
from __future__ import annotations

import ctypes as C
from typing import Any

from ._lib import DTYPE_KIND_NAMES, declare, lib

__all__ = ["dtype"]


class _Info(C.Structure):
    _fields_ = [("dtype", C.c_int), ("name", C.c_char_p), ("itemsize", C.c_size_t), ("kind", C.c_int),
                ("is_signed", C.c_bool)]


declare("mn_dtype_info", C.POINTER(_Info), [C.c_int])
declare("mn_dtype_parse", "status", [C.c_char_p, C.POINTER(C.c_int)])
declare("mn_dtype_bits", C.c_int, [C.c_int])

_KINDS = DTYPE_KIND_NAMES  # indexed by mn_dtype_kind
# Canonical names whose numpy dtype has the same name; the others have none.
_NUMPY_NAMES = {"bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64", "complex64",
                "complex128", "uint16", "uint32", "uint64"}


class dtype:
    """An element type. ``dtype(spec)`` returns the one object for ``spec``: a
    dtype, a name ("float32", "torch.half", "bf16", "fp8_e4m3", "u8"), a numpy
    dtype or scalar type, or a torch dtype. Attributes: ``name`` (canonical,
    PyTorch's without "torch."), ``itemsize`` (bytes), ``kind`` ("bool",
    "uint", "int", "float", "complex", "quantized"), ``is_floating_point``,
    ``is_complex``, ``is_quantized``, ``is_signed``, ``value`` (the mn_dtype
    number)."""

    __slots__ = ("value", "name", "itemsize", "kind", "is_floating_point", "is_complex", "is_quantized", "is_signed",
                 "_bits")
    _by_value = {}

    def __new__(cls, spec):
        return _parse(spec)

    @classmethod
    def _make(cls, value):
        info = lib.mn_dtype_info(value).contents
        self = object.__new__(cls)
        kind = _KINDS[info.kind]
        for k, v in (("value", value), ("name", info.name.decode()), ("itemsize", int(info.itemsize)), ("kind", kind),
                     ("is_floating_point", kind == "float"), ("is_complex", kind == "complex"),
                     ("is_quantized", kind == "quantized"), ("is_signed", bool(info.is_signed)),
                     ("_bits", int(lib.mn_dtype_bits(value)))):
            object.__setattr__(self, k, v)
        return self

    def __setattr__(self, name, value):
        raise AttributeError("mnemo.dtype is immutable")

    def __reduce__(self):
        return (dtype, (self.name,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        return f"mnemo.{self.name}"

    __str__ = __repr__

    def __eq__(self, other):
        if isinstance(other, dtype):
            return self is other
        return NotImplemented

    def __hash__(self):
        return hash(("mnemo.dtype", self.value))

    @property
    def bits(self) -> int:
        """Bits per element (itemsize * 8; 4 for quint4x2, 2 for quint2x4)."""
        return self._bits

    @property
    def has_numpy(self) -> bool:
        """Whether numpy has this dtype (False for bfloat16 and the float8 types)."""
        return self.name in _NUMPY_NAMES

    def numpy_dtype(self) -> Any:
        """The numpy dtype of the same name. TypeError for bfloat16 and the
        float8 types, which numpy does not have."""
        import numpy as np
        if self.is_quantized:
            raise TypeError(f"mnemo: numpy has no {self.name} dtype; use int_repr() or dequantize() first")
        if self.name not in _NUMPY_NAMES:
            alt = "uint16" if self.itemsize == 2 else "uint8"
            raise TypeError(f"mnemo: numpy has no {self.name} dtype; view the bytes with .view(mnemo.{alt}) "
                            f"or cast with .to(dtype=mnemo.float32) first")
        return np.dtype(self.name)

    def torch_dtype(self) -> Any:
        """The torch dtype of the same name. TypeError when this torch has
        none (torch 1.13 has no uint16/32/64 or float8 types)."""
        import torch
        t = getattr(torch, self.name, None)
        if not isinstance(t, torch.dtype):
            raise TypeError(f"mnemo: torch {torch.__version__} has no {self.name} dtype")
        return t

    @classmethod
    def from_numpy(cls, np_dtype: Any) -> dtype:
        """The dtype of a numpy dtype (or scalar type, or anything np.dtype()
        takes). TypeError for numpy dtypes mnemo lacks (strings, objects, ...)
        and for non-native byte order."""
        import numpy as np
        d = np.dtype(np_dtype)
        if not d.isnative:
            raise TypeError(f"mnemo: numpy dtype {d.str!r} is not in native byte order")
        if d.name not in _NUMPY_NAMES:
            raise TypeError(f"mnemo: numpy dtype {d.name!r} has no mnemo dtype")
        return _parse(d.name)

    @classmethod
    def from_torch(cls, torch_dtype: Any) -> dtype:
        """The dtype of a torch dtype (torch.float32 -> mnemo.float32)."""
        return _parse(str(torch_dtype))


def _parse(spec):
    if isinstance(spec, dtype):
        return spec
    if isinstance(spec, str):
        out = C.c_int()
        try:
            lib.mn_dtype_parse(spec.encode(), C.byref(out))
        except Exception as e:
            raise ValueError(f"mnemo: unknown dtype {spec!r} ({getattr(e, 'message', e)})") from None
        return dtype._by_value[out.value]
    mod = type(spec).__module__
    if mod.startswith("torch"):
        return _parse(str(spec))
    if spec is bool:
        return dtype._by_value[0]
    if spec is float:  # as torch: Python's float is a double
        return _parse("float64")
    if spec is int:
        return _parse("int64")
    if spec is complex:
        return _parse("complex128")
    if mod == "numpy" or (isinstance(spec, type) and spec.__module__ == "numpy"):
        return dtype.from_numpy(spec)
    raise TypeError(f"mnemo: cannot make a dtype from {spec!r}")


def _build():
    names = {}
    value = 0
    while lib.mn_dtype_info(value):
        d = dtype._make(value)
        dtype._by_value[value] = d
        names[d.name] = d
        value += 1
    return names


_DTYPES = _build()
globals().update(_DTYPES)
# PyTorch's aliases (attributes of the package, not exported by "import *").
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "short": "int16", "int": "int32",
           "long": "int64", "cfloat": "complex64", "cdouble": "complex128"}
globals().update({a: _DTYPES[n] for a, n in ALIASES.items()})
# Every canonical dtype name ("bool" included; `from mnemo import *` leaves
# the builtin bool alone because __init__ leaves "bool" out of __all__).
DTYPE_NAMES = tuple(_DTYPES)
__all__ += [n for n in DTYPE_NAMES]
