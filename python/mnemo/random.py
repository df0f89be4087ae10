"""mnemo.random: seeded random fills (manual_seed, rand, randn, randint,
Generator) over include/mnemo/kernels.h's Philox4x32-10 fills.

The numbers are mnemo's, not PyTorch's: the same seed gives the same
numbers on every device (CPU, SIM, CUDA) and for any layout, but not the
numbers torch.manual_seed gives (docs/PYTHON.md "Random numbers"). A
Generator is a (seed, offset) pair: each fill uses the Philox counter blocks
from the offset on and advances it (mn_kernel_random_blocks), so
consecutive fills give fresh numbers. randint draws float64 uniforms on the
device and maps them to integers on the host (floor(low + (high - low) * u)),
exact for ranges up to 2**53.

Threading: a Generator's state changes under its lock; the default
generator is shared by the whole process, as PyTorch's.
"""
from __future__ import annotations

import ctypes as C
import threading
from typing import Any, Optional

from ._core import VP, VPP, as_int, as_shape, out_handle
from ._lib import Device as CDevice, declare, lib
from .dtype import dtype as _dtype
from .view import View

__all__ = ["Generator", "manual_seed", "seed", "initial_seed", "default_generator", "rand", "randn", "randint",
           "rand_like", "randn_like"]

declare("mn_kernel_random_uniform", "status", [VP, VP, C.c_uint64, C.c_uint64, C.c_double, C.c_double])
declare("mn_kernel_random_normal", "status", [VP, VP, C.c_uint64, C.c_uint64, C.c_double, C.c_double])
declare("mn_stream_default", "status", [CDevice, VPP])
declare("mn_kernel_random_blocks", C.c_uint64, [C.c_int, C.c_int64, C.c_bool])

_DEFAULT_SEED = 67280421310721  # PyTorch's default seed (the numbers still differ: Philox, not mt19937)
_UINT64 = (1 << 64) - 1


class Generator:
    """A Philox generator state: ``seed`` and the counter ``offset`` of the
    next fill. Generator(device="cpu") as torch.Generator; the device is only
    recorded (the same numbers come on every device)."""

    def __init__(self, device: Any = "cpu") -> None:
        from .device import device as _device
        self.device = _device(device)
        self._lock = threading.Lock()
        self._seed = _DEFAULT_SEED
        self._offset = 0

    def manual_seed(self, seed: int) -> "Generator":
        """Sets the seed (any int; taken modulo 2**64 as PyTorch) and restarts the counter."""
        s = as_int(seed, "seed", -(1 << 63), _UINT64) & _UINT64
        with self._lock:
            self._seed, self._offset = s, 0
        return self

    def seed(self) -> int:
        """Seeds from the operating system's randomness; returns the seed."""
        import os
        s = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        """The seed set last."""
        return self._seed

    def get_state(self) -> tuple:
        """(seed, offset): pass to set_state to replay the following fills."""
        with self._lock:
            return (self._seed, self._offset)

    def set_state(self, state: tuple) -> "Generator":
        """Restores a state from get_state."""
        s, o = state
        s, o = as_int(s, "seed", 0, _UINT64), as_int(o, "offset", 0, _UINT64)
        with self._lock:
            self._seed, self._offset = s, o
        return self

    def _take(self, blocks: int) -> tuple:
        with self._lock:
            seed, offset = self._seed, self._offset
            self._offset = (offset + blocks) & _UINT64
        return seed, offset

    def __repr__(self) -> str:
        return f"mnemo.random.Generator(device={self.device}, seed={self._seed}, offset={self._offset})"

    def __reduce__(self):
        return (_rebuild_generator, (str(self.device), self._seed, self._offset))


def _rebuild_generator(device: str, seed: int, offset: int) -> Generator:
    return Generator(device).set_state((seed, offset))


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seeds the default generator (torch.manual_seed); returns it."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    """Seeds the default generator from the operating system; returns the seed."""
    return default_generator.seed()


def initial_seed() -> int:
    """The default generator's seed."""
    return default_generator.initial_seed()


