"""mnemo._core: the C declarations of storages, views, DLPack and save/load
(libmnemo's storage layer) and the small helpers the public modules share:
argument checks (ints, dims, shapes), Python <-> mn_scalar_t, host buffers,
and foreign memory kept alive by a reference the C storage itself holds.

Threading: declarations happen once at import; the helpers are pure
functions. The keep-alive table is a dict changed under the GIL (the C
deleter runs as a ctypes callback, which takes the GIL).
"""
from __future__ import annotations

import ctypes as C
import itertools
import numbers
import operator
import os
from collections.abc import Sequence
from typing import Any, TypeVar

from . import device as _device_module  # noqa: F401 (declares mn_device_synchronize, used below)
from ._lib import (DEVICE_TYPE_NAMES, MN_MAX_DIMS, MN_SCALAR_BOOL, MN_SCALAR_COMPLEX, MN_SCALAR_FLOAT, MN_SCALAR_INT,
                   MN_SCALAR_UINT, MN_VIEW_END, MN_VIEW_OFFSET_KEEP, Device as CDevice, I64P, Scalar, VP, declare, lib)

VPP = C.POINTER(VP)


def _load_speedups():
    """mnemo._speedups (the compiled fast paths, mnemo/_speedups.c), or None:
    not built, or MNEMO_PURE_PYTHON=1 (ctypes alone; the tests run both)."""
    if os.environ.get("MNEMO_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


# The compiled fast paths or None; mnemo.view binds them (_speedups._bind) once View exists.
speedups = _load_speedups()
T = TypeVar("T")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
VIEW_END = MN_VIEW_END
OFFSET_KEEP = MN_VIEW_OFFSET_KEEP
MAX_DIMS = MN_MAX_DIMS
DEVICE_TYPES = DEVICE_TYPE_NAMES

# ---- storages ---------------------------------------------------------------
declare("mn_storage_create", "status", [CDevice, C.c_size_t, VP, VP, VPP])
declare("mn_storage_retain", VP, [VP])
declare("mn_storage_release", None, [VP])
declare("mn_storage_nbytes", C.c_size_t, [VP])
declare("mn_storage_data", VP, [VP])
declare("mn_storage_device", CDevice, [VP])
declare("mn_storage_allocator", VP, [VP])
declare("mn_storage_refcount", C.c_long, [VP])
declare("mn_storage_get_kind", C.c_int, [VP])
declare("mn_storage_kind_name", C.c_char_p, [C.c_int])
declare("mn_storage_is_resizable", C.c_bool, [VP])
declare("mn_storage_is_pinned", C.c_bool, [VP])
declare("mn_storage_filename", C.c_char_p, [VP])
declare("mn_storage_is_shared", C.c_bool, [VP])
STORAGE_DELETER = C.CFUNCTYPE(None, VP, VP)
declare("mn_storage_from_buffer", "status", [CDevice, VP, C.c_size_t, STORAGE_DELETER, VP, VPP])
declare("mn_storage_from_buffer_copy", "status", [CDevice, VP, C.c_size_t, VPP])
declare("mn_storage_resize", "status", [VP, C.c_size_t, VP])
declare("mn_storage_fill", "status", [VP, C.c_int, VP])
declare("mn_storage_copy", "status", [VP, VP, C.c_bool, VP])
declare("mn_storage_clone", "status", [VP, VP, VPP])
declare("mn_storage_to", "status", [VP, CDevice, C.c_bool, VP, VPP])
declare("mn_storage_pin_memory", "status", [VP, CDevice, VPP])
declare("mn_storage_from_file", "status", [C.c_char_p, C.c_bool, C.c_size_t, VPP])
declare("mn_storage_share_memory", "status", [VP])
declare("mn_storage_shm_handle", "status", [VP, C.c_char_p, C.c_size_t])
declare("mn_storage_from_shm_handle", "status", [C.c_char_p, VPP])
declare("mn_storage_format", "status", [VP, C.c_int, C.c_size_t, C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t)])
declare("mn_storage_tolist", "status", [VP, C.c_int, C.POINTER(Scalar), C.c_size_t, C.POINTER(C.c_size_t)])
declare("mn_storage_byteswap_dtype", "status", [VP, C.c_int, VP])

