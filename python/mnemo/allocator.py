"""mnemo.allocator: mnemo's allocators from Python: the caching device
allocator (PyTorch's CUDACachingAllocator rules) with its PyTorch-style
configuration, the pinned host pool and the naive allocator, their statistics
(``memory_stats()`` with PyTorch's flat keys), snapshots
(``memory_snapshot()`` shaped like ``torch.cuda.memory_snapshot()``), text
summaries, and the per-device default allocator that storages use when given
none (``mnemo.memory_stats(device)``, ``mnemo.empty_cache(device)``, ...).

Ownership (docs/PYTHON.md "Object lifetimes"): an allocator object made here
(CachingAllocator, PinnedAllocator, NaiveAllocator) owns its C handle, once
(mnemo._owner): ``close()`` (also on leaving a ``with`` block) destroys it,
and refuses with MnemoError (invalid_state), changing nothing, while a view,
a storage, a DLPack export, an open MemPool or a raw ``alloc()`` of it lives,
because they would then point into freed memory. When the object is garbage
collected instead, the destroy waits for the last of those to go (even in a
garbage cycle that holds them all): no error, no leak. Allocators, memory
pools and recorders are not duplicated: ``copy.copy``/``copy.deepcopy`` give
the object itself; pickling raises TypeError (a ``spawn`` child cannot get
one; a ``fork`` child has its own copy of the process, allocator included). An allocator made a
device's default (``set_default()``) is kept alive by this module as long as it
is the default, and afterwards too unless closed explicitly: storages created
while it was the default keep its C pointer. Objects from
``default_allocator(device)`` and ``PinnedAllocator.get_default(device)`` do
not own their handle (mnemo does).

Threading: every method may be called from any thread, as the C allocators
are thread-safe; ``close()`` may be called from several threads at once (it
destroys once) but must not race with other calls on the same allocator, and
``set_default`` / ``set_default_allocator`` must not race with allocations on
that device that rely on the default.
"""
from __future__ import annotations

import ctypes as C
from typing import Any, Callable

from . import _owner
from ._lib import (MN_DEVICE_CUDA, MN_DEVICE_SIM, MN_ERR_OVERFLOW, MN_ROUNDUP_BUCKETS, Device as _CDevice, MnemoError,
                   VP, declare, lib)
from .device import Device, DeviceLike, best_device, device as _device

__all__ = ["Allocator", "CachingAllocator", "PinnedAllocator", "NaiveAllocator", "default_allocator",
           "set_default_allocator", "memory_stats", "memory_snapshot", "memory_summary", "empty_cache",
           "reset_peak_memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated",
           "max_memory_reserved", "caching_config_parse", "caching_config_format"]

# ---- C structs ---------------------------------------------------------------

_POOLS = ("all", "small_pool", "large_pool")  # MN_POOL_ALL, MN_POOL_SMALL, MN_POOL_LARGE
_POOLED = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
           "active_bytes", "inactive_split_bytes", "requested_bytes")  # MN_ALLOC_STATS_MAP, in order
_STAT_FIELDS = ("current", "peak", "allocated", "freed")
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
             "max_split_size")


class _Stat(C.Structure):
    _fields_ = [(f, C.c_int64) for f in _STAT_FIELDS]


class _AllocStats(C.Structure):
    _fields_ = ([("size", C.c_uint32), ("version", C.c_uint32)] + [(n, _Stat * 3) for n in _POOLED]
                + [("oversize_allocations", _Stat), ("oversize_segments", _Stat)]
                + [(n, C.c_int64) for n in _COUNTERS])


class _SnapBlock(C.Structure):
    _fields_ = [("address", C.c_size_t), ("size", C.c_size_t), ("requested_size", C.c_size_t),
                ("state", C.c_int)]


class _SnapSegment(C.Structure):
    _fields_ = [("device", _CDevice), ("address", C.c_size_t), ("total_size", C.c_size_t),
                ("allocated_size", C.c_size_t), ("active_size", C.c_size_t), ("requested_size", C.c_size_t),
                ("stream_id", C.c_uint64), ("is_large", C.c_bool), ("is_expandable", C.c_bool),
                ("pool_id", C.c_uint64), ("nblocks", C.c_size_t), ("blocks", C.POINTER(_SnapBlock))]


class _Snapshot(C.Structure):
    _fields_ = [("nsegments", C.c_size_t), ("segments", C.POINTER(_SnapSegment))]


_ROUNDUP_BUCKETS = MN_ROUNDUP_BUCKETS


class _CachingConfig(C.Structure):
    _fields_ = [("max_split_size", C.c_size_t), ("max_non_split_rounding", C.c_size_t),
                ("garbage_collection_threshold", C.c_double),
                ("roundup_power2_divisions", C.c_uint * _ROUNDUP_BUCKETS), ("expandable_segments", C.c_bool),
                ("per_process_memory_fraction", C.c_double), ("backend", C.c_char * 32)]


