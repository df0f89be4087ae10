"""mnemo.quantized: PyTorch's per-tensor affine quantized views over
include/mnemo/quantized.h: quantize_per_tensor, dequantize, int_repr,
q_scale, q_zero_point, qscheme, and their printing (``_repr``).

A quantized view (dtype qint8, quint8, qint32, quint4x2 or quint2x4) stores
integers q and carries a scale and a zero point: its values are
(q - zero_point) * scale. quantize_per_tensor rounds half to even in float32
and clamps to the dtype's range, bit-exact against torch 1.13 (docs/VIEWS.md
"Quantized views"). Every view operation keeps scale and zero point.

Threading: as the views involved (see mnemo.view).
"""
from __future__ import annotations

import ctypes as C
from typing import Any

from ._core import VP, VPP, as_int
from ._lib import declare, lib
from .dtype import dtype as _dtype
from .view import View

__all__ = ["quantize_per_tensor", "dequantize", "int_repr", "q_scale", "q_zero_point", "qscheme",
           "per_tensor_affine", "QScheme"]

declare("mn_view_quantize_per_tensor", "status", [VP, C.c_double, C.c_int64, C.c_int, VP, VPP])
declare("mn_view_dequantize", "status", [VP, VP, VPP])
declare("mn_view_int_repr", "status", [VP, VP, VPP])
declare("mn_dtype_quant_range", "status", [C.c_int, C.POINTER(C.c_int64), C.POINTER(C.c_int64)])


class QScheme:
    """A quantization scheme (PyTorch's torch.qscheme); mnemo has
    ``mnemo.per_tensor_affine`` only."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"mnemo.{self.name}"

    def __reduce__(self):
        return (_qscheme, (self.name,))


def _qscheme(name: str) -> QScheme:
    if name != "per_tensor_affine":
        raise ValueError(f"mnemo: unknown quantization scheme {name!r}")
    return per_tensor_affine


per_tensor_affine = QScheme("per_tensor_affine")


def _stream(stream: Any):
    from .allocator import _stream_handle
    return _stream_handle(stream)


def _input(v: Any, what: str) -> "View":
    from .view import _need_view
    return _need_view(v, f"{what}(input)")


def _check_quantized(v, what: str) -> None:
    _input(v, what)
    if not v.dtype.is_quantized:
        raise RuntimeError(f"mnemo: {what} needs a quantized view, got {v.dtype.name}")


def quantize_per_tensor(input: "View", scale: float, zero_point: int, dtype: Any, *, stream: Any = None) -> "View":
    """A quantized copy of ``input`` (float16, bfloat16, float32 or float64)
    in a new storage: q = clamp(round_half_even(x / scale) + zero_point) of
    ``dtype`` (qint8, quint8, qint32, quint4x2, quint2x4), as torch 1.13."""
    _input(input, "quantize_per_tensor")
    dt = _dtype(dtype)
    return input._op_copy(lib.mn_view_quantize_per_tensor, float(scale), as_int(zero_point, "zero_point"), dt.value,
                          _stream(stream))


def dequantize(input: "View", *, stream: Any = None) -> "View":
    """(q - zero_point) * scale as a new float32 view; a view that is not
    quantized comes back as itself when float32, else cast to float32
    (PyTorch's dequantize of a non-quantized tensor)."""
    if not _input(input, "dequantize").dtype.is_quantized:
        return input if input.dtype.name == "float32" else input.to(dtype="float32")
    return input._op_copy(lib.mn_view_dequantize, _stream(stream))


def int_repr(input: "View", *, stream: Any = None) -> "View":
    """The stored integers in a new view: int8 (qint8), uint8 (quint8),
    int32 (qint32); the packed bytes (uint8) for quint4x2 and quint2x4."""
    _check_quantized(input, "int_repr")
    return input._op_copy(lib.mn_view_int_repr, _stream(stream))


def q_scale(input: "View") -> float:
    """The scale of a quantized view."""
    _check_quantized(input, "q_scale")
    return float(lib.mn_view_q_scale(input._handle))


def q_zero_point(input: "View") -> int:
    """The zero point of a quantized view."""
    _check_quantized(input, "q_zero_point")
    return int(lib.mn_view_q_zero_point(input._handle))


def qscheme(input: "View") -> QScheme:
    """mnemo.per_tensor_affine for a quantized view (the only scheme)."""
    _check_quantized(input, "qscheme")
    return per_tensor_affine


def _repr(view: "View") -> str:
    """PyTorch's repr of a quantized tensor (View.__repr__ calls it through
    mnemo._format): the dequantized values formatted as PyTorch's, then
    ``device=`` off the CPU, ``size``, ``dtype``, ``quantization_scheme``,
    ``scale`` and ``zero_point``."""
    from ._format import device_suffixes, format_tensor
    suffixes = device_suffixes(view) + [f"size={tuple(view.shape)}", f"dtype={view.dtype!r}",
                                        f"quantization_scheme={per_tensor_affine!r}", f"scale={q_scale(view)}",
                                        f"zero_point={q_zero_point(view)}"]
    return format_tensor(dequantize(view), suffixes)
