"""mnemo.storage: Storage, an untyped, reference-counted run of bytes on one
device (PyTorch's UntypedStorage) over mn_storage_t: allocator-owned,
foreign (wrapped memory), mmap'd files, shared memory and CUDA IPC imports.

A Storage object owns exactly one C reference and drops it when it dies or
on ``release()`` (docs/PYTHON.md "Object lifetimes"); views hold their own
references, so ``View.untyped_storage()`` returns a Storage that shares the
bytes (the C refcount counts both). ``copy.copy`` and ``copy.deepcopy`` clone
the bytes, as PyTorch's storages do (deepcopy once per C storage within one
deepcopy); pickling carries the device, the size and the bytes (a
multiprocessing child gets its own copy). A storage made from a Python
allocator object (anything with ``_handle``, the ``mn_allocator_t*``) keeps
that object alive for as long as the storage (and every view or copy made
from it) lives; the allocators of mnemo.allocator also count it
(mnemo._owner), so even a garbage cycle destroys the allocator last.

Threading: the reference count is atomic; reads (nbytes, data_ptr, copies
out) may run on any thread; ``release()`` may be called from several threads
at once (the reference is dropped once), but not while another thread still
uses the storage. ``resize_`` and ``share_memory_`` change the
storage in place and must not race any other use of it, as in PyTorch.
Device work (fill_, copy_ with non_blocking) is queued on the device's
default stream; host reads (tolist, repr) synchronize the device first.
"""
import ctypes as C
import os

from . import _core, _owner
from ._core import out_handle
from ._lib import Scalar, lib
from .device import Device, device as _device, device_count
from .dtype import dtype as _dtype

__all__ = ["Storage"]

_LOOKUP = object()  # _wrap's box argument: find the allocator box from the handle

_KIND_NAMES = {k: lib.mn_storage_kind_name(k).decode() for k in range(5)}


def _allocator_handle(allocator):
    if allocator is None:
        return None
    h = getattr(allocator, "_handle", None)
    if isinstance(h, bool) or not isinstance(h, int) or h == 0:
        raise TypeError(f"mnemo: allocator must be an object whose _handle is an mn_allocator_t* (an int), "
                        f"got {type(allocator).__name__}")
    return h


