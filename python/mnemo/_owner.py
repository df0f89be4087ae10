"""mnemo._owner: the one ownership rule of every Python object that holds a
C handle (docs/PYTHON.md "Object lifetimes"), in one place:

- ``Owner``: the object owns its handle (``_handle``, an int) exactly once.
  ``_take()`` is the only way a handle leaves its owner: atomic, so
  ``release()`` / ``close()`` / the garbage collector free it once, whichever
  threads call them and however often.
- ``Resource`` (allocators, memory pools, trace recorders): not duplicated:
  ``copy.copy`` and ``copy.deepcopy`` give the object itself (a deepcopied
  view is cloned from the same allocator), and pickling (so a ``spawn``
  child or a ``multiprocessing`` queue) raises TypeError "cannot pickle
  mnemo.X: ...". Views and storages (mnemo.view, mnemo.storage) are values:
  copies share through the library's reference count or clone, pickles carry
  the bytes.
- ``AllocatorBox``: the C handle of an allocator a Python object owns, with
  the count of what lives from it: every View and Storage object whose
  storage the allocator made, every DLPack export of one, every open
  MemPool. The allocator is destroyed when its owner is closed (or
  collected) AND that count is zero, by whichever comes last. The box has no
  finalizer, so within a garbage cycle (finalizers run in no set order, all
  before any object is cleared) the views' finalizers still find it intact
  and the allocator outlives every block it gave.

Threading: every count and every handle swap happens under one re-entrant
lock (re-entrant: a collection may run finalizers on a thread that holds it).
"""
from __future__ import annotations

import threading
from typing import Any, NoReturn

from . import _core  # noqa: F401 (declares mn_storage_allocator and mn_view_storage, used below)
from ._lib import VP, declare, lib

__all__ = ["Owner", "Resource", "AllocatorBox", "lock", "register_allocator", "box_of", "pin", "unpin",
           "pin_storage", "pin_view", "pool_opened", "pool_closed", "pool_collected", "allocator_closed",
           "live_allocator_count"]

declare("mn_allocator_destroy", None, [VP])
declare("mn_mempool_destroy", "status", [VP])

lock = threading.RLock()
# C allocator address -> its AllocatorBox, for every allocator a Python
# object owns and that is not destroyed yet.
_boxes = {}


class Owner:
    """Base of every class holding a C handle in ``_handle`` (None once it is
    given up): ``_take()`` hands it over exactly once."""

    __slots__ = ()

    def _take(self, _lock: Any = lock) -> int | None:
        """The handle, now no longer this object's (None when already taken)."""
        with _lock:
            # getattr: an object whose __init__ never ran (a wrong keyword argument) has no handle to give
            h = getattr(self, "_handle", None)
            if h is not None:
                self._handle = None
        return h


class Resource(Owner):
    """An object that stands for a resource of this process (an allocator, a
    memory pool, a recorder): never duplicated, never pickled."""

    __slots__ = ()
    _no_pickle = "it owns a resource of this process (a C handle) that cannot travel to another process"

    def __copy__(self) -> Resource:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Resource:
        return self

    def __reduce_ex__(self, protocol: int) -> NoReturn:
        raise TypeError(f"cannot pickle mnemo.{type(self).__name__}: {self._no_pickle}")


class AllocatorBox:
    """An owned C allocator (``handle``, None once destroyed) and what lives
    from it: ``live`` (views, storages, exports), ``pools`` (open MemPools),
    ``raw`` (alloc() addresses not freed), ``orphans`` (pools whose object
    went while busy: destroyed as soon as they can be, or with the allocator)."""

    __slots__ = ("handle", "closed", "live", "pools", "raw", "orphans", "__weakref__")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.closed = False
        self.live = 0
        self.pools = 0
        self.raw = 0
        self.orphans = []

    def __copy__(self):
        return self  # (one box per C allocator: a second would count and destroy it apart)

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot pickle mnemo._owner.AllocatorBox: it holds an allocator of this process")


def register_allocator(handle: int) -> AllocatorBox:
    """The box of an allocator handle a Python object now owns."""
    box = AllocatorBox(handle)
    with lock:
        _boxes[handle] = box
    return box


