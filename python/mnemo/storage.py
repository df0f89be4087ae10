"""mnemo.storage: PyTorch's storage classes over mn_storage_t.

``UntypedStorage`` (``mnemo.Storage`` is the same class) is an untyped,
reference-counted run of bytes on one device (torch.UntypedStorage):
allocator-owned, foreign (wrapped memory), mmap'd files, shared memory and
CUDA IPC imports. ``TypedStorage`` is a one-dimensional array of elements of
one dtype over an UntypedStorage (torch.TypedStorage), and ``FloatStorage``,
``IntStorage``, ... (17 classes) make TypedStorages of their dtype, as torch's
legacy classes do (``isinstance(s, mnemo.FloatStorage)`` is true for every
float32 TypedStorage). Sizes are in bytes for untyped storages and in
elements for typed ones, as PyTorch. docs/PYTHON.md "Storages" has the
method list and the table of the few places where mnemo differs.

An UntypedStorage object owns exactly one C reference and drops it when it
dies or on ``release()`` (docs/PYTHON.md "Object lifetimes"); views hold
their own references, so ``View.untyped_storage()`` returns a Storage that
shares the bytes (the C refcount counts both). ``copy.copy`` and
``copy.deepcopy`` clone the bytes, as PyTorch's storages do (deepcopy once per
C storage within one deepcopy); pickling carries the device, the size, the
bytes (and a typed storage's dtype): a multiprocessing child gets its own
copy. A storage made from a Python allocator object (anything with
``_handle``, the ``mn_allocator_t*``) keeps that object alive for as long as
the storage (and every view or copy made from it) lives; the allocators of
mnemo.allocator also count it (mnemo._owner), so even a garbage cycle
destroys the allocator last.

Threading: the reference count is atomic; reads (nbytes, data_ptr, copies
out) may run on any thread; ``release()`` may be called from several threads
at once (the reference is dropped once), but not while another thread still
uses the storage. ``resize_``, ``share_memory_`` and element writes change
the storage in place and must not race any other use of it, as in PyTorch.
Device work (fill_, copy_ with non_blocking) is queued on the device's
default stream; host reads (tolist, indexing, repr) synchronize the device
first.
"""
from __future__ import annotations

import ctypes as C
import os
import sys
from typing import Any, Iterator, Optional, Union

from . import _core, _owner
from ._core import out_handle
from ._lib import Scalar, declare, lib
from .device import Device, device as _device, device_count
from .dtype import dtype as _dtype

__all__ = ["Storage", "UntypedStorage", "TypedStorage", "FloatStorage", "DoubleStorage", "HalfStorage",
           "BFloat16Storage", "ByteStorage", "CharStorage", "ShortStorage", "IntStorage", "LongStorage",
           "BoolStorage", "ComplexFloatStorage", "ComplexDoubleStorage", "QUInt8Storage", "QInt8Storage",
           "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage"]

# the storage-specific declaration (the rest are in _core)
declare("mn_storage_convert", "status", [C.c_void_p, C.c_int, C.c_int, C.c_void_p, C.POINTER(C.c_void_p)])

_LOOKUP = object()  # _wrap's box argument: find the allocator box from the handle

_KIND_NAMES = {k: lib.mn_storage_kind_name(k).decode() for k in range(5)}
_UINT8 = _dtype("uint8")
_UINT8_VALUE = _UINT8.value
_CPU_TYPE = _core.DEVICE_TYPES.index("cpu")
_ONE = (C.c_int64 * 1)(1)  # the sizes of a one-element view (read only)
# The compiled element reads and writes (mnemo._speedups; None: ctypes alone).
_sp = _core.speedups
# The element type a quantized storage's elements read and write as (torch's
# QUInt8Storage.tolist() gives the raw integers).
_QUANT_RAW = {"qint8": "int8", "quint8": "uint8", "qint32": "int32", "quint4x2": "uint8", "quint2x4": "uint8"}

DeviceLike = Union[str, Device, tuple, None]
DtypeLike = Any


def _allocator_handle(allocator):
    if allocator is None:
        return None
    from .allocator import Allocator
    # an object of the package other than an Allocator (a View, a storage) has a _handle that is no allocator
    mine = type(allocator).__module__.split(".")[0] == "mnemo"
    h = getattr(allocator, "_handle", None) if isinstance(allocator, Allocator) or not mine else None
    if isinstance(h, bool) or not isinstance(h, int) or h == 0:
        raise TypeError(f"mnemo: allocator must be an object whose _handle is an mn_allocator_t* (an int), "
                        f"got {type(allocator).__name__}")
    return h


def _get_device(dev: Device) -> int:
    """PyTorch's get_device(): the device index, -1 on the CPU."""
    return -1 if dev.type == "cpu" else dev.index


def _byte_order_swaps(byte_order: str) -> bool:
    if byte_order not in ("native", "little", "big"):
        raise ValueError(f"mnemo: byte_order must be 'native', 'little' or 'big', got {byte_order!r}")
    return byte_order != "native" and byte_order != sys.byteorder


def _storage_str(values, info):
    """PyTorch's storage text: the elements one a line, then the info line."""
    return " " + "\n ".join(str(x) for x in values) + "\n" + info


