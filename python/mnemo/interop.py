"""mnemo.interop: zero-copy interchange of views with numpy, torch and any
DLPack or array-interface library: View.__dlpack__ / __dlpack_device__
(DLPack capsules over mn_view_to_dlpack(_versioned)), mnemo.from_dlpack
(objects with __dlpack__, or raw capsules), numpy's __array_interface__ (CPU
views) and __cuda_array_interface__ (CUDA views), and mnemo.asarray (zero-copy
when the source allows it, else a copy).

Lifetimes: an exported capsule holds a storage reference; the consumer's
deleter call drops it, and a capsule nobody consumed drops it when it is
garbage collected. An imported tensor stays alive (its producer's deleter
runs) until the last mnemo view or storage of it goes, even after the
producer object is deleted. Memory wrapped through __array_interface__ keeps
the producer object alive from the C storage itself.

Streams: mnemo's work on a device runs on its default stream (CUDA's legacy
default stream). ``__dlpack__(stream=s)`` on a CUDA view returns at once for
s None, 1, 2 or -1 (the legacy and per-thread default streams are ordered
after mnemo's work) and synchronizes the device for any other stream; on SIM
it synchronizes the device (unless s == -1). from_dlpack asks CUDA producers
for stream 1. __cuda_array_interface__ says stream 1.

Threading: any thread may export or import; a capsule must be consumed once.
"""
from __future__ import annotations

import ctypes as C
import operator
import sys
from typing import Any

from . import _core, _owner
from ._core import VP, VPP, out_handle
from ._lib import check
from ._lib import (DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, MN_DLPACK_MAJOR, MN_DLPACK_MINOR, declare,
                   kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLExtDev, lib)
from .device import Device, DeviceLike, device as _device
from .dtype import dtype as _dtype
from .storage import Storage
from .view import View, _copy_data, empty

__all__ = ["from_dlpack", "asarray", "to_dlpack"]

_sp = _core.speedups  # the compiled capsule import (mnemo._speedups), or None

K_DLCPU, K_DLCUDA, K_DLCUDAHOST, K_DLEXTDEV, K_DLCUDAMANAGED = kDLCPU, kDLCUDA, kDLCUDAHost, kDLExtDev, kDLCUDAManaged
FLAG_READ_ONLY, FLAG_IS_COPIED = DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", VP), ("device", DLDevice), ("ndim", C.c_int32), ("dtype", DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    pass


class DLPackVersion(C.Structure):
    _fields_ = [("major", C.c_uint32), ("minor", C.c_uint32)]


class DLManagedTensorVersioned(C.Structure):
    pass


LEGACY_DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensor))
VERSIONED_DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensorVersioned))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", VP), ("deleter", LEGACY_DELETER)]
DLManagedTensorVersioned._fields_ = [("version", DLPackVersion), ("manager_ctx", VP), ("deleter", VERSIONED_DELETER),
                                     ("flags", C.c_uint64), ("dl_tensor", DLTensor)]

declare("mn_view_to_dlpack", "status", [VP, VPP])
declare("mn_view_to_dlpack_versioned", "status", [VP, VPP])
declare("mn_view_from_dlpack", "status", [VP, VPP])
declare("mn_view_from_dlpack_versioned", "status", [VP, VPP])


# ---- capsules (the Python C API through ctypes; private function objects) ---------------
def _pyapi(name, restype, argtypes):
    f = C.pythonapi[name]  # a new function object: other code's declarations stay untouched
    f.restype, f.argtypes = restype, argtypes
    return f


# Names stay valid for every capsule's life: module-level buffers, never freed.
_NAMES = {n: C.create_string_buffer(n) for n in (b"dltensor", b"used_dltensor", b"dltensor_versioned",
                                                  b"used_dltensor_versioned")}


def _name(n):
    return C.cast(_NAMES[n], C.c_char_p)