def box_of(handle: int) -> AllocatorBox | None:
    """The box of a live owned allocator handle, else None (mnemo's own)."""
    with lock:
        return _boxes.get(handle)


def live_allocator_count() -> int:
    """How many allocators Python objects own and that are not destroyed yet (tests)."""
    with lock:
        return len(_boxes)


def _retry_orphans(box: AllocatorBox, _destroy: Any = lib.mn_mempool_destroy) -> None:
    keep = []
    for p in box.orphans:
        try:
            _destroy(p)
        except Exception:  # still busy (a block lives, a thread uses it)
            keep.append(p)
    box.orphans[:] = keep


def _destroy_if_done(box: AllocatorBox, _boxes: dict[int, AllocatorBox] = _boxes,
                     _destroy: Any = lib.mn_allocator_destroy, _retry: Any = _retry_orphans) -> None:
    """Destroys the allocator when its owner is gone and nothing lives from it
    (with the lock held)."""
    if box.orphans and box.handle is not None:
        _retry(box)
    if box.closed and box.live == 0 and box.pools == 0 and box.handle is not None:
        h, box.handle = box.handle, None
        _boxes.pop(h, None)
        box.orphans.clear()  # the allocator frees its pools (mnemo/mempool.h)
        _destroy(h)


def pin(box: AllocatorBox | None, _lock: Any = lock) -> AllocatorBox | None:
    """One more thing lives from the allocator of ``box`` (None: nothing)."""
    if box is not None:
        with _lock:
            box.live += 1
    return box


def unpin(box: AllocatorBox | None, _lock: Any = lock, _done: Any = _destroy_if_done) -> None:
    """The opposite of pin: may destroy the allocator (the last thing gone).
    (Everything it uses is bound now: a DLPack deleter may call it at exit.)"""
    if box is not None:
        with _lock:
            box.live -= 1
            _done(box)


def pin_storage(storage: int, _alloc: Any = lib.mn_storage_allocator, _lock: Any = lock) -> AllocatorBox | None:
    """Pins the box of the allocator that made C storage ``storage`` (when a
    Python object owns it) and returns it, else None."""
    if not _boxes:
        return None
    a = _alloc(storage)
    if not a:
        return None
    with _lock:
        box = _boxes.get(a)
        if box is not None:
            box.live += 1
        return box


def pin_view(view: int, _storage: Any = lib.mn_view_storage) -> AllocatorBox | None:
    """pin_storage of a C view's storage."""
    if not _boxes:
        return None
    return pin_storage(_storage(view))


def pool_opened(allocator_handle: int) -> AllocatorBox | None:
    """A MemPool of this allocator was made (with the lock held): its box
    (None for mnemo's own allocators) counts it."""
    box = _boxes.get(allocator_handle)
    if box is not None:
        box.pools += 1
    return box


def pool_closed(box: AllocatorBox | None, _lock: Any = lock) -> None:
    """A pool counted by pool_opened was destroyed."""
    if box is not None:
        with _lock:
            box.pools -= 1
            _destroy_if_done(box)


def pool_collected(box: AllocatorBox | None, pool: int, _lock: Any = lock,
                   _destroy: Any = lib.mn_mempool_destroy, _done: Any = _destroy_if_done) -> None:
    """A MemPool object was collected with its pool open: destroys the pool,
    or, while blocks of it live, leaves that to the allocator's box (retried
    as things from the allocator go; the allocator's destroy frees it)."""
    with _lock:
        try:
            _destroy(pool)
        except Exception:  # busy
            if box is not None:
                box.orphans.append(pool)
        if box is not None:
            box.pools -= 1
            _done(box)


def allocator_closed(box: AllocatorBox, _lock: Any = lock, _done: Any = _destroy_if_done) -> None:
    """The owner of ``box`` is closed or collected: destroys the allocator now
    when nothing lives from it, else when the last thing goes. (Everything it
    uses is bound now: a finalizer may call it at interpreter exit, when the
    module's globals are gone.)"""
    with _lock:
        box.closed = True
        _done(box)
