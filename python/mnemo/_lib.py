"""mnemo._lib: finds and loads libmnemo.so once (ctypes), declares C functions
and turns mnemo's status codes into Python exceptions.

Threading: loading happens once at import, under Python's import lock; the
declared functions are plain ctypes calls, safe from any thread (mnemo's error
message is thread-local, and ``check`` reads it on the calling thread).

Where the library comes from, first match wins:
  1. ``$MNEMO_LIBRARY`` (a path to libmnemo.so);
  2. the path written by the build into ``mnemo/_paths.py``: the build tree's
     library for the staged package (``<build>/python/mnemo``), or the prefix's
     ``lib/`` relative to the installed package;
  3. the system's search path (``ctypes.util.find_library("mnemo")``).
"""
import ctypes as C
import ctypes.util
import os

__all__ = ["lib", "library_path", "built_path", "MnemoError", "OutOfMemoryError", "check", "declare", "Device",
           "Scalar", "VP", "I64P"]

VP = C.c_void_p
I64P = C.POINTER(C.c_int64)


def built_path(name):
    """The path ``mnemo/_paths.py`` (written by python/CMakeLists.txt) gives
    for ``name`` ("LIBRARY", "CLI"), a relative one resolved against the
    package's folder (the install's); None without _paths.py or the entry."""
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

    def __init__(self, status, message):
        self.status = int(status)
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


def _error(status):
    msg = (lib.mn_last_error() or b"").decode("utf-8", "replace")
    cls = OutOfMemoryError if status == 2 else MnemoError
    return cls(status, msg)


def check(status):
    """Raises the MnemoError of a non-zero mn_status; returns None on MN_OK."""
    if status != 0:
        raise _error(status)


def declare(name, restype, argtypes):
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