_capsule_new = _pyapi("PyCapsule_New", C.py_object, [VP, C.c_char_p, VP])
_capsule_is_valid = _pyapi("PyCapsule_IsValid", C.c_int, [C.py_object, C.c_char_p])
_capsule_get_pointer = _pyapi("PyCapsule_GetPointer", VP, [C.py_object, C.c_char_p])
_capsule_set_name = _pyapi("PyCapsule_SetName", C.c_int, [C.py_object, C.c_char_p])
# In the destructor the capsule is a raw pointer and an exception may be in
# flight: these two read the capsule only and never set an error.
_raw_is_valid = _pyapi("PyCapsule_IsValid", C.c_int, [VP, C.c_char_p])
_raw_get_pointer = _pyapi("PyCapsule_GetPointer", VP, [VP, C.c_char_p])


@_core.immortal
@C.CFUNCTYPE(None, VP)
def _capsule_destructor(cap, _valid=_raw_is_valid, _get=_raw_get_pointer, _cast=C.cast, _ptr=C.POINTER,
                        _legacy=(_name(b"dltensor"), DLManagedTensor),
                        _versioned=(_name(b"dltensor_versioned"), DLManagedTensorVersioned)):
    """A capsule nobody consumed still owns its managed tensor: delete it.
    (Everything it uses is bound at definition: it may run at interpreter exit.)"""
    for name, struct in (_legacy, _versioned):
        if _valid(cap, name):
            m = _cast(_get(cap, name), _ptr(struct))
            if m.contents.deleter:
                m.contents.deleter(m)
            return


_DESTRUCTOR = C.cast(_capsule_destructor, VP).value

# Exports of storages whose Python allocator must outlive them: the managed
# tensor's deleter is replaced by one that calls mnemo's and then lets the
# allocator go (the export's count on its box, mnemo._owner; or, for an
# allocator object mnemo does not own, the object itself).
# address -> (mnemo's deleter, objects to keep, box).
_exports = {}


@_core.immortal
@LEGACY_DELETER
def _legacy_deleter(m, _pop=_exports.pop, _cast=C.cast, _fn=LEGACY_DELETER, _unpin=_owner.unpin):
    orig, _keep, box = _pop(_cast(m, VP).value)
    _fn(orig)(m)
    _unpin(box)


@_core.immortal
@VERSIONED_DELETER
def _versioned_deleter(m, _pop=_exports.pop, _cast=C.cast, _fn=VERSIONED_DELETER, _unpin=_owner.unpin):
    orig, _keep, box = _pop(_cast(m, VP).value)
    _fn(orig)(m)
    _unpin(box)


def dlpack_device(dev):
    """The DLPack (device_type, device_id) of a Device."""
    if dev.type == "meta":
        raise ValueError("mnemo: Cannot pack tensors on meta (the meta device has no data)")
    return {"cpu": (K_DLCPU, 0), "cuda": (K_DLCUDA, dev.index), "sim": (K_DLEXTDEV, dev.index)}[dev.type]


def _device_from_dl(dl):
    try:
        kind, index = int(dl[0]), int(dl[1])
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        raise ValueError(f"mnemo: dl_device must be a (device_type, device_id) pair, got {dl!r}") from None
    if kind in (K_DLCPU, K_DLCUDAHOST):
        return Device("cpu")
    if kind in (K_DLCUDA, K_DLCUDAMANAGED):
        return Device("cuda", index)
    if kind == K_DLEXTDEV:
        return Device("sim", index)
    raise BufferError(f"mnemo: DLPack device type {kind} is not one mnemo has (1 CPU, 2 CUDA, 12 SIM)")


def _ready_for_consumer(dev, stream):
    """Makes the view's queued device work visible to a consumer on `stream`."""
    if dev.type == "cpu" or stream == -1:
        return
    if dev.type == "cuda":
        if stream == 0:
            raise ValueError("mnemo: __dlpack__(stream=0) is ambiguous for CUDA; use 1 (legacy default stream), "
                             "2 (per-thread default stream) or a stream handle")
        if stream in (None, 1, 2):
            return  # ordered after mnemo's work on the legacy default stream
    _core.synchronize(dev)


