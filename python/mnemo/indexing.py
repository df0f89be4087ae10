"""mnemo.indexing: PyTorch's advanced indexing and index operations over
include/mnemo/index.h: ``v[[0, 2]]``, ``v[mask]``, ``v[idx] = x`` and their
mixes with ints, slices, None and Ellipsis (View.__getitem__/__setitem__
dispatch here when a key holds an index), index_select, gather, scatter(_),
scatter_add(_), index_put(_), take, masked_select, and arange.

Rules (docs/PYTHON.md "Indexing"), as PyTorch 1.13:
- ints, slices, None and Ellipsis are applied first as views (an int
  removes its dim, as a 0-d integer index view does); the other entries are
  the advanced indices of the dims that remain: lists, tuples, numpy arrays,
  torch tensors or Views of integers (int64/int32) or bools (a mask covers as
  many dims as it has). A Python bool (or a 0-d bool view) adds a dim of size
  1 (True) or 0 (False). The advanced indices broadcast together; when they
  index adjacent dims their shape takes those dims' place, else it comes
  first. A non-tuple list holding a sequence, slice, None, ... or a View is
  read as a tuple (PyTorch's and numpy's legacy rule).
- The result of advanced indexing is a copy in a new storage; writes
  (``__setitem__``, index_put_) go into the indexed view itself.
- Index values out of range raise IndexError where PyTorch does (indexing,
  index_select, take), RuntimeError (MnemoError) in gather and scatter.
- ``stream`` (optional, a mnemo stream or an mn_stream_t address) queues the
  work there instead of the device's default stream.

Threading: as the views involved (see mnemo.view).
"""
from __future__ import annotations

import ctypes as C
import numbers
from typing import Any, Optional, Sequence

from ._core import VP, VPP
from ._lib import MnemoError, declare, lib
from .dtype import dtype as _dtype
from .view import View

__all__ = ["index_select", "gather", "scatter", "scatter_add", "index_put", "take", "masked_select", "arange"]

declare("mn_view_index_select", "status", [VP, C.c_int, VP, VP, VPP])
declare("mn_view_take", "status", [VP, VP, VP, VPP])
declare("mn_view_gather", "status", [VP, C.c_int, VP, VP, VPP])
declare("mn_view_masked_select", "status", [VP, VP, VP, VPP])
declare("mn_view_index", "status", [VP, C.c_int, VPP, VP, VPP])
declare("mn_view_index_put", "status", [VP, C.c_int, VPP, VP, C.c_bool, VP])
declare("mn_view_scatter", "status", [VP, C.c_int, VP, VP, VP])
declare("mn_view_scatter_add", "status", [VP, C.c_int, VP, VP, VP])

_INDEX_DTYPES = ("int64", "int32", "bool", "uint8")


def _stream(stream: Any) -> Optional[int]:
    from .allocator import _stream_handle
    return _stream_handle(stream)


def _view_cls():
    from .view import View
    return View


def _input(x: Any, what: str) -> "View":
    """x when it is a View, else TypeError (as torch's "must be Tensor")."""
    from .view import _need_view
    return _need_view(x, f"{what}(input)")


def _as_index_view(x: Any, what: str = "index"):
    """x (a View, list, tuple, numpy array, torch tensor or int) as an
    integer or bool View usable as an index; IndexError for other dtypes."""
    View = _view_cls()
    if not isinstance(x, View):
        from .view import tensor
        if not isinstance(x, (list, tuple, str, bytes)) and not hasattr(x, "__array__") \
                and not hasattr(x, "__dlpack__"):
            raise IndexError(f"mnemo: only integers, slices (`:`), ellipsis (`...`), None, lists and integer or "
                             f"bool views (or numpy arrays, torch tensors) are valid indices (got "
                             f"{type(x).__name__})")
        if isinstance(x, (list, tuple)) and _is_empty_seq(x):
            import numpy as np
            x = np.zeros(_seq_shape(x), dtype=np.int64)  # [] indexes nothing (int64, as torch)
        try:
            x = tensor(x)
        except TypeError as e:  # a string, an object: TypeError, as torch's
            raise TypeError(f"mnemo: {what} must be integers or bools: {e}") from None
        except ValueError as e:  # ragged lists
            raise IndexError(f"mnemo: {what} must be integers or bools: {e}") from None
    if x.dtype.name not in _INDEX_DTYPES:
        raise IndexError(f"mnemo: tensors used as indices must be long, int, byte or bool tensors, "
                         f"got {x.dtype.name}")
    return x


