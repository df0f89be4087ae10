"""mnemo._lib: finds and loads libmnemo.so once (ctypes), declares C functions
and turns mnemo's status codes into Python exceptions.

Threading: loading happens once at import, under Python's import lock; the
declared functions are plain ctypes calls, safe from any thread (mnemo's error
message is thread-local, and ``check`` reads it on the calling thread).

Where the library comes from, first match wins:
  1. ``$MNEMO_LIBRARY`` (a path to libmnemo.so);
  2. the path written by the build into ``mnemo/_paths.py``: the build tree's
     library for the staged package (``<build>/python/mnemo``), the wheel's
     ``mnemo/_native/lib/`` inside the package (``pip install``), or the
     prefix's ``lib/`` relative to the package (``cmake --install``);
  3. the system's search path (``ctypes.util.find_library("mnemo")``).
"""
from __future__ import annotations

import ctypes as C
import ctypes.util
import os
from typing import Any

__all__ = ["lib", "library_path", "built_path", "MnemoError", "OutOfMemoryError", "check", "declare", "Device",
           "Scalar", "VP", "I64P"]

VP = C.c_void_p
I64P = C.POINTER(C.c_int64)

# ---- the C constants the package uses -------------------------------------
# Named as in include/mnemo/*.h; tests/python/test_bindings.py checks every
# MN_*, kDL* and DLPACK_* name of this module against the compiler's values
# (tests/py_layouts.c). Modules read numbers from here, never write them.
MN_OK, MN_ERR_INVALID_ARGUMENT, MN_ERR_OUT_OF_MEMORY, MN_ERR_DEVICE, MN_ERR_NOT_SUPPORTED = 0, 1, 2, 3, 4
MN_ERR_IO, MN_ERR_NO_DEVICE, MN_ERR_INVALID_STATE, MN_ERR_NOT_FOUND, MN_ERR_FORMAT = 5, 6, 7, 8, 9
MN_ERR_OVERFLOW, MN_ERR_INTERNAL, MN_ERR_BUSY = 10, 11, 12
MN_DEVICE_CPU, MN_DEVICE_CUDA, MN_DEVICE_SIM, MN_DEVICE_META, MN_DEVICE_TYPE_COUNT = 0, 1, 2, 3, 4
DEVICE_TYPE_NAMES = ("cpu", "cuda", "sim", "meta")  # indexed by mn_device_type
MN_KIND_BOOL, MN_KIND_UINT, MN_KIND_INT, MN_KIND_FLOAT, MN_KIND_COMPLEX, MN_KIND_QUANTIZED = 0, 1, 2, 3, 4, 5
DTYPE_KIND_NAMES = ("bool", "uint", "int", "float", "complex", "quantized")  # indexed by mn_dtype_kind
MN_SCALAR_BOOL, MN_SCALAR_INT, MN_SCALAR_UINT, MN_SCALAR_FLOAT, MN_SCALAR_COMPLEX = 0, 1, 2, 3, 4
MN_POOL_ALL, MN_POOL_SMALL, MN_POOL_LARGE, MN_POOL_COUNT = 0, 1, 2, 3
MN_MAX_DIMS = 25
MN_VIEW_END = (1 << 63) - 1        # INT64_MAX
MN_VIEW_OFFSET_KEEP = -(1 << 63)   # INT64_MIN
MN_ROUNDUP_BUCKETS = 64
MN_DEVICE_NAME_MAX = 96
MN_TRACE_ACTION_COUNT = 9
MN_REPORT_MAX_CONFIGS = 16
MN_DLPACK_MAJOR, MN_DLPACK_MINOR = 1, 1  # the DLPack version mnemo's versioned tensors carry
kDLCPU, kDLCUDA, kDLCUDAHost, kDLExtDev, kDLCUDAManaged = 1, 2, 3, 12, 13
DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED = 1, 2


def built_path(name: str) -> str | None:
    """The path ``mnemo/_paths.py`` (written by python/CMakeLists.txt) gives
    for ``name`` ("LIBRARY", "CLI"), a relative one resolved against the
    package's folder (the wheel's or the install's); None without _paths.py or
    the entry."""
    try:
        from . import _paths
    except ImportError:
        return None
    path = getattr(_paths, name, None)
    if not path:
        return None
    return path if os.path.isabs(path) else os.path.normpath(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), path))