class _StorageBase:
    """What UntypedStorage and TypedStorage share: the dtype conversions,
    type(), is_cuda, get_device() (over each class's ``device``) and the
    PyTorch constants."""

    __slots__ = ()
    is_sparse = False
    is_sparse_csr = False

    def _convert(self, dtype) -> "TypedStorage":
        raise NotImplementedError

    @property
    def is_cuda(self) -> bool:
        """Whether the storage is on a CUDA device."""
        return self.device.type == "cuda"

    def get_device(self) -> int:
        """The device index; -1 on the CPU (PyTorch 2's value)."""
        return _get_device(self.device)

    def byte(self) -> "TypedStorage":
        """A copy as a uint8 TypedStorage (values converted, PyTorch's wrap-around)."""
        return self._convert("uint8")

    def char(self) -> "TypedStorage":
        """A copy as an int8 TypedStorage."""
        return self._convert("int8")

    def short(self) -> "TypedStorage":
        """A copy as an int16 TypedStorage."""
        return self._convert("int16")

    def int(self) -> "TypedStorage":
        """A copy as an int32 TypedStorage."""
        return self._convert("int32")

    def long(self) -> "TypedStorage":
        """A copy as an int64 TypedStorage."""
        return self._convert("int64")

    def half(self) -> "TypedStorage":
        """A copy as a float16 TypedStorage."""
        return self._convert("float16")

    def float(self) -> "TypedStorage":
        """A copy as a float32 TypedStorage."""
        return self._convert("float32")

    def double(self) -> "TypedStorage":
        """A copy as a float64 TypedStorage."""
        return self._convert("float64")

    def bool(self) -> "TypedStorage":
        """A copy as a bool TypedStorage."""
        return self._convert("bool")

    def bfloat16(self) -> "TypedStorage":
        """A copy as a bfloat16 TypedStorage."""
        return self._convert("bfloat16")

    def complex_float(self) -> "TypedStorage":
        """A copy as a complex64 TypedStorage."""
        return self._convert("complex64")

    def complex_double(self) -> "TypedStorage":
        """A copy as a complex128 TypedStorage."""
        return self._convert("complex128")

    def float8_e4m3fn(self) -> "TypedStorage":
        """A copy as a float8_e4m3fn TypedStorage."""
        return self._convert("float8_e4m3fn")

    def float8_e5m2(self) -> "TypedStorage":
        """A copy as a float8_e5m2 TypedStorage."""
        return self._convert("float8_e5m2")

    def float8_e4m3fnuz(self) -> "TypedStorage":
        """PyTorch's float8_e4m3fnuz cast: mnemo has no such dtype (TypeError;
        docs/PYTHON.md "Where mnemo differs from PyTorch")."""
        raise TypeError("mnemo: there is no float8_e4m3fnuz dtype in mnemo (only float8_e4m3fn and float8_e5m2)")

    def float8_e5m2fnuz(self) -> "TypedStorage":
        """PyTorch's float8_e5m2fnuz cast: mnemo has no such dtype (TypeError)."""
        raise TypeError("mnemo: there is no float8_e5m2fnuz dtype in mnemo (only float8_e4m3fn and float8_e5m2)")

    def type(self, dtype: Any = None, non_blocking: bool = False) -> Any:
        """No argument: the storage's type name ("mnemo.UntypedStorage",
        "mnemo.FloatStorage", ...). Given a storage class, its name or a
        dtype: this storage when it already is of that type, else a copy
        converted to it (as byte(), float(), ...)."""
        if dtype is None:
            return self._type_name()
        if isinstance(dtype, str):
            name = dtype.split(".")[-1]
            if name in ("UntypedStorage", "Storage"):
                return self.untyped() if isinstance(self, UntypedStorage) else self.untyped().clone()
            cls = _LEGACY_BY_NAME.get(name)
            target = cls.dtype if cls is not None else _dtype(dtype)
        elif isinstance(dtype, type) and issubclass(dtype, _StorageBase):
            if dtype is UntypedStorage:
                return self if isinstance(self, UntypedStorage) else self.untyped().clone()
            target = getattr(dtype, "dtype", None)
            if not isinstance(target, _dtype):
                raise TypeError(f"mnemo: type(): {dtype.__name__} has no dtype")
        else:
            target = _dtype(dtype)
        if isinstance(self, TypedStorage) and self.dtype is target:
            return self
        return self._convert(target)


