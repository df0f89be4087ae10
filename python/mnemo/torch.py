"""mnemo.torch: plugs mnemo in as PyTorch's CUDA allocator (opt-in: ``import
mnemo`` never imports torch; ``import mnemo.torch`` does not either, until
use() is called).

    import mnemo.torch
    mnemo.torch.use()            # first thing, before any CUDA tensor exists
    x = torch.empty(1 << 20, device="cuda")
    mnemo.torch.memory_stats()   # mnemo's statistics of cuda:0

use() hands PyTorch the C entry points mnemo_torch_alloc / mnemo_torch_free of
libmnemo.so through torch.cuda.memory.CUDAPluggableAllocator (PyTorch >= 2.0),
so every CUDA tensor then lives in the default allocator of its device
(mnemo's caching allocator, configured by MNEMO_ALLOC_CONF, or one set with
CachingAllocator.set_default()). torch.cuda.empty_cache() then empties mnemo's
cache too (where the PyTorch build lets a pluggable allocator take an
empty-cache hook). PyTorch's own torch.cuda.memory_stats() knows nothing of
a pluggable allocator: use mnemo.torch.memory_stats() instead.

Threading: call use() once, from the main thread, before CUDA memory is
allocated; the entry points themselves are thread-safe.
"""
from __future__ import annotations

import ctypes as C
import re
from typing import Any

from . import allocator as _allocator
from ._lib import declare, lib, library_path
from .device import DeviceLike

__all__ = ["use", "is_used", "memory_stats", "memory_snapshot", "memory_summary", "empty_cache",
           "memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved",
           "reset_peak_memory_stats", "ALLOC_FN", "FREE_FN"]

ALLOC_FN = "mnemo_torch_alloc"
FREE_FN = "mnemo_torch_free"

declare("mnemo_empty_cache", C.c_int, [C.c_int])

_DEVICE_TYPES = ("cuda", "sim")  # sim: tests without a GPU
_state = {"allocator": None, "device_type": None, "hook": None}


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("mnemo.torch needs PyTorch (import torch failed: "
                          f"{e}); install torch >= 2.0 with CUDA support") from e
    return torch


def _version_tuple(text):
    m = re.match(r"\s*(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _check_version(torch):
    ver = getattr(torch, "__version__", "unknown")
    cuda_mem = getattr(getattr(torch, "cuda", None), "memory", None)
    if _version_tuple(ver) < (2, 0) or not hasattr(cuda_mem, "CUDAPluggableAllocator"):
        raise RuntimeError(f"mnemo.torch.use() needs torch >= 2.0 (torch.cuda.memory.CUDAPluggableAllocator "
                           f"appeared in 2.0); found torch {ver} at "
                           f"{getattr(torch, '__file__', '?')}")
    return cuda_mem


def _devices(device_type, device):
    """The device indices to serve: the one asked for, or every device of the type."""
    from .device import device_count
    n = device_count(device_type)
    if device is None:
        return list(range(n))
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        from .device import device as _device
        d = _device(device)
        if d.type not in ("cuda", device_type):
            raise ValueError(f"mnemo.torch.use(): device must be a CUDA device, got {d}")
        index = d.index
    if not 0 <= index < n:
        raise ValueError(f"mnemo.torch.use(): there is no {device_type}:{index} ({n} {device_type} device(s))")
    return [index]


def _empty_all():
    dt = _state["device_type"] or "cuda"
    from .device import device_count
    for i in range(device_count(dt)):
        lib.mnemo_empty_cache(i)


def use(device: DeviceLike | int | None = None, empty_cache_hook: bool = True, _device_type: str = "cuda") -> Any:
    """Makes mnemo PyTorch's CUDA allocator (torch.cuda.memory.change_current_allocator
    with a CUDAPluggableAllocator over libmnemo.so's mnemo_torch_alloc /
    mnemo_torch_free). Call it before the first CUDA tensor is allocated.

    device: None (every GPU) or the one index (or "cuda:N") whose default
    allocator is created now, so that a bad MNEMO_ALLOC_CONF fails here rather
    than as a failed allocation later. empty_cache_hook: make
    torch.cuda.empty_cache() also empty mnemo's caches (when PyTorch's
    pluggable allocator takes a reset hook). Returns the
    CUDAPluggableAllocator; a second call returns the same one.

    Errors: ImportError without torch; RuntimeError naming the version for
    torch < 2.0; RuntimeError when torch or mnemo has no CUDA device; and
    when PyTorch already allocated CUDA memory, PyTorch's own error with a
    hint (use() must come first)."""
    if _state["allocator"] is not None:
        return _state["allocator"]
    torch = _torch()
    cuda_mem = _check_version(torch)
    if _device_type not in _DEVICE_TYPES:
        raise ValueError(f"mnemo.torch.use(): _device_type must be 'cuda' or 'sim', not {_device_type!r}")
    if not torch.cuda.is_available():
        raise RuntimeError(f"mnemo.torch.use(): torch {torch.__version__} sees no CUDA device "
                           "(torch.cuda.is_available() is False): nothing to plug mnemo into")
    from .device import build_has_cuda, device_count
    if _device_type == "cuda" and device_count("cuda") == 0:
        raise RuntimeError("mnemo.torch.use(): mnemo sees no CUDA device ("
                           + ("none found" if build_has_cuda() else "this libmnemo.so was built without CUDA")
                           + f": {library_path})")
    _allocator.serve_framework_hooks_from(_device_type)
    for i in _devices(_device_type, device):
        _allocator.default_allocator(f"{_device_type}:{i}")  # raises on a bad MNEMO_ALLOC_CONF
    alloc = cuda_mem.CUDAPluggableAllocator(library_path, ALLOC_FN, FREE_FN)
    hook = None
    inner = getattr(alloc, "_allocator", None)
    if empty_cache_hook and inner is not None and hasattr(inner, "set_reset_fn"):
        hook = C.CFUNCTYPE(None)(_empty_all)  # void reset_fn(void), kept alive below
        inner.set_reset_fn(C.cast(hook, C.c_void_p).value)
    try:
        cuda_mem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError(f"mnemo.torch.use(): PyTorch refused to change its CUDA allocator: {e}. Hint: PyTorch "
                           "cannot swap its allocator once it has allocated CUDA memory; call "
                           "mnemo.torch.use() first, before any CUDA tensor is created") from e
    _state.update(allocator=alloc, device_type=_device_type, hook=hook)
    return alloc


def is_used() -> bool:
    """Whether use() plugged mnemo into PyTorch in this process."""
    return _state["allocator"] is not None


def _default(device):
    dt = _state["device_type"] or "cuda"
    if device is None:
        device = 0
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"{dt}:{device}"
    elif getattr(device, "type", None) == "cuda" and dt != "cuda":  # a torch.device in sim test mode
        device = f"{dt}:{device.index or 0}"
    return _allocator.default_allocator(device)


for _name in _allocator.DEFAULT_ALLOCATOR_FUNCTIONS:
    if _name != "empty_cache":
        globals()[_name] = _allocator.forward_to_default(
            _name, _default, "the allocator serving PyTorch on a device (an index, \"cuda:N\" or a "
            "torch.device; None: 0)", __name__)
del _name


def empty_cache(device: DeviceLike | int | None = None) -> None:
    """Returns mnemo's cached memory of a device (None: every device) to the
    device (mnemo_empty_cache); MnemoError on failure."""
    if device is None:
        dt = _state["device_type"] or "cuda"
        from .device import device_count
        for i in range(device_count(dt)):
            _default(i).empty_cache()
        return
    _default(device).empty_cache()

