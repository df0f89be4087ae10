"""mnemo: a GPU-first memory allocator and storage runtime (PyTorch's c10
storage model as a C library), from Python.

A pure-Python package over libmnemo.so (ctypes); nothing to compile. See the
README's "Python" section and each submodule's docstring.

Threading: every object may be used from any thread as its C counterpart
allows (views are immutable; storages are ref-counted atomically).
"""
from ._lib import MnemoError, OutOfMemoryError, library_path, lib as _clib
from .device import (Device, best_device, build_has_cuda, cpu, cuda, device, device_count, is_available, sim,
                     synchronize)

__version__ = _clib.mn_version().decode()

__all__ = ["MnemoError", "OutOfMemoryError", "library_path", "__version__", "Device", "device", "device_count",
           "is_available", "synchronize", "best_device", "build_has_cuda", "cpu", "sim", "cuda"]
# ---- the helpers' modules add their imports and names below, one block each ----

