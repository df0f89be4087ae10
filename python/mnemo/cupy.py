"""mnemo.cupy: makes mnemo CuPy's GPU allocator (opt-in: ``import mnemo`` never
imports CuPy).

    import mnemo.cupy
    mnemo.cupy.use()                       # each device's default allocator
    mnemo.cupy.use(mnemo.CachingAllocator("cuda:0", "expandable_segments:True"))

use() installs cupy.cuda.memory.CFunctionAllocator(param, mnemo_cupy_malloc,
mnemo_cupy_free, owner).malloc with cupy.cuda.set_allocator: libmnemo.so's C
entry points, called by CuPy without Python in between. ``param`` is 0 (each
device's default allocator, as PyTorch's hook uses) or the C handle of the
allocator given, which then serves every CuPy allocation (of its device
only: CuPy allocations on another device fail). CuPy passes no stream: the
default stream is used. A failed allocation returns a null pointer to CuPy
(the reason is in mnemo's thread-local last error).

Threading: call use() from one thread, before the allocations it should
serve; the entry points are thread-safe.
"""
from __future__ import annotations

import ctypes as C
from typing import Any

from . import allocator as _allocator
from .allocator import Allocator
from ._lib import declare, lib

__all__ = ["use", "MALLOC_FN", "FREE_FN", "malloc_address", "free_address"]

MALLOC_FN = "mnemo_cupy_malloc"
FREE_FN = "mnemo_cupy_free"

declare("mnemo_cupy_malloc", C.c_void_p, [C.c_void_p, C.c_size_t, C.c_int])
declare("mnemo_cupy_free", None, [C.c_void_p, C.c_void_p, C.c_int])

_kept = []  # allocators handed to CuPy: CuPy's memory objects keep only the raw handle


def malloc_address() -> int:
    """The address of mnemo_cupy_malloc(void *param, size_t size, int device)."""
    return C.cast(lib.mnemo_cupy_malloc, C.c_void_p).value


def free_address() -> int:
    """The address of mnemo_cupy_free(void *param, void *ptr, int device)."""
    return C.cast(lib.mnemo_cupy_free, C.c_void_p).value


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError(f"mnemo.cupy needs CuPy (import cupy failed: {e}); install the cupy package "
                          "built for your CUDA version") from e
    return cupy


def use(allocator: Allocator | None = None, _device_type: str = "cuda") -> Any:
    """Makes mnemo CuPy's allocator (cupy.cuda.set_allocator) and returns the
    CFunctionAllocator installed. allocator: None (every device's default
    allocator) or a mnemo Allocator (a CachingAllocator of one GPU), kept
    alive from then on, since CuPy's memory blocks hold only its C handle.
    ImportError with a clear message without CuPy."""
    cupy = _cupy()
    from .allocator import Allocator
    if allocator is not None and not isinstance(allocator, Allocator):
        raise TypeError(f"mnemo.cupy.use(): allocator must be None or a mnemo Allocator, not "
                        f"{type(allocator).__name__}")
    if _device_type not in ("cuda", "sim"):
        raise ValueError(f"mnemo.cupy.use(): _device_type must be 'cuda' or 'sim', not {_device_type!r}")
    if allocator is not None and allocator.device.type != _device_type:
        raise ValueError(f"mnemo.cupy.use(): CuPy allocates on {_device_type} devices; the allocator given is for "
                         f"{allocator.device}")
    _allocator.serve_framework_hooks_from(_device_type)
    param = 0 if allocator is None else allocator._h()
    c_alloc = cupy.cuda.memory.CFunctionAllocator(param, malloc_address(), free_address(), allocator)
    cupy.cuda.set_allocator(c_alloc.malloc)
    if allocator is not None:
        _kept.append(allocator)
    return c_alloc
