"""mnemo: a GPU-first memory allocator and storage runtime (PyTorch's c10
storage model as a C library), from Python.

Python over libmnemo.so (ctypes), with the compiled fast paths of small calls
in mnemo._speedups (optional: without it, ctypes alone). See the
README's "Python" section and each submodule's docstring.

Threading: every object may be used from any thread as its C counterpart
allows (views are immutable; storages are ref-counted atomically).
"""
from ._lib import MnemoError, OutOfMemoryError, library_path, lib as _clib
from .device import (Device, best_device, build_has_cuda, cpu, cuda, device, device_count, is_available, meta, sim,
                     synchronize)

__version__ = _clib.mn_version().decode()

__all__ = ["MnemoError", "OutOfMemoryError", "library_path", "__version__", "Device", "device", "device_count",
           "is_available", "synchronize", "best_device", "build_has_cuda", "cpu", "sim", "cuda", "meta"]
# ---- the helpers' modules add their imports and names below, one block each ----

# allocators, statistics, profiling (helper h2); mnemo.torch and mnemo.cupy are opt-in: import them yourself
from . import allocator, profiling
from .allocator import (Allocator, CachingAllocator, MemPool, NaiveAllocator, PinnedAllocator, default_allocator,
                        empty_cache, use_mem_pool,
                        max_memory_allocated, max_memory_reserved, memory_allocated, memory_reserved, memory_snapshot,
                        memory_stats, memory_summary, reset_peak_memory_stats, set_default_allocator)

__all__ += ["allocator", "profiling", "Allocator", "CachingAllocator", "MemPool", "use_mem_pool", "NaiveAllocator",
            "PinnedAllocator",
            "default_allocator", "set_default_allocator", "memory_stats", "memory_snapshot", "memory_summary",
            "empty_cache", "reset_peak_memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated",
            "max_memory_reserved"]

# dtypes, storages, views, interchange, save/load (helper h1); mnemo.safetensors is a submodule
from . import dtype as _dtype_module, interop, serialize
from .dtype import *  # noqa: F401,F403 (mnemo.float32, mnemo.bfloat16, ... every dtype of the table)
from .dtype import ALIASES as _ALIASES, DTYPE_NAMES as _DTYPE_NAMES, dtype
from .interop import asarray, from_dlpack
from .serialize import load, load_bytes, safetensors, save, save_bytes
from .view import (View, channels_last, channels_last_3d, contiguous_format, empty, empty_like, empty_strided, full,
                   full_like, ones, ones_like, preserve_format, tensor, zeros, zeros_like)

globals().update({_a: getattr(_dtype_module, _a) for _a in _ALIASES})  # mnemo.half, mnemo.long, ...
__all__ += ["dtype", "Storage", "View", "empty", "empty_strided", "zeros", "ones", "full", "empty_like", "zeros_like",
            "ones_like", "full_like", "tensor", "from_dlpack", "asarray", "save", "load", "save_bytes", "load_bytes",
            "safetensors", "interop", "serialize", "contiguous_format", "channels_last", "channels_last_3d",
            "preserve_format"] + [_n for _n in _DTYPE_NAMES if _n != "bool"]

# printing as PyTorch (print options, tensor repr)
from ._format import get_printoptions, set_printoptions

__all__ += ["set_printoptions", "get_printoptions"]

# PyTorch's storage classes (helper "storage"): UntypedStorage (mnemo.Storage is the same class), TypedStorage and
# the 17 legacy typed classes (FloatStorage, ...)
from . import storage
from .storage import (BFloat16Storage, BoolStorage, ByteStorage, CharStorage, ComplexDoubleStorage,
                      ComplexFloatStorage, DoubleStorage, FloatStorage, HalfStorage, IntStorage, LongStorage,
                      QInt8Storage, QInt32Storage, QUInt2x4Storage, QUInt4x2Storage, QUInt8Storage, ShortStorage,
                      Storage, TypedStorage, UntypedStorage)

__all__ += ["storage", "UntypedStorage", "TypedStorage", "FloatStorage", "DoubleStorage", "HalfStorage",
            "BFloat16Storage", "ByteStorage", "CharStorage", "ShortStorage", "IntStorage", "LongStorage",
            "BoolStorage", "ComplexFloatStorage", "ComplexDoubleStorage", "QUInt8Storage", "QInt8Storage",
            "QInt32Storage", "QUInt4x2Storage", "QUInt2x4Storage"]

# advanced indexing, index operations, arange, quantized views, random fills (helper index)
from . import indexing, quantized, random
from .indexing import arange, gather, index_put, index_select, masked_select, scatter, scatter_add, take
from .quantized import dequantize, int_repr, per_tensor_affine, q_scale, q_zero_point, quantize_per_tensor
from .random import Generator, initial_seed, manual_seed, rand, rand_like, randint, randn, randn_like, seed

__all__ += ["indexing", "quantized", "random", "arange", "gather", "index_put", "index_select", "masked_select",
            "scatter", "scatter_add", "take", "dequantize", "int_repr", "per_tensor_affine", "q_scale",
            "q_zero_point", "quantize_per_tensor", "Generator", "initial_seed", "manual_seed", "rand", "rand_like",
            "randint", "randn", "randn_like", "seed"]