class UntypedStorage(_StorageBase, _owner.Owner):
    """An untyped storage of bytes (torch.UntypedStorage):
    ``UntypedStorage()`` (empty), ``UntypedStorage(nbytes, device="cpu",
    allocator=None)`` (contents undefined; allocator: an object with
    ``_handle``, e.g. mnemo.CachingAllocator; None: the device's default) or
    ``UntypedStorage(sequence_of_byte_values, device=...)``. ``mnemo.Storage``
    is this class. Indexing, len() and iteration are over bytes."""

    __slots__ = ("_handle", "_keep", "_box", "__weakref__")

    def __init__(self, nbytes: Any = 0, device: DeviceLike = "cpu", allocator: Any = None) -> None:
        """``nbytes`` new bytes (or a copy of a sequence of byte values, each
        modulo 256) on ``device`` from ``allocator``."""
        self._handle = self._box = None
        dev = _device("cpu" if device is None else device)
        data = None
        if not hasattr(nbytes, "__index__") and not isinstance(nbytes, (str, bytes, bytearray)) \
                and hasattr(nbytes, "__iter__"):
            data = [_core.as_int(b, "byte value") for b in nbytes]
            n = len(data)
        else:
            n = _core.as_int(nbytes, "nbytes", 0)
        ah = _allocator_handle(allocator)
        self._keep = (allocator,) if allocator is not None else ()
        h = out_handle(lib.mn_storage_create, dev._c, n, ah, None)
        self._box = _owner.pin_storage(h)
        self._handle = h
        if data:
            self._write_bytes(bytes(b & 0xFF for b in data))

    @classmethod
    def _wrap(cls, handle: int, keep: tuple = (), box: Any = _LOOKUP) -> "UntypedStorage":
        """A Storage owning one reference `handle` (taken over, not retained);
        box: the allocator box its storage counts on (default: looked up)."""
        s = object.__new__(UntypedStorage)
        s._handle = None
        s._keep = tuple(keep)
        s._box = _owner.pin_storage(handle) if box is _LOOKUP else _owner.pin(box)
        s._handle = handle
        return s

    def __del__(self) -> None:
        self._drop()

    def _drop(self, _release=lib.mn_storage_release, _unpin=_owner.unpin):
        h = self._take()  # once, whichever thread gets here first
        if h:
            _release(h)
            _unpin(self._box)

    def _h(self) -> int:
        if not self._handle:
            raise ValueError("mnemo: the storage was released")
        return self._handle

    def release(self) -> None:
        """Drops this object's reference now (the bytes go when no view or
        other Storage holds one). The object is unusable afterwards (ValueError).
        Releasing twice, or from several threads at once, drops it once."""
        self._drop()

    def __enter__(self) -> "UntypedStorage":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # ---- queries ---------------------------------------------------------------
    def nbytes(self) -> int:
        """The size in bytes."""
        return int(lib.mn_storage_nbytes(self._h()))

    def size(self) -> int:
        """The size in bytes (as nbytes())."""
        return self.nbytes()

    def __len__(self) -> int:
        return self.nbytes()

    def element_size(self) -> int:
        """1: an untyped storage's elements are bytes."""
        return 1

    @property
    def device(self) -> Device:
        """The Device the bytes live on."""
        return Device._from_c(lib.mn_storage_device(self._h()))

    def data_ptr(self) -> int:
        """The address of the first byte (0 when empty)."""
        return lib.mn_storage_data(self._h()) or 0

    @property
    def refcount(self) -> int:
        """The C reference count (this object's, every view's, every export's)."""
        return int(lib.mn_storage_refcount(self._h()))

    @property
    def kind(self) -> str:
        """Where the bytes come from: "allocator", "foreign", "file", "shared" or "ipc"."""
        return _KIND_NAMES.get(lib.mn_storage_get_kind(self._h()), "invalid")

    def resizable(self) -> bool:
        """Whether resize_ may change the size (allocator-owned storages)."""
        return bool(lib.mn_storage_is_resizable(self._h()))

    def is_pinned(self, device: DeviceLike = None) -> bool:
        """Whether the bytes are page-locked host memory."""
        return bool(lib.mn_storage_is_pinned(self._h()))

    def is_shared(self) -> bool:
        """Whether other processes can map the bytes (shared memory, a shared
        file mapping, a CUDA IPC import)."""
        return bool(lib.mn_storage_is_shared(self._h()))

    @property
    def filename(self) -> Optional[str]:
        """The path of a file storage (from_file); None for other kinds."""
        f = lib.mn_storage_filename(self._h())
        return os.fsdecode(f) if f is not None else None

    @property
    def allocator_handle(self) -> Optional[int]:
        """The owning mn_allocator_t* as an int (allocator kind), else None."""
        return lib.mn_storage_allocator(self._h()) or None

    def untyped(self) -> "UntypedStorage":
        """This storage (it is already untyped)."""
        return self

    def new(self) -> "UntypedStorage":
        """A new empty storage on the same device."""
        return UntypedStorage(0, self.device)

    def _type_name(self) -> str:
        return "mnemo.UntypedStorage"

    def _convert(self, dtype) -> "TypedStorage":
        """The bytes read as uint8 values, converted to ``dtype`` (PyTorch's
        UntypedStorage.float(), ...)."""
        return _convert(self, _UINT8, _dtype(dtype))

    # ---- elements ---------------------------------------------------------------
    def _elements(self, dtype) -> Any:
        """A 1-d View of the whole storage as elements of ``dtype``."""
        from .view import View
        n = self.nbytes() // dtype.itemsize
        return View(self, dtype, (n,))

    def _write_bytes(self, data: bytes) -> None:
        src = UntypedStorage.from_buffer(data, device=self.device)
        lib.mn_storage_copy(self._h(), src._h(), False, None)

    def __getitem__(self, idx: Union[int, slice]) -> Union[int, "UntypedStorage"]:
        """s[i]: the byte value (an int, negative i from the end); s[a:b]: a
        new storage holding a copy of those bytes (step 1)."""
        if _sp is not None and type(idx) is int:
            v = _sp.storage_getitem(self._handle, _UINT8_VALUE, idx)
            if v is not NotImplemented:
                return v
        return _getitem(self, _UINT8, idx)

    def __setitem__(self, idx: Union[int, slice], value: Any) -> None:
        """s[i] = v / s[a:b] = v: writes byte(s); an int value wraps around
        modulo 256 as PyTorch's."""
        value = _wrap_byte(value)
        if _sp is not None and type(idx) is int and _sp.storage_setitem(self._handle, _UINT8_VALUE, idx, value) is None:
            return
        _setitem(self, _UINT8, idx, value)

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    # ---- contents -----------------------------------------------------------------
    def resize_(self, nbytes: int) -> "UntypedStorage":
        """Grows or shrinks an allocator-owned storage in place, keeping the
        common prefix (new bytes undefined). MnemoError (invalid_state) for
        other kinds, and while any View of this storage lives (the bytes
        move: drop the views first, or resize a clone); a failure leaves the
        storage as it was."""
        lib.mn_storage_resize(self._h(), _core.as_int(nbytes, "nbytes", 0), None)
        return self

    def fill_(self, value: int) -> "UntypedStorage":
        """Sets every byte to ``value`` modulo 256 (PyTorch's wrap-around:
        300 gives 44, -1 gives 255). TypeError for non-integers."""
        lib.mn_storage_fill(self._h(), _wrap_byte(value), None)
        return self

    def zero_(self) -> "UntypedStorage":
        """Sets every byte to 0."""
        return self.fill_(0)

    def copy_(self, src: Union["UntypedStorage", "TypedStorage"], non_blocking: Optional[bool] = False
              ) -> "UntypedStorage":
        """Copies the bytes of ``src`` (a storage of the same nbytes, any
        device, typed or not) into this storage; blocking unless non_blocking."""
        if not isinstance(src, (UntypedStorage, TypedStorage)):
            raise TypeError(f"mnemo: Storage.copy_ takes a storage, got {type(src).__name__}")
        lib.mn_storage_copy(self._h(), src.untyped()._h(), bool(non_blocking), None)
        return self

    def clone(self) -> "UntypedStorage":
        """A new storage with the same bytes on the same device."""
        return UntypedStorage._wrap(out_handle(lib.mn_storage_clone, self._h(), None), self._keep)

    # ---- copies and pickles (docs/PYTHON.md "Object lifetimes") ---------------------
    def __copy__(self) -> "UntypedStorage":
        """copy.copy: a clone, as torch.UntypedStorage's."""
        return self.clone()

    def __deepcopy__(self, memo: dict) -> "UntypedStorage":
        """copy.deepcopy: a clone, one per C storage within one deepcopy (views
        of one storage deep-copied together share the new one), as PyTorch."""
        _check_memo(memo)
        seen = memo.setdefault("mnemo.storages", {})
        key = self._h()
        new = seen.get(key)
        if new is None:
            new = seen[key] = self.clone()
        return new

    def __reduce_ex__(self, protocol: int) -> tuple:
        """Pickles by value: device, size and bytes (none on the meta device);
        the unpickled storage comes from its device's default allocator."""
        self._h()
        dev = self.device
        data = None if dev.type == "meta" else self.tobytes()
        return (_rebuild_storage, (str(dev), self.nbytes(), data))

    def to(self, device: DeviceLike = None, non_blocking: bool = False) -> "UntypedStorage":
        """The storage on ``device``: this storage itself when already there
        (as PyTorch), else a copy. A non_blocking copy to the CPU lands in
        pinned memory; synchronize before reading it."""
        dev = self.device if device is None else _device(device)
        if dev == self.device:
            return self
        h = out_handle(lib.mn_storage_to, self._h(), dev._c, bool(non_blocking), None)
        return UntypedStorage._wrap(h, _core.keep_for(h, self._handle, self._keep))

    def cpu(self) -> "UntypedStorage":
        """to("cpu"): this storage when already on the CPU."""
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> "UntypedStorage":
        """to(cuda:device) (device: an index or None for 0): this storage
        when already there."""
        return self.to(_cuda_device(device), non_blocking)

    def pin_memory(self, device: DeviceLike = None) -> "UntypedStorage":
        """A page-locked copy of a CPU storage, from the pinned pool of
        ``device`` (the device that will copy it; None: cuda:0 when there is
        a GPU, else sim:0). MnemoError for storages off the CPU."""
        if device is None:
            device = "cuda:0" if device_count("cuda") > 0 else "sim:0"
        h = out_handle(lib.mn_storage_pin_memory, self._h(), _device(device)._c)
        return UntypedStorage._wrap(h, _core.keep_for(h, self._handle, self._keep))

    def share_memory_(self) -> "UntypedStorage":
        """Moves a CPU storage into (unnamed, sealed) shared memory in place;
        a no-op when already shared and for CUDA storages; MnemoError on SIM."""
        lib.mn_storage_share_memory(self._h())
        return self

    @classmethod
    def _new_shared(cls, size: int, device: DeviceLike = None) -> "UntypedStorage":
        """A new storage of ``size`` bytes in shared memory (CPU) or on ``device``."""
        s = UntypedStorage(size, "cpu" if device is None else device)
        return s.share_memory_() if s.device.type == "cpu" else s

    def shm_handle(self) -> str:
        """The text handle ("mnemo-shm:<pid>:<fd>:<nbytes>") of a shared-memory
        storage that another process opens with Storage.from_shm_handle while
        this storage lives."""
        buf = C.create_string_buffer(64)
        lib.mn_storage_shm_handle(self._h(), buf, len(buf))
        return buf.value.decode()

    @classmethod
    def from_shm_handle(cls, handle: str) -> "UntypedStorage":
        """Maps the shared-memory storage named by a handle of shm_handle()."""
        if not isinstance(handle, str):
            raise TypeError("mnemo: a shared-memory handle is a str")
        return UntypedStorage._wrap(out_handle(lib.mn_storage_from_shm_handle, handle.encode()))

    def byteswap(self, dtype: DtypeLike) -> "UntypedStorage":
        """Reverses the byte order of every element of ``dtype`` in place
        (complex: each part)."""
        lib.mn_storage_byteswap_dtype(self._h(), _dtype(dtype).value, None)
        return self

    def tolist(self, dtype: DtypeLike = "uint8") -> list:
        """The contents as Python values, read as elements of ``dtype`` (the
        bytes by default, as torch.UntypedStorage.tolist)."""
        dt = _dtype(dtype)
        n = self.nbytes() // dt.itemsize
        arr = (Scalar * max(1, n))()
        count = C.c_size_t()
        lib.mn_storage_tolist(self._h(), dt.value, arr, n, C.byref(count))
        return [_core.from_scalar(arr[i]) for i in range(count.value)]

    def tobytes(self) -> bytes:
        """The bytes as a Python bytes object (device memory is copied to the host)."""
        host = self if self.device.type == "cpu" else self.to("cpu")
        n = host.nbytes()
        return C.string_at(host.data_ptr(), n) if n else b""

    def __repr__(self) -> str:
        """PyTorch's text: the bytes one a line, then
        ``[mnemo.UntypedStorage(device=cpu) of size 12]``."""
        if not self._handle:
            return "mnemo.UntypedStorage(<released>)"
        info = f"[mnemo.UntypedStorage(device={self.device}) of size {self.nbytes()}]"
        if self.device.type == "meta":
            return "...\n" + info
        return _storage_str(self.tolist(), info)

    __str__ = __repr__

    def describe(self) -> str:
        """mnemo's one-line description (mn_storage_format): device, size,
        kind, reference count, flags and the first 16 bytes."""
        need = C.c_size_t()
        buf = C.create_string_buffer(512)
        lib.mn_storage_format(self._h(), _UINT8.value, 16, buf, len(buf), C.byref(need))
        if need.value >= len(buf):
            buf = C.create_string_buffer(need.value + 1)
            lib.mn_storage_format(self._h(), _UINT8.value, 16, buf, len(buf), None)
        return buf.value.decode(errors="replace")

    # ---- other sources --------------------------------------------------------------
    @classmethod
    def from_file(cls, filename: Union[str, os.PathLike], shared: bool = False, size: int = 0, *,
                  nbytes: Optional[int] = None) -> "UntypedStorage":
        """Maps ``size`` bytes of a file (0: its whole size; ``nbytes`` is
        the same). shared: MAP_SHARED, read-write, created or extended as
        needed; else MAP_PRIVATE (the file must exist and be large enough;
        writes stay in this process)."""
        p = os.fsencode(os.fspath(filename))
        n = _core.as_int(size if nbytes is None else nbytes, "nbytes", 0)
        return UntypedStorage._wrap(out_handle(lib.mn_storage_from_file, p, bool(shared), n))

    @classmethod
    def from_buffer(cls, buffer: Any, byte_order: Any = "native", count: int = -1, offset: int = 0,
                    dtype: DtypeLike = None, device: DeviceLike = "cpu") -> "UntypedStorage":
        """A new storage on ``device`` holding a copy of the bytes of a
        bytes-like object (bytes, bytearray, memoryview, numpy array, ...):
        ``count`` elements of ``dtype`` (-1: all; dtype None: bytes) from
        byte ``offset``, swapped per element when ``byte_order`` ("native",
        "little", "big") differs from the machine's. A device in place of
        byte_order (mnemo's older form) is the device."""
        if byte_order not in ("native", "little", "big"):
            device, byte_order = byte_order, "native"
        dt = _UINT8 if dtype is None else _dtype(dtype)
        return _from_buffer(buffer, byte_order, count, offset, dt, device)