class _PinnedConfig(C.Structure):
    _fields_ = [("size_class_divisions", C.c_uint), ("use_host_register", C.c_bool)]


_AP = C.POINTER(VP)  # mn_allocator_t **

# The framework entry points of libmnemo (mnemo/pluggable.h: mnemo_torch_alloc,
# mnemo_cupy_malloc, ...) serve CUDA devices, or SIM ones for tests.
declare("mn_pluggable_set_device_type", "status", [C.c_int])


def serve_framework_hooks_from(device_type):
    """Makes libmnemo's PyTorch and CuPy entry points serve ``device_type``
    devices: "cuda" (what frameworks use) or "sim" (tests without a GPU)."""
    lib.mn_pluggable_set_device_type({"cuda": MN_DEVICE_CUDA, "sim": MN_DEVICE_SIM}[device_type])


declare("mn_allocator_alloc", "status", [VP, C.c_size_t, VP, C.POINTER(VP)])
declare("mn_allocator_free", "status", [VP, VP])
declare("mn_allocator_record_stream", "status", [VP, VP, VP])
declare("mn_allocator_empty_cache", "status", [VP])
declare("mn_allocator_get_stats", "status", [VP, C.POINTER(_AllocStats)])
declare("mn_allocator_reset_peak", "status", [VP])
declare("mn_allocator_snapshot", "status", [VP, C.POINTER(C.POINTER(_Snapshot))])
declare("mn_snapshot_free", None, [C.POINTER(_Snapshot)])
declare("mn_allocator_check_invariants", "status", [VP])
declare("mn_allocator_name", C.c_char_p, [VP])
declare("mn_allocator_device", _CDevice, [VP])
declare("mn_allocator_size_of", C.c_size_t, [VP, VP])
declare("mn_naive_allocator_create", "status", [_CDevice, _AP])
declare("mn_allocator_get_default", "status", [_CDevice, _AP])
declare("mn_allocator_set_default", "status", [_CDevice, VP])
declare("mn_caching_config_default", _CachingConfig, [])
declare("mn_caching_config_parse", "status", [C.c_char_p, C.POINTER(_CachingConfig)])
declare("mn_caching_config_format", "status", [C.POINTER(_CachingConfig), C.c_char_p, C.c_size_t])
declare("mn_caching_allocator_create", "status", [_CDevice, C.POINTER(_CachingConfig), _AP])
declare("mn_pinned_config_default", _PinnedConfig, [])
declare("mn_pinned_size_class", C.c_size_t, [C.POINTER(_PinnedConfig), C.c_size_t])
declare("mn_pinned_allocator_create", "status", [_CDevice, C.POINTER(_PinnedConfig), _AP])
declare("mn_pinned_allocator_get_default", "status", [_CDevice, _AP])
declare("mn_pinned_allocator_lookup", "status", [VP, _AP])
declare("mn_allocator_memory_summary", "status", [VP, C.c_char_p, C.c_size_t, C.POINTER(C.c_size_t)])

_MN_ERR_INVALID_STATE = 7
_MN_ERR_OVERFLOW = MN_ERR_OVERFLOW
_BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")
_SIZE_MAX = C.c_size_t(-1).value

# ---- configuration -----------------------------------------------------------


def _config_value_text(key, value):
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and key == "roundup_power2_divisions":
        parts = []
        for k, v in value.items():
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"mnemo: roundup_power2_divisions[{k!r}] must be an int, got {v!r}")
            parts.append(f"{k}:{v}")
        return "[" + ",".join(parts) + "]"
    raise TypeError(f"mnemo: allocator option {key!r}: cannot use a value of type {type(value).__name__} "
                    f"({value!r}); give a bool, a number or a string")


def _config_text(config):
    """The option string of None, a string or a dict of options."""
    if config is None:
        return ""
    if isinstance(config, str):
        return config
    if isinstance(config, dict):
        parts = []
        for key, value in config.items():
            if not isinstance(key, str):
                raise TypeError(f"mnemo: allocator option names are strings, got {key!r}")
            parts.append(f"{key}:{_config_value_text(key, value)}")
        return ",".join(parts)
    raise TypeError("mnemo: an allocator config is None, an option string such as "
                    "'expandable_segments:True,max_split_size_mb:512' or a dict of those options, "
                    f"not {type(config).__name__}")


def _parse_config(config):
    """A _CachingConfig from None, an option string or a dict (MnemoError on bad options)."""
    cfg = lib.mn_caching_config_default()
    text = _config_text(config)
    if text:
        lib.mn_caching_config_parse(text.encode(), C.byref(cfg))
    return cfg