def _is_empty_seq(x) -> bool:
    if isinstance(x, (list, tuple)):
        return all(_is_empty_seq(e) for e in x)
    return False


def _seq_shape(x) -> tuple:
    shape = []
    while isinstance(x, (list, tuple)):
        shape.append(len(x))
        if not x:
            break
        x = x[0]
    return tuple(shape)


def _to_index_error(e: MnemoError) -> Exception:
    """IndexError for the C errors PyTorch raises as IndexError (indices out
    of range, masks of the wrong shape, indices that do not broadcast); the
    others (dtype or value-shape mismatches) stay MnemoError (RuntimeError)."""
    msg = e.message
    if "out of bounds" in msg or "out of range" in msg or "too many indices" in msg or "does not match" in msg \
            or "indexing tensors could not be broadcast" in msg:
        return IndexError(msg)
    return e


def _is_advanced(k: Any) -> bool:
    """Whether one entry of an index key is not an int / slice / None / Ellipsis."""
    View = _view_cls()
    if k is None or k is Ellipsis or isinstance(k, slice):
        return False
    if isinstance(k, View):
        return not (k.ndim == 0 and k.dtype.kind in ("int", "uint") and k.dtype.name != "uint8")
    if isinstance(k, bool) or type(k).__name__ == "bool_":
        return True
    if hasattr(k, "__index__") and not hasattr(k, "shape"):
        return False
    if hasattr(k, "shape") and hasattr(k, "dtype"):  # numpy / torch: 0-d integers act as ints
        return not (len(k.shape) == 0 and str(k.dtype).replace("torch.", "") not in ("bool", "uint8")
                    and hasattr(k, "__index__"))
    return True


def _key_tuple(key: Any) -> tuple:
    """PyTorch's treatSequenceAsTuple: a tuple is the key; a short non-tuple
    list holding a sequence, slice, Ellipsis, None or tensor is read as a
    tuple (numpy's legacy rule); anything else is one entry."""
    if isinstance(key, tuple):
        return key
    View = _view_cls()
    if isinstance(key, list) and len(key) < 32:
        for e in key:
            if e is None or e is Ellipsis or isinstance(e, (slice, list, tuple, View)) or hasattr(e, "shape"):
                return tuple(key)
    return (key,)


_BASIC = (int, slice, type(None), type(Ellipsis))


def is_basic(key: Any) -> bool:
    """Whether an index key (View.__getitem__'s) holds only ints, slices,
    None and Ellipsis (a view, no copy: View._index); else this module's
    getitem/setitem take it. Fast for the common keys (called on every
    indexing)."""
    t = type(key)
    if t is tuple:
        items = key
    elif t in _BASIC:
        return True
    elif t is list:
        return False
    else:
        items = (key,)
    for k in items:
        if type(k) in _BASIC:
            continue
        if isinstance(k, (bool, View)) or type(k).__name__ == "bool_" or not hasattr(k, "__index__"):
            return False
        if hasattr(k, "shape") and len(k.shape) != 0:
            return False
        if type(k).__module__.startswith("torch"):
            return False
    return True


