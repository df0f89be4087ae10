"""mnemo.device: devices (cpu, cuda:N, sim:N, meta), their properties, counts and
synchronization.

``mnemo.device("cuda:0")``, ``mnemo.device("sim")``, ``mnemo.device(("cuda", 1))``
or a Device give a Device; every function of the package that takes a device
takes any of those forms (and a torch.device, by its string).

Threading: Device objects are immutable values; any thread may use them.
"""
from __future__ import annotations

import ctypes as C
from typing import Any, Tuple, Union

from ._lib import DEVICE_TYPE_NAMES, MN_DEVICE_NAME_MAX, Device as _CDevice, MnemoError, declare, lib

__all__ = ["Device", "device", "device_count", "synchronize", "best_device", "build_has_cuda", "cpu", "sim",
           "cuda", "meta", "is_available"]

_TYPES = DEVICE_TYPE_NAMES  # in mn_device_type order

declare("mn_device_parse", "status", [C.c_char_p, C.POINTER(_CDevice)])
declare("mn_device_count", "status", [C.c_int, C.POINTER(C.c_int)])
declare("mn_device_check", "status", [_CDevice])
declare("mn_device_synchronize", "status", [_CDevice])
declare("mn_device_mem_info", "status", [_CDevice, C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)])
declare("mn_device_best", _CDevice, [])
declare("mn_build_has_cuda", C.c_bool, [])


class _Props(C.Structure):
    _fields_ = [("device", _CDevice), ("name", C.c_char * MN_DEVICE_NAME_MAX), ("total_memory", C.c_size_t),
                ("cc_major", C.c_int), ("cc_minor", C.c_int), ("multiprocessors", C.c_int),
                ("alloc_granularity", C.c_size_t), ("supports_vmm", C.c_bool), ("is_host_accessible", C.c_bool)]


declare("mn_device_get_properties", "status", [_CDevice, C.POINTER(_Props)])


class Device:
    """A device: ``type`` ("cpu", "cuda", "sim" or "meta") and ``index``. Hashable,
    compares by value, prints as "cuda:0" (the CPU as "cpu", the meta device
    as "meta": sizes without data, see docs/STORAGE.md)."""

    __slots__ = ("type", "index")

    def __init__(self, type: str, index: int = 0) -> None:
        if type not in _TYPES:
            raise ValueError(f"mnemo: unknown device type {type!r} (cpu, cuda, sim or meta)")
        if not isinstance(index, int) or index < 0:
            raise ValueError(f"mnemo: device index must be an int >= 0, got {index!r}")
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "index", 0 if type in ("cpu", "meta") else index)

    def __setattr__(self, name, value):
        raise AttributeError("mnemo.Device is immutable")

    def __reduce__(self):
        """Pickles as ``Device(type, index)``."""
        return (Device, (self.type, self.index))

    def __copy__(self):
        """The object itself (immutable)."""
        return self

    def __deepcopy__(self, memo):
        """The object itself (immutable)."""
        return self

    @property
    def _c(self):
        """The mn_device_t of this device."""
        return _CDevice(_TYPES.index(self.type), self.index)

    @classmethod
    def _from_c(cls, d):
        return cls(_TYPES[d.type], d.index)

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.type in ("cpu", "meta") else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"mnemo.device({str(self)!r})"

    def properties(self) -> dict[str, Any]:
        """A dict: name, total_memory (bytes), compute_capability (major, minor),
        multiprocessors, alloc_granularity, supports_vmm, is_host_accessible."""
        p = _Props()
        lib.mn_device_get_properties(self._c, C.byref(p))
        return {"name": p.name.decode(errors="replace"), "total_memory": p.total_memory,
                "compute_capability": (p.cc_major, p.cc_minor), "multiprocessors": p.multiprocessors,
                "alloc_granularity": p.alloc_granularity, "supports_vmm": p.supports_vmm,
                "is_host_accessible": p.is_host_accessible}

    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device (host RAM for the CPU)."""
        free, total = C.c_size_t(), C.c_size_t()
        lib.mn_device_mem_info(self._c, C.byref(free), C.byref(total))
        return free.value, total.value

    def synchronize(self) -> None:
        """Waits for all work queued on every stream of the device."""
        lib.mn_device_synchronize(self._c)


#: What every function of the package taking a device accepts: a Device, a
#: name ("cuda:1", "sim", "cpu"), a (type, index) pair, or anything whose str()
#: is such a name (a torch.device).
DeviceLike = Union[Device, str, Tuple[str, int], Any]


def device(spec: DeviceLike = "cpu", index: int | None = None) -> Device:
    """A Device from "cpu", "cuda", "cuda:1", "sim:0", "meta", ("sim", 0), a Device,
    or anything whose str() is such a name (a torch.device). The device need
    not exist; functions that use it check."""
    if isinstance(spec, Device):
        return spec if index is None else Device(spec.type, index)
    if isinstance(spec, tuple) and len(spec) == 2:
        return Device(spec[0], spec[1])
    text = spec if isinstance(spec, str) else str(spec)
    d = _PARSED.get(text)
    if d is None:
        out = _CDevice()
        lib.mn_device_parse(text.encode(), C.byref(out))
        d = Device._from_c(out)
        if len(_PARSED) < 64:  # (the few names a program uses; Devices are immutable)
            _PARSED[text] = d
    return d if index is None else Device(d.type, index)


_PARSED = {}  # device name -> its Device, for the names parsed so far


def device_count(type: str = "cuda") -> int:
    """How many devices of a type exist (0 for cuda without a GPU or a CUDA build)."""
    n = C.c_int()
    lib.mn_device_count(_TYPES.index(type) if type in _TYPES else -1, C.byref(n))
    return n.value


def is_available(dev: DeviceLike) -> bool:
    """Whether the device exists (True/False, never raises for a well-formed name)."""
    try:
        lib.mn_device_check(device(dev)._c)
        return True
    except MnemoError:
        return False


def synchronize(dev: DeviceLike = "cpu") -> None:
    """Waits for all work on every stream of the device."""
    device(dev).synchronize()


def best_device() -> Device:
    """cuda:0 when a GPU is present, else the CPU (mn_device_best)."""
    return Device._from_c(lib.mn_device_best())


def build_has_cuda() -> bool:
    """Whether libmnemo.so was built with the CUDA backend."""
    return bool(lib.mn_build_has_cuda())


cpu = Device("cpu")


def sim(index: int = 0) -> Device:
    """The simulated GPU sim:<index> (deterministic; no hardware needed)."""
    return Device("sim", index)


meta = Device("meta")
"""The meta device: storages with sizes and no data (dry runs, shape inference)."""


def cuda(index: int = 0) -> Device:
    """The GPU cuda:<index>."""
    return Device("cuda", index)