def _format_config(cfg):
    size = 1024
    while True:
        buf = C.create_string_buffer(size)
        try:
            lib.mn_caching_config_format(C.byref(cfg), buf, size)
            return buf.value.decode()
        except MnemoError as e:
            if e.status != _MN_ERR_OVERFLOW or size > (1 << 20):
                raise
            size *= 4


def _value_from_text(text):
    if text in ("True", "true"):
        return True
    if text in ("False", "false"):
        return False
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text.startswith("[") and text.endswith("]"):
        out = {}
        for item in text[1:-1].split(","):
            k, _, v = item.partition(":")
            k = k.strip()
            out[k if k == ">" else _value_from_text(k)] = _value_from_text(v.strip())
        return out
    return text


def _split_options(text):
    """'a:1,b:[1:2,>:4]' -> [('a', '1'), ('b', '[1:2,>:4]')] (commas inside [] kept)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            item = text[start:i].strip()
            start = i + 1
            if item:
                key, _, value = item.partition(":")
                out.append((key.strip(), value.strip()))
    return out


def caching_config_parse(config: str | dict[str, Any] | None) -> dict[str, Any]:
    """Checks a caching-allocator configuration (None, a PyTorch-style option
    string such as ``"expandable_segments:True,max_split_size_mb:512"`` or a dict
    of those options) and returns it normalized as a dict of the options that
    differ from the defaults (what ``CachingAllocator.config()`` returns).
    Unknown options and bad values raise MnemoError with mnemo's message."""
    return _config_dict(_format_config(_parse_config(config)))


def caching_config_format(config: str | dict[str, Any] | None) -> str:
    """The normalized option string of a configuration (None, a string or a
    dict): only the options that differ from the defaults, "" for the defaults
    (mn_caching_config_format)."""
    return _format_config(_parse_config(config))


def _config_dict(text):
    return {k: _value_from_text(v) for k, v in _split_options(text)}


# ---- allocators ----------------------------------------------------------------


def _stream_handle(stream):
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    # no class of the package is a stream: a View, storage or allocator's _handle is no mn_stream_t
    h = None if type(stream).__module__.split(".")[0] == "mnemo" else getattr(stream, "_handle", None)
    if isinstance(h, int) and not isinstance(h, bool):
        return h
    raise TypeError(f"mnemo: stream must be None, a mnemo stream or an mn_stream_t address, not {stream!r}")


def _check_ptr(ptr):
    if isinstance(ptr, bool) or not isinstance(ptr, int) or ptr < 0:
        raise TypeError(f"mnemo: ptr must be an int address, got {ptr!r}")
    return ptr


def _stats_dict(s):
    out = {}
    for name in _POOLED:
        arr = getattr(s, name)
        for p, pool in enumerate(_POOLS):
            for f in _STAT_FIELDS:
                out[f"{name}.{pool}.{f}"] = getattr(arr[p], f)
    for name in ("oversize_allocations", "oversize_segments"):
        st = getattr(s, name)
        for f in _STAT_FIELDS:
            out[f"{name}.{f}"] = getattr(st, f)
    for name in _COUNTERS:
        out[name] = getattr(s, name)
    return dict(sorted(out.items()))


def _snapshot_list(snap):
    segments = []
    for i in range(snap.nsegments):
        seg = snap.segments[i]
        blocks = []
        for j in range(seg.nblocks):
            b = seg.blocks[j]
            blocks.append({"address": b.address, "size": b.size, "requested_size": b.requested_size,
                           "state": _BLOCK_STATES[b.state] if 0 <= b.state < 3 else "invalid"})
        segments.append({"device": seg.device.index, "address": seg.address, "total_size": seg.total_size,
                         "allocated_size": seg.allocated_size, "active_size": seg.active_size,
                         "requested_size": seg.requested_size, "stream": seg.stream_id,
                         "segment_type": "large" if seg.is_large else "small",
                         "is_expandable": bool(seg.is_expandable),
                         "segment_pool_id": (0, seg.pool_id), "blocks": blocks})
    return segments


