#!/usr/bin/env python3
# tests/python/test_copies.py: copy.copy, copy.deepcopy and a pickle round trip
# of an instance of EVERY class of the mnemo package (found by walking its
# modules, so a new class is covered or the test names it), each with the
# meaning it has (docs/PYTHON.md "Object lifetimes"): views and storages are
# values (copies share or clone as PyTorch's, pickles carry the bytes),
# dtypes and devices are immutable values, allocators, pools and recorders are
# resources (copies are the object itself, pickling is a TypeError), errors
# keep their text and attributes; never a crash, never a C handle held twice
# (the process must also exit cleanly: run under the asan preset too).
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_copies.py
(exit 0 pass, 1 fail, 77 skip: numpy missing). Label cpu;sim."""
import copy
import ctypes
import gc
import importlib
import inspect
import pickle
import pkgutil
import sys
import unittest

try:
    import numpy  # noqa: F401 (the package needs it)
except ImportError:
    print("SKIPPED: numpy is not installed")
    sys.exit(77)

import mnemo
from mnemo import _owner, profiling


_CDATA = (ctypes.Structure, ctypes.Union, ctypes._Pointer, ctypes._SimpleCData, ctypes.Array)


def roundtrip(x):
    return pickle.loads(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL))


def package_classes():
    """Every class defined in a module of the package (mnemo.cupy when cupy imports)."""
    out = {}
    for info in pkgutil.iter_modules(mnemo.__path__):
        if info.name.startswith("__"):  # __main__ runs the CLI
            continue
        try:
            mod = importlib.import_module("mnemo." + info.name)
        except ImportError:  # mnemo.cupy without cupy
            continue
        for name, cls in vars(mod).items():
            if inspect.isclass(cls) and cls.__module__ == mod.__name__:
                out[f"{mod.__name__}.{name}"] = cls
    return out


# Classes with no instance of their own to copy, and why.
NO_INSTANCES = {
    "mnemo._owner.Owner": "abstract base: every subclass is walked",
    "mnemo._owner.Resource": "abstract base: every subclass is walked",
    "mnemo._format._Formatter": "lives only inside one repr() call",
    "mnemo._format._Printer": "lives only inside one repr() call",
    "mnemo.storage._StorageBase": "the storage classes' shared base, never made itself (its subclasses are)",
}
# The snapshot importer (tools/import_torch_snapshot.py staged as mnemo._torch_snapshot):
# its objects live only inside one mnemo.profiling import, its errors become
# profiling.SnapshotError before they leave it.
NO_INSTANCES.update({f"mnemo._torch_snapshot.{n}": "the snapshot importer's internals, alive only during an import"
                     for n in ("Device", "Snapshot", "SnapshotError", "Stacks", "_FrameParser", "_Layout",
                               "_Progress", "_Ranges", "_RestrictedUnpickler")})


class Walk(unittest.TestCase):
    def setUp(self):
        self.alloc = mnemo.CachingAllocator("sim")

    def tearDown(self):
        gc.collect()

    def makers(self):
        """class name -> a function making an instance (closures over this test's objects)."""
        a = self.alloc
        pool = mnemo.MemPool(a)
        return {
            "mnemo._lib.MnemoError": lambda: mnemo.MnemoError(1, "mn_x: bad value (3)"),
            "mnemo._lib.OutOfMemoryError": lambda: mnemo.OutOfMemoryError(2, "mn_y: out of memory"),
            "mnemo.profiling.ToolError": lambda: profiling.ToolError("mnemo replay: bad", 2, ["mnemo", "replay"], "x"),
            "mnemo.profiling.SnapshotError":
                lambda: profiling.SnapshotError("mnemo.profiling.replay: x.pickle: malformed snapshot: empty file"),
            "mnemo.device.Device": lambda: mnemo.device("sim:0"),
            "mnemo.dtype.dtype": lambda: mnemo.bfloat16,
            "mnemo.allocator.Allocator": lambda: mnemo.default_allocator("sim"),
            "mnemo.allocator.CachingAllocator": lambda: mnemo.CachingAllocator("sim"),
            "mnemo.allocator.NaiveAllocator": lambda: mnemo.NaiveAllocator("cpu"),
            "mnemo.allocator.PinnedAllocator": lambda: mnemo.PinnedAllocator(),
            "mnemo.allocator.MemPool": lambda: pool,
            "mnemo.allocator.use_mem_pool": lambda: mnemo.use_mem_pool(pool),
            "mnemo.profiling.record": lambda: profiling.record(mnemo.CachingAllocator("sim"), capacity=16),
            "mnemo._owner.AllocatorBox": lambda: mnemo.empty(4, device="sim", allocator=a)._box,
            "mnemo._format._Options": lambda: mnemo._format._Options(),
            "mnemo.storage._LegacyStorageMeta": lambda: mnemo.FloatStorage,  # its instances are the typed classes
            "mnemo.view.View": lambda: mnemo.tensor([[1., 2., 3.], [4., 5., 6.]], device="sim").t()[1:],
            "mnemo.quantized.QScheme": lambda: mnemo.per_tensor_affine,
            "mnemo.random.Generator": lambda: mnemo.Generator("sim:0").manual_seed(5),
        }

    def storage_maker(self, cls):
        """Storage classes (mnemo.Storage, and the storage API's untyped,
        typed and dtype-named classes once they exist): 4 elements (bytes for
        untyped) on the CPU, however the class takes its size."""
        for args, kwargs in (((4,), {}), ((4,), {"dtype": mnemo.float32}), ((), {})):
            try:
                x = cls(*args, **kwargs)
            except (TypeError, ValueError, RuntimeError):
                continue
            x.untyped().fill_(60)  # defined values, none a NaN (0x3c bytes: 1.0 as float16, ...)
            return lambda x=x: x
        return None

    def test_every_class(self):
        makers = self.makers()
        unknown = []
        for qual, cls in sorted(package_classes().items()):
            if qual in NO_INSTANCES:
                continue
            if issubclass(cls, _CDATA):
                self.check_ctypes(qual, cls)
                continue
            make = makers.get(qual)
            if make is None and qual.startswith("mnemo.storage."):
                make = self.storage_maker(cls)
            if make is None:
                make = self.plain_maker(cls)
                if make is None:
                    unknown.append(qual)
                    continue
                with self.subTest(cls=qual, generic=True):
                    self.check_generic(make())
                continue
            with self.subTest(cls=qual):
                self.check_object(qual, make())
        self.assertEqual(unknown, [], "classes with no maker in test_copies.py: add one (or a NO_INSTANCES reason)")

    @staticmethod
    def plain_maker(cls):
        """A class made with no arguments (a new class of the package with no
        written expectation yet): the generic check below."""
        try:
            cls()
        except Exception:
            return None
        return cls

    def check_generic(self, x):
        """Copies are of the same class (or the object itself), pickling
        round-trips or is refused with TypeError: never a crash."""
        for fn in (copy.copy, copy.deepcopy, roundtrip):
            try:
                y = fn(x)
            except TypeError as e:
                self.assertIn("pickle", str(e))
            else:
                self.assertIs(type(y), type(x))

    def check_ctypes(self, qual, cls):
        """C layout mirrors: a copy has the same bytes, or (pointers) ctypes' ValueError."""
        with self.subTest(cls=qual):
            x = cls()
            for fn in (copy.copy, copy.deepcopy, roundtrip):
                try:
                    y = fn(x)
                except ValueError as e:
                    self.assertIn("pointer", str(e))
                else:
                    self.assertEqual(ctypes.string_at(ctypes.addressof(y), ctypes.sizeof(y)),
                                     ctypes.string_at(ctypes.addressof(x), ctypes.sizeof(x)))

    def check_object(self, qual, x):
        cls = type(x)
        if isinstance(x, mnemo.MnemoError):
            for y in (copy.copy(x), copy.deepcopy(x), roundtrip(x)):
                self.assertIs(type(y), cls)
                self.assertEqual((str(y), y.args, y.__dict__), (str(x), x.args, x.__dict__))
        elif isinstance(x, type):  # a class (FloatStorage, ...): copies and pickles are the class itself
            self.assertIs(copy.copy(x), x)
            self.assertIs(copy.deepcopy(x), x)
            self.assertIs(roundtrip(x), x)
        elif isinstance(x, (mnemo.Device, mnemo.dtype)):
            self.assertIs(copy.copy(x), x)
            self.assertIs(copy.deepcopy(x), x)
            self.assertEqual(roundtrip(x), x)
            if isinstance(x, mnemo.dtype):
                self.assertIs(roundtrip(x), x)
        elif isinstance(x, (_owner.Resource, _owner.AllocatorBox)):
            self.assertIs(copy.copy(x), x)
            self.assertIs(copy.deepcopy(x), x)
            with self.assertRaisesRegex(TypeError, "cannot pickle"):
                pickle.dumps(x)
        elif isinstance(x, mnemo.use_mem_pool):
            y = copy.copy(x)
            self.assertIs(y.pool, x.pool)
            with self.assertRaisesRegex(TypeError, "cannot pickle mnemo.use_mem_pool"):
                pickle.dumps(x)
        elif isinstance(x, mnemo.View):
            self.check_view(x)
        elif type(x).__module__ == "mnemo.storage":  # every storage class: values of its own class
            for y in (copy.copy(x), copy.deepcopy(x), roundtrip(x)):
                self.assertEqual(type(y), cls)
                self.assertEqual(y.tolist(), x.tolist())
                self.assertEqual(y.untyped().tolist(), x.untyped().tolist())  # the same bytes
                self.assertEqual(y.device, x.device)
        elif isinstance(x, mnemo._format._Options):
            for y in (copy.copy(x), copy.deepcopy(x), roundtrip(x)):
                self.assertEqual([getattr(y, k) for k in y.__slots__], [getattr(x, k) for k in x.__slots__])
        elif isinstance(x, mnemo.quantized.QScheme):  # a singleton, as torch.per_tensor_affine
            for y in (copy.copy(x), copy.deepcopy(x), roundtrip(x)):
                self.assertIs(y, x)
        elif isinstance(x, mnemo.Generator):  # a value: the same state, its own counter from then on
            mnemo.rand(3, generator=x)
            for y in (copy.copy(x), copy.deepcopy(x), roundtrip(x)):
                self.assertIsNot(y, x)
                self.assertEqual((y.get_state(), y.device), (x.get_state(), x.device))
                self.assertEqual(mnemo.rand(3, generator=y).tolist(), mnemo.rand(3, generator=copy.copy(x)).tolist())
        else:
            self.fail(f"{qual}: no expectation written for this class")

    def check_view(self, v):
        geometry = lambda t: (t.dtype, t.device, t.shape, t.stride(), t.storage_offset(), t.tolist())  # noqa: E731
        c = copy.copy(v)
        self.assertEqual(geometry(c), geometry(v))
        self.assertTrue(c.shares_storage(v), "copy.copy shares the storage, as PyTorch")
        d = copy.deepcopy(v)
        self.assertEqual(geometry(d), geometry(v))
        self.assertFalse(d.shares_storage(v), "copy.deepcopy clones")
        p = roundtrip(v)
        self.assertEqual(geometry(p), geometry(v))
        self.assertFalse(p.shares_storage(v))


class Views(unittest.TestCase):
    """Views copied and pickled together keep sharing, on every device and dtype."""

    def test_devices_and_dtypes(self):
        for dev in ("cpu", "sim"):
            for dt in (mnemo.float32, mnemo.bfloat16, mnemo.int8, mnemo.bool, mnemo.complex64, mnemo.float8_e4m3fn):
                with self.subTest(dev=dev, dtype=dt):
                    base = mnemo.ones(3, 4, dtype=dt, device=dev)
                    v = base.t()[1:, ::2]
                    for y in (copy.copy(v), copy.deepcopy(v), roundtrip(v)):
                        self.assertEqual((y.dtype, y.device, y.shape, y.stride(), y.storage_offset(), y.tolist()),
                                         (v.dtype, v.device, v.shape, v.stride(), v.storage_offset(), v.tolist()))

    def test_every_kind_of_storage(self):
        """Views over imported (numpy, torch), wrapped, file-backed, shared,
        pinned and released-source storages copy and pickle by value."""
        import os
        import tempfile
        import numpy as np
        arr = np.arange(6, dtype=np.float32).reshape(2, 3)
        kinds = {"numpy": mnemo.from_dlpack(arr), "buffer": mnemo.View(mnemo.Storage.from_buffer(arr.tobytes()),
                                                                        mnemo.float32, (2, 3))}
        try:
            import torch
            kinds["torch"] = mnemo.from_dlpack(torch.arange(6, dtype=torch.float32).reshape(2, 3))
        except ImportError:
            pass
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "f.bin")
            with open(path, "wb") as f:
                f.write(arr.tobytes())
            kinds["file"] = mnemo.View(mnemo.Storage.from_file(path, nbytes=24), mnemo.float32, (2, 3))
            shared = mnemo.Storage(24)
            shared.copy_(mnemo.Storage.from_buffer(arr.tobytes()))
            shared.share_memory_()
            kinds["shared"] = mnemo.View(shared, mnemo.float32, (2, 3))
            pinned = mnemo.Storage.from_buffer(arr.tobytes()).pin_memory()
            kinds["pinned"] = mnemo.View(pinned, mnemo.float32, (2, 3))
            for kind, v in kinds.items():
                with self.subTest(kind=kind):
                    v = v.t()[1:]
                    for y in (copy.copy(v), copy.deepcopy(v), roundtrip(v)):
                        self.assertEqual((y.shape, y.stride(), y.storage_offset(), y.tolist()),
                                         (v.shape, v.stride(), v.storage_offset(), v.tolist()))
            del kinds, v, y, shared, pinned
            gc.collect()

    def test_meta(self):
        v = mnemo.empty(3, 2, device="meta").t()
        for y in (copy.copy(v), copy.deepcopy(v), roundtrip(v)):
            self.assertEqual((y.device, y.shape, y.stride()), (v.device, v.shape, v.stride()))

    def test_sharing_together(self):
        base = mnemo.tensor([[1., 2., 3.], [4., 5., 6.]])
        part = base.t()[1:]
        together = (copy.deepcopy([base, part]), roundtrip([base, part]), roundtrip({"x": base, "y": (part,)}).values())
        for a, b in together:
            if isinstance(b, tuple):
                b = b[0]
            self.assertTrue(a.shares_storage(b), "views copied/pickled together share one storage")
            self.assertFalse(a.shares_storage(base))
            a[0, 1] = 42.0
            self.assertEqual(b.tolist(), [[42.0, 5.0], [3.0, 6.0]])
        a, b = roundtrip(base), roundtrip(part)
        self.assertFalse(a.shares_storage(b), "views pickled separately do not share")

    def test_pickle_writes_bytes_once(self):
        big = mnemo.zeros(1 << 16, dtype=mnemo.uint8)
        one = len(pickle.dumps([big]))
        three = len(pickle.dumps([big, big[1:], big[2:]]))
        self.assertLess(three, one + 1000, "the storage's bytes go into one pickle once")

    def test_copies_outlive_their_source(self):
        a = mnemo.CachingAllocator("sim")
        v = mnemo.tensor([1, 2, 3]).to("sim")
        w = mnemo.empty(3, dtype=mnemo.int64, device="sim", allocator=a).copy_(v)
        copies = [copy.copy(w), copy.deepcopy(w), roundtrip(w)]
        del v, w
        gc.collect()
        self.assertEqual([c.tolist() for c in copies], [[1, 2, 3]] * 3)
        with self.assertRaises(mnemo.MnemoError):  # the copy and the deep copy count on it
            a.close()
        del copies
        gc.collect()
        a.close()
        self.assertTrue(a.closed)