def to_dlpack(view: View, stream: int | None = None, max_version: tuple[int, int] | None = None,
              dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
    """A DLPack capsule of ``view`` without a copy (View.__dlpack__): legacy
    "dltensor", or "dltensor_versioned" (DLPack 1.1) when max_version >=
    (1, 0). dl_device other than the view's device copies there (BufferError
    when copy=False); copy=True always exports a copy (flag IS_COPIED)."""
    if not isinstance(view, View):
        raise TypeError(f"mnemo: to_dlpack takes a View, got {type(view).__name__}")
    src, copied = view, False
    if dl_device is not None:
        target = _device_from_dl(dl_device)
        if target != view.device:
            if copy is False:
                raise BufferError(f"mnemo: the view is on {view.device}, not {target}, and copy=False")
            src, copied = view.to(target), True
    if copy is True and not copied:
        src, copied = view.clone(), True
    if stream is not None and not isinstance(stream, int):
        raise TypeError(f"mnemo: __dlpack__ stream must be an int or None, got {type(stream).__name__}")
    _ready_for_consumer(src.device, None if copied and src.device.type == "cpu" else stream)
    if copied:
        _core.synchronize(src.device)
    try:
        versioned = max_version is not None and int(tuple(max_version)[0]) >= 1
    except (TypeError, ValueError, IndexError, KeyError, OverflowError):
        raise TypeError(f"mnemo: __dlpack__ max_version must be a (major, minor) pair of ints, got "
                        f"{max_version!r}") from None
    if versioned:
        p = out_handle(lib.mn_view_to_dlpack_versioned, src._handle)
        m = C.cast(p, C.POINTER(DLManagedTensorVersioned))
        if copied:
            m.contents.flags |= FLAG_IS_COPIED
        name, wrapper = b"dltensor_versioned", _versioned_deleter
    else:
        p = out_handle(lib.mn_view_to_dlpack, src._handle)
        m = C.cast(p, C.POINTER(DLManagedTensor))
        name, wrapper = b"dltensor", _legacy_deleter
    try:
        if src._keep or src._box is not None:
            # (the address, read now: a ctypes function field read is a view of the struct's memory)
            # An allocator with a box is kept by the count alone: holding its
            # object in this module-level table would make any garbage cycle
            # through it uncollectable; other allocator objects are held.
            keep = () if src._box is not None else src._keep
            _exports[p] = (C.cast(m.contents.deleter, VP).value, keep, _owner.pin(src._box))
            m.contents.deleter = wrapper
        return _capsule_new(p, _name(name), _DESTRUCTOR)
    except BaseException:
        m.contents.deleter(m)
        raise


def _is_capsule(obj):
    return type(obj).__name__ == "PyCapsule"


def _consume(cap):
    if _sp is not None:
        out = _sp.from_dlpack_capsule(cap)
        if type(out) is int:
            check(out)  # mnemo refused the tensor: MnemoError (the capsule keeps it)
        if out is not None:
            return out
    if _capsule_is_valid(cap, _name(b"dltensor_versioned")):
        name, used, fn = b"dltensor_versioned", b"used_dltensor_versioned", lib.mn_view_from_dlpack_versioned
    elif _capsule_is_valid(cap, _name(b"dltensor")):
        name, used, fn = b"dltensor", b"used_dltensor", lib.mn_view_from_dlpack
    else:
        raise ValueError("mnemo: not a DLPack capsule, or one already consumed (its name is not "
                         "'dltensor' or 'dltensor_versioned')")
    p = _capsule_get_pointer(cap, _name(name))
    h = out_handle(fn, p)  # on failure the capsule keeps the tensor (its destructor frees it)
    _capsule_set_name(cap, _name(used))  # mnemo owns the tensor now
    return View._wrap(h)


# Producer types whose __dlpack__ refused max_version once (DLPack < 1.0):
# asked without it from then on, so each export is one call. type -> whether
# it has __dlpack_device__ (from_dlpack's first lines ask it for the CPU case).
_NO_MAX_VERSION = {}


def from_dlpack(obj: Any) -> View:
    """A View of ``obj``'s memory without a copy: obj has __dlpack__ (numpy
    arrays, torch tensors, Views, ...) or is a DLPack capsule (consumed:
    renamed "used_dltensor"). The producer's memory stays alive until the
    last mnemo view of it goes. MnemoError when mnemo refuses the tensor
    (negative strides, read-only, unknown dtype or device)."""
    if _sp is not None and _NO_MAX_VERSION.get(type(obj)) and obj.__dlpack_device__() == (K_DLCPU, 0):
        cap = obj.__dlpack__()  # the common case in one call each: a CPU array of a known pre-1.0 producer
        out = _sp.from_dlpack_capsule(cap)
        return out if type(out) is View else _consume(cap)  # (_consume raises the refusal)
    if isinstance(obj, View):
        return obj[()]
    if _is_capsule(obj):
        return _consume(obj)
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"mnemo: from_dlpack needs an object with __dlpack__ or a DLPack capsule, "
                        f"got {type(obj).__name__}")
    kwargs = {}
    dev_fn = getattr(obj, "__dlpack_device__", None)
    dev = dev_fn() if dev_fn is not None else None
    if dev is not None:
        if type(dev) is tuple and len(dev) == 2 and type(dev[0]) is int and type(dev[1]) is int:
            dev_type = dev[0]
        else:
            try:
                dev_type, _ = (operator.index(x) for x in dev)
            except (TypeError, ValueError):
                raise TypeError(f"mnemo: from_dlpack: {type(obj).__name__}.__dlpack_device__() returned {dev!r}, "
                                "not (device_type, device_id) ints") from None
        if dev_type == K_DLCUDA or dev_type == K_DLCUDAMANAGED:
            kwargs["stream"] = 1  # mnemo works on the legacy default stream
    kind = type(obj)
    if kind in _NO_MAX_VERSION:
        cap = obj.__dlpack__(**kwargs) if kwargs else obj.__dlpack__()
    else:
        try:
            cap = obj.__dlpack__(max_version=(MN_DLPACK_MAJOR, MN_DLPACK_MINOR), **kwargs)
        except TypeError:  # producers of DLPack < 1.0 (numpy 1.x, torch < 2.4) know no max_version
            cap = obj.__dlpack__(**kwargs)
            # (after a success: a TypeError of another cause is not remembered)
            _NO_MAX_VERSION[kind] = dev_fn is not None
    try:
        return _consume(cap)
    except BaseException:
        del cap  # outside the error state: its destructor gives the tensor back now
        raise