class Allocator(_owner.Resource):
    """An mnemo allocator (an ``mn_allocator_t``): allocation, statistics,
    snapshots. Made by CachingAllocator, PinnedAllocator, NaiveAllocator, or
    ``default_allocator(device)`` (a view of a device's default that mnemo
    owns). ``_handle`` is the C pointer as an int; ``mnemo.Storage(nbytes,
    device, allocator=obj)`` allocates from it and keeps ``obj`` alive."""

    _no_pickle = ("an allocator and its memory live in this process; a spawned child makes its own, a forked "
                  "child inherits a copy")

    def __init__(self, handle: int, owned: bool = False) -> None:
        """Refused (TypeError): a C handle given as an int cannot be checked,
        and a wrong one (or one wrapped twice with ``owned``) would crash the
        process. Make allocators with CachingAllocator, NaiveAllocator,
        PinnedAllocator, or get a device's with default_allocator()."""
        self._handle = None
        self._owned = False
        self._box = None
        raise TypeError("mnemo.Allocator(handle) does not wrap C pointers given as ints (a wrong one would crash "
                        "the process): make allocators with CachingAllocator(device), NaiveAllocator(device), "
                        "PinnedAllocator(), or get a device's with default_allocator(device)")

    @classmethod
    def _wrap(cls, handle: int, owned: bool = False) -> "Allocator":
        """An object of cls over a handle the library just gave (never a user's int)."""
        obj = cls.__new__(cls)
        obj._init(handle, owned)
        return obj

    def _init(self, handle: int, owned: bool) -> None:
        """Wraps a handle the library gave; ``owned`` makes this object
        destroy it in close()."""
        self._handle = None
        self._owned = False
        self._box = None
        if not isinstance(handle, int) or handle == 0:
            raise ValueError("mnemo: an allocator handle is a non-zero int")
        self._handle = handle
        self._owned = bool(owned)
        if owned:
            self._box = _owner.register_allocator(handle)

    # -- identity ---------------------------------------------------------
    def _h(self):
        if self._handle is None:
            raise ValueError("mnemo: this allocator is closed")
        return self._handle

    @property
    def name(self) -> str:
        """The allocator's kind: "caching", "naive", "pinned", ..."""
        return lib.mn_allocator_name(self._h()).decode()

    @property
    def device(self) -> Device:
        """The Device it allocates on (the CPU for the pinned pool)."""
        return Device._from_c(lib.mn_allocator_device(self._h()))

    @property
    def closed(self) -> bool:
        """Whether close() destroyed it."""
        return self._handle is None

    def __repr__(self):
        if self._handle is None:
            return f"<mnemo.{type(self).__name__} (closed)>"
        return f"<mnemo.{type(self).__name__} {self.name!r} on {self.device}{'' if self._owned else ', not owned'}>"

    # -- memory -------------------------------------------------------------
    def alloc(self, nbytes: int, stream: Any = None) -> int:
        """Allocates nbytes (an int >= 0) usable on ``stream`` (None: the
        device's default stream) and returns the address as an int (0 for
        nbytes == 0). For tests and tools: storages are the normal way to hold
        memory. OutOfMemoryError when the device has not enough memory."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise TypeError(f"mnemo: nbytes must be an int >= 0, got {nbytes!r}")
        out = VP()
        lib.mn_allocator_alloc(self._h(), nbytes, _stream_handle(stream), C.byref(out))
        box = self._box
        if out.value and box is not None:
            with _owner.lock:
                box.raw += 1  # close() refuses until it is freed
        return out.value or 0

    def free(self, ptr: int) -> None:
        """Frees an address returned by alloc() (0 is a no-op). An address this
        allocator did not give (freed twice, interior, foreign) raises
        MnemoError and changes nothing."""
        _check_ptr(ptr)
        lib.mn_allocator_free(self._h(), ptr or None)
        box = self._box
        if ptr and box is not None:
            with _owner.lock:
                box.raw = max(0, box.raw - 1)

    def record_stream(self, ptr: int, stream: Any) -> None:
        """Marks the block at ``ptr`` as used by ``stream``, so its memory is
        not reused before that stream's work queued so far has completed."""
        _check_ptr(ptr)
        lib.mn_allocator_record_stream(self._h(), ptr, _stream_handle(stream))

    def size_of(self, ptr: int) -> int:
        """Bytes of the live block at ptr; 0 when unknown or not one of its blocks."""
        _check_ptr(ptr)
        return lib.mn_allocator_size_of(self._h(), ptr)

    def empty_cache(self) -> None:
        """Returns cached, unused memory to the device (torch.cuda.empty_cache)."""
        lib.mn_allocator_empty_cache(self._h())

    # -- statistics -----------------------------------------------------------
    def _stats(self):
        s = _AllocStats()
        lib.mn_allocator_get_stats(self._h(), C.byref(s))
        return s

    def memory_stats(self) -> dict[str, int]:
        """A dict of every counter with PyTorch's flat keys, sorted:
        "<counter>.<pool>.<field>" for allocation, segment, active,
        inactive_split, allocated_bytes, reserved_bytes, active_bytes,
        inactive_split_bytes and requested_bytes (pools all, small_pool,
        large_pool; fields current, peak, allocated, freed),
        "oversize_allocations.<field>", "oversize_segments.<field>", and
        num_alloc_retries, num_ooms, num_sync_all_streams, num_device_alloc,
        num_device_free, max_split_size (-1: unlimited). MnemoError
        (not_supported) for an allocator that keeps no statistics (naive)."""
        return _stats_dict(self._stats())

    def memory_allocated(self) -> int:
        """Bytes of live allocations (rounded block sizes)."""
        return self._stats().allocated_bytes[0].current

    def max_memory_allocated(self) -> int:
        """Peak of memory_allocated() since creation or reset_peak_memory_stats()."""
        return self._stats().allocated_bytes[0].peak

    def memory_reserved(self) -> int:
        """Bytes reserved from the device (live and cached)."""
        return self._stats().reserved_bytes[0].current

    def max_memory_reserved(self) -> int:
        """Peak of memory_reserved()."""
        return self._stats().reserved_bytes[0].peak

    def reset_peak_memory_stats(self) -> None:
        """Sets every peak to its current value."""
        lib.mn_allocator_reset_peak(self._h())

    def memory_snapshot(self) -> list[dict[str, Any]]:
        """Every segment, sorted by address, as torch.cuda.memory_snapshot()
        gives them: dicts with device (index), address, total_size,
        allocated_size, active_size, requested_size, stream (mnemo's stream
        id), segment_type ("large" or "small"), is_expandable, segment_pool_id
        ((0, pool id), (0, 0) outside memory pools, as PyTorch's tuple) and blocks, a
        list in address order of {address, size, requested_size, state}
        (state "active_allocated", "active_pending_free" or "inactive")."""
        p = C.POINTER(_Snapshot)()
        lib.mn_allocator_snapshot(self._h(), C.byref(p))
        try:
            return _snapshot_list(p.contents)
        finally:
            lib.mn_snapshot_free(p)

    def memory_summary(self) -> str:
        """The statistics as a table, like torch.cuda.memory_summary()."""
        need = C.c_size_t(0)
        size = 8192
        while True:
            buf = C.create_string_buffer(size)
            try:
                lib.mn_allocator_memory_summary(self._h(), buf, size, C.byref(need))
                return buf.value.decode("utf-8", "replace")
            except MnemoError as e:
                if e.status != _MN_ERR_OVERFLOW or need.value < size:
                    raise
                size = need.value + 1

    def check_invariants(self) -> None:
        """Checks the allocator's internal invariants (blocks tile segments,
        free lists, counters...); MnemoError (internal_error) naming the broken
        fact, None when they hold or the allocator has no checker."""
        lib.mn_allocator_check_invariants(self._h())

    # -- lifetime ---------------------------------------------------------------
    def _live_allocations(self):
        try:
            return self._stats().allocation[0].current
        except MnemoError:
            return 0  # keeps no statistics: cannot tell

    def close(self) -> None:
        """Destroys the allocator (an owned one; for a view it just detaches).
        Refused with MnemoError (invalid_state), changing nothing, while a
        view, storage, DLPack export, open MemPool or raw alloc() of it lives.
        If it is a device's default, the built-in default is restored first.
        Closing twice, or from several threads at once, destroys it once."""
        with _owner.lock:
            if self._handle is None:
                return
            if not self._owned:
                self._handle = None
                return
            box = self._box
            what = f"mnemo: cannot close the {self.name} allocator of {self.device}"
            if box.pools:
                raise MnemoError(_MN_ERR_INVALID_STATE,
                                 f"{what}: {box.pools} memory pool(s) of it are open; close them first")
            if box.live:
                raise MnemoError(_MN_ERR_INVALID_STATE,
                                 f"{what}: {box.live} view(s), storage(s) or DLPack export(s) of its memory are "
                                 "alive; drop them first")
            live = max(box.raw, self._live_allocations())
            if live:
                raise MnemoError(_MN_ERR_INVALID_STATE,
                                 f"{what}: it has {live} live allocation(s); free them (drop the storages) first")
            with _defaults_lock:
                dev = self.device
                if _current_default.get(dev) is self:
                    lib.mn_allocator_set_default(dev._c, None)
                    del _current_default[dev]
                _kept.pop(id(self), None)
            self._handle = None
            _owner.allocator_closed(box)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            try:  # do not hide the block's own exception
                self.close()
            except MnemoError:
                pass
        return False

    def __del__(self, _closed=_owner.allocator_closed):
        # Collected: no other reference exists, so nothing races this. The
        # destroy waits for whatever still lives from it (mnemo._owner).
        # (Not self.__dict__: making the dict here, in a finalizer, would make
        # CPython 3.11 count the object's garbage cycle resurrected.)
        box = getattr(self, "_box", None)
        if box is not None and self._take() is not None:
            _closed(box)