def _apply(v, key):
    """Applies the basic entries of ``key`` to ``v`` as views; returns the
    view and the advanced indices [(dim of the view, index View)]."""
    View = _view_cls()
    from .view import full
    key = _key_tuple(key)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("mnemo: an index can only have a single ellipsis ('...')")
    entries = []
    consumed = 0
    for k in key:
        if k is None or k is Ellipsis:
            entries.append(("none" if k is None else "ell", k))
            continue
        if isinstance(k, bool) or type(k).__name__ == "bool_":
            entries.append(("bool", bool(k)))
            continue
        if isinstance(k, View) and k.ndim == 0 and k.dtype.name in ("bool", "uint8"):
            entries.append(("bool", bool(k.item())))
            continue
        if not _is_advanced(k):
            entries.append(("slice" if isinstance(k, slice) else "int", k))
            consumed += 1
            continue
        idx = _as_index_view(k)
        if idx.ndim == 0 and idx.dtype.name in ("bool", "uint8"):
            entries.append(("bool", bool(idx.item())))
            continue
        if idx.ndim == 0:
            entries.append(("int", int(idx.item())))
            consumed += 1
            continue
        entries.append(("adv", idx))
        consumed += idx.ndim if idx.dtype.name in ("bool", "uint8") else 1
    ndim = v.ndim
    if consumed > ndim:
        raise IndexError(f"mnemo: too many indices for tensor of dimension {ndim}")
    advanced = []
    dim = 0
    for kind, k in entries:
        if kind == "none":
            v = v.unsqueeze(dim)
            dim += 1
        elif kind == "ell":
            dim += ndim - consumed
        elif kind == "slice":
            v = v.slice(dim, k.start, k.stop, k.step)
            dim += 1
        elif kind == "int":
            i = int(k.__index__()) if not isinstance(k, int) else k
            size = v.shape[dim]
            if not -size <= i < size:
                raise IndexError(f"mnemo: index {i} is out of bounds for dimension {dim} with size {size}")
            v = v.select(dim, i)
        elif kind == "bool":
            v = v.unsqueeze(dim)
            advanced.append((dim, full((1,), k, dtype="bool")))
            dim += 1
        else:
            advanced.append((dim, k))
            dim += k.ndim if k.dtype.name in ("bool", "uint8") else 1
    return v, advanced


def _handles(advanced):
    """The C array of mn_view_index's entries, one per indexed dim from dim
    0 (NULL for a whole dim; a k-dim mask is one entry covering k dims),
    and its length."""
    entries, dim = [], 0
    for d, idx in sorted(advanced, key=lambda e: e[0]):
        entries += [None] * (d - dim)
        entries.append(idx._handle)
        dim = d + (idx.ndim if idx.dtype.name in ("bool", "uint8") else 1)
    arr = (VP * max(len(entries), 1))(*entries)
    return len(entries), arr


def getitem(v: "View", key: Any) -> "View":
    """v[key] with advanced indices: a copy (mn_view_index)."""
    base, advanced = _apply(v, key)
    if not advanced:
        return base if base is not v else v._alias()
    n, arr = _handles(advanced)
    try:
        return base._op_copy(lib.mn_view_index, n, arr, None)
    except MnemoError as e:
        raise _to_index_error(e) from None


def _values_for(target, value, shape=None):
    """value as a View of target's dtype and device (index_put_'s values); a
    scalar becomes a 0-d view (expanded to ``shape`` when given)."""
    View = _view_cls()
    from .view import full, tensor
    if isinstance(value, View):
        return value
    if isinstance(value, numbers.Number) or type(value).__name__ == "bool_":
        v = full((), value, dtype=target.dtype, device=target.device)
        return v if shape is None else v.expand(shape)
    return tensor(value, dtype=target.dtype, device=target.device)


def setitem(v: "View", key: Any, value: Any) -> None:
    """v[key] = value with advanced indices (mn_view_index_put)."""
    base, advanced = _apply(v, key)
    vals = _values_for(base, value)
    if not advanced:
        base.copy_(vals)
        return
    n, arr = _handles(advanced)
    try:
        lib.mn_view_index_put(base._handle, n, arr, vals._handle, False, None)
    except MnemoError as e:
        raise _to_index_error(e) from None