Storage = UntypedStorage


def _check_memo(memo: Any) -> None:
    """__deepcopy__'s memo is copy.deepcopy's dict: TypeError for anything else."""
    if not isinstance(memo, dict):
        raise TypeError(f"mnemo: __deepcopy__(memo) takes copy.deepcopy's memo dict, not {type(memo).__name__}")


def _wrap_byte(value: Any) -> int:
    if type(value) is int:
        return value & 0xFF
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return int(value)
    if not hasattr(value, "__index__"):
        raise TypeError(f"mnemo: an untyped storage's bytes are ints, got {type(value).__name__} {value!r}")
    return value.__index__() & 0xFF


def _cuda_device(device: Any) -> Device:
    if device is None:
        return Device("cuda", 0)
    if hasattr(device, "__index__") and not isinstance(device, bool):
        return Device("cuda", device.__index__())
    dev = _device(device)
    if dev.type != "cuda":
        raise ValueError(f"mnemo: cuda() takes a CUDA device, got {dev}")
    return dev


def _from_buffer(buffer, byte_order, count, offset, dt, device):
    """The bytes of from_buffer as a new UntypedStorage."""
    _core.as_int(count, "count")
    off = _core.as_int(offset, "offset", 0)
    swap = _byte_order_swaps(byte_order)
    addr, n, keep = _core.host_buffer(buffer)
    item = dt.itemsize
    if off > n:
        raise ValueError(f"mnemo: offset {off} is past the buffer's {n} bytes")
    avail = n - off
    if count < 0:
        if avail % item:
            raise ValueError(f"mnemo: buffer size ({avail}) must be a multiple of element size ({item})")
        nb = avail
    else:
        nb = count * item
        if nb > avail:
            raise ValueError(f"mnemo: {count} elements of {item} bytes from offset {off} exceed the buffer's "
                             f"{n} bytes")
    dev = _device("cpu" if device is None else device)
    h = out_handle(lib.mn_storage_from_buffer_copy, dev._c, (addr + off) if addr and nb else None, nb)
    del keep
    s = UntypedStorage._wrap(h)
    if swap and item > 1:
        s.byteswap(dt)
    return s