# Defaults set from Python: device -> the Allocator object now default there
# (kept alive), and every allocator that was ever a default (kept alive until
# closed: storages made meanwhile keep its C pointer).
# (The owner lock itself: close() holds it while it restores a default, and a
# collection inside set_default_allocator may run finalizers that take it; one
# re-entrant lock cannot be taken in two orders.)
_defaults_lock = _owner.lock
_current_default = {}
_kept = {}


def _own_create(fn, *args):
    out = VP()
    fn(*args, C.byref(out))
    return out.value


class CachingAllocator(Allocator):
    """The caching device allocator (PyTorch's CUDACachingAllocator rules) on a
    device (sim:N, cuda:N, or the CPU). ``config`` is None (the defaults), a
    PyTorch-style option string ("expandable_segments:True,max_split_size_mb:512",
    the syntax of MNEMO_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF) or a dict of the
    same options ({"expandable_segments": True, "max_split_size_mb": 512}; a
    roundup_power2_divisions dict {size_mb: divisions, ">": divisions} is
    accepted). Unknown options and bad values raise MnemoError with mnemo's
    message, and nothing is created.

    Use it from storages (``mnemo.Storage(n, dev, allocator=a)``), make it the
    device's default (``set_default()``), or allocate raw memory
    (``alloc``/``free``) in tests and tools."""

    def __init__(self, device: DeviceLike, config: str | dict[str, Any] | None = None) -> None:
        self._handle = None
        self._owned = False
        dev = _device(device)
        cfg = _parse_config(config)
        handle = _own_create(lib.mn_caching_allocator_create, dev._c, C.byref(cfg))
        self._init(handle, owned=True)
        self._config = cfg

    def config(self) -> dict[str, Any]:
        """The configuration as a dict of the options that differ from the
        defaults ({} for the defaults); CachingAllocator(dev, a.config()) has the same."""
        return _config_dict(self.config_string())

    def config_string(self) -> str:
        """The configuration as an option string (only non-default options; ""
        for the defaults), mn_caching_config_format."""
        return _format_config(self._config)

    def set_default(self) -> None:
        """Makes this allocator its device's default: storages created on that
        device without an allocator, ``mnemo.memory_stats(device)`` and the
        framework hooks (mnemo.torch, mnemo.cupy) then use it. The previous
        Python-set default stays alive (see the module's ownership notes);
        ``mnemo.set_default_allocator(device, None)`` restores the built-in one."""
        set_default_allocator(self.device, self)

    def is_default(self) -> bool:
        """Whether it is its device's default now."""
        with _defaults_lock:
            return _current_default.get(self.device) is self