# ---- views --------------------------------------------------------------------
declare("mn_view_create", "status", [VP, C.c_int, C.c_int, I64P, I64P, C.c_int64, VPP])
declare("mn_view_empty", "status", [CDevice, C.c_int, C.c_int, I64P, VPP])
declare("mn_view_empty_strided", "status", [CDevice, C.c_int, C.c_int, I64P, I64P, VPP])
declare("mn_view_destroy", None, [VP])
declare("mn_view_ndim", C.c_int, [VP])
declare("mn_view_sizes", I64P, [VP])
declare("mn_view_strides", I64P, [VP])
declare("mn_view_offset", C.c_int64, [VP])
declare("mn_view_numel", C.c_int64, [VP])
declare("mn_view_dtype", C.c_int, [VP])
declare("mn_view_device", CDevice, [VP])
declare("mn_view_storage", VP, [VP])
declare("mn_view_data", VP, [VP])
declare("mn_view_is_contiguous", C.c_bool, [VP])
declare("mn_view_as_strided", "status", [VP, C.c_int, I64P, I64P, C.c_int64, VPP])
declare("mn_view_check", "status", [VP])
declare("mn_view_is_contiguous_channels_last", C.c_bool, [VP])
declare("mn_view_is_contiguous_channels_last_3d", C.c_bool, [VP])
declare("mn_view_is_non_overlapping_and_dense", C.c_bool, [VP])
declare("mn_view_shares_storage", C.c_bool, [VP, VP])
declare("mn_view_same_storage_and_layout", C.c_bool, [VP, VP])
declare("mn_view_nbytes", C.c_size_t, [VP])
declare("mn_view_view", "status", [VP, C.c_int, I64P, VPP])
declare("mn_view_transpose", "status", [VP, C.c_int, C.c_int, VPP])
declare("mn_view_t2d", "status", [VP, VPP])
declare("mn_view_permute", "status", [VP, C.c_int, C.POINTER(C.c_int), VPP])
declare("mn_view_movedim", "status", [VP, C.c_int, C.POINTER(C.c_int), C.POINTER(C.c_int), VPP])
declare("mn_view_slice", "status", [VP, C.c_int, C.c_int64, C.c_int64, C.c_int64, VPP])
declare("mn_view_narrow", "status", [VP, C.c_int, C.c_int64, C.c_int64, VPP])
declare("mn_view_select", "status", [VP, C.c_int, C.c_int64, VPP])
declare("mn_view_unsqueeze", "status", [VP, C.c_int, VPP])
declare("mn_view_squeeze", "status", [VP, VPP])
declare("mn_view_squeeze_dim", "status", [VP, C.c_int, VPP])
declare("mn_view_expand", "status", [VP, C.c_int, I64P, VPP])
declare("mn_view_unflatten", "status", [VP, C.c_int, C.c_int, I64P, VPP])
declare("mn_view_diagonal", "status", [VP, C.c_int64, C.c_int, C.c_int, VPP])
declare("mn_view_unfold", "status", [VP, C.c_int, C.c_int64, C.c_int64, VPP])
declare("mn_view_split", "status", [VP, C.c_int64, C.c_int, C.POINTER(VPP), C.POINTER(C.c_int)])
declare("mn_view_chunk", "status", [VP, C.c_int64, C.c_int, C.POINTER(VPP), C.POINTER(C.c_int)])
declare("mn_view_list_destroy", None, [VPP, C.c_int])
declare("mn_view_view_dtype", "status", [VP, C.c_int, VPP])
declare("mn_view_real", "status", [VP, VPP])
declare("mn_view_imag", "status", [VP, VPP])
declare("mn_view_reshape", "status", [VP, C.c_int, I64P, VP, VPP])
declare("mn_view_flatten", "status", [VP, C.c_int, C.c_int, VP, VPP])
declare("mn_view_contiguous", "status", [VP, VP, VPP])
declare("mn_view_clone", "status", [VP, VP, VPP])
declare("mn_view_to", "status", [VP, CDevice, C.c_int, C.c_bool, VP, VPP])
declare("mn_view_copy", "status", [VP, VP, VP])
declare("mn_view_fill", "status", [VP, Scalar, VP])
declare("mn_view_zero", "status", [VP, VP])
declare("mn_scalar_from_bytes", "status", [C.c_int, VP, C.POINTER(Scalar)])
declare("mn_view_is_quantized", C.c_bool, [VP])
declare("mn_view_q_scale", C.c_double, [VP])
declare("mn_view_q_zero_point", C.c_int64, [VP])
declare("mn_view_create_quantized", "status", [VP, C.c_int, C.c_int, I64P, I64P, C.c_int64, C.c_double, C.c_int64,
                                                 VPP])