def _convert(untyped: UntypedStorage, src, dst) -> "TypedStorage":
    """A new TypedStorage of ``dst`` holding the elements of ``untyped`` read
    as ``src``, converted (mn_storage_convert; quantized dtypes as their raw
    integers)."""
    src_raw = _dtype(_QUANT_RAW.get(src.name, src.name))
    dst_raw = _dtype(_QUANT_RAW.get(dst.name, dst.name))
    h = out_handle(lib.mn_storage_convert, untyped._h(), src_raw.value, dst_raw.value, None)
    out = UntypedStorage._wrap(h, _core.keep_for(h, untyped._handle, untyped._keep))
    return TypedStorage(wrap_storage=out, dtype=dst)


def _raw(dt):
    return _dtype(_QUANT_RAW[dt.name]) if dt.is_quantized else dt


def _getitem(st: UntypedStorage, dt, idx):
    n = st.nbytes() // dt.itemsize
    if isinstance(idx, slice):
        start, stop, step = idx.indices(n)
        if step != 1:
            raise ValueError("mnemo: a storage slice takes step 1")
        stop = max(stop, start)
        if dt is not _UINT8:
            raise RuntimeError("mnemo: slices are only supported in UntypedStorage.__getitem__")
        out = UntypedStorage(stop - start, st.device)
        if stop > start:
            out.copy_(st._elements(_UINT8)[start:stop].clone().untyped_storage())
        return out
    i = _core.as_int(idx, "index")
    if not -n <= i < n:
        raise IndexError(f"mnemo: index {i} out of range for storage of size {n}")
    raw = _raw(dt)
    if lib.mn_storage_device(st._handle).type == _CPU_TYPE:  # read in place (no view, no copy)
        s = Scalar()
        lib.mn_scalar_from_bytes(raw.value, lib.mn_storage_data(st._handle) + (i % n) * raw.itemsize, C.byref(s))
        return _core.from_scalar(s)
    return st._elements(raw)[i % n].item()