class Errors(unittest.TestCase):
    def test_error_from_the_library_round_trips(self):
        with self.assertRaises(mnemo.MnemoError) as cm:
            mnemo.empty(2).view(3)
        e = cm.exception
        for y in (copy.copy(e), copy.deepcopy(e), roundtrip(e)):
            self.assertEqual((type(y), str(y), y.status, y.status_name, y.message),
                             (type(e), str(e), e.status, e.status_name, e.message))

    def test_tool_error_keeps_its_text(self):
        e = profiling.ToolError("mnemo replay: bad", 2, ["mnemo", "replay"], "x")
        y = roundtrip(e)
        self.assertEqual((str(y), y.returncode, y.command, y.stderr, y.status), (str(e), 2, ["mnemo", "replay"], "x",
                                                                                  e.status))

    def test_rebuild_refuses_other_classes(self):
        with self.assertRaises(TypeError):
            mnemo._lib._rebuild_error(ValueError, ("x",), {})



class DeepcopyMemo(unittest.TestCase):
    """Found by tests/python/fuzz_api.py: __deepcopy__ called with something
    that is no memo dict raises TypeError (an AttributeError before)."""

    def test_memo_must_be_a_dict(self):
        for x in (mnemo.tensor([1., 2.]), mnemo.UntypedStorage(4), mnemo.FloatStorage(2)):
            for memo in (1, "x", None, [1]):
                with self.subTest(cls=type(x).__name__, memo=memo), self.assertRaisesRegex(TypeError, "memo"):
                    x.__deepcopy__(memo)


if __name__ == "__main__":
    unittest.main()