def _stream(stream: Any, view):
    """The mn_stream_t of ``stream``; None: the default stream of the view's device."""
    from .allocator import _stream_handle
    if stream is None:
        return out_handle(lib.mn_stream_default, view.device._c)
    return _stream_handle(stream)


def _fill(out, normal: bool, a: float, b: float, generator: Optional[Generator], stream: Any):
    gen = default_generator if generator is None else generator
    if not isinstance(gen, Generator):
        raise TypeError(f"mnemo: generator must be a mnemo.random.Generator, got {type(gen).__name__}")
    if not out.dtype.is_floating_point or out.dtype.itemsize == 1:
        raise TypeError(f"mnemo: random fills need float16, bfloat16, float32 or float64, got {out.dtype.name}")
    blocks = int(lib.mn_kernel_random_blocks(out.dtype.value, out.numel(), normal))
    s, o = gen._take(blocks)
    fn = lib.mn_kernel_random_normal if normal else lib.mn_kernel_random_uniform
    fn(_stream(stream, out), out._handle, s, o, float(a), float(b))
    return out


def _empty(size, dtype, device, what):
    from .view import empty
    dt = _dtype("float32") if dtype is None else _dtype(dtype)
    return empty(as_shape(size, "size"), dtype=dt, device=device)


def rand(*size: Any, generator: Optional[Generator] = None, dtype: Any = None, device: Any = "cpu",
         stream: Any = None) -> "View":
    """Uniform numbers in [0, 1) (Philox; 24 random bits, 53 for float64):
    rand(2, 3) or rand((2, 3))."""
    return _fill(_empty(size, dtype, device, "rand"), False, 0.0, 1.0, generator, stream)


def randn(*size: Any, generator: Optional[Generator] = None, dtype: Any = None, device: Any = "cpu",
          stream: Any = None) -> "View":
    """Standard normal numbers (Philox + Box-Muller): randn(2, 3) or randn((2, 3))."""
    return _fill(_empty(size, dtype, device, "randn"), True, 0.0, 1.0, generator, stream)


def rand_like(input: "View", *, dtype: Any = None, device: Any = None, generator: Optional[Generator] = None) -> "View":
    """rand() of input's shape, dtype and device (unless given)."""
    from .view import _need_view
    _need_view(input, "rand_like(input)")
    return rand(input.shape, generator=generator, dtype=dtype or input.dtype, device=device or input.device)


def randn_like(input: "View", *, dtype: Any = None, device: Any = None,
               generator: Optional[Generator] = None) -> "View":
    """randn() of input's shape, dtype and device (unless given)."""
    from .view import _need_view
    _need_view(input, "randn_like(input)")
    return randn(input.shape, generator=generator, dtype=dtype or input.dtype, device=device or input.device)


def randint(*args: Any, generator: Optional[Generator] = None, dtype: Any = None, device: Any = "cpu",
            stream: Any = None) -> "View":
    """randint(high, size) or randint(low, high, size): integers uniform in
    [low, high), int64 unless ``dtype`` says otherwise."""
    import numpy as np

    from .view import empty, tensor
    if len(args) == 2:
        low, (high, size) = 0, args
    elif len(args) == 3:
        low, high, size = args
    else:
        raise TypeError("mnemo: randint() takes (high, size) or (low, high, size)")
    low, high = as_int(low, "low"), as_int(high, "high")
    if low >= high:
        raise RuntimeError(f"mnemo: random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    s = as_shape((size,), "size")
    dt = _dtype("int64") if dtype is None else _dtype(dtype)
    u = _fill(empty(s, dtype="float64", device=device), False, 0.0, 1.0, generator, stream)
    span = high - low
    vals = np.minimum(np.floor(u.cpu().numpy() * float(span)), float(span - 1)).astype(np.int64) + low
    return tensor(vals, dtype=dt, device=device)