class _MemPoolOptions(C.Structure):
    _fields_ = [("source", VP), ("no_split", C.c_bool), ("use_on_oom", C.c_bool)]


declare("mn_mempool_create", "status", [VP, C.POINTER(_MemPoolOptions), C.POINTER(VP)])
declare("mn_mempool_id", C.c_uint64, [VP])
declare("mn_mempool_use", "status", [VP])
declare("mn_mempool_unuse", "status", [VP])
declare("mn_mempool_get_stats", "status", [VP, C.POINTER(_AllocStats)])
declare("mn_mempool_snapshot", "status", [VP, C.POINTER(C.POINTER(_Snapshot))])
declare("mn_mempool_empty_cache", "status", [VP])


class MemPool(_owner.Resource):
    """A memory pool of a CachingAllocator, as torch.cuda.MemPool: its own
    segments, statistics and snapshot; blocks never move between pools.
    ``no_split``: every allocation is a segment of its own; ``use_on_oom``:
    allocations outside pools that run out of memory may take its cached
    blocks. ``with pool.use():`` (or ``mnemo.use_mem_pool(pool)``) routes this
    thread's allocations from the allocator into the pool (nestable; the
    allocator is a CachingAllocator or a caching default, others raise
    MnemoError). The
    allocator's empty_cache leaves the pool's cache alone (PyTorch's rule);
    ``pool.empty_cache()`` gives it back. close() destroys it: MnemoError
    (busy), changing nothing, while a block of it is live (stream capture
    into pools is C-only: mnemo/mempool.h). A pool collected while busy is
    destroyed once its blocks are gone, or with its allocator. The
    allocator (an owned one) is destroyed only after its open pools."""

    _no_pickle = "a memory pool is part of an allocator of this process"

    def __init__(self, allocator: Allocator, no_split: bool = False, use_on_oom: bool = False) -> None:
        self._handle = None
        self._box = None
        if not isinstance(allocator, Allocator):
            raise TypeError("mnemo: a MemPool needs a caching allocator, not " + type(allocator).__name__)
        opts = _MemPoolOptions(None, bool(no_split), bool(use_on_oom))
        out = VP()
        with _owner.lock:
            ah = allocator._h()
            lib.mn_mempool_create(ah, C.byref(opts), C.byref(out))
            self._box = _owner.pool_opened(ah)  # the allocator's close() refuses while it is open
            self._handle = out.value
        self.allocator = allocator  # kept alive: the pool is part of it

    def _h(self):
        if self._handle is None:
            raise ValueError("mnemo: this memory pool is closed")
        return self._handle

    @property
    def id(self) -> int:
        """The pool's id (> 0); snapshots name it in segment_pool_id as (0, id)."""
        return int(lib.mn_mempool_id(self._h()))

    def __repr__(self):
        state = "closed" if self._handle is None else f"id={self.id}"
        return f"MemPool({state}, allocator={self.allocator!r})"

    def use(self) -> use_mem_pool:
        """A context manager: this thread's allocations from the allocator come
        from the pool inside it."""
        return use_mem_pool(self)

    def memory_stats(self) -> dict[str, int]:
        """The pool's part of the allocator's statistics (same keys as
        Allocator.memory_stats)."""
        st = _AllocStats()
        lib.mn_mempool_get_stats(self._h(), C.byref(st))
        return _stats_dict(st)

    def memory_snapshot(self) -> list[dict[str, Any]]:
        """The pool's segments (Allocator.memory_snapshot's format)."""
        p = C.POINTER(_Snapshot)()
        lib.mn_mempool_snapshot(self._h(), C.byref(p))
        try:
            return _snapshot_list(p.contents)
        finally:
            lib.mn_snapshot_free(p)

    def empty_cache(self) -> None:
        """Gives the pool's unused cached segments back to the device."""
        lib.mn_mempool_empty_cache(self._h())

    def close(self) -> None:
        """Destroys the pool (its cache is given back first). Closing twice, or
        from several threads at once, destroys it once."""
        with _owner.lock:
            if self._handle is None:
                return
            lib.mn_mempool_destroy(self._handle)  # MnemoError (busy): nothing changed
            self._handle = None
            _owner.pool_closed(self._box)

    def __del__(self, _gone=_owner.pool_collected):
        h = self._take()
        if h is not None:
            _gone(self._box, h)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False