def _candidates():
    env = os.environ.get("MNEMO_LIBRARY")
    if env:
        yield env
        return
    built = built_path("LIBRARY")
    if built:
        yield built
    found = ctypes.util.find_library("mnemo")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        try:
            return C.CDLL(path), path
        except OSError as e:
            tried.append(f"{path}: {e}")
    raise ImportError("mnemo: cannot load libmnemo.so (set MNEMO_LIBRARY=/path/to/libmnemo.so); tried: "
                      + ("; ".join(tried) if tried else "no candidate (no _paths.py, not on the library path)"))


lib, library_path = _load()

# ---- statuses -------------------------------------------------------------
lib.mn_status_name.restype = C.c_char_p
lib.mn_status_name.argtypes = [C.c_int]
lib.mn_last_error.restype = C.c_char_p
lib.mn_last_error.argtypes = []
lib.mn_clear_error.restype = None
lib.mn_clear_error.argtypes = []


class MnemoError(RuntimeError):
    """A failed mnemo call: ``status`` (the mn_status value), ``status_name``
    ("invalid_argument", ...) and ``message`` (mnemo's own message, naming the
    call and the offending values)."""

    def __init__(self, status: int, message: str) -> None:
        if isinstance(status, bool) or not hasattr(status, "__index__"):
            raise TypeError(f"mnemo: an error's status is an mn_status (an int), not {type(status).__name__}")
        if not -2 ** 31 <= status.__index__() < 2 ** 31:
            raise ValueError(f"mnemo: an error's status is an mn_status (an int32), got {status!r}")
        self.status = status.__index__()
        self.status_name = lib.mn_status_name(self.status).decode()
        self.message = message
        super().__init__(f"{message} [{self.status_name}]" if message else self.status_name)

    def __reduce__(self):
        """Copies and pickles as the same error (class, text, status, every
        attribute), whatever the subclass's __init__ takes."""
        return (_rebuild_error, (type(self), self.args, dict(self.__dict__)))


def _rebuild_error(cls, args, state):
    """A MnemoError (or subclass) of a copy or pickle: its args and attributes, no __init__."""
    if not (isinstance(cls, type) and issubclass(cls, MnemoError)):
        raise TypeError(f"mnemo: a pickled error must be a MnemoError class, not {cls!r}")
    e = cls.__new__(cls, *args)
    e.args = tuple(args)
    e.__dict__.update(state)
    return e


class OutOfMemoryError(MnemoError, MemoryError):
    """MN_ERR_OUT_OF_MEMORY: the device (or the host) had not enough memory."""


def _error(status: int) -> MnemoError:
    msg = (lib.mn_last_error() or b"").decode("utf-8", "replace")
    cls = OutOfMemoryError if status == MN_ERR_OUT_OF_MEMORY else MnemoError
    return cls(status, msg)


def check(status: int) -> None:
    """Raises the MnemoError of a non-zero mn_status; returns None on MN_OK."""
    if status != 0:
        raise _error(status)


def declare(name: str, restype: Any, argtypes: list[Any]) -> Any:
    """Declares lib.<name> with its result and argument types and returns it.
    restype "status" declares an mn_status result that raises MnemoError."""
    fn = getattr(lib, name)
    if restype == "status":
        fn.restype = C.c_int
        fn.errcheck = lambda result, func, args: check(result)
    else:
        fn.restype = restype
    fn.argtypes = argtypes
    return fn


# ---- the structs every module needs ---------------------------------------
class Device(C.Structure):
    """mn_device_t: (type, index); type 0 cpu, 1 cuda, 2 sim."""
    _fields_ = [("type", C.c_int), ("index", C.c_int)]


class _ScalarValue(C.Union):
    _fields_ = [("b", C.c_bool), ("i", C.c_int64), ("u", C.c_uint64), ("f", C.c_double), ("c", C.c_double * 2)]


class Scalar(C.Structure):
    """mn_scalar_t: kind 0 bool, 1 int, 2 uint, 3 float, 4 complex."""
    _fields_ = [("kind", C.c_int), ("v", _ScalarValue)]


declare("mn_version", C.c_char_p, [])