def _setitem(st: UntypedStorage, dt, idx, value):
    n = st.nbytes() // dt.itemsize
    if isinstance(idx, slice):
        start, stop, step = idx.indices(n)
        key = slice(start, stop, step) if step > 0 else None
        if key is None:
            raise ValueError("mnemo: a storage slice takes a positive step")
    else:
        i = _core.as_int(idx, "index")
        if not -n <= i < n:
            raise IndexError(f"mnemo: index {i} out of range for storage of size {n}")
        key = i % n
        if _core.is_scalar(value):  # a one-element view's fill_ (what View.__setitem__ would do), no more
            h = out_handle(lib.mn_view_create, st._handle, _raw(dt).value, 1, _ONE, None, key)
            try:
                lib.mn_view_fill(h, _core.to_scalar(value), None)
            finally:
                lib.mn_view_destroy(h)
            return
    st._elements(_raw(dt))[key] = value


# ---- typed storages ---------------------------------------------------------------------
class _LegacyStorageMeta(type):
    """The metaclass of FloatStorage and the other legacy classes: an
    instance is any TypedStorage of the class's dtype (as torch's)."""

    def __instancecheck__(cls, instance: Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        dt = cls.__dict__.get("dtype")
        return isinstance(instance, TypedStorage) and dt is not None and instance.dtype is dt


class TypedStorage(_StorageBase):
    """A one-dimensional array of ``dtype`` elements over an UntypedStorage
    (torch.TypedStorage): ``TypedStorage(dtype=..., device=...)`` (empty),
    ``TypedStorage(size, dtype=..., device=...)`` (contents undefined),
    ``TypedStorage(sequence, dtype=..., device=...)`` (the values), or
    ``TypedStorage(wrap_storage=untyped, dtype=...)`` (the same bytes, no
    copy; a trailing part of an element is ignored). dtype None: float32.
    Sizes and indices count elements."""

    __slots__ = ("_untyped_storage", "dtype", "__weakref__")

    def __init__(self, *args: Any, wrap_storage: Optional[UntypedStorage] = None, dtype: DtypeLike = None,
                 device: DeviceLike = None, allocator: Any = None) -> None:
        """See the class docstring: empty, a size, a sequence of values or
        wrap_storage."""
        dt = _dtype("float32") if dtype is None else _dtype(dtype)
        if wrap_storage is not None:
            if args:
                raise TypeError("mnemo: TypedStorage(wrap_storage=...) takes no positional argument")
            if not isinstance(wrap_storage, UntypedStorage):
                raise TypeError(f"mnemo: wrap_storage must be an UntypedStorage, got {type(wrap_storage).__name__}")
            if device is not None and _device(device) != wrap_storage.device:
                raise ValueError("mnemo: device and wrap_storage.device differ")
            self._untyped_storage, self.dtype = wrap_storage, dt
            return
        if len(args) > 1:
            raise TypeError(f"mnemo: TypedStorage() takes at most one positional argument, got {len(args)}")
        dev = "cpu" if device is None else device
        arg = args[0] if args else 0
        if hasattr(arg, "__index__") and not isinstance(arg, bool):
            size = _core.as_int(arg, "size", 0)
            nbytes = size * dt.itemsize
            self._untyped_storage, self.dtype = UntypedStorage(nbytes, dev, allocator), dt
            return
        if isinstance(arg, (str, bytes, bytearray)) or not hasattr(arg, "__iter__"):
            raise TypeError(f"mnemo: TypedStorage() takes a size or a sequence, got {type(arg).__name__}")
        values = list(arg)
        self._untyped_storage = UntypedStorage(len(values) * dt.itemsize, dev, allocator)
        self.dtype = dt
        if values:  # each value converted and range-checked as fill_ does (through a 1-element CPU view)
            item = dt.itemsize
            one = UntypedStorage(item)._elements(_raw(dt))
            src = one.data_ptr()
            buf = C.create_string_buffer(len(values) * item)
            base = C.addressof(buf)
            for i, v in enumerate(values):
                one.fill_(v)
                C.memmove(base + i * item, src, item)
            self._untyped_storage._write_bytes(buf.raw)

    def __new__(cls, *args: Any, **kwargs: Any) -> "TypedStorage":
        """A TypedStorage (the typed classes make TypedStorages, as PyTorch's)."""
        return object.__new__(TypedStorage)

    # ---- queries ---------------------------------------------------------------------
    def untyped(self) -> UntypedStorage:
        """The UntypedStorage holding the bytes (the same object every time)."""
        return self._untyped_storage

    def _h(self) -> int:
        return self._untyped_storage._h()

    def size(self) -> int:
        """The number of elements."""
        return self._untyped_storage.nbytes() // self.dtype.itemsize

    def __len__(self) -> int:
        return self.size()

    def nbytes(self) -> int:
        """The size in bytes (of the untyped storage)."""
        return self._untyped_storage.nbytes()

    def element_size(self) -> int:
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def device(self) -> Device:
        """The Device the elements live on."""
        return self._untyped_storage.device

    def data_ptr(self) -> int:
        """The address of the first element (0 when empty)."""
        return self._untyped_storage.data_ptr()

    def is_pinned(self, device: DeviceLike = None) -> bool:
        """Whether the elements are in page-locked host memory."""
        return self._untyped_storage.is_pinned()

    def is_shared(self) -> bool:
        """Whether other processes can map the elements."""
        return self._untyped_storage.is_shared()

    def resizable(self) -> bool:
        """Whether resize_ may change the size."""
        return self._untyped_storage.resizable()

    @property
    def filename(self) -> Optional[str]:
        """The path of a file storage (from_file); None otherwise."""
        return self._untyped_storage.filename

    def pickle_storage_type(self) -> str:
        """The legacy class name of the dtype ("FloatStorage", ...)."""
        cls = _LEGACY_BY_DTYPE.get(self.dtype.name)
        if cls is None:
            raise TypeError(f"mnemo: no legacy storage class for {self.dtype}")
        return cls.__name__

    def _type_name(self) -> str:
        cls = _LEGACY_BY_DTYPE.get(self.dtype.name)
        return f"mnemo.{cls.__name__}" if cls is not None else "mnemo.TypedStorage"

    def _new_wrapped(self, untyped: UntypedStorage) -> "TypedStorage":
        return TypedStorage(wrap_storage=untyped, dtype=self.dtype)

    def _convert(self, dtype) -> "TypedStorage":
        return _convert(self._untyped_storage, self.dtype, _dtype(dtype))

    # ---- elements ---------------------------------------------------------------------
    def __getitem__(self, idx: int) -> Any:
        """s[i]: the element as a Python value (negative i from the end).
        Slices are refused (RuntimeError) as in PyTorch."""
        if _sp is not None and type(idx) is int:
            v = _sp.storage_getitem(self._untyped_storage._handle, _raw(self.dtype).value, idx)
            if v is not NotImplemented:
                return v
        if isinstance(idx, slice):
            raise RuntimeError("mnemo: slices are only supported in UntypedStorage.__getitem__")
        return _getitem(self._untyped_storage, self.dtype, idx)

    def __setitem__(self, idx: Union[int, slice], value: Any) -> None:
        """s[i] = v / s[a:b] = v: writes elements, range-checked as fill_."""
        if _sp is not None and type(idx) is int and _sp.storage_setitem(
                self._untyped_storage._handle, _raw(self.dtype).value, idx, value) is None:
            return
        _setitem(self._untyped_storage, self.dtype, idx, value)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.tolist())

    def tolist(self) -> list:
        """The elements as Python values."""
        return self._untyped_storage.tolist(_raw(self.dtype))

    # ---- contents -----------------------------------------------------------------------
    def fill_(self, value: Any) -> "TypedStorage":
        """Writes ``value`` into every element, checked against the dtype's
        range as PyTorch's (uint8 takes -1 as 255, refuses 300)."""
        if self.nbytes():
            self._untyped_storage._elements(_raw(self.dtype)).fill_(value)
        else:
            _core.to_scalar(value)
        return self

    def zero_(self) -> "TypedStorage":
        """Writes 0 into every element."""
        self._untyped_storage.fill_(0)
        return self

    def copy_(self, source: Union["TypedStorage", UntypedStorage], non_blocking: Optional[bool] = None
              ) -> "TypedStorage":
        """Copies the bytes of ``source`` (same nbytes) into this storage."""
        self._untyped_storage.copy_(source, bool(non_blocking))
        return self

    def resize_(self, size: int) -> None:
        """Resizes to ``size`` elements in place (allocator-owned storages;
        returns None, as PyTorch's TypedStorage.resize_)."""
        self._untyped_storage.resize_(_core.as_int(size, "size", 0) * self.dtype.itemsize)

    def clone(self) -> "TypedStorage":
        """A copy in a new storage."""
        return self._new_wrapped(self._untyped_storage.clone())

    def to(self, device: DeviceLike = None, non_blocking: bool = False) -> "TypedStorage":
        """The storage on ``device`` (a new TypedStorage object; its bytes
        are this one's when already there, else a copy)."""
        return self._new_wrapped(self._untyped_storage.to(device, non_blocking))

    def cpu(self) -> "TypedStorage":
        """to("cpu")."""
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> "TypedStorage":
        """to(cuda:device)."""
        return self._new_wrapped(self._untyped_storage.cuda(device, non_blocking))

    def pin_memory(self, device: DeviceLike = None) -> "TypedStorage":
        """A page-locked copy of a CPU storage (see UntypedStorage.pin_memory)."""
        return self._new_wrapped(self._untyped_storage.pin_memory(device))

    def share_memory_(self) -> "TypedStorage":
        """Moves the bytes into shared memory in place; returns self."""
        self._untyped_storage.share_memory_()
        return self

    @classmethod
    def _new_shared(cls, size: int, device: DeviceLike = None) -> "TypedStorage":
        """A new storage of ``size`` elements in shared memory (CPU)."""
        dt = _class_dtype(cls, None)
        return TypedStorage(wrap_storage=UntypedStorage._new_shared(size * dt.itemsize, device), dtype=dt)

    # ---- copies, pickles, text ------------------------------------------------------------
    def __copy__(self) -> "TypedStorage":
        """copy.copy: a clone, as torch's."""
        return self.clone()

    def __deepcopy__(self, memo: dict) -> "TypedStorage":
        """copy.deepcopy: the dtype over a deep copy of the untyped storage."""
        import copy
        _check_memo(memo)
        return TypedStorage(wrap_storage=copy.deepcopy(self._untyped_storage, memo), dtype=self.dtype)

    def __reduce_ex__(self, protocol: int) -> tuple:
        """Pickles the untyped storage (by value) and the dtype."""
        return (_rebuild_typed, (self._untyped_storage, self.dtype.name))

    def __repr__(self) -> str:
        """PyTorch's text: the elements one a line, then
        ``[mnemo.TypedStorage(dtype=mnemo.float32, device=cpu) of size 3]``."""
        if not self._untyped_storage._handle:
            return "mnemo.TypedStorage(<released>)"
        info = f"[mnemo.TypedStorage(dtype={self.dtype!r}, device={self.device}) of size {self.size()}]"
        if self.device.type == "meta":
            return "...\n" + info
        return _storage_str(self.tolist(), info)

    __str__ = __repr__

    # ---- other sources -------------------------------------------------------------------
    @classmethod
    def from_buffer(cls, buffer: Any, byte_order: str = "native", count: int = -1, offset: int = 0,
                    dtype: DtypeLike = None, device: DeviceLike = "cpu") -> "TypedStorage":
        """A new storage holding a copy of ``count`` elements (-1: all) of a
        bytes-like object from byte ``offset``, in ``byte_order`` ("native",
        "little", "big"). The dtype is the class's (FloatStorage...) or
        ``dtype`` (TypedStorage; float32 by default)."""
        dt = _class_dtype(cls, dtype)
        return TypedStorage(wrap_storage=_from_buffer(buffer, byte_order, count, offset, dt, device), dtype=dt)

    @classmethod
    def from_file(cls, filename: Union[str, os.PathLike], shared: bool = False, size: int = 0, *,
                  dtype: DtypeLike = None) -> "TypedStorage":
        """Maps ``size`` elements of a file (0: the whole file), as
        UntypedStorage.from_file."""
        dt = _class_dtype(cls, dtype)
        nb = _core.as_int(size, "size", 0) * dt.itemsize
        return TypedStorage(wrap_storage=UntypedStorage.from_file(filename, shared, nb), dtype=dt)