# ---- numpy's array interfaces -------------------------------------------------------------------
_LITTLE = sys.byteorder == "little"
_TYPE_KINDS = {"bool": "b", "int": "i", "uint": "u", "float": "f", "complex": "c"}


def typestr(dt):
    """The array-interface typestr of a dtype numpy has ("<f4", "|b1", ...)."""
    order = "|" if dt.itemsize == 1 else ("<" if _LITTLE else ">")
    return f"{order}{_TYPE_KINDS[dt.kind]}{dt.itemsize}"


def _interface(view, what):
    dt = view.dtype
    if not dt.has_numpy:
        raise AttributeError(f"mnemo: {what} has no typestr for {dt.name} (numpy has no such dtype)")
    return dt


_EMPTY = (C.c_longdouble * 2)()


def array_interface(view):
    """numpy's __array_interface__ (version 3) of a CPU view: its memory,
    writable, strides in bytes. AttributeError for views off the CPU (numpy
    must not read device memory) and for dtypes numpy lacks."""
    dev = view.device
    if dev.type != "cpu":
        raise AttributeError(f"mnemo: __array_interface__ is only for CPU views; this one is on {dev} "
                             f"(use .numpy() or .to('cpu'))")
    dt = _interface(view, "__array_interface__")
    item = dt.itemsize
    ptr = view.data_ptr()
    if not ptr and view.numel() == 0:
        ptr = C.addressof(_EMPTY)  # numpy reads NULL as "no data"; an empty array never touches its address
    return {"version": 3, "typestr": typestr(dt), "data": (ptr, False), "shape": view.shape,
            "strides": tuple(s * item for s in view.stride())}


def cuda_array_interface(view):
    """The __cuda_array_interface__ (version 3) of a CUDA view: strides None
    when contiguous, stream 1 (mnemo's work is on the legacy default stream).
    AttributeError for other devices."""
    dev = view.device
    if dev.type != "cuda":
        raise AttributeError(f"mnemo: __cuda_array_interface__ is only for CUDA views; this one is on {dev}")
    dt = _interface(view, "__cuda_array_interface__")
    strides = None if view.is_contiguous() else tuple(s * dt.itemsize for s in view.stride())
    return {"version": 3, "typestr": typestr(dt), "data": (view.data_ptr(), False), "shape": view.shape,
            "strides": strides, "stream": 1}


