"""mnemo.serialize: saving and loading dicts of named views: mnemo's own
format (mnemo.save / mnemo.load: storage sharing kept, checksummed;
docs/SAVE_FORMAT.md) and safetensors (mnemo.safetensors.save / load, also
importable as ``mnemo.safetensors``), to files or to bytes.

Views on any device are saved (device memory is copied to the host first);
loading puts every storage on the device asked for, from its default
allocator. Loaders never trust their input: a malformed file raises
MnemoError (format_error), a missing one MnemoError (not_found).

Threading: every call is self-contained; any thread may save or load.
"""
from __future__ import annotations

import ctypes as C
import os
import sys
import types
from collections.abc import Mapping
from typing import Any, Union

from . import _core
from ._core import VP, VPP, out_handle
from ._lib import declare, lib
from .device import DeviceLike, device as _device
from .view import View

PathLike = Union[str, bytes, "os.PathLike[str]"]  # a file path
Buffer = Any  # bytes, bytearray, memoryview, a numpy array: any bytes-like object

__all__ = ["save", "load", "save_bytes", "load_bytes", "safetensors"]


class _NamedViews(C.Structure):
    _fields_ = [("count", C.c_size_t), ("names", C.POINTER(C.c_char_p)), ("views", VPP), ("nmeta", C.c_size_t),
                ("meta_keys", C.POINTER(C.c_char_p)), ("meta_values", C.POINTER(C.c_char_p))]


_NVP = C.POINTER(_NamedViews)
_CDevice = type(_device("cpu")._c)
_STRS = C.POINTER(C.c_char_p)
declare("mn_named_views_free", None, [_NVP])
declare("mn_save", "status", [C.c_char_p, C.c_size_t, _STRS, VPP])
declare("mn_save_buffer", "status", [C.c_size_t, _STRS, VPP, C.POINTER(VP), C.POINTER(C.c_size_t)])
declare("mn_load", "status", [C.c_char_p, _CDevice, C.POINTER(_NVP)])
declare("mn_load_ex", "status", [C.c_char_p, _CDevice, C.c_uint, C.POINTER(_NVP)])
declare("mn_load_buffer", "status", [VP, C.c_size_t, _CDevice, C.POINTER(_NVP)])
declare("mn_safetensors_save", "status", [C.c_char_p, C.c_size_t, _STRS, VPP, C.c_size_t, _STRS, _STRS])
declare("mn_safetensors_save_buffer", "status", [C.c_size_t, _STRS, VPP, C.c_size_t, _STRS, _STRS, C.POINTER(VP),
                                                 C.POINTER(C.c_size_t)])
declare("mn_safetensors_load", "status", [C.c_char_p, _CDevice, C.POINTER(_NVP)])
declare("mn_safetensors_load_ex", "status", [C.c_char_p, _CDevice, C.c_uint, C.POINTER(_NVP)])
declare("mn_safetensors_load_buffer", "status", [VP, C.c_size_t, _CDevice, C.POINTER(_NVP)])


def _path(p):
    return os.fsencode(os.fspath(p))


def _named(views, what="views"):
    """(count, names array, views array, keepalive) of a {name: View} mapping."""
    if not isinstance(views, Mapping):
        raise TypeError(f"mnemo: {what} must be a dict of name -> View, got {type(views).__name__}")
    names, handles = [], []
    for k, v in views.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"mnemo: view names must be non-empty str, got {k!r}")
        if not isinstance(v, View):
            raise TypeError(f"mnemo: {k!r} is a {type(v).__name__}, not a mnemo.View (use mnemo.asarray)")
        names.append(k.encode())
        handles.append(v._handle)
    n = len(names)
    c_names = (C.c_char_p * max(1, n))(*names)
    c_views = (VP * max(1, n))(*handles)
    return n, c_names, c_views, list(views.values())


def _meta(metadata):
    if metadata is None:
        return 0, None, None
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                    for k, v in metadata.items()):
        raise TypeError("mnemo: safetensors metadata must be a dict of str -> str")
    keys = [k.encode() for k in metadata]
    values = [v.encode() for v in metadata.values()]
    n = len(keys)
    return n, (C.c_char_p * max(1, n))(*keys), (C.c_char_p * max(1, n))(*values)


def _take_bytes(data, size):
    try:
        return C.string_at(data.value, size.value) if size.value else b""
    finally:
        _core.libc_free(data)


def _result(nv, with_meta=False):
    """Turns an mn_named_views_t into ({name: View}, metadata) and frees it
    (each View holds its own handle of the same storage and layout)."""
    try:
        r = nv.contents
        out = {}
        for i in range(r.count):
            h = r.views[i]
            n = lib.mn_view_ndim(h)
            sizes = _core.i64_array(lib.mn_view_sizes(h)[:n]) if n else None
            strides = _core.i64_array(lib.mn_view_strides(h)[:n]) if n else None
            dup = out_handle(lib.mn_view_create, lib.mn_view_storage(h), lib.mn_view_dtype(h), n, sizes, strides,
                             lib.mn_view_offset(h))
            out[r.names[i].decode("utf-8", "replace")] = View._wrap(dup)
        meta = {r.meta_keys[i].decode("utf-8", "replace"): r.meta_values[i].decode("utf-8", "replace")
                for i in range(r.nmeta)}
    finally:
        lib.mn_named_views_free(nv)
    return (out, meta) if with_meta else out