def _class_dtype(cls, dtype):
    fixed = cls.__dict__.get("dtype")
    if isinstance(fixed, _dtype):
        if dtype is not None and _dtype(dtype) is not fixed:
            raise TypeError(f"mnemo: {cls.__name__} has dtype {fixed}, got dtype={dtype}")
        return fixed
    return _dtype("float32") if dtype is None else _dtype(dtype)


def _rebuild_typed(untyped: UntypedStorage, dtype: str) -> TypedStorage:
    """The typed storage of a pickle (TypedStorage.__reduce_ex__)."""
    if not isinstance(untyped, UntypedStorage):
        raise TypeError(f"mnemo: a pickled typed storage holds an UntypedStorage, not {type(untyped).__name__}")
    return TypedStorage(wrap_storage=untyped, dtype=dtype)


def _legacy_class(name: str, dtype_name: str) -> type:
    dt = _dtype(dtype_name)

    def __new__(cls, *args: Any, **kwargs: Any) -> TypedStorage:
        """A TypedStorage of the class's dtype (TypedStorage's arguments but dtype)."""
        if "dtype" in kwargs:
            raise TypeError(f"mnemo: {name}() takes no dtype (it is {dt})")
        return TypedStorage(*args, dtype=dt, **kwargs)

    doc = (f"Makes TypedStorages of {dt!r} (torch.{name}): ``{name}()``, ``{name}(size)``, "
           f"``{name}(sequence)``, ``{name}(wrap_storage=untyped)``; device= and allocator= as TypedStorage. "
           f"isinstance(s, mnemo.{name}) is true for every {dt!r} TypedStorage.")
    return _LegacyStorageMeta(name, (TypedStorage,), {"__new__": __new__, "__doc__": doc, "dtype": dt,
                                                       "__slots__": (), "__module__": __name__})


