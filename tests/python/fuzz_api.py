#!/usr/bin/env python3
# tests/python/fuzz_api.py: a deterministic random-argument test of every public
# callable of the Python package (docs/PYTHON.md "Bad input"). It walks
# mnemo.__all__, the __all__ of every public submodule and the public methods,
# properties and dunders of every public class (a name added later is picked up
# by the walk with no change here), and calls each with a seeded random mix of
# valid and junk arguments: wrong types, negative and huge ints (past int64),
# out-of-range indices and slices, bool masks of the wrong shape, index views of
# the wrong dtype or device, released storages, closed allocators, 0-d, empty,
# non-contiguous and quantized views, cpu/sim/meta devices, numpy arrays and
# torch tensors, NaN and infinities, shapes whose byte count overflows int64.
# Checked, after every call: no crash (and, in the asan preset, no sanitizer
# report: the process dies there), only the allowed exception types (ALLOWED
# below), and after a failed call every object it was given (and the receiver)
# unchanged: shape, strides, offset, dtype, device, the bytes of its storage and
# the storage's reference count; the print options and the default allocator.
# Threading: one thread.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/fuzz_api.py [--seed N] [--steps N] [--verbose]
(exit 0 pass, 1 fail). The normal suite runs it briefly (labels cpu;sim), the
fuzz label longer. A failure names the seed, the step and the call to replay
(--only NAME restricts the walk to callables whose name contains NAME).