class use_mem_pool:
    """``with mnemo.use_mem_pool(pool):`` routes the calling thread's
    allocations from the pool's allocator into the pool (torch.cuda.use_mem_pool)."""

    def __init__(self, pool: MemPool) -> None:
        if not isinstance(pool, MemPool):
            raise TypeError("mnemo: use_mem_pool takes a MemPool")
        self.pool = pool

    def __copy__(self):
        """A new context manager for the same pool."""
        return use_mem_pool(self.pool)

    def __deepcopy__(self, memo):
        """A new context manager for the same pool (a pool is a resource: never duplicated)."""
        return use_mem_pool(self.pool)

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle mnemo.use_mem_pool: its MemPool is part of an allocator of this process")

    def __enter__(self):
        lib.mn_mempool_use(self.pool._h())
        return self.pool

    def __exit__(self, exc_type, exc, tb):
        lib.mn_mempool_unuse(self.pool._h())
        return False


class NaiveAllocator(Allocator):
    """The naive allocator: every alloc is a raw device allocation, every free
    a raw free; nothing cached. Keeps no statistics (memory_stats raises
    MnemoError not_supported); refuses frees of pointers it did not give."""

    def __init__(self, device: DeviceLike) -> None:
        self._handle = None
        self._owned = False
        dev = _device(device)
        self._init(_own_create(lib.mn_naive_allocator_create, dev._c), owned=True)