_libc = C.CDLL(None)
libc_free = _libc.free
libc_free.restype = None
libc_free.argtypes = [VP]


def keep_for(new_storage: int, old_storage: int, keep: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a storage made from another (a copy) keeps alive of the old one's
    ``keep`` (its allocator objects): all of it when the same allocator made
    both, else nothing (the copy lives in another device's default)."""
    if keep and lib.mn_storage_allocator(new_storage) != lib.mn_storage_allocator(old_storage):
        return ()
    return keep


def out_handle(fn: Any, *args: Any) -> int | None:
    """Calls fn(*args, &out) (an mn_status function ending in an out handle)
    and returns the handle as an int."""
    out = VP()
    fn(*args, C.byref(out))
    return out.value


# ---- argument checks ------------------------------------------------------------
def as_int(x: Any, what: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """x as a Python int in [lo, hi]: TypeError for non-integers (bool
    included), ValueError out of range."""
    if isinstance(x, bool) or not hasattr(x, "__index__"):
        raise TypeError(f"mnemo: {what} must be an int, got {type(x).__name__} {x!r}")
    v = operator.index(x)
    if not lo <= v <= hi:
        raise ValueError(f"mnemo: {what} {v} is out of range [{lo}, {hi}]")
    return v


def as_dim(x: Any, what: str = "dim") -> int:
    return as_int(x, what, -(1 << 31), (1 << 31) - 1)


def as_shape(args: tuple[Any, ...], what: str = "shape") -> tuple[int, ...]:
    """A shape from f(2, 3), f((2, 3)), f([2, 3]) or f(torch.Size([2, 3])):
    a tuple of ints. As PyTorch, a view, storage, array or other iterable is
    not a shape (TypeError)."""
    if len(args) == 1 and getattr(args[0], "ndim", 0):  # a view or array of one or more dims
        raise TypeError(f"mnemo: {what} must be ints or a tuple or list of ints, not {type(args[0]).__name__}")
    if len(args) == 1 and not hasattr(args[0], "__index__"):
        seq = args[0]
        if not isinstance(seq, (tuple, list, range)):
            raise TypeError(f"mnemo: {what} must be ints or a tuple or list of ints, not {type(seq).__name__}")
        args = tuple(seq)
    if len(args) > MAX_DIMS:
        raise ValueError(f"mnemo: {what} has {len(args)} dims; at most {MAX_DIMS}")
    return tuple(as_int(a, what) for a in args)


def i64_array(values: Sequence[int]) -> C.Array[C.c_int64]:
    return (C.c_int64 * max(1, len(values)))(*values)


def int_array(values: Sequence[int]) -> C.Array[C.c_int]:
    return (C.c_int * max(1, len(values)))(*values)


# ---- scalars -----------------------------------------------------------------------
def to_scalar(value: Any) -> Scalar:
    """A Python (or numpy) bool, int, float or complex as an mn_scalar_t."""
    s = Scalar()
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        s.kind, s.v.b = MN_SCALAR_BOOL, bool(value)
    elif isinstance(value, numbers.Integral):
        v = int(value)
        if INT64_MIN <= v <= INT64_MAX:
            s.kind, s.v.i = MN_SCALAR_INT, v
        elif 0 <= v <= UINT64_MAX:
            s.kind, s.v.u = MN_SCALAR_UINT, v
        else:
            raise ValueError(f"mnemo: value {v} does not fit in 64 bits")
    elif isinstance(value, numbers.Real):
        s.kind, s.v.f = MN_SCALAR_FLOAT, float(value)
    elif isinstance(value, numbers.Complex):
        z = complex(value)
        s.kind = MN_SCALAR_COMPLEX
        s.v.c[0], s.v.c[1] = z.real, z.imag
    else:
        item = getattr(value, "item", None)  # a 1-element View, numpy or torch scalar
        if item is not None and callable(item):
            return to_scalar(item())
        raise TypeError(f"mnemo: expected a bool, int, float or complex value, got {type(value).__name__}")
    return s


def from_scalar(s: Scalar) -> bool | int | float | complex:
    """The Python value of an mn_scalar_t."""
    k = s.kind
    if k == MN_SCALAR_FLOAT:
        return float(s.v.f)
    if k == MN_SCALAR_INT:
        return int(s.v.i)
    if k == MN_SCALAR_BOOL:
        return bool(s.v.b)
    if k == MN_SCALAR_UINT:
        return int(s.v.u)
    if k == MN_SCALAR_COMPLEX:
        return complex(s.v.c[0], s.v.c[1])
    raise ValueError(f"mnemo: unknown scalar kind {k}")


def is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, numbers.Number)) or type(value).__name__ == "bool_"


# ---- host memory -----------------------------------------------------------------------
def host_buffer(obj: Any) -> tuple[int, int, Any]:
    """(address, nbytes, keepalive) of the bytes of a bytes-like object (its
    contiguous bytes; a copy when it is not C-contiguous). keepalive must live
    as long as the address is used."""
    if type(obj).__module__ == "numpy" and hasattr(obj, "ctypes"):  # any numpy dtype, complex included
        import numpy as np
        arr = np.ascontiguousarray(obj)
        return (arr.ctypes.data if arr.nbytes else 0), arr.nbytes, arr
    mv = memoryview(obj)
    if not mv.c_contiguous:
        mv = memoryview(mv.tobytes())
    mv = mv.cast("B")
    n = mv.nbytes
    if n == 0:
        return 0, 0, mv
    if mv.readonly:
        b = mv.obj if isinstance(mv.obj, bytes) and len(mv.obj) == n else mv.tobytes()
        return C.cast(C.c_char_p(b), VP).value, n, b
    arr = (C.c_char * n).from_buffer(mv)
    return C.addressof(arr), n, (arr, mv)


def immortal(cfunc: T) -> T:
    """Keeps a ctypes callback valid until the process ends and returns it: C
    may call it during interpreter shutdown (a numpy array or a C storage
    freed after this module is gone), when its trampoline would otherwise be
    freed already (a crash at exit, found by tests/python/fuzz_lifetimes.py)."""
    C.pythonapi.Py_IncRef(C.py_object(cfunc))
    return cfunc


# Python objects that C storages keep alive (foreign memory): ctx -> object.
_kept = {}
_kept_ids = itertools.count(1)


@immortal
@STORAGE_DELETER
def _release_kept(ctx, data, _pop=_kept.pop):  # (bound now: may run at interpreter exit)
    _pop(ctx, None)


def storage_over(dev: Any, address: int, nbytes: int, owner: Any) -> int:
    """A foreign storage (one reference) over nbytes at `address` of device
    `dev` (a Device), keeping `owner` alive until the C storage's last
    reference goes (whoever holds it: a view, a DLPack consumer, ...)."""
    key = next(_kept_ids)
    _kept[key] = owner
    try:
        return out_handle(lib.mn_storage_from_buffer, dev._c, address, nbytes, _release_kept, key)
    except BaseException:
        _kept.pop(key, None)  # refused: the deleter never runs
        raise


def kept_count() -> int:
    """How many Python objects C storages keep alive now (for tests)."""
    return len(_kept)


def synchronize(dev: Any) -> None:
    """Waits for the queued work of a SIM or CUDA device (nothing on the CPU)."""
    if dev.type != "cpu":
        lib.mn_device_synchronize(dev._c)
