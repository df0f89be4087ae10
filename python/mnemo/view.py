"""mnemo.view: View, PyTorch's strided tensor metadata over a Storage (an
mn_view_t: dtype, shape, strides and offset in elements), every view
operation of include/mnemo/view.h under PyTorch's names, indexing, copies,
casts and fills between any two devices, and the factories (empty, zeros,
ones, full, empty_strided, tensor).

Views are immutable handles but for ``set_`` (PyTorch's, in place): every
other operation returns a new View (or the view itself where PyTorch returns
self) that holds its own storage reference; views of one storage see each
other's writes.
Copies follow PyTorch's tensors (docs/PYTHON.md "Object lifetimes"):
``copy.copy`` is a new view of the same storage (the library's reference
count counts it), ``copy.deepcopy`` clones the whole storage (views of one
storage deep-copied together share the clone), and pickling carries the
storage's bytes with dtype, shape, strides and offset (a multiprocessing
child gets its own copy; views pickled together share one storage again,
views pickled separately do not). repr/str print as PyTorch (mnemo._format).
Host reads (numpy() of a SIM view, tolist, item, repr) synchronize the
device first. CPU views hand numpy their memory without a copy
(``numpy()``, ``__array_interface__``, ``__array__``); CUDA views refuse
host reads (copy them with ``.to("cpu")``). DLPack and the array interfaces
are in mnemo.interop.

Threading: a View may be used from any thread (the metadata changes only in
``set_``, which must not race any other use of the view, as in PyTorch);
in-place writes (fill_, copy_, __setitem__) to memory other threads read
need the caller's synchronization, as in PyTorch. Writes on SIM and CUDA are
queued on the device's default stream, like PyTorch's CUDA work; copy_ and
to() wait for completion unless non_blocking.
"""
import copy
import ctypes as C
import numbers
import weakref
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

from . import _core, _owner
from ._core import VIEW_END, VP, VPP, as_dim, as_int, as_shape, i64_array, int_array, out_handle
from ._lib import Scalar, lib
from .device import Device, DeviceLike, device as _device
from .dtype import dtype as _dtype
from .storage import _LOOKUP, Storage, TypedStorage

__all__ = ["View", "empty", "empty_strided", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like",
           "full_like", "tensor", "contiguous_format", "channels_last", "channels_last_3d", "preserve_format"]

contiguous_format = "contiguous_format"
channels_last = "channels_last"
channels_last_3d = "channels_last_3d"
preserve_format = "preserve_format"
_FLOAT32 = _dtype("float32")

# Type-hint aliases: what the arguments accept (as_shape; mnemo.dtype()).
ShapeLike = Union[int, Sequence[int]]
DTypeLike = Any  # a mnemo.dtype, its name, a numpy or torch dtype, or Python's bool/int/float/complex


def _need_view(x: Any, where: str) -> "View":
    """x when it is a View, else TypeError (as torch's "argument 'input' must
    be Tensor"): a function that reads a View's attributes says so instead of
    an AttributeError."""
    if not isinstance(x, View):
        raise TypeError(f"mnemo: {where} must be a View, not {type(x).__name__}")
    return x


def _is_dtype_like(x):
    """A mnemo, torch or numpy dtype (or numpy scalar type, or Python's
    bool/int/float/complex): not a numpy scalar value."""
    if isinstance(x, _dtype):
        return True
    if isinstance(x, type):
        return x.__module__ == "numpy" or x in (bool, int, float, complex)
    t = type(x)
    if t.__module__.startswith("torch"):
        return t.__name__ == "dtype"
    return t.__module__ == "numpy" and t.__name__.startswith("dtype")


def _is_device_like(x):
    if isinstance(x, (Device, tuple)):
        return True
    if isinstance(x, str):
        return x.split(":")[0] in _core.DEVICE_TYPES
    return type(x).__module__.startswith("torch") and type(x).__name__ == "device"