class PinnedAllocator(Allocator):
    """A pool of pinned (page-locked) host memory, PyTorch's
    CachingHostAllocator rules: requests round up to size classes
    (``size_class_divisions`` steps per power of two: 1, 2, 4 (default) or 8),
    blocks are never split and are reused only once the streams recorded on
    them (record_stream) have passed the free. Memory is pinned by the backend
    of ``device_for_events`` (cuda:N, sim:N, or "cpu" for plain memory); the
    allocator's own device is the CPU. Statistics fill the "all" pool only."""

    def __init__(self, device_for_events: DeviceLike = "cpu", size_class_divisions: int | None = None,
                 use_host_register: bool = False) -> None:
        self._handle = None
        self._owned = False
        dev = _device(device_for_events)
        cfg = lib.mn_pinned_config_default()
        if size_class_divisions is not None:
            if isinstance(size_class_divisions, bool) or not isinstance(size_class_divisions, int):
                raise TypeError(f"mnemo: size_class_divisions must be an int, got {size_class_divisions!r}")
            cfg.size_class_divisions = size_class_divisions
        cfg.use_host_register = bool(use_host_register)
        self._init(_own_create(lib.mn_pinned_allocator_create, dev._c, C.byref(cfg)), owned=True)
        self._pconfig = cfg

    def size_class(self, nbytes: int) -> int:
        """The bytes a request of nbytes is rounded to in this pool."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise TypeError(f"mnemo: nbytes must be an int >= 0, got {nbytes!r}")
        cfg = getattr(self, "_pconfig", None)
        return lib.mn_pinned_size_class(C.byref(cfg) if cfg is not None else None, nbytes)

    @classmethod
    def get_default(cls, device: DeviceLike = "cpu") -> PinnedAllocator:
        """The process-wide pinned pool of a device (the one the copy engine
        stages through), owned by mnemo: the returned object does not own it."""
        dev = _device(device)
        h = _own_create(lib.mn_pinned_allocator_get_default, dev._c)
        return cls._wrap(h, owned=False)

    @staticmethod
    def lookup(ptr: int) -> PinnedAllocator | None:
        """The pinned pool (a non-owning PinnedAllocator) holding address ptr,
        or None when no pool does."""
        _check_ptr(ptr)
        out = VP()
        try:
            lib.mn_pinned_allocator_lookup(ptr, C.byref(out))
        except MnemoError as e:
            if e.status_name == "not_found":
                return None
            raise
        return PinnedAllocator._wrap(out.value, owned=False)


# ---- defaults --------------------------------------------------------------------


def _dev(device):
    return best_device() if device is None else _device(device)


def default_allocator(device: DeviceLike | None = None) -> Allocator:
    """The allocator storages on ``device`` use when given none (None: the best
    device, cuda:0 when there is a GPU, else the CPU): the one set with
    set_default / set_default_allocator, else mnemo's built-in one (a caching
    allocator configured from MNEMO_ALLOC_CONF on SIM and CUDA devices, the
    naive allocator on the CPU; a bad MNEMO_ALLOC_CONF raises MnemoError here).
    The returned object is a view: mnemo (or the Python object that was set)
    owns the allocator."""
    dev = _dev(device)
    with _defaults_lock:
        obj = _current_default.get(dev)
        if obj is not None:
            return obj
    h = _own_create(lib.mn_allocator_get_default, dev._c)
    return Allocator._wrap(h, owned=False)


def set_default_allocator(device: DeviceLike, allocator: Allocator | None) -> None:
    """Makes ``allocator`` (an Allocator for that device) the device's default,
    or restores mnemo's built-in default with None. mnemo does not own an
    allocator set so (mn_allocator_set_default): this module keeps the Python
    object alive while it is the default, and afterwards too (storages created
    meanwhile hold its C pointer) until it is closed explicitly."""
    dev = _device(device)
    if allocator is not None and not isinstance(allocator, Allocator):
        raise TypeError(f"mnemo: allocator must be a mnemo Allocator or None, not {type(allocator).__name__}")
    with _defaults_lock:
        lib.mn_allocator_set_default(dev._c, None if allocator is None else allocator._h())
        if allocator is None:
            _current_default.pop(dev, None)
        else:
            _current_default[dev] = allocator
            if allocator._owned:
                _kept[id(allocator)] = allocator


# The torch.cuda-style module functions: each applies one Allocator method to
# the default allocator of a device. mnemo.torch builds its own set from the
# same table over the devices PyTorch uses.
DEFAULT_ALLOCATOR_FUNCTIONS = {
    "memory_stats": "Statistics of {what} (Allocator.memory_stats).",
    "memory_snapshot": "Segments of {what} (Allocator.memory_snapshot).",
    "memory_summary": "The statistics table of {what}.",
    "empty_cache": "Returns the cached memory of {what} to the device.",
    "reset_peak_memory_stats": "Resets the peaks of {what}.",
    "memory_allocated": "Bytes allocated by {what} now.",
    "memory_reserved": "Bytes {what} reserved from the device now.",
    "max_memory_allocated": "Peak bytes allocated by {what}.",
    "max_memory_reserved": "Peak bytes reserved by {what}.",
}
# Their return annotations (Allocator's methods of the same names).
DEFAULT_ALLOCATOR_RETURNS = {
    "memory_stats": "dict[str, int]", "memory_snapshot": "list[dict[str, Any]]", "memory_summary": "str",
    "empty_cache": "None", "reset_peak_memory_stats": "None", "memory_allocated": "int", "memory_reserved": "int",
    "max_memory_allocated": "int", "max_memory_reserved": "int",
}


def forward_to_default(name: str, get_allocator: Callable[[Any], Allocator], what: str,
                       module: str) -> Callable[..., Any]:
    """A function f(device=None) calling Allocator.<name> on
    get_allocator(device), documented from DEFAULT_ALLOCATOR_FUNCTIONS."""
    def f(device: DeviceLike | None = None) -> Any:
        return getattr(get_allocator(device), name)()
    f.__annotations__ = {"device": "DeviceLike | None", "return": DEFAULT_ALLOCATOR_RETURNS[name]}
    f.__name__ = f.__qualname__ = name
    f.__module__ = module
    f.__doc__ = DEFAULT_ALLOCATOR_FUNCTIONS[name].format(what=what)
    return f


for _name in DEFAULT_ALLOCATOR_FUNCTIONS:
    globals()[_name] = forward_to_default(_name, default_allocator, "the device's default allocator", __name__)
del _name