def _buffer(data):
    addr, n, keep = _core.host_buffer(data)
    return addr or None, n, keep


def save(path: PathLike, views: Mapping[str, View]) -> None:
    """Saves {name: View} to ``path`` in mnemo's format: every storage once,
    whole, so views that share a storage share it again after load(). (The
    order save(views, path), as torch.save, is accepted too.) The file is
    written under a temporary name and renamed into place."""
    if isinstance(path, Mapping) and not isinstance(views, Mapping):
        path, views = views, path
    n, names, handles, keep = _named(views)
    lib.mn_save(_path(path), n, names, handles)
    del keep


def save_bytes(views: Mapping[str, View]) -> bytes:
    """The bytes save() would write."""
    n, names, handles, keep = _named(views)
    data, size = VP(), C.c_size_t()
    lib.mn_save_buffer(n, names, handles, C.byref(data), C.byref(size))
    return _take_bytes(data, size)


# mnemo/serialize.h's MN_LOAD_* flags
LOAD_MAP, LOAD_COPY, LOAD_NO_VERIFY = 1, 2, 4


def _load_flags(mmap, verify):
    if mmap not in (None, True, False):
        raise TypeError("mmap must be None (the default: mapped on the CPU), True or False")
    return (0 if mmap is None else LOAD_MAP if mmap else LOAD_COPY) | (0 if verify else LOAD_NO_VERIFY)


def load(path: PathLike, device: DeviceLike = "cpu", mmap: bool | None = None,
         verify: bool = True) -> dict[str, View]:
    """Loads a file of save() onto ``device``: a dict {name: View} in the
    file's order; views that shared a storage share one again. On the CPU the
    storages map the file privately (copy-on-write) unless ``mmap=False``,
    which copies; ``verify=False`` skips the storages' checksums."""
    nv = _NVP()
    lib.mn_load_ex(_path(path), _device(device)._c, _load_flags(mmap, verify), C.byref(nv))
    return _result(nv)


def load_bytes(data: Buffer, device: DeviceLike = "cpu") -> dict[str, View]:
    """load() from bytes (any bytes-like object)."""
    addr, n, keep = _buffer(data)
    nv = _NVP()
    lib.mn_load_buffer(addr, n, _device(device)._c, C.byref(nv))
    return _result(nv)


# ---- safetensors ------------------------------------------------------------------------------
def st_save(tensors: Mapping[str, View], path: PathLike, metadata: Mapping[str, str] | None = None) -> None:
    """Writes {name: View} as a safetensors file (each view stored
    contiguously; views whose bytes overlap are refused; complex128 has no
    safetensors dtype), with optional {str: str} "__metadata__"."""
    n, names, handles, keep = _named(tensors, "tensors")
    nm, keys, values = _meta(metadata)
    lib.mn_safetensors_save(_path(path), n, names, handles, nm, keys, values)


def st_save_bytes(tensors: Mapping[str, View], metadata: Mapping[str, str] | None = None) -> bytes:
    """The bytes of the safetensors file st_save would write."""
    n, names, handles, keep = _named(tensors, "tensors")
    nm, keys, values = _meta(metadata)
    data, size = VP(), C.c_size_t()
    lib.mn_safetensors_save_buffer(n, names, handles, nm, keys, values, C.byref(data), C.byref(size))
    return _take_bytes(data, size)


def st_load(path: PathLike, device: DeviceLike = "cpu", return_metadata: bool = False,
            mmap: bool | None = None) -> Any:
    """Reads a safetensors file onto ``device``: {name: View} (one storage
    per tensor), plus the "__metadata__" dict when return_metadata. On the
    CPU aligned tensors map the file (copy-on-write) unless ``mmap=False``."""
    nv = _NVP()
    lib.mn_safetensors_load_ex(_path(path), _device(device)._c, _load_flags(mmap, True), C.byref(nv))
    return _result(nv, return_metadata)


def st_load_bytes(data: Buffer, device: DeviceLike = "cpu", return_metadata: bool = False) -> Any:
    """st_load() from bytes."""
    addr, n, keep = _buffer(data)
    nv = _NVP()
    lib.mn_safetensors_load_buffer(addr, n, _device(device)._c, C.byref(nv))
    return _result(nv, return_metadata)


safetensors = types.ModuleType("mnemo.safetensors", """mnemo.safetensors: safetensors files of mnemo views:
save(tensors, path, metadata=None), load(path, device="cpu", return_metadata=False),
save_bytes(tensors, metadata=None), load_bytes(data, device="cpu", return_metadata=False).
Threading: every call is self-contained; any thread may use them.""")
for _n, _f in (("save", st_save), ("load", st_load), ("save_bytes", st_save_bytes), ("load_bytes", st_load_bytes)):
    _f.__name__ = _f.__qualname__ = _n
    _f.__module__ = "mnemo.safetensors"
    setattr(safetensors, _n, _f)
safetensors.__all__ = ["save", "load", "save_bytes", "load_bytes"]
sys.modules.setdefault("mnemo.safetensors", safetensors)