def _infer_dtype(value):
    """PyTorch's dtype for a Python scalar: bool, int64, float32, complex64."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return _dtype("bool")
    if isinstance(value, numbers.Integral):
        return _dtype("int64")
    if isinstance(value, numbers.Real):
        return _FLOAT32
    if isinstance(value, numbers.Complex):
        return _dtype("complex64")
    raise TypeError(f"mnemo: expected a bool, int, float or complex value, got {type(value).__name__}")


def _ctype_sizes(shape):
    return i64_array(shape) if shape else None


_sp = _core.speedups


class _PyViewBase(_owner.Owner):
    """View's base without mnemo._speedups: the same members as the compiled
    _speedups.ViewBase (the handle and what it keeps, freeing it once, shape,
    ndim, indexing and tolist through View's general paths), in Python over
    ctypes."""

    __slots__ = ("_handle", "_keep", "_box", "__weakref__")

    def __del__(self, _destroy=lib.mn_view_destroy, _unpin=_owner.unpin):
        h = self._take()
        if h:
            _destroy(h)
            _unpin(self._box)

    @property
    def shape(self) -> Tuple[int, ...]:
        """The sizes, a tuple of ints."""
        n = lib.mn_view_ndim(self._handle)
        return tuple(lib.mn_view_sizes(self._handle)[:n]) if n else ()

    @property
    def ndim(self) -> int:
        """The number of dims."""
        return int(lib.mn_view_ndim(self._handle))

    def __getitem__(self, key: Any) -> "View":
        return self._getitem_slow(key)

    def tolist(self) -> Any:
        """The values as nested Python lists (a scalar for a 0-d view)."""
        return self._tolist_slow()

    def t(self) -> "View":
        """Transposes a 2-d view; 0-d and 1-d views come back as they are."""
        return self._t_slow()

    def transpose(self, dim0: int, dim1: int) -> "View":
        """Swaps two dims."""
        return self._transpose_slow(dim0, dim1)

    def view(self, *shape: Any) -> "View":
        """view(*shape): the same elements in a new shape (one -1 inferred);
        refused when the layout needs a copy (use reshape). view(dtype): the
        bytes as another dtype (PyTorch's rules)."""
        return self._view_slow(*shape)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(DLPack device type, index): (1, 0) CPU, (2, i) CUDA, (12, i) SIM."""
        return self._dlpack_device_slow()


_ViewBase = _PyViewBase if _sp is None else _sp.ViewBase
_new = _ViewBase.__new__  # (object.__new__ refuses a subclass of a C type)


class View(_ViewBase, _owner.Owner):
    """A strided view over a storage: ``View(storage, dtype, shape,
    strides=None, offset=0)`` (strides and offset in elements; None:
    contiguous) is mn_view_create; every element must lie inside the storage.
    Most views come from the factories (mnemo.empty, zeros, tensor, ...) and
    from other views' operations."""

    __slots__ = ()

    def __init__(self, storage: Storage, dtype: DTypeLike, shape: ShapeLike, strides: Optional[ShapeLike] = None,
                     offset: int = 0) -> None:
        self._handle = self._box = None
        if not isinstance(storage, Storage):
            raise TypeError(f"mnemo: View() takes a Storage, got {type(storage).__name__}")
        dt = _dtype(dtype)
        shape = as_shape((shape,))
        st = None
        if strides is not None:
            st = as_shape((strides,), "strides")
            if len(st) != len(shape):
                raise ValueError(f"mnemo: {len(shape)} sizes but {len(st)} strides")
        off = as_int(offset, "offset")
        self._keep = storage._keep
        h = out_handle(lib.mn_view_create, storage._h(), dt.value, len(shape), _ctype_sizes(shape),
                       _ctype_sizes(st) if st is not None else None, off)
        self._box = _owner.pin(storage._box)
        self._handle = h

    @classmethod
    def _wrap(cls, handle, keep=(), box=_LOOKUP):
        """A View owning C view `handle`; box: the allocator box its storage
        counts on (default: looked up from the handle)."""
        v = _new(cls)
        v._handle = None
        v._keep = keep
        v._box = _owner.pin_view(handle) if box is _LOOKUP else _owner.pin(box)
        v._handle = handle
        return v

    def _op(self, fn, *args):
        """A view operation that never copies: the result shares this storage."""
        return View._wrap(out_handle(fn, self._handle, *args), self._keep, self._box)

    def _op_copy(self, fn, *args):
        """An operation that may copy (into this storage's allocator, or another
        device's default): the result keeps this view's allocator objects only
        when its storage comes from the same allocator."""
        h = out_handle(fn, self._handle, *args)
        return View._wrap(h, _core.keep_for(lib.mn_view_storage(h), lib.mn_view_storage(self._handle), self._keep))

    # ---- copies and pickles (docs/PYTHON.md "Object lifetimes") ---------------------
    def _alias(self):
        """A new view (its own handle) of this view's storage with this view's geometry."""
        return self._op(lib.mn_view_as_strided, self.ndim, _ctype_sizes(self.shape), _ctype_sizes(self.stride()),
                        _core.OFFSET_KEEP)

    def __copy__(self):
        """copy.copy: a new view of the same storage, as PyTorch's copy.copy of a tensor."""
        return self._alias()

    def _qparams(self):
        if not lib.mn_view_is_quantized(self._handle):
            return None
        return float(lib.mn_view_q_scale(self._handle)), int(lib.mn_view_q_zero_point(self._handle))

    def __deepcopy__(self, memo):
        """copy.deepcopy: the view over a clone of its whole storage (same
        dtype, shape, strides, offset), as PyTorch's; one clone per storage
        within one deepcopy."""
        from .storage import _check_memo
        _check_memo(memo)
        storage = copy.deepcopy(self.untyped_storage(), memo)
        return _rebuild_view(storage, self.dtype.name, self.shape, self.stride(), self.storage_offset(),
                             self._qparams())

    def __reduce_ex__(self, protocol):
        """Pickles by value: the whole storage (Storage.__reduce_ex__), dtype,
        shape, strides, offset and quantization parameters, as PyTorch pickles
        a tensor."""
        return (_rebuild_view, (self._storage_for_pickle(), self.dtype.name, self.shape, self.stride(),
                                self.storage_offset(), self._qparams()))

    def _storage_for_pickle(self):
        """One Storage object per C storage while a pickle is being written:
        the pickler's memo (which keeps it alive until the pickle is done)
        then writes the bytes once, and views pickled together share one
        storage again when loaded, as PyTorch's."""
        key = lib.mn_view_storage(self._handle)
        with _owner.lock:
            s = _PICKLED_STORAGES.get(key)
            if s is None:
                s = _PICKLED_STORAGES[key] = self.untyped_storage()
        return s

    # ---- metadata -------------------------------------------------------------------
    def size(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """The shape, or the size of one dim (negative allowed)."""
        shape = self.shape
        return shape if dim is None else shape[self._wrap_dim(dim)]

    def stride(self, dim: Optional[int] = None) -> Union[Tuple[int, ...], int]:
        """The strides in elements (a tuple), or one dim's stride."""
        n = lib.mn_view_ndim(self._handle)
        strides = tuple(lib.mn_view_strides(self._handle)[:n]) if n else ()
        return strides if dim is None else strides[self._wrap_dim(dim)]

    def _wrap_dim(self, dim):
        n = self.ndim
        d = as_dim(dim)
        if not -max(n, 1) <= d < max(n, 1):
            raise IndexError(f"mnemo: dimension out of range (expected to be in range of "
                             f"[{-max(n, 1)}, {max(n, 1) - 1}], but got {d})")
        return d + n if d < 0 else d

    def storage_offset(self) -> int:
        """The offset of element 0 in the storage, in elements."""
        return int(lib.mn_view_offset(self._handle))

    @property
    def dtype(self) -> _dtype:
        """The element type (a mnemo.dtype)."""
        return _dtype._by_value[lib.mn_view_dtype(self._handle)]

    @property
    def device(self) -> Device:
        """The Device the storage lives on."""
        return Device._from_c(lib.mn_view_device(self._handle))

    @property
    def is_cuda(self) -> bool:
        """Whether the view lives on a CUDA device."""
        return self.device.type == "cuda"

    def dim(self) -> int:
        """The number of dims."""
        return self.ndim

    def numel(self) -> int:
        """The number of elements."""
        return int(lib.mn_view_numel(self._handle))

    @property
    def nbytes(self) -> int:
        """numel() * itemsize."""
        return self.numel() * self.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    def element_size(self) -> int:
        """Bytes per element."""
        return self.itemsize

    def data_ptr(self) -> int:
        """The address of element 0 (storage data + offset * itemsize)."""
        return lib.mn_view_data(self._handle) or 0

    def untyped_storage(self) -> Storage:
        """The UntypedStorage the view looks at (a new Storage object holding
        its own reference to the same C storage)."""
        h = lib.mn_storage_retain(lib.mn_view_storage(self._handle))
        return Storage._wrap(h, self._keep, self._box)

    def storage(self) -> TypedStorage:
        """The whole storage as a TypedStorage of this view's dtype (PyTorch's
        Tensor.storage(); it shares the bytes)."""
        return TypedStorage(wrap_storage=self.untyped_storage(), dtype=self.dtype)

    def is_pinned(self, device: object = None) -> bool:
        """Whether the storage is page-locked host memory."""
        return bool(lib.mn_storage_is_pinned(lib.mn_view_storage(self._handle)))

    def pin_memory(self, device: object = None) -> "View":
        """This view when already pinned (as PyTorch), else the view over a
        page-locked copy of its storage (CPU views; see Storage.pin_memory)."""
        if self.is_pinned():
            return self
        storage = self.untyped_storage().pin_memory(device)
        return _rebuild_view(storage, self.dtype.name, self.shape, self.stride(), self.storage_offset(),
                             self._qparams())

    def is_shared(self) -> bool:
        """Whether other processes can map the storage."""
        return bool(lib.mn_storage_is_shared(lib.mn_view_storage(self._handle)))

    def share_memory_(self) -> "View":
        """Moves the storage into shared memory in place (every view of it
        follows); a no-op when already shared and for CUDA. Returns self."""
        self.untyped_storage().share_memory_()
        return self

    def set_(self, source: object = None, storage_offset: int = 0, size: object = None,
             stride: object = None) -> "View":
        """Makes this view look at ``source`` in place, as PyTorch's set_:
        a View (its storage, offset, sizes and strides; same dtype), an
        UntypedStorage or a TypedStorage of this dtype (``size`` elements
        from ``storage_offset`` with ``stride``; defaults: the whole storage,
        contiguous), or nothing (a new empty storage). Returns self. Like
        PyTorch's, it changes this object: no other thread may use it
        meanwhile."""
        if self._qparams() is not None:
            raise TypeError("mnemo: set_ on a quantized view is not supported")
        dt = self.dtype
        if source is None:
            new = View(Storage(0, self.device), dt, (0,))
        elif isinstance(source, View):
            if source.dtype is not dt:
                raise RuntimeError(f"mnemo: set_: a {dt.name} view cannot look at a {source.dtype.name} view")
            new = source._alias()
        elif isinstance(source, (Storage, TypedStorage)):
            if isinstance(source, TypedStorage) and source.dtype is not dt:
                raise RuntimeError(f"mnemo: set_: expected a storage of {dt.name}, got {source.dtype.name}")
            untyped = source.untyped()
            if size is None:
                if storage_offset:
                    raise TypeError("mnemo: set_(storage, storage_offset, size, stride): give size with storage_offset")
                size = (untyped.nbytes() // dt.itemsize,)
            sz = as_shape((size,))
            st = _contiguous_strides(sz) if stride is None else as_shape((stride,), "stride")
            if len(st) != len(sz):
                raise ValueError(f"mnemo: set_: {len(sz)} sizes but {len(st)} strides")
            new = View(untyped, dt, sz, st, as_int(storage_offset, "storage_offset", 0))
        else:
            raise TypeError(f"mnemo: set_ takes a View or a storage, got {type(source).__name__}")
        old_h, old_box = self._take(), self._box
        self._keep, self._box, self._handle = new._keep, new._box, new._take()
        if old_h:
            lib.mn_view_destroy(old_h)
            _owner.unpin(old_box)
        return self

    def is_contiguous(self, memory_format: Any = None) -> bool:
        """Whether the view is contiguous in ``memory_format`` (None or
        "contiguous_format": row-major; "channels_last" (4-d),
        "channels_last_3d" (5-d); torch.memory_format objects work too)."""
        fmt = "contiguous_format" if memory_format is None else str(memory_format).replace("torch.", "")
        if fmt == "contiguous_format":
            return bool(lib.mn_view_is_contiguous(self._handle))
        if fmt == "channels_last":
            return bool(lib.mn_view_is_contiguous_channels_last(self._handle))
        if fmt == "channels_last_3d":
            return bool(lib.mn_view_is_contiguous_channels_last_3d(self._handle))
        raise ValueError(f"mnemo: unknown memory format {memory_format!r}")

    def is_non_overlapping_and_dense(self) -> bool:
        """Whether the elements tile a dense range of memory without overlap."""
        return bool(lib.mn_view_is_non_overlapping_and_dense(self._handle))

    def shares_storage(self, other: "View") -> bool:
        """Whether ``other`` (a View) looks at the same storage."""
        if not isinstance(other, View):
            raise TypeError("mnemo: shares_storage takes a View")
        return bool(lib.mn_view_shares_storage(self._handle, other._handle))

    def is_set_to(self, other: "View") -> bool:
        """Same storage, dtype, offset, sizes and strides (torch's is_set_to)."""
        if not isinstance(other, View):
            raise TypeError("mnemo: is_set_to takes a View")
        return bool(lib.mn_view_same_storage_and_layout(self._handle, other._handle))

    def check(self) -> "View":
        """Re-checks the view's invariants (MnemoError internal_error if broken)."""
        lib.mn_view_check(self._handle)
        return self

    # ---- view operations (never copy) ---------------------------------------------------
    def _view_slow(self, *shape: Any) -> "View":
        """view() (the compiled fast path hands everything but plain int shapes here)."""
        if len(shape) == 1 and _is_dtype_like(shape[0]):
            return self._op(lib.mn_view_view_dtype, _dtype(shape[0]).value)
        s = as_shape(shape)
        return self._op(lib.mn_view_view, len(s), _ctype_sizes(s))

    def view_as(self, other: "View") -> "View":
        """self.view(other.shape)."""
        return self.view(_need_view(other, "view_as(other)").shape)

    def reshape(self, *shape: Any) -> "View":
        """view() when possible, else a contiguous copy of the new shape."""
        s = as_shape(shape)
        return self._op_copy(lib.mn_view_reshape, len(s), _ctype_sizes(s), None)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> "View":
        """Merges dims start_dim..end_dim (a view when possible)."""
        return self._op_copy(lib.mn_view_flatten, as_dim(start_dim), as_dim(end_dim), None)

    def _transpose_slow(self, dim0: int, dim1: int) -> "View":
        """transpose() (the compiled fast path takes plain ints itself)."""
        return self._op(lib.mn_view_transpose, as_dim(dim0), as_dim(dim1))

    swapaxes = swapdims = _ViewBase.transpose

    def _t_slow(self) -> "View":
        """t() (the compiled fast path does it itself, but for errors)."""
        return self._op(lib.mn_view_t2d)

    def permute(self, *dims: Any) -> "View":
        """Reorders the dims (a permutation of 0..ndim-1)."""
        d = as_shape(dims, "dims")
        return self._op(lib.mn_view_permute, len(d), int_array([as_dim(x) for x in d]))

    def movedim(self, source: Union[int, Sequence[int]], destination: Union[int, Sequence[int]]) -> "View":
        """Moves dims ``source`` to positions ``destination`` (ints or sequences)."""
        src = (source,) if hasattr(source, "__index__") else tuple(source)
        dst = (destination,) if hasattr(destination, "__index__") else tuple(destination)
        if len(src) != len(dst):
            raise ValueError(f"mnemo: movedim: {len(src)} source dims but {len(dst)} destination dims")
        return self._op(lib.mn_view_movedim, len(src), int_array([as_dim(x) for x in src]),
                        int_array([as_dim(x) for x in dst]))

    moveaxis = movedim

    def narrow(self, dim: int, start: int, length: int) -> "View":
        """Elements start..start+length of a dim."""
        return self._op(lib.mn_view_narrow, as_dim(dim), as_int(start, "start"), as_int(length, "length"))

    def slice(self, dim: int, start: Optional[int] = None, end: Optional[int] = None, step: int = 1) -> "View":
        """self[..., start:end:step, ...] along ``dim`` (Python clamping; step > 0)."""
        step = 1 if step is None else as_int(step, "step")
        if step <= 0:
            raise ValueError("mnemo: slice step must be greater than zero")
        start = 0 if start is None else _clamp64(start)
        end = VIEW_END if end is None else _clamp64(end)
        return self._op(lib.mn_view_slice, as_dim(dim), start, end, step)

    def select(self, dim: int, index: int) -> "View":
        """Removes ``dim``, keeping element ``index`` (negative allowed)."""
        return self._op(lib.mn_view_select, as_dim(dim), as_int(index, "index"))

    def unsqueeze(self, dim: int) -> "View":
        """Inserts a dim of size 1."""
        return self._op(lib.mn_view_unsqueeze, as_dim(dim))

    def squeeze(self, dim: Union[None, int, Sequence[int]] = None) -> "View":
        """Removes dims of size 1: all of them (dim None), or those of ``dim``
        (an int or a sequence of ints) that have size 1."""
        if dim is None:
            return self._op(lib.mn_view_squeeze)
        if hasattr(dim, "__index__"):
            return self._op(lib.mn_view_squeeze_dim, as_dim(dim))
        v = self[()]  # a new handle even when nothing is squeezed
        for d in sorted({self._wrap_dim(d) for d in dim}, reverse=True):
            v = v._op(lib.mn_view_squeeze_dim, d)
        return v

    def expand(self, *sizes: Any) -> "View":
        """Broadcasts dims of size 1 (stride 0); -1 keeps a size; new leading
        dims allowed. Writes into the result are refused."""
        s = as_shape(sizes)
        return self._op(lib.mn_view_expand, len(s), _ctype_sizes(s))

    def expand_as(self, other: "View") -> "View":
        """self.expand(other.shape)."""
        return self.expand(_need_view(other, "expand_as(other)").shape)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> "View":
        """Splits ``dim`` into ``sizes`` (one -1 allowed)."""
        s = as_shape((sizes,))
        return self._op(lib.mn_view_unflatten, as_dim(dim), len(s), _ctype_sizes(s))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> "View":
        """The diagonal of dims dim1, dim2 (removed) as a new last dim."""
        return self._op(lib.mn_view_diagonal, as_int(offset, "offset"), as_dim(dim1), as_dim(dim2))

    def unfold(self, dimension: int, size: int, step: int) -> "View":
        """Windows of ``size`` every ``step`` along ``dimension`` as a new last dim."""
        return self._op(lib.mn_view_unfold, as_dim(dimension), as_int(size, "size"), as_int(step, "step"))

    def _list(self, fn, n, dim):
        arr = VPP()
        count = C.c_int()
        fn(self._handle, n, as_dim(dim), C.byref(arr), C.byref(count))
        try:
            handles = [arr[i] for i in range(count.value)]
            out = tuple(View._wrap(h, self._keep, self._box) for h in handles)
        finally:
            libc_free = _core.libc_free
            libc_free(C.cast(arr, VP))  # the array only: the views are now owned by the tuple
        return out

    def split(self, split_size_or_sections: Union[int, Sequence[int]], dim: int = 0) -> Tuple["View", ...]:
        """Pieces of ``split_size`` along ``dim`` (the last may be smaller),
        or of the given section sizes (a sequence summing to the dim's size)."""
        if hasattr(split_size_or_sections, "__index__"):
            return self._list(lib.mn_view_split, as_int(split_size_or_sections, "split_size"), dim)
        sections = as_shape((split_size_or_sections,), "split sizes")
        d = self._wrap_dim(dim)
        if sum(sections) != self.shape[d] or any(s < 0 for s in sections):
            raise ValueError(f"mnemo: split sizes {list(sections)} do not sum to {self.shape[d]} (dim {d})")
        out, at = [], 0
        for s in sections:
            out.append(self.narrow(d, at, s))
            at += s
        return tuple(out)

    def chunk(self, chunks: int, dim: int = 0) -> Tuple["View", ...]:
        """At most ``chunks`` pieces of equal size (the last may be smaller)."""
        return self._list(lib.mn_view_chunk, as_int(chunks, "chunks"), dim)

    def unbind(self, dim: int = 0) -> Tuple["View", ...]:
        """Every select(dim, i), as a tuple."""
        d = self._wrap_dim(dim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    @property
    def real(self) -> "View":
        """The real parts of a complex view (float view, strides doubled); a
        real view itself."""
        return self._op(lib.mn_view_real)

    @property
    def imag(self) -> "View":
        """The imaginary parts of a complex view; refused for real views."""
        return self._op(lib.mn_view_imag)

    def as_strided(self, size: ShapeLike, stride: ShapeLike, storage_offset: Optional[int] = None) -> "View":
        """This view's storage and dtype with new sizes, strides and offset
        (None keeps this view's), bounds-checked."""
        s = as_shape((size,))
        st = as_shape((stride,), "stride")
        if len(s) != len(st):
            raise ValueError(f"mnemo: as_strided: {len(s)} sizes but {len(st)} strides")
        off = _core.OFFSET_KEEP if storage_offset is None else as_int(storage_offset, "storage_offset", 0)
        return self._op(lib.mn_view_as_strided, len(s), _ctype_sizes(s), _ctype_sizes(st), off)

    # ---- operations that may copy ---------------------------------------------------------
    def contiguous(self, memory_format: object = None) -> "View":
        """This view itself when contiguous (as PyTorch), else a contiguous
        copy."""
        if memory_format not in (None, "contiguous_format") and str(memory_format) != "torch.contiguous_format":
            raise ValueError("mnemo: contiguous() supports only the contiguous format")
        if lib.mn_view_is_contiguous(self._handle):
            return self
        return self._op_copy(lib.mn_view_contiguous, None)

    def clone(self) -> "View":
        """A copy in a new storage (keeps the strides of a dense view)."""
        return self._op_copy(lib.mn_view_clone, None)

    def to(self, device: Any = None, dtype: Optional[DTypeLike] = None, non_blocking: bool = False,
           copy: bool = False) -> "View":
        """The view on ``device`` as ``dtype``: this view itself when both
        already match (unless copy=True; as PyTorch), else a copy laid
        out as clone's. Positional forms as PyTorch: to("sim:0"),
        to(mnemo.float16), to(other_view). Waits for the copy unless
        non_blocking."""
        if isinstance(device, View):
            device, dtype = device.device, dtype if dtype is not None else device.dtype
        elif device is not None and dtype is None and _is_dtype_like(device) and not _is_device_like(device):
            device, dtype = None, device
        dev = self.device if device is None else _device(device)
        dt = self.dtype if dtype is None else _dtype(dtype)
        if not copy and dev == self.device and dt is self.dtype:
            return self  # as PyTorch: nothing to change, the same object
        out = self._op_copy(lib.mn_view_to, dev._c, dt.value, bool(non_blocking), None)
        if copy and out.is_set_to(self):
            out = out.clone()
            if not non_blocking:
                _core.synchronize(dev)
        return out

    def cpu(self) -> "View":
        """to("cpu"): this view itself when already on the CPU."""
        return self.to("cpu")

    def sim(self, index: int = 0) -> "View":
        """to(mnemo.sim(index))."""
        return self.to(Device("sim", index))

    def cuda(self, device: object = None, non_blocking: bool = False) -> "View":
        """to(cuda:device) (an index, a device, or None: cuda:0): this view
        itself when already there."""
        from .storage import _cuda_device
        return self.to(_cuda_device(device), non_blocking=non_blocking)

    def type_as(self, other: "View") -> "View":
        """self.to(dtype=other.dtype)."""
        return self.to(dtype=_need_view(other, "type_as(other)").dtype)

    # ---- in-place writes -------------------------------------------------------------------
    def copy_(self, src: Any, non_blocking: bool = False) -> "View":
        """Copies ``src`` (a View, or anything mnemo.asarray takes: numpy
        arrays, torch tensors, lists) into this view, broadcasting and
        casting, across devices. Waits for the copy unless non_blocking."""
        non_blocking = bool(non_blocking)  # before the copy: a refused argument changes nothing
        if not isinstance(src, View):
            from .interop import asarray
            src = asarray(src)
        lib.mn_view_copy(self._handle, src._handle, None)
        if not non_blocking:
            _core.synchronize(self.device)
            if src.device != self.device:
                _core.synchronize(src.device)
        return self

    def fill_(self, value: Union[bool, int, float, complex]) -> "View":
        """Writes ``value`` (bool, int, float or complex; checked against the
        dtype's range) into every element (queued on SIM/CUDA)."""
        lib.mn_view_fill(self._handle, _core.to_scalar(value), None)
        return self

    def zero_(self) -> "View":
        """Writes 0 into every element."""
        lib.mn_view_zero(self._handle, None)
        return self

    # ---- indexing --------------------------------------------------------------------------
    def _index(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        n_ell = sum(1 for k in key if k is Ellipsis)
        if n_ell > 1:
            raise IndexError("mnemo: an index can only have a single ellipsis ('...')")
        consumed = 0
        for k in key:
            if k is None or k is Ellipsis:
                continue
            if isinstance(k, slice) or (hasattr(k, "__index__") and not isinstance(k, bool)
                                        and not isinstance(k, View)):
                consumed += 1
            else:
                raise TypeError(f"mnemo: only ints, slices (step > 0), None and ... index a View "
                                f"(no advanced indexing), got {type(k).__name__}")
        ndim = self.ndim
        if consumed > ndim:
            raise IndexError(f"mnemo: too many indices for a view of dimension {ndim}")
        v, dim = self, 0
        for k in key:
            if k is None:
                v = v._op(lib.mn_view_unsqueeze, dim)
                dim += 1
            elif k is Ellipsis:
                dim += ndim - consumed
            elif isinstance(k, slice):
                v = v.slice(dim, k.start, k.stop, k.step)
                dim += 1
            else:
                i = as_int(k, "index")
                size = v.shape[dim]
                if not -size <= i < size:
                    raise IndexError(f"mnemo: index {i} is out of bounds for dimension {dim} with size {size}")
                v = v._op(lib.mn_view_select, dim, i)
        if v is self:  # v[()] / v[...]: a new handle, as every indexing result
            v = self._alias()
        return v

    def _getitem_slow(self, key: Any) -> "View":
        """PyTorch's indexing (View.__getitem__, whose compiled fast path
        hands every case but plain ints and slices here): ints (negative ok),
        slices with step > 0, None, Ellipsis and tuples of them give a view
        (no copy); integer lists, index views and bool masks (mnemo, numpy or
        torch), alone or mixed with those, give a copy (advanced indexing,
        mnemo.indexing)."""
        from . import indexing
        if indexing.is_basic(key):
            return self._index(key)
        return indexing.getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        """self[key].fill_(value) for a scalar, self[key].copy_(value) for a
        View (or an array-like), broadcasting; with advanced indices,
        index_put_ (values of this view's dtype; scalars and array-likes are
        converted to it)."""
        from . import indexing
        if not indexing.is_basic(key):
            indexing.setitem(self, key, value)
            return
        target = self._index(key)
        if _core.is_scalar(value):
            target.fill_(value)
        else:
            target.copy_(value)

    def __len__(self) -> int:
        """The size of dim 0; TypeError for a 0-d view, as PyTorch."""
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor (torch.tensor() and torch.as_tensor() read only numbers, "
                            "sequences, numpy arrays and tensors: give them numpy.asarray(view), or use "
                            "torch.from_dlpack(view))")
        return self.shape[0]

    def __iter__(self) -> Iterator["View"]:
        """The views of dim 0 (select(0, i)); TypeError for a 0-d view, as PyTorch."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self._op(lib.mn_view_select, 0, i)

    # ---- host reads --------------------------------------------------------------------------
    def _host(self):
        """A CPU view with this view's values (self when on the CPU), after
        the device's queued work."""
        dev = self.device
        if dev.type == "cpu":
            return self
        _core.synchronize(dev)
        return self.to("cpu")

    def numpy(self) -> Any:
        """A numpy array: for CPU views zero-copy and writable (sharing memory,
        keeping the view alive); for SIM views a copy after synchronizing.
        CUDA views are refused (copy with .to("cpu") first); bfloat16 and
        float8 have no numpy dtype (TypeError)."""
        dev = self.device
        if dev.type == "cuda":
            raise TypeError(f"mnemo: can't convert a {dev} view to numpy; use .to(\"cpu\") to copy it to host "
                            f"memory first")
        self.dtype.numpy_dtype()  # TypeError for dtypes numpy lacks
        import numpy as np
        return np.asarray(self._host())

    def __array__(self, dtype=None, copy=None):
        if self.device.type == "cuda":
            raise TypeError(f"mnemo: can't convert a {self.device} view to numpy; use .to(\"cpu\") first")
        if copy is False and (self.device.type != "cpu" or (dtype is not None and dtype != self.dtype.name)):
            raise ValueError(f"mnemo: a {self.device} {self.dtype.name} view reaches numpy only as a copy")
        a = self.numpy()
        if dtype is not None:
            a = a.astype(dtype, copy=False)
        return a.copy() if copy else a

    def _host_numpy(self):
        """A numpy array of the values on the host (any dtype: those numpy
        lacks as float32, exactly), for tolist and repr."""
        v = self._host()
        if not v.dtype.has_numpy:
            v = v.to(dtype=_FLOAT32)
        import numpy as np
        return np.asarray(v)

    def _tolist_slow(self) -> Any:
        """tolist() through numpy (the compiled fast path reads CPU views itself)."""
        return self._host_numpy().tolist()

    def item(self) -> Union[bool, int, float, complex]:
        """The value of a one-element view as a Python bool, int, float or complex."""
        if self.numel() != 1:
            raise ValueError(f"mnemo: item() needs a view of one element, this one has {self.numel()}")
        v = self._host()
        s = Scalar()
        lib.mn_scalar_from_bytes(v.dtype.value, v.data_ptr(), C.byref(s))
        return _core.from_scalar(s)

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError("mnemo: the truth value of a view with more than one element is ambiguous")
        return bool(self.item())

    def __int__(self) -> int:
        v = self._one()
        return int(v.real if isinstance(v, complex) else v)

    def __float__(self) -> float:
        return float(self._one())

    def __complex__(self) -> complex:
        return complex(self._one())

    def __index__(self) -> int:
        if self.dtype.kind not in ("int", "uint", "bool"):
            raise TypeError("mnemo: only integer views of one element can be used as an index")
        return int(self._one())

    def _one(self):
        if self.numel() != 1:
            raise ValueError("mnemo: only views of one element can be converted to Python scalars")
        return self.item()

    def __repr__(self) -> str:
        """PyTorch's text of a tensor (mnemo._format): ``tensor([1., 2.])``,
        ``device='sim:0'`` off the CPU, ``dtype=mnemo.float16`` for dtypes
        other than float32, complex64, int64 and bool; mnemo.set_printoptions
        controls it as torch.set_printoptions."""
        if not getattr(self, "_handle", None):
            return "tensor(<released view>)"
        from ._format import view_repr
        return view_repr(self)

    __str__ = __repr__

    def __format__(self, format_spec: str) -> str:
        """As PyTorch: a 0-d view formats its value (``f"{v:.2f}"``); other
        views only with an empty spec (their str())."""
        if self.ndim == 0 and self.device.type != "meta":
            return format(self.item(), format_spec)
        return object.__format__(self, format_spec)

    # ---- interchange (mnemo.interop) --------------------------------------------------------
    def __dlpack__(self, stream: Any = None, max_version: Optional[Tuple[int, int]] = None, dl_device: Any = None,
                       copy: Optional[bool] = None) -> Any:
        """A DLPack capsule of this view (no copy): "dltensor", or
        "dltensor_versioned" when max_version >= (1, 0). See mnemo.interop."""
        if (_sp is not None and stream is None and max_version is None and dl_device is None and copy is None
                and not self._keep and self._box is None):
            cap = _sp.to_dlpack(self)  # (a CPU view; None: the general path below)
            if cap is not None:
                return cap
        from . import interop
        return interop.to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def _dlpack_device_slow(self) -> Tuple[int, int]:
        """__dlpack_device__() (the compiled fast path answers CPU, CUDA and SIM itself)."""
        from . import interop
        return interop.dlpack_device(self.device)

    @property
    def __array_interface__(self) -> dict:
        """numpy's array interface (version 3) of a CPU view (zero-copy);
        AttributeError for other devices and dtypes numpy lacks."""
        from . import interop
        return interop.array_interface(self)

    @property
    def __cuda_array_interface__(self) -> dict:
        """The CUDA array interface (version 3) of a CUDA view; AttributeError otherwise."""
        from . import interop
        return interop.cuda_array_interface(self)

    # ---- indexing, quantization and random fills (mnemo.indexing, mnemo.quantized, mnemo.random) ----
    def index_select(self, dim: int, index: Any, *, stream: Any = None) -> "View":
        """torch's index_select: mnemo.indexing.index_select(self, dim, index)."""
        from . import indexing
        return indexing.index_select(self, dim, index, stream=stream)

    def take(self, index: Any, *, stream: Any = None) -> "View":
        """torch's take: mnemo.indexing.take(self, index)."""
        from . import indexing
        return indexing.take(self, index, stream=stream)

    def gather(self, dim: int, index: Any, *, stream: Any = None) -> "View":
        """torch's gather: mnemo.indexing.gather(self, dim, index)."""
        from . import indexing
        return indexing.gather(self, dim, index, stream=stream)

    def masked_select(self, mask: Any, *, stream: Any = None) -> "View":
        """torch's masked_select: mnemo.indexing.masked_select(self, mask)."""
        from . import indexing
        return indexing.masked_select(self, mask, stream=stream)

    def scatter_(self, dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
        """torch's scatter_ (src a View or a scalar); returns self."""
        from . import indexing
        return indexing.scatter_(self, dim, index, src, stream=stream)

    def scatter(self, dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
        """torch's scatter: scatter_ into a clone."""
        from . import indexing
        return indexing.scatter(self, dim, index, src, stream=stream)

    def scatter_add_(self, dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
        """torch's scatter_add_ (deterministic: row-major order); returns self."""
        from . import indexing
        return indexing.scatter_add_(self, dim, index, src, stream=stream)

    def scatter_add(self, dim: int, index: Any, src: Any, *, stream: Any = None) -> "View":
        """torch's scatter_add: scatter_add_ into a clone."""
        from . import indexing
        return indexing.scatter_add(self, dim, index, src, stream=stream)

    def index_put_(self, indices: Any, values: Any, accumulate: bool = False, *, stream: Any = None) -> "View":
        """torch's index_put_ (indices: a tuple of index views); returns self."""
        from . import indexing
        return indexing.index_put_(self, indices, values, accumulate, stream=stream)

    def index_put(self, indices: Any, values: Any, accumulate: bool = False, *, stream: Any = None) -> "View":
        """torch's index_put: index_put_ into a clone."""
        from . import indexing
        return indexing.index_put(self, indices, values, accumulate, stream=stream)

    @property
    def is_quantized(self) -> bool:
        """Whether the dtype is quantized (qint8, quint8, qint32, quint4x2, quint2x4)."""
        return bool(lib.mn_view_is_quantized(self._handle))

    def dequantize(self, *, stream: Any = None) -> "View":
        """mnemo.quantized.dequantize(self): the float32 values (self when not quantized)."""
        from . import quantized
        return quantized.dequantize(self, stream=stream)

    def int_repr(self, *, stream: Any = None) -> "View":
        """mnemo.quantized.int_repr(self): the stored integers."""
        from . import quantized
        return quantized.int_repr(self, stream=stream)

    def q_scale(self) -> float:
        """The scale of a quantized view."""
        from . import quantized
        return quantized.q_scale(self)

    def q_zero_point(self) -> int:
        """The zero point of a quantized view."""
        from . import quantized
        return quantized.q_zero_point(self)

    def qscheme(self) -> Any:
        """mnemo.per_tensor_affine for a quantized view."""
        from . import quantized
        return quantized.qscheme(self)

    def uniform_(self, from_: float = 0.0, to: float = 1.0, *, generator: Any = None, stream: Any = None) -> "View":
        """Fills with uniform numbers in [from_, to) (mnemo's Philox, not PyTorch's numbers)."""
        from . import random
        return random._fill(self, False, from_, to, generator, stream)

    def normal_(self, mean: float = 0.0, std: float = 1.0, *, generator: Any = None, stream: Any = None) -> "View":
        """Fills with normal numbers (mnemo's Philox + Box-Muller, not PyTorch's numbers)."""
        from . import random
        return random._fill(self, True, mean, std, generator, stream)


if _sp is not None:
    _sp._bind({n: C.cast(lib[n], VP).value for n in _sp._names()}, View, _owner.pin, _owner.unpin,
              _owner.pin_view, _owner._boxes)

# C storage address -> the Storage object pickles of its views use (View._storage_for_pickle)
_PICKLED_STORAGES = weakref.WeakValueDictionary()


def _rebuild_view(storage, dtype, shape, strides, offset, qparams):
    """The view of a pickle or deepcopy (View.__reduce_ex__): mn_view_create
    (or mn_view_create_quantized with qparams (scale, zero_point)) over
    ``storage``, bounds-checked by the library."""
    if not isinstance(storage, Storage):
        raise TypeError(f"mnemo: a pickled view's storage is a Storage, not {type(storage).__name__}")
    if qparams is None:
        return View(storage, dtype, shape, strides, offset)
    dt = _dtype(dtype)
    s = as_shape((shape,))
    st = as_shape((strides,), "strides")
    if len(st) != len(s):
        raise ValueError(f"mnemo: {len(s)} sizes but {len(st)} strides")
    scale, zero_point = qparams
    h = out_handle(lib.mn_view_create_quantized, storage._h(), dt.value, len(s), _ctype_sizes(s), _ctype_sizes(st),
                   as_int(offset, "offset"), float(scale), as_int(zero_point, "zero_point"))
    return View._wrap(h, storage._keep, storage._box)


def _clamp64(x):
    v = as_int(x, "slice index", -(1 << 200), 1 << 200)
    return max(_core.INT64_MIN + 1, min(_core.INT64_MAX, v))


# ---- factories -------------------------------------------------------------------------------
def _extent_bytes(shape, strides, itemsize):
    if any(s == 0 for s in shape):
        return 0
    return (1 + sum((s - 1) * st for s, st in zip(shape, strides))) * itemsize


def empty_strided(size: ShapeLike, stride: ShapeLike, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu",
                  allocator: Any = None) -> View:
    """A view of ``size`` and ``stride`` over a new storage just large enough
    (contents undefined), from ``allocator`` (None: the device's default)."""
    s = as_shape((size,))
    st = as_shape((stride,), "stride")
    if len(s) != len(st):
        raise ValueError(f"mnemo: empty_strided: {len(s)} sizes but {len(st)} strides")
    dt = _FLOAT32 if dtype is None else _dtype(dtype)
    dev = _device(device)
    if allocator is None:
        h = out_handle(lib.mn_view_empty_strided, dev._c, dt.value, len(s), _ctype_sizes(s), _ctype_sizes(st))
        return View._wrap(h)
    if any(x < 0 for x in s + st):
        raise ValueError(f"mnemo: empty_strided: negative size or stride in {s}, {st}")
    storage = Storage(_extent_bytes(s, st, dt.itemsize), dev, allocator)
    return View(storage, dt, s, st, 0)


def empty(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", allocator: Any = None) -> View:
    """A contiguous view over a new storage (contents undefined):
    empty(2, 3) or empty((2, 3))."""
    if _sp is not None and allocator is None:  # the compiled path: plain int sizes, a mnemo dtype, cpu or a Device
        dt = _FLOAT32 if dtype is None else dtype
        if type(dt) is _dtype:
            if type(device) is str and device == "cpu":
                v = _sp.empty(size, dt.value, 0, 0)
            elif type(device) is Device:
                v = _sp.empty(size, dt.value, _core.DEVICE_TYPES.index(device.type), device.index)
            else:
                v = None
            if v is not None:
                return v
    s = as_shape(size)
    dt = _FLOAT32 if dtype is None else _dtype(dtype)
    dev = _device(device)
    if allocator is not None:
        return empty_strided(s, _contiguous_strides(s), dt, dev, allocator)
    return View._wrap(out_handle(lib.mn_view_empty, dev._c, dt.value, len(s), _ctype_sizes(s)))


def _contiguous_strides(shape):
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def zeros(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", allocator: Any = None) -> View:
    """A new view of zeros."""
    return empty(*size, dtype=dtype, device=device, allocator=allocator).zero_()


def ones(*size: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", allocator: Any = None) -> View:
    """A new view of ones."""
    return empty(*size, dtype=dtype, device=device, allocator=allocator).fill_(1)


def full(size: ShapeLike, fill_value: Union[bool, int, float, complex], dtype: Optional[DTypeLike] = None,
         device: DeviceLike = "cpu", allocator: Any = None) -> View:
    """A new view of ``size`` filled with ``fill_value`` (dtype None:
    inferred from the value as PyTorch: bool, int64, float32, complex64)."""
    dt = _infer_dtype(fill_value) if dtype is None else _dtype(dtype)
    return empty(size, dtype=dt, device=device, allocator=allocator).fill_(fill_value)


def empty_like(v: View, dtype: Optional[DTypeLike] = None, device: Optional[DeviceLike] = None) -> View:
    """empty() of v's shape, dtype and device (unless given)."""
    _need_view(v, "empty_like(input)")
    return empty(v.shape, dtype=dtype or v.dtype, device=device or v.device)


def zeros_like(v: View, dtype: Optional[DTypeLike] = None, device: Optional[DeviceLike] = None) -> View:
    """zeros() of v's shape, dtype and device (unless given)."""
    _need_view(v, "zeros_like(input)")
    return empty_like(v, dtype, device).zero_()


def ones_like(v: View, dtype: Optional[DTypeLike] = None, device: Optional[DeviceLike] = None) -> View:
    """ones() of v's shape, dtype and device (unless given)."""
    _need_view(v, "ones_like(input)")
    return empty_like(v, dtype, device).fill_(1)


def full_like(v: View, fill_value: Union[bool, int, float, complex], dtype: Optional[DTypeLike] = None,
              device: Optional[DeviceLike] = None) -> View:
    """full() of v's shape with fill_value, v's dtype and device (unless given)."""
    _need_view(v, "full_like(input)")
    return empty_like(v, dtype, device).fill_(fill_value)


def tensor(data: Any, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> View:
    """A new view holding a copy of ``data``: a scalar, nested lists, a numpy
    array, a torch tensor or a View. dtype None: the data's (numpy and torch
    keep theirs; Python floats give float32, ints int64, bools bool, complex
    complex64, as torch.tensor)."""
    dev = _device(device)
    dt = None if dtype is None else _dtype(dtype)
    if isinstance(data, View):
        return data.to(dev, dt or data.dtype, copy=True)
    if hasattr(data, "__dlpack__") and not isinstance(data, type):
        from .interop import from_dlpack
        try:
            src = from_dlpack(data)
        except (BufferError, TypeError, ValueError, RuntimeError):
            src = None  # e.g. torch's bool tensors: through numpy below
        if src is not None:
            return src.to(dev, dt or src.dtype, copy=True)
    return _copy_data(data, dt, dev)


def _copy_data(data, dt, dev):
    """tensor() of scalars, nested lists and anything numpy.array takes."""
    import numpy as np
    typed = hasattr(data, "dtype")  # numpy arrays and scalars, torch tensors: keep their dtype
    try:
        arr = np.array(data, copy=True)
    except ValueError as e:  # ragged nested lists
        raise ValueError(f"mnemo: tensor(): {e}") from None
    if arr.dtype == object or arr.dtype.kind in "USV":
        raise TypeError(f"mnemo: tensor() cannot make a view of {type(data).__name__} data "
                        f"(numpy gives {arr.dtype}; ragged lists and strings are refused)")
    if not typed:
        kind = arr.dtype.kind
        if kind == "f":
            arr = arr.astype(np.float32)
        elif kind == "c":
            arr = arr.astype(np.complex64)
        elif kind in "iu" and arr.dtype != np.int64:
            if arr.size and (arr.max() > np.iinfo(np.int64).max):
                raise ValueError("mnemo: tensor(): a value does not fit in int64")
            arr = arr.astype(np.int64)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")  # (np.ascontiguousarray would make a 0-d array 1-d)
    src_dt = _dtype.from_numpy(arr.dtype)
    out_dt = dt or src_dt
    storage = Storage.from_buffer(arr, "cpu")
    host = View(storage, src_dt, arr.shape, None, 0)
    del storage
    if out_dt is src_dt and dev.type == "cpu":
        return host
    return host.to(dev, out_dt)