# ---- index operations (torch.index_select, ... and their View methods) -------------------
def index_select(input: "View", dim: int, index: Any, *, stream: Any = None) -> "View":
    """The elements of ``index`` (0-d or 1-d integers) along ``dim``, in a new storage."""
    _input(input, "index_select")
    from ._core import as_dim
    idx = _as_index_view(index)
    try:
        return input._op_copy(lib.mn_view_index_select, as_dim(dim), idx._handle, _stream(stream))
    except MnemoError as e:
        raise _to_index_error(e) from None


def take(input: "View", index: Any, *, stream: Any = None) -> "View":
    """input seen as 1-d (row-major) at ``index``; the result has index's shape."""
    _input(input, "take")
    idx = _as_index_view(index)
    try:
        return input._op_copy(lib.mn_view_take, idx._handle, _stream(stream))
    except MnemoError as e:
        raise _to_index_error(e) from None


def gather(input: "View", dim: int, index: Any, *, stream: Any = None) -> "View":
    """out[i][j][k] = input[index[i][j][k]][j][k] (dim 0); index has input's ndim."""
    _input(input, "gather")
    from ._core import as_dim
    idx = _as_index_view(index)
    return input._op_copy(lib.mn_view_gather, as_dim(dim), idx._handle, _stream(stream))


def masked_select(input: "View", mask: Any, *, stream: Any = None) -> "View":
    """The elements where ``mask`` (bool, broadcast with input) is true, as a 1-d view."""
    _input(input, "masked_select")
    m = _as_index_view(mask, "mask")
    return input._op_copy(lib.mn_view_masked_select, m._handle, _stream(stream))


def _scatter_into(input, dim, index, src, stream, fn, name):
    _input(input, name)
    from ._core import as_dim
    idx = _as_index_view(index)
    s = _values_for(input, src, idx.shape)
    fn(input._handle, as_dim(dim), idx._handle, s._handle, _stream(stream))
    return input