Allowed exceptions, and why (the package's error contract, docs/PYTHON.md):
- TypeError: an argument of the wrong type (Python's convention, as torch);
- ValueError: a right type with a wrong value (unknown names, bad shapes);
- IndexError: an index or dim out of range (as torch and Python sequences);
- RuntimeError: every error of the library (MnemoError and OutOfMemoryError
  are RuntimeErrors; so is NotImplementedError) and torch's own refusals;
- BufferError: the DLPack/buffer protocol's refusals (docs/PYTHON.md Interop);
- OSError: a path that cannot be opened, read or written;
- ImportError: an optional dependency missing (mnemo.cupy.use without CuPy);
- AttributeError: only from __cuda_array_interface__ / __array_interface__
  (how numpy and CuPy probe for them: documented).
Everything else (ctypes.ArgumentError, OverflowError, ZeroDivisionError,
KeyError, AttributeError elsewhere, AssertionError, MemoryError,
RecursionError, SystemError, StopIteration...) is a defect: an implementation
detail leaking instead of a clear error."""
import argparse
import ctypes
import gc
import importlib
import inspect
import os
import pkgutil
import random
import sys
import tempfile
import traceback
import warnings

import mnemo

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None

ALLOWED = (TypeError, ValueError, IndexError, RuntimeError, BufferError, OSError, ImportError)
PROBE_ATTRIBUTES = {"__cuda_array_interface__", "__array_interface__"}

# Names not called, and why.
SKIP = {
    "mnemo.torch.use": "makes mnemo torch's CUDA allocator for the rest of the process, irreversibly (torch >= 2.0; "
                       "tested in test_python_hooks and hooks_gpu)",
}
# Dunders called when a class defines them itself.
DUNDERS = {"__getitem__", "__setitem__", "__len__", "__iter__", "__repr__", "__str__", "__format__", "__copy__",
           "__deepcopy__", "__reduce_ex__", "__reduce__", "__array__", "__dlpack__", "__dlpack_device__", "__eq__",
           "__ne__", "__hash__", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__contains__",
           "__enter__", "__exit__", "__call__", "__setstate__", "__getstate__", "__instancecheck__",
           "__cuda_array_interface__", "__array_interface__", "__len__", "__reversed__", "__neg__", "__add__"}
EXTRA = {"_new_shared"}  # underscored but on PyTorch's storage documentation page


def _modules():
    mods = {"mnemo": mnemo}
    for m in pkgutil.iter_modules(mnemo.__path__, "mnemo."):
        if m.name.rsplit(".", 1)[1].startswith("_"):
            continue
        try:
            mods[m.name] = importlib.import_module(m.name)
        except ImportError:  # mnemo.cupy without CuPy
            continue
    for name, mod in list(sys.modules.items()):  # namespaces made at import (mnemo.safetensors)
        if name.startswith("mnemo.") and not name.rsplit(".", 1)[1].startswith("_"):
            mods.setdefault(name, mod)
    return mods


def public_callables():
    """[(qualified name, kind, owner class or None, object)] of every public
    callable: kind "func" (a function or a class: calling it constructs),
    "method" (called on an instance), "prop" (read on an instance)."""
    seen, out = set(), []
    mods = _modules()
    public = {id(getattr(m, n, None)) for m in mods.values() for n in getattr(m, "__all__", [])}
    for modname, mod in sorted(mods.items()):
        for name in sorted(getattr(mod, "__all__", [])):
            obj = getattr(mod, name, None)
            if obj is None or id(obj) in seen or inspect.ismodule(obj):
                continue
            seen.add(id(obj))
            qual = f"{modname}.{name}"
            if callable(obj):
                out.append((qual, "func", None, obj))
            if inspect.isclass(obj):
                for klass in obj.__mro__:
                    if klass is object or not klass.__module__.startswith("mnemo"):
                        continue
                    if klass is not obj and id(klass) in public:  # walked under its own name
                        continue
                    # a member of a private base (mnemo.storage._StorageBase) once, on any instance of it
                    owner = obj if klass is obj else klass
                    for attr, member in sorted(vars(klass).items()):
                        if attr.startswith("_") and attr not in DUNDERS and attr not in EXTRA:
                            continue
                        if (id(klass), attr) in seen or (klass is not obj and (id(obj), attr) in seen):
                            continue
                        seen.add((id(klass), attr))
                        seen.add((id(obj), attr))
                        q = f"{qual if klass is obj else klass.__module__ + '.' + klass.__name__}.{attr}"
                        if isinstance(member, property) or attr in PROBE_ATTRIBUTES:
                            out.append((q, "prop", owner, attr))
                        elif isinstance(member, (staticmethod, classmethod)) or callable(member):
                            out.append((q, "method", owner, attr))
    return [o for o in out if o[0] not in SKIP]


# Half of the time a parameter gets a plausible value for its name (so calls
# also get past their first check and reach the deeper paths), else anything.
_small = lambda pool, rng: rng.choice([0, 1, -1, 0, 2])  # noqa: E731
HINTS = {
    **{n: _small for n in ("dim", "dim0", "dim1", "source", "destination", "start", "length", "step", "dimension",
                           "offset", "storage_offset", "zero_point", "low", "high", "end", "count", "size_")},
    **{n: (lambda pool, rng: rng.choice(pool.views[3:8] + [[0], [1, 0], [[0, 1]]]))
       for n in ("index", "mask", "indices")},
    **{n: (lambda pool, rng: rng.choice(pool.views)) for n in ("input", "src", "other", "v", "view", "values", "obj")},
    **{n: (lambda pool, rng: rng.choice(pool.paths)) for n in ("path", "f", "filename", "out", "trace", "a", "b")},
    **{n: (lambda pool, rng: rng.choice(["cpu", "sim", "sim:0", "meta", "cuda"])) for n in ("device",)},
    **{n: (lambda pool, rng: rng.choice([mnemo.float32, mnemo.int64, mnemo.uint8, mnemo.quint8, "float64", None]))
       for n in ("dtype",)},
    "scale": lambda pool, rng: rng.choice([0.5, 1.0, 0.0, float("nan"), -1.0]),
    "size": lambda pool, rng: rng.choice([(2, 3), (3,), (), 4, (0,), [2, 2]]),
    "shape": lambda pool, rng: rng.choice([(2, 3), (3,), (), (-1,), (6,)]),
    "stride": lambda pool, rng: rng.choice([(3, 1), (1,), (), (1, 2), (0,)]),
    "data": lambda pool, rng: rng.choice([[1., 2.], [[1, 2], [3, 4]], 3, [True], b"abcd"]),
    "storage": lambda pool, rng: rng.choice(pool.storages),
    "allocator": lambda pool, rng: rng.choice(pool.allocators + [None]),
}


class Liar:
    """Looks like an array, an index and a DLPack producer, and is none: its
    protocol methods return junk or raise (allowed types only: what a user's
    own exception is, the package passes on)."""
    shape, ndim, dtype, device, _handle = (2, 3), 2, "float32", "cpu", None

    def __index__(self):
        raise ValueError("Liar.__index__")

    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise IndexError("Liar.__getitem__")

    def __array__(self, *a, **k):
        return "not an array"

    def __dlpack__(self, *a, **k):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(id(self), b"not_dltensor", None)  # a capsule of another name

    def __dlpack_device__(self):
        return ("x",)

    def __float__(self):
        raise TypeError("Liar.__float__")


class Pool:
    """The objects the arguments are drawn from: valid ones of every class and
    junk. Remade every `refresh` steps (successful calls may change them)."""

    def __init__(self, rng, tmp):
        self.rng, self.tmp = rng, tmp
        self.make()

    def make(self):
        alloc = mnemo.CachingAllocator("sim")
        closed = mnemo.NaiveAllocator("cpu")
        closed.close()
        self.allocators = [alloc, mnemo.NaiveAllocator("cpu"), mnemo.default_allocator("cpu"),
                           mnemo.default_allocator("sim"), closed, mnemo.PinnedAllocator()]
        released = mnemo.UntypedStorage(8)
        released.release()
        q = mnemo.quantize_per_tensor(mnemo.tensor([0.5, 1.0, -2.0, 3.0]), 0.5, 3, mnemo.quint8)
        views = [
            mnemo.tensor([[1., 2., 3.], [4., 5., 6.]]),
            mnemo.tensor([[1., 2., 3.], [4., 5., 6.]], device="sim").t()[1:],
            mnemo.arange(6, device="sim").reshape(2, 3),
            mnemo.tensor([0, 2], dtype=mnemo.int64),
            mnemo.tensor([1, 0], dtype=mnemo.int32, device="sim"),
            mnemo.tensor([0.0, 1.0]),  # a float "index"
            mnemo.tensor([[True, False, True], [False, True, False]]),
            mnemo.tensor([True, False, True, True, False]),  # a mask of the wrong shape
            mnemo.tensor(3.5),
            mnemo.tensor(2, dtype=mnemo.int64),
            mnemo.empty((0, 3)),
            mnemo.empty((2, 0), device="sim"),
            mnemo.empty((2, 3), device="meta"),
            mnemo.tensor([float("nan"), float("inf"), -float("inf")]),
            mnemo.tensor([1, 2, 255], dtype=mnemo.uint8),
            mnemo.tensor([1 + 2j, 3 - 1j], dtype=mnemo.complex64),
            mnemo.ones(3, dtype=mnemo.bfloat16),
            mnemo.ones(4, dtype=mnemo.float16, device="sim", allocator=alloc),
            mnemo.zeros(2, 2, dtype=mnemo.bool),
            q, q[1:],
            mnemo.empty(5, dtype=mnemo.float8_e4m3fn) if hasattr(mnemo, "float8_e4m3fn") else mnemo.empty(5),
            mnemo.tensor([1., 2., 3., 4.])[::2],
            mnemo.tensor([1., 2.]).expand(3, 2),  # stride 0: writes refused
        ]
        shared = mnemo.UntypedStorage(16).share_memory_()
        filed = mnemo.UntypedStorage.from_file(os.path.join(self.tmp, "backing"), shared=True, size=16)
        pinned = mnemo.UntypedStorage(8).pin_memory()
        views += [mnemo.empty(0).set_(shared, 1, (3,), (1,)) if hasattr(mnemo.View, "set_") else views[0]]
        storages = [mnemo.UntypedStorage(8), mnemo.UntypedStorage(4, device="sim"), released,
                    mnemo.UntypedStorage(0), mnemo.FloatStorage(3), mnemo.FloatStorage([1., 2.]),
                    mnemo.IntStorage(2), mnemo.BoolStorage([True]), mnemo.QUInt8Storage(4),
                    mnemo.TypedStorage(2, dtype=mnemo.float64), views[1].storage(), views[0].untyped_storage(),
                    mnemo.UntypedStorage(6, device="meta"), shared, filed, pinned]
        self.views, self.storages = views, storages
        junk = [Liar(), object(), {}, {"a": 1}, set(), lambda *a, **k: 0, print, ctypes.c_int(3), range(3), iter([1]),
                NotImplemented, type, mnemo, Exception("x")]
        closed_pool = mnemo.MemPool(alloc)
        closed_pool.close()
        stopped = mnemo.profiling.record(alloc, capacity=16)
        stopped.stop()
        self.others = [closed_pool, stopped, mnemo.device("cpu"), mnemo.device("sim:0"), mnemo.device("meta"), mnemo.float32,
                       mnemo.int64, mnemo.bool, mnemo.quint8, mnemo.qint32, mnemo.Generator("sim:0"),
                       mnemo.MemPool(alloc), mnemo.per_tensor_affine] + junk
        if np is not None:
            nps = [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([True, False]), np.array([0, -1, 1]),
                   np.array(2.5), np.empty((0,)), np.array([np.nan, np.inf]), np.array(["a", "b"]),
                   np.array([1, 2], dtype=np.uint64), np.arange(6)[::2], np.float64(1.5), np.int64(2),
                   np.array([object()], dtype=object), np.zeros((2, 3), dtype=bool)]
            self.others += nps
            try:
                self.others.append(np.arange(3).__dlpack__())
            except (AttributeError, TypeError):
                pass
        if torch is not None:
            self.others += [torch.arange(4), torch.tensor([True, False, True]), torch.tensor(float("nan")),
                            torch.zeros(2, 3), torch.tensor([0, 1], dtype=torch.int32), torch.float32,
                            torch.device("cpu"), torch.empty(0), torch.ones(3).t() if False else torch.ones(2, 2).t(),
                            torch.UntypedStorage(4) if hasattr(torch, "UntypedStorage") else torch.ones(1)]
        self.paths = [os.path.join(self.tmp, "f"), os.path.join(self.tmp, "nope", "x"), self.tmp, "", "\x00",
                      os.path.join(self.tmp, "saved.mnemo")]
        try:
            mnemo.save(views[0], self.paths[-1])
        except Exception:  # noqa: BLE001 (the pool keeps whatever it can make)
            pass

    INTS = [0, 1, 2, 3, -1, -2, 5, 7, -100, 2 ** 50, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -2 ** 63,
            -2 ** 63 - 1, 10 ** 30, True, False]
    FLOATS = [0.0, 0.5, -1.5, float("nan"), float("inf"), -float("inf"), 1e308, 2.0 ** 70]
    STRS = ["cpu", "sim", "sim:0", "sim:7", "meta", "cuda", "cuda:0", "float32", "int64", "uint8", "quint8",
            "junk", "", "mnemo.IntStorage", "torch.FloatStorage", "peak", "big", "little", "native", "default",
            "full", "contiguous_format", "caching", "\x00", "-1"]

    def value(self, depth=0):
        rng = self.rng
        r = rng.random()
        if r < 0.22:
            return rng.choice(self.INTS)
        if r < 0.27:
            return rng.choice(self.FLOATS)
        if r < 0.35:
            return rng.choice(self.STRS)
        if r < 0.37:
            return rng.choice(self.paths)
        if r < 0.40:
            return None
        if r < 0.58:
            return rng.choice(self.views)
        if r < 0.68:
            return rng.choice(self.storages)
        if r < 0.80:
            return rng.choice(self.others)
        if r < 0.84:
            return rng.choice(self.allocators)
        if r < 0.88:
            return rng.choice([slice(None), slice(1, None, 2), slice(None, None, -1), slice(0, 0),
                               slice(2 ** 63, None), slice("a"), slice(-100, 100), Ellipsis,
                               b"abc", bytearray(8), memoryview(b"\x01\x02\x03\x04")])
        if depth >= 2:
            return rng.choice(self.INTS)
        n = rng.choice([0, 1, 2, 2, 3, 9, 70]) if rng.random() < 0.95 else 0
        if r < 0.95:  # tuples and lists of small ints (shapes, index lists), sometimes junk inside
            items = [rng.choice([0, 1, 2, 3, -1, 2 ** 50, 2 ** 63]) if rng.random() < 0.85 else self.value(depth + 1)
                     for _ in range(min(n, 4) if rng.random() < 0.8 else n)]
        else:
            items = [self.value(depth + 1) for _ in range(min(n, 3))]
        return tuple(items) if rng.random() < 0.5 else items

    def adopt(self, x):
        """A View or storage a successful call made joins the pool (the pool's
        first objects stay): later calls get odd strides, dtypes and devices."""
        for kind, lst, base in ((mnemo.View, self.views, 24), ((mnemo.UntypedStorage, mnemo.TypedStorage),
                                                                self.storages, 16)):
            if isinstance(x, kind):
                if any(y is x for y in lst):  # identity: == of views compares elements
                    return
                if len(lst) < base + 12:
                    lst.append(x)
                else:
                    lst[base + self.rng.randrange(12)] = x
                return

    def receiver(self, cls):
        """An instance of cls from the pool, or a new one; None when none can be made."""
        rng = self.rng
        cands = [x for x in self.views + self.storages + self.others + self.allocators if isinstance(x, cls)]
        if cands:
            return rng.choice(cands)
        if cls.__name__ == "record":
            return mnemo.profiling.record(self.allocators[0], capacity=16)
        if issubclass(cls, BaseException):
            try:
                return cls(1, "mn_x: bad value (3)") if cls is not mnemo.profiling.ToolError else \
                    cls("mnemo replay: bad", 2, ["mnemo", "replay"], "x")
            except Exception:  # noqa: BLE001
                return None
        if cls.__name__ == "use_mem_pool":
            return mnemo.use_mem_pool(next(x for x in self.others if isinstance(x, mnemo.MemPool)))
        if issubclass(cls, mnemo.TypedStorage):
            try:
                return cls(3)
            except Exception:  # noqa: BLE001
                return cls(3, dtype=mnemo.float32)
        try:
            return cls()
        except Exception:  # noqa: BLE001
            return None


def state(x, depth=0):
    """What must not change when a call on x fails (a hashable-ish tuple)."""
    def attempt(f):
        try:
            return f()
        except Exception as e:  # noqa: BLE001 (a released storage, a meta view: the refusal is the state)
            return ("raises", type(e).__name__)
    if isinstance(x, mnemo.View):
        st = attempt(lambda: x.untyped_storage())
        data = attempt(lambda: st.tobytes()) if isinstance(st, mnemo.UntypedStorage) and x.device.type != "meta" \
            else None
        rc = attempt(lambda: st.refcount) if isinstance(st, mnemo.UntypedStorage) else None
        del st
        return ("view", tuple(x.shape), attempt(x.stride), attempt(x.storage_offset), str(x.dtype), str(x.device),
                data, rc)
    if isinstance(x, mnemo.UntypedStorage):
        return ("untyped", attempt(lambda: x.nbytes()), attempt(lambda: str(x.device)),
                attempt(lambda: x.tobytes()) if attempt(lambda: x.device.type) != "meta" else None,
                attempt(lambda: x.refcount))
    if isinstance(x, mnemo.TypedStorage):
        return ("typed", str(x.dtype), state(x.untyped(), depth))
    if np is not None and isinstance(x, np.ndarray):
        return ("np", x.shape, x.strides, str(x.dtype), x.tobytes() if x.dtype != object else len(x))
    if torch is not None and isinstance(x, torch.Tensor):
        return ("torch", tuple(x.shape), x.stride(), str(x.dtype), x.numpy().tobytes())
    if isinstance(x, (list, tuple)) and depth < 3:
        return (type(x).__name__, len(x), tuple(state(y, depth + 1) for y in x))
    if isinstance(x, (bytearray,)):
        return bytes(x)
    return None


class Failure(Exception):
    pass


class Fuzz:
    def __init__(self, seed, verbose=False, only=None):
        self.seed, self.verbose = seed, verbose
        self.rng = random.Random(seed)
        self.tmp = tempfile.mkdtemp(prefix="mnemo_fuzz_api_")
        os.chdir(self.tmp)  # a junk path that is a relative name writes here
        self.targets = public_callables()
        if only:
            self.targets = [t for t in self.targets if only in t[0]]
        self.pool = Pool(self.rng, self.tmp)
        self.calls = self.raised = 0
        self.outcomes = {}
        self.unraisable = []  # exceptions a finalizer (__del__) could not raise: a defect too
        sys.unraisablehook = lambda u: self.unraisable.append(
            f"{type(u.exc_value).__name__}: {u.exc_value} in {u.object!r}\n"
            + "".join(traceback.format_tb(u.exc_traceback)))

    def describe(self, x):
        try:
            if isinstance(x, (mnemo.View, mnemo.UntypedStorage, mnemo.TypedStorage)):
                s = state(x)
                return f"<{type(x).__name__} {s[1:3] if s[0] != 'typed' else s[1]} {getattr(x, 'dtype', '')}>"
            r = repr(x)
        except Exception as e:  # noqa: BLE001
            r = f"<{type(x).__name__}: repr raises {type(e).__name__}>"
        return r if len(r) < 80 else r[:77] + "..."

    def value_for(self, name):
        """A value for the parameter called name. ``stream`` takes an
        mn_stream_t address as an int, unchecked as a ctypes pointer is
        (docs/PYTHON.md): streams get None, 0 (the default stream) or a value
        that is no int (which must be refused), never another int."""
        rng, pool = self.rng, self.pool
        hint = HINTS.get(name)
        v = pool.value() if hint is None or rng.random() < 0.5 else hint(pool, rng)
        if name == "stream":
            while isinstance(v, int) and not isinstance(v, bool) and v != 0:
                v = self.pool.value()
        return v

    def args_for(self, fn):
        rng, pool = self.rng, self.pool
        try:
            sig = inspect.signature(fn)
            params = [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
        except (TypeError, ValueError):
            params = None
        if params is None:
            return [pool.value() for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4]))], {}
        pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in pos if p.default is p.empty]
        n = rng.randint(len(required), len(pos)) if rng.random() < 0.85 else rng.randint(0, len(pos) + 2)
        args = [self.value_for(pos[k].name if k < len(pos) else "") for k in range(n)]
        if any(p.kind == p.VAR_POSITIONAL for p in params) and rng.random() < 0.5:
            args += [pool.value() for _ in range(rng.randint(0, 3))]
        kwargs = {}
        for p in params:
            if p.kind == p.KEYWORD_ONLY and (p.default is p.empty or rng.random() < 0.3):
                kwargs[p.name] = self.value_for(p.name)
            elif p.kind == p.POSITIONAL_OR_KEYWORD and pos.index(p) >= n and rng.random() < 0.15:
                kwargs[p.name] = self.value_for(p.name)
        if rng.random() < 0.03:
            kwargs["no_such_argument"] = 1
        return args, kwargs

    def step(self, i):
        rng = self.rng
        qual, kind, owner, obj = rng.choice(self.targets)
        recv = None
        if kind == "func":
            fn = obj
        else:
            recv = self.pool.receiver(owner)
            if recv is None:
                return
            if kind == "prop":
                fn = None
            else:
                fn = getattr(recv, obj, None)
                if fn is None:
                    return
        args, kwargs = ([], {}) if fn is None else self.args_for(fn)
        involved = [recv] + list(args) + list(kwargs.values())
        before = [state(x) for x in involved]
        opts = mnemo.get_printoptions()
        defaults = {d: mnemo.default_allocator(d)._handle for d in ("cpu", "sim")}
        call = f"{qual}({', '.join([self.describe(a) for a in args] + [f'{k}={self.describe(v)}' for k, v in kwargs.items()])})"
        if recv is not None:
            call = f"[on {self.describe(recv)}] " + call
        if self.verbose:
            print(f"step {i}: {call}", flush=True)
        self.calls += 1
        err = None
        self.check_unraisable(i, "before " + call)
        try:
            result = getattr(recv, obj) if fn is None else fn(*args, **kwargs)
            if inspect.isgenerator(result) or type(result).__name__ in ("list_iterator", "generator"):
                for _ in zip(range(10), result):
                    pass
            self.pool.adopt(result)
            del result
        except ALLOWED as e:
            err = e
        except AttributeError as e:
            if fn is None and obj in PROBE_ATTRIBUTES:
                err = e
            else:
                raise Failure(f"seed {self.seed} step {i}: {call} raised AttributeError: {e}\n"
                              + traceback.format_exc())
        except Exception as e:  # noqa: BLE001
            raise Failure(f"seed {self.seed} step {i}: {call} raised {type(e).__module__}.{type(e).__name__} "
                          f"(not an allowed type): {e}\n" + traceback.format_exc())
        self.check_unraisable(i, call)
        if err is None:
            self.outcomes[qual] = self.outcomes.get(qual, 0) | 1
            if mnemo.get_printoptions() != opts:  # a successful set_printoptions: back to the defaults
                mnemo.set_printoptions(profile="default", sci_mode=None)
            return
        self.raised += 1
        self.outcomes[qual] = self.outcomes.get(qual, 0) | 2
        msg = f"{type(err).__name__}: {err}"
        del err
        if not str(msg.split(": ", 1)[-1]).strip():
            raise Failure(f"seed {self.seed} step {i}: {call} raised {msg!r}: an error with no message")
        after = [state(x) for x in involved]
        if after != before:
            gc.collect()
            after = [state(x) for x in involved]
        if after != before:
            bad = [(self.describe(x), b, a) for x, b, a in zip(involved, before, after) if a != b]
            raise Failure(f"seed {self.seed} step {i}: {call} failed ({msg}) but changed its arguments: {bad}")
        if mnemo.get_printoptions() != opts:
            raise Failure(f"seed {self.seed} step {i}: {call} failed ({msg}) but changed the print options")
        if {d: mnemo.default_allocator(d)._handle for d in ("cpu", "sim")} != defaults:
            raise Failure(f"seed {self.seed} step {i}: {call} failed ({msg}) but changed the default allocator")
        for x in involved:  # what failed stays usable: it prints
            if isinstance(x, (mnemo.View, mnemo.UntypedStorage, mnemo.TypedStorage)):
                try:
                    repr(x)
                except ALLOWED:
                    pass

    def check_unraisable(self, i, call):
        if self.unraisable:
            u, self.unraisable = self.unraisable, []
            raise Failure(f"seed {self.seed} step {i}: {call}: an exception in a finalizer: {u[0]}")

    def run(self, steps, refresh=60, keep_going=False):
        found = {}
        for i in range(steps):
            if i and i % refresh == 0:
                self.pool = Pool(self.rng, self.tmp)
                for d in ("cpu", "sim"):
                    try:
                        mnemo.set_default_allocator(None, d)
                    except Exception:  # noqa: BLE001 (set_default_allocator's own refusals are fuzzed)
                        pass
                gc.collect()
            if not keep_going:
                self.step(i)
                continue
            try:
                self.step(i)
            except Failure as e:
                text = str(e).split("\n")[0]
                key = (text.split("] ")[-1].split("(")[0].split(": ")[-1], text.split(" raised ")[-1][:30]
                       if " raised " in text else "changed")
                if key not in found:
                    found[key] = text
                    print("FAIL", text, flush=True)
        return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--only", default=None)
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--keep-going", action="store_true", help="report every distinct failure, not only the first")
    a = ap.parse_args()
    # numpy's warnings about junk (a string compared with an array, 1e308 cast to float32) are not errors
    warnings.simplefilter("ignore")
    if a.list:
        for t in public_callables():
            print(t[0], t[1])
        return 0
    f = Fuzz(a.seed, a.verbose, a.only)
    try:
        if f.run(a.steps, keep_going=a.keep_going):
            return 1
    except Failure as e:
        print(f"FAIL {e}", flush=True)
        return 1
    never = sorted(q for q, *_ in f.targets if q not in f.outcomes)
    print(f"fuzz_api: seed {a.seed}: {f.calls} calls over {len(f.targets)} callables, {f.raised} refused "
          f"cleanly; {len(never)} never reached", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