def _dtype_of_typestr(ts):
    if not isinstance(ts, str) or len(ts) < 3:
        return None
    order, kind, size = ts[0], ts[1], ts[2:]
    if order not in "|=" and order != ("<" if _LITTLE else ">"):
        return None
    if not size.isdigit():
        return None
    n = int(size)
    names = {("b", 1): "bool", ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32", ("i", 8): "int64",
             ("u", 1): "uint8", ("u", 2): "uint16", ("u", 4): "uint32", ("u", 8): "uint64", ("f", 2): "float16",
             ("f", 4): "float32", ("f", 8): "float64", ("c", 8): "complex64", ("c", 16): "complex128"}
    name = names.get((kind, n))
    return _dtype(name) if name else None


def _wrap_interface(owner, ai, dev):
    """A View over the memory an (cuda_)array_interface describes, keeping
    `owner` alive from the C storage; None when it cannot be shared."""
    if not isinstance(ai, dict) or ai.get("mask") is not None:
        return None
    dt = _dtype_of_typestr(ai.get("typestr"))
    data = ai.get("data")
    if dt is None or not isinstance(data, tuple) or len(data) != 2 or data[1]:
        return None  # unknown type, buffer-protocol data or read-only memory: copy instead
    ptr = int(data[0] or 0)
    shape = tuple(int(s) for s in ai.get("shape", ()))
    item = dt.itemsize
    strides = ai.get("strides")
    if strides is None:
        strides, acc = [], item
        for s in reversed(shape):
            strides.append(acc)
            acc *= max(s, 1)
        strides = tuple(reversed(strides))
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape) or any(s < 0 or s % item for s in strides) or ptr % item:
        return None
    if any(s == 0 for s in shape):
        return empty(shape, dtype=dt, device=dev)
    extent = item + sum((n - 1) * s for n, s in zip(shape, strides))
    storage = Storage._wrap(_core.storage_over(dev, ptr, extent, owner))
    return View(storage, dt, shape, tuple(s // item for s in strides), 0)


def asarray(obj: Any, dtype: Any = None, device: DeviceLike | None = None, copy: bool | None = None) -> View:
    """A View of ``obj``: the View itself; without a copy when obj has
    __dlpack__ (numpy, torch, ...), __array_interface__ (writable host
    memory) or __cuda_array_interface__ (CUDA memory); else a copy (nested
    lists, scalars, read-only arrays, negative strides). dtype/device other
    than the result's convert it (a copy); copy=True always copies,
    copy=False raises ValueError when a copy would be needed."""
    v = None
    if isinstance(obj, View):
        v = obj
    else:
        if hasattr(obj, "__dlpack__") and not isinstance(obj, type):
            try:
                v = from_dlpack(obj)
            except (BufferError, TypeError, ValueError, RuntimeError):
                v = None
        if v is None:
            ai = getattr(obj, "__array_interface__", None)
            if ai is not None:
                v = _wrap_interface(obj, ai, Device("cpu"))
        if v is None:
            cai = getattr(obj, "__cuda_array_interface__", None)
            if cai is not None:
                odev = getattr(obj, "device", None)  # torch: .index, CuPy: .id
                index = getattr(odev, "index", None)
                index = getattr(odev, "id", 0) if index is None else index
                v = _wrap_interface(obj, cai, Device("cuda", index))
        if v is None:
            if copy is False:
                raise ValueError(f"mnemo: asarray(copy=False): {type(obj).__name__} cannot be shared without a copy")
            v = _copy_data(obj, None, Device("cpu"))
            copy = None  # already a copy
    dev = v.device if device is None else _device(device)
    dt = v.dtype if dtype is None else _dtype(dtype)
    if (dev != v.device or dt is not v.dtype) and copy is False:
        raise ValueError(f"mnemo: asarray(copy=False): converting to {dev} {dt.name} needs a copy")
    if dev != v.device or dt is not v.dtype or copy:
        return v.to(dev, dt, copy=bool(copy))
    return v