def scatter_(input: "View", dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
    """In place: input[index[i][j][k]][j][k] = src[i][j][k] (dim 0); src may be a scalar."""
    return _scatter_into(input, dim, index, src, stream, lib.mn_view_scatter, "scatter_")


def scatter_add_(input: "View", dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
    """In place: input[index[i][j][k]][j][k] += src[i][j][k] (dim 0), summed in row-major order."""
    return _scatter_into(input, dim, index, src, stream, lib.mn_view_scatter_add, "scatter_add_")


def scatter(input: "View", dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
    """scatter_ into a clone of input."""
    _input(input, "scatter")
    return scatter_(input.clone(), dim, index, src, stream=stream)


def scatter_add(input: "View", dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
    """scatter_add_ into a clone of input."""
    _input(input, "scatter_add")
    return scatter_add_(input.clone(), dim, index, src, stream=stream)


def index_put_(input: "View", indices: Sequence[Any], values: Any, accumulate: bool = False, *,
               stream: Any = None) -> "View":
    """In place: input[indices] = values (or += with accumulate); ``indices``
    is a tuple of index views (None for a whole dim), as torch's index_put_."""
    _input(input, "index_put_")
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"mnemo: index_put_ takes a tuple of indices, got {type(indices).__name__}")
    advanced, dim = [], 0
    for k in indices:
        if k is None:
            dim += 1
            continue
        idx = _as_index_view(k)
        advanced.append((dim, idx))
        dim += idx.ndim if idx.dtype.name in ("bool", "uint8") else 1
    vals = _values_for(input, values)
    n, arr = _handles(advanced) if advanced else (0, (VP * 1)())
    try:
        lib.mn_view_index_put(input._handle, n, arr, vals._handle, bool(accumulate), _stream(stream))
    except MnemoError as e:
        raise _to_index_error(e) from None
    return input


def index_put(input: "View", indices: Sequence[Any], values: Any, accumulate: bool = False, *,
              stream: Any = None) -> "View":
    """index_put_ into a clone of input."""
    _input(input, "index_put")
    return index_put_(input.clone(), indices, values, accumulate, stream=stream)


def _fma(a: float, i, c: float):
    """a * i + c rounded once (as PyTorch's vectorized CPU kernel computes
    arange with fused multiply-adds), from Dekker's exact product and
    Knuth's exact sum in float64 (numpy arrays ``i``)."""
    import numpy as np
    split = 134217729.0  # 2**27 + 1
    p = a * i
    ta = split * a
    ah = ta - (ta - a)
    al = a - ah
    ti = split * i
    ih = ti - (ti - i)
    il = i - ih
    ep = ((ah * ih - p) + ah * il + al * ih) + al * il
    s = p + c
    bb = s - p
    es = (p - (s - bb)) + (c - bb)
    with np.errstate(invalid="ignore"):
        return s + (ep + es)


# ---- arange ------------------------------------------------------------------------------------
def arange(start: numbers.Number = 0, end: Optional[numbers.Number] = None, step: numbers.Number = 1, *,
           dtype: Any = None, device: Any = "cpu") -> "View":
    """torch.arange: arange(end), arange(start, end[, step]): start + i * step
    for i in [0, ceil((end - start) / step)), rounded once to float64 (for
    integer dtypes: in int64 with start and step cast to int64, as PyTorch),
    then cast to ``dtype``; PyTorch's vectorized kernel may differ in the
    last bit or two of floats. dtype None: int64 when every argument is an
    int, else float32."""
    import math

    import numpy as np

    from .view import tensor
    if end is None:
        start, end = 0, start
    for name, x in (("start", start), ("end", end), ("step", step)):
        if isinstance(x, bool) or not isinstance(x, numbers.Real):
            raise TypeError(f"mnemo: arange(): {name} must be a real number, got {type(x).__name__}")
        if not math.isfinite(float(x)):
            raise RuntimeError(f"mnemo: arange(): unsupported range: {start} -> {end}")
    if step == 0:
        raise RuntimeError("mnemo: arange(): step must be nonzero")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError("mnemo: arange(): upper bound and larger bound inconsistent with step sign")
    all_int = all(isinstance(x, numbers.Integral) for x in (start, end, step))
    dt = (_dtype("int64") if all_int else _dtype("float32")) if dtype is None else _dtype(dtype)
    integral = dt.kind in ("int", "uint", "bool")
    if all_int and integral:
        n = max(0, -((int(start) - int(end)) // int(step)))
    else:
        n = max(0, math.ceil((float(end) - float(start)) / float(step)))
    try:  # the values are made on the host (numpy), then copied to the device
        if integral:  # PyTorch's integer kernel: start and step cast to the accumulator (int64) first
            if int(step) == 0:
                raise RuntimeError("mnemo: arange(): step must be nonzero")
            if not all(-2 ** 63 <= int(x) < 2 ** 63 for x in (start, end, step)):
                raise OverflowError
            vals = int(start) + int(step) * np.arange(n, dtype=np.int64)
        else:
            vals = _fma(float(step), np.arange(n, dtype=np.float64), float(start))
    except MemoryError:  # numpy's: the library's own error type, as every other allocation
        from ._lib import MN_ERR_OUT_OF_MEMORY, OutOfMemoryError
        raise OutOfMemoryError(MN_ERR_OUT_OF_MEMORY, f"mnemo: arange(): {n} elements do not fit in host "
                                                     f"memory") from None
    except OverflowError:  # an int64 start or step out of range (torch: "Overflow when unpacking long")
        raise RuntimeError(f"mnemo: arange(): start {start} or step {step} is out of int64's range") from None
    return tensor(vals, dtype=dt, device=device)