_LEGACY = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "ByteStorage": "uint8", "CharStorage": "int8", "ShortStorage": "int16", "IntStorage": "int32",
    "LongStorage": "int64", "BoolStorage": "bool", "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128", "QUInt8Storage": "quint8", "QInt8Storage": "qint8",
    "QInt32Storage": "qint32", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4",
}
_LEGACY_BY_NAME = {n: _legacy_class(n, d) for n, d in _LEGACY.items()}
_LEGACY_BY_DTYPE = {c.dtype.name: c for c in _LEGACY_BY_NAME.values()}
FloatStorage = _LEGACY_BY_NAME["FloatStorage"]
DoubleStorage = _LEGACY_BY_NAME["DoubleStorage"]
HalfStorage = _LEGACY_BY_NAME["HalfStorage"]
BFloat16Storage = _LEGACY_BY_NAME["BFloat16Storage"]
ByteStorage = _LEGACY_BY_NAME["ByteStorage"]
CharStorage = _LEGACY_BY_NAME["CharStorage"]
ShortStorage = _LEGACY_BY_NAME["ShortStorage"]
IntStorage = _LEGACY_BY_NAME["IntStorage"]
LongStorage = _LEGACY_BY_NAME["LongStorage"]
BoolStorage = _LEGACY_BY_NAME["BoolStorage"]
ComplexFloatStorage = _LEGACY_BY_NAME["ComplexFloatStorage"]
ComplexDoubleStorage = _LEGACY_BY_NAME["ComplexDoubleStorage"]
QUInt8Storage = _LEGACY_BY_NAME["QUInt8Storage"]
QInt8Storage = _LEGACY_BY_NAME["QInt8Storage"]
QInt32Storage = _LEGACY_BY_NAME["QInt32Storage"]
QUInt4x2Storage = _LEGACY_BY_NAME["QUInt4x2Storage"]
QUInt2x4Storage = _LEGACY_BY_NAME["QUInt2x4Storage"]


def _rebuild_storage(device: str, nbytes: int, data: Optional[bytes]) -> UntypedStorage:
    """The storage of a pickle (Storage.__reduce_ex__): ``nbytes`` bytes on
    ``device`` holding ``data`` (bytes, or None on the meta device)."""
    n = _core.as_int(nbytes, "nbytes", 0)
    dev = _device(device)
    if data is None:
        if dev.type != "meta":
            raise ValueError(f"mnemo: a pickled storage on {dev} carries its bytes")
        return UntypedStorage(n, dev)
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"mnemo: a pickled storage's bytes are bytes, not {type(data).__name__}")
    if len(data) != n:
        raise ValueError(f"mnemo: a pickled storage of {n} bytes carries {len(data)}")
    return UntypedStorage.from_buffer(data, device=dev)