class Storage(_owner.Owner):
    """An untyped storage of ``nbytes`` bytes on ``device`` (contents
    undefined), from ``allocator`` (an object with ``_handle``, e.g.
    mnemo.CachingAllocator; None: the device's default allocator).

    Methods follow torch.UntypedStorage: nbytes(), size(), data_ptr(),
    device, resize_(), fill_(), copy_(), clone(), to(), cpu(), pin_memory(),
    share_memory_(), tolist(), from_file(), from_buffer()."""

    __slots__ = ("_handle", "_keep", "_box", "__weakref__")

    def __init__(self, nbytes=0, device="cpu", allocator=None):
        self._handle = self._box = None
        n = _core.as_int(nbytes, "nbytes", 0)
        dev = _device(device)
        ah = _allocator_handle(allocator)
        self._keep = (allocator,) if allocator is not None else ()
        h = out_handle(lib.mn_storage_create, dev._c, n, ah, None)
        self._box = _owner.pin_storage(h)
        self._handle = h

    @classmethod
    def _wrap(cls, handle, keep=(), box=_LOOKUP):
        """A Storage owning one reference `handle` (taken over, not retained);
        box: the allocator box its storage counts on (default: looked up)."""
        s = object.__new__(cls)
        s._handle = None
        s._keep = tuple(keep)
        s._box = _owner.pin_storage(handle) if box is _LOOKUP else _owner.pin(box)
        s._handle = handle
        return s

    def __del__(self):
        self._drop()

    def _drop(self, _release=lib.mn_storage_release, _unpin=_owner.unpin):
        h = self._take()  # once, whichever thread gets here first
        if h:
            _release(h)
            _unpin(self._box)

    def _h(self):
        if not self._handle:
            raise ValueError("mnemo: the storage was released")
        return self._handle

    def release(self):
        """Drops this object's reference now (the bytes go when no view or
        other Storage holds one). The object is unusable afterwards (ValueError).
        Releasing twice, or from several threads at once, drops it once."""
        self._drop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()

    # ---- queries ---------------------------------------------------------------
    def nbytes(self):
        """The size in bytes."""
        return int(lib.mn_storage_nbytes(self._h()))

    size = nbytes

    def __len__(self):
        return self.nbytes()

    @property
    def device(self):
        """The Device the bytes live on."""
        return Device._from_c(lib.mn_storage_device(self._h()))

    def data_ptr(self):
        """The address of the first byte (0 when empty)."""
        return lib.mn_storage_data(self._h()) or 0

    @property
    def refcount(self):
        """The C reference count (this object's, every view's, every export's)."""
        return int(lib.mn_storage_refcount(self._h()))

    @property
    def kind(self):
        """Where the bytes come from: "allocator", "foreign", "file", "shared" or "ipc"."""
        return _KIND_NAMES.get(lib.mn_storage_get_kind(self._h()), "invalid")

    def resizable(self):
        """Whether resize_ may change the size (allocator-owned storages)."""
        return bool(lib.mn_storage_is_resizable(self._h()))

    def is_pinned(self):
        """Whether the bytes are page-locked host memory."""
        return bool(lib.mn_storage_is_pinned(self._h()))

    def is_shared(self):
        """Whether other processes can map the bytes (shared memory, a shared
        file mapping, a CUDA IPC import)."""
        return bool(lib.mn_storage_is_shared(self._h()))

    @property
    def filename(self):
        """The path of a file storage (from_file); None for other kinds."""
        f = lib.mn_storage_filename(self._h())
        return os.fsdecode(f) if f is not None else None

    @property
    def allocator_handle(self):
        """The owning mn_allocator_t* as an int (allocator kind), else None."""
        return lib.mn_storage_allocator(self._h()) or None

    # ---- contents -----------------------------------------------------------------
    def resize_(self, nbytes):
        """Grows or shrinks an allocator-owned storage in place, keeping the
        common prefix (new bytes undefined). MnemoError (invalid_state) for
        other kinds, and while any View of this storage lives (the bytes
        move: drop the views first, or resize a clone); a failure leaves the
        storage as it was."""
        lib.mn_storage_resize(self._h(), _core.as_int(nbytes, "nbytes", 0), None)
        return self

    def fill_(self, value):
        """Sets every byte to ``value`` (0..255)."""
        v = _core.as_int(value, "byte value", -128, 255)
        lib.mn_storage_fill(self._h(), v, None)
        return self

    def zero_(self):
        """Sets every byte to 0."""
        return self.fill_(0)

    def copy_(self, src, non_blocking=False):
        """Copies the bytes of ``src`` (a Storage of the same nbytes, any
        device) into this storage; blocking unless non_blocking."""
        if not isinstance(src, Storage):
            raise TypeError(f"mnemo: Storage.copy_ takes a Storage, got {type(src).__name__}")
        lib.mn_storage_copy(self._h(), src._h(), bool(non_blocking), None)
        return self

    def clone(self):
        """A new storage with the same bytes on the same device."""
        return Storage._wrap(out_handle(lib.mn_storage_clone, self._h(), None), self._keep)

    # ---- copies and pickles (docs/PYTHON.md "Object lifetimes") ---------------------
    def __copy__(self):
        """copy.copy: a clone, as torch.UntypedStorage's."""
        return self.clone()

    def __deepcopy__(self, memo):
        """copy.deepcopy: a clone, one per C storage within one deepcopy (views
        of one storage deep-copied together share the new one), as PyTorch."""
        seen = memo.setdefault("mnemo.storages", {})
        key = self._h()
        new = seen.get(key)
        if new is None:
            new = seen[key] = self.clone()
        return new

    def __reduce_ex__(self, protocol):
        """Pickles by value: device, size and bytes (none on the meta device);
        the unpickled storage comes from its device's default allocator."""
        self._h()
        dev = self.device
        data = None if dev.type == "meta" else self.tobytes()
        return (_rebuild_storage, (str(dev), self.nbytes(), data))

    def to(self, device, non_blocking=False):
        """The storage on ``device``: this storage (a new object sharing it)
        when already there, else a copy. A non_blocking copy to the CPU lands
        in pinned memory; synchronize before reading it."""
        dev = _device(device)
        h = out_handle(lib.mn_storage_to, self._h(), dev._c, bool(non_blocking), None)
        return Storage._wrap(h, _core.keep_for(h, self._handle, self._keep))

    def cpu(self):
        """to("cpu")."""
        return self.to("cpu")

    def pin_memory(self, device=None):
        """A page-locked copy of a CPU storage, from the pinned pool of
        ``device`` (the device that will copy it; None: cuda:0 when there is
        a GPU, else sim:0). MnemoError for storages off the CPU."""
        if device is None:
            device = "cuda:0" if device_count("cuda") > 0 else "sim:0"
        h = out_handle(lib.mn_storage_pin_memory, self._h(), _device(device)._c)
        return Storage._wrap(h, _core.keep_for(h, self._handle, self._keep))

    def share_memory_(self):
        """Moves a CPU storage into (unnamed, sealed) shared memory in place;
        a no-op when already shared and for CUDA storages; MnemoError on SIM."""
        lib.mn_storage_share_memory(self._h())
        return self

    def shm_handle(self):
        """The text handle ("mnemo-shm:<pid>:<fd>:<nbytes>") of a shared-memory
        storage that another process opens with Storage.from_shm_handle while
        this storage lives."""
        buf = C.create_string_buffer(64)
        lib.mn_storage_shm_handle(self._h(), buf, len(buf))
        return buf.value.decode()

    @classmethod
    def from_shm_handle(cls, handle):
        """Maps the shared-memory storage named by a handle of shm_handle()."""
        if not isinstance(handle, str):
            raise TypeError("mnemo: a shared-memory handle is a str")
        return cls._wrap(out_handle(lib.mn_storage_from_shm_handle, handle.encode()))

    def byteswap(self, dtype):
        """Reverses the byte order of every element of ``dtype`` in place
        (complex: each part)."""
        lib.mn_storage_byteswap_dtype(self._h(), _dtype(dtype).value, None)
        return self

    def tolist(self, dtype="uint8"):
        """The contents as Python values, read as elements of ``dtype`` (the
        bytes by default, as torch.UntypedStorage.tolist)."""
        dt = _dtype(dtype)
        n = self.nbytes() // dt.itemsize
        arr = (Scalar * max(1, n))()
        count = C.c_size_t()
        lib.mn_storage_tolist(self._h(), dt.value, arr, n, C.byref(count))
        return [_core.from_scalar(arr[i]) for i in range(count.value)]

    def tobytes(self):
        """The bytes as a Python bytes object (device memory is copied to the host)."""
        host = self if self.device.type == "cpu" else self.to("cpu")
        n = host.nbytes()
        return C.string_at(host.data_ptr(), n) if n else b""

    def __repr__(self):
        if not self._handle:
            return "mnemo.Storage(<released>)"
        need = C.c_size_t()
        buf = C.create_string_buffer(512)
        lib.mn_storage_format(self._handle, _dtype("uint8").value, 16, buf, len(buf), C.byref(need))
        if need.value >= len(buf):
            buf = C.create_string_buffer(need.value + 1)
            lib.mn_storage_format(self._handle, _dtype("uint8").value, 16, buf, len(buf), None)
        return f"mnemo.Storage({buf.value.decode(errors='replace')})"

    # ---- other sources --------------------------------------------------------------
    @classmethod
    def from_file(cls, path, shared=False, nbytes=0):
        """Maps ``nbytes`` of a file (0: its whole size). shared: MAP_SHARED,
        read-write, created or extended as needed; else MAP_PRIVATE (the file
        must exist and be large enough; writes stay in this process)."""
        p = os.fsencode(os.fspath(path))
        n = _core.as_int(nbytes, "nbytes", 0)
        return cls._wrap(out_handle(lib.mn_storage_from_file, p, bool(shared), n))

    @classmethod
    def from_buffer(cls, data, device="cpu"):
        """A new storage on ``device`` holding a copy of the bytes of a
        bytes-like object (bytes, bytearray, memoryview, numpy array, ...)."""
        dev = _device(device)
        addr, n, keep = _core.host_buffer(data)
        h = out_handle(lib.mn_storage_from_buffer_copy, dev._c, addr or None, n)
        del keep
        return cls._wrap(h)


def _rebuild_storage(device, nbytes, data):
    """The storage of a pickle (Storage.__reduce_ex__): ``nbytes`` bytes on
    ``device`` holding ``data`` (bytes, or None on the meta device)."""
    n = _core.as_int(nbytes, "nbytes", 0)
    dev = _device(device)
    if data is None:
        if dev.type != "meta":
            raise ValueError(f"mnemo: a pickled storage on {dev} carries its bytes")
        return Storage(n, dev)
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"mnemo: a pickled storage's bytes are bytes, not {type(data).__name__}")
    if len(data) != n:
        raise ValueError(f"mnemo: a pickled storage of {n} bytes carries {len(data)}")
    return Storage.from_buffer(data, dev)
