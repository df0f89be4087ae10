#!/usr/bin/env python3
# tests/python/test_hooks.py: mnemo.torch and mnemo.cupy without a GPU: the
# clear errors (torch missing, torch < 2.0, no CUDA, allocator already in use),
# the wiring into fake torch / cupy modules, and the real C entry points those
# frameworks would call, served from the SIM device. Single-threaded.
"""Run: PYTHONPATH=<build>/python python3 tests/python/test_hooks.py"""
import contextlib
import ctypes as C
import os
import subprocess
import sys
import types
import unittest

import mnemo
import mnemo.cupy
import mnemo.torch

MN_DEVICE_CUDA, MN_DEVICE_SIM = 1, 2
lib = C.CDLL(mnemo.library_path)  # the same library object as mnemo's: same addresses
lib.mn_pluggable_set_device_type.argtypes = [C.c_int]
lib.mn_pluggable_set_device_type.restype = C.c_int
TORCH_ALLOC = C.CFUNCTYPE(C.c_void_p, C.c_ssize_t, C.c_int, C.c_void_p)
TORCH_FREE = C.CFUNCTYPE(None, C.c_void_p, C.c_size_t, C.c_int, C.c_void_p)
CUPY_MALLOC = C.CFUNCTYPE(C.c_void_p, C.c_void_p, C.c_size_t, C.c_int)
CUPY_FREE = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p, C.c_int)
RESET_FN = C.CFUNCTYPE(None)


@contextlib.contextmanager
def modules(**mods):
    """Replaces sys.modules entries (None: the import fails) and restores them."""
    names = list(mods)
    keep = {n: sys.modules.get(n, KeyError) for n in names}
    try:
        for n, m in mods.items():
            sys.modules[n] = m
        yield
    finally:
        for n, m in keep.items():
            if m is KeyError:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def fake_torch(version="2.3.1", cuda=True, refuse=None, reset_hook=True):
    """A torch module with what mnemo.torch uses; calls are recorded in .calls."""
    calls = {"pluggable": [], "changed": [], "reset_fn": []}

    class _Inner:
        pass

    if reset_hook:
        _Inner.set_reset_fn = lambda self, addr: calls["reset_fn"].append(addr)

    class CUDAPluggableAllocator:
        def __init__(self, path, alloc_fn_name, free_fn_name):
            calls["pluggable"].append((path, alloc_fn_name, free_fn_name))
            self._allocator = _Inner()

    def change_current_allocator(a):
        if refuse:
            raise RuntimeError(refuse)
        calls["changed"].append(a)

    torch = types.ModuleType("torch")
    torch.__version__ = version
    torch.__file__ = "/fake/torch/__init__.py"
    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda,
                                       memory=types.SimpleNamespace(CUDAPluggableAllocator=CUDAPluggableAllocator,
                                                                    change_current_allocator=change_current_allocator))
    torch.calls = calls
    return torch


def fake_cupy():
    calls = {"cfunc": [], "set": []}

    class CFunctionAllocator:
        def __init__(self, param, malloc_func, free_func, owner):
            calls["cfunc"].append((param, malloc_func, free_func, owner))

        def malloc(self, size):
            raise AssertionError("not called in these tests")

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(memory=types.SimpleNamespace(CFunctionAllocator=CFunctionAllocator),
                                      set_allocator=lambda f: calls["set"].append(f))
    cupy.calls = calls
    return cupy


def reset_torch_state():
    mnemo.torch._state.update(allocator=None, device_type=None, hook=None)


class TorchErrors(unittest.TestCase):
    def tearDown(self):
        reset_torch_state()

    def test_installed_torch(self):
        """torch 1.13 here: the version error; without torch: an ImportError."""
        try:
            import torch  # noqa: F401  (the real one, if installed)
        except ImportError:
            with self.assertRaises(ImportError) as cm:
                mnemo.torch.use()
            self.assertIn("needs PyTorch", str(cm.exception))
            return
        major = int(torch.__version__.split(".")[0])
        if major >= 2:
            self.skipTest(f"torch {torch.__version__} is >= 2.0 (covered by the fakes and test_hooks_gpu)")
        with self.assertRaises(RuntimeError) as cm:
            mnemo.torch.use()
        msg = str(cm.exception)
        self.assertIn("torch >= 2.0", msg)
        self.assertIn(torch.__version__, msg)
        self.assertIn("CUDAPluggableAllocator", msg)
        self.assertFalse(mnemo.torch.is_used())

    def test_torch_missing(self):
        with modules(torch=None):
            with self.assertRaises(ImportError) as cm:
                mnemo.torch.use()
        self.assertIn("mnemo.torch needs PyTorch", str(cm.exception))

    def test_old_fake_torch(self):
        t = fake_torch(version="1.12.1")
        with modules(torch=t):
            with self.assertRaises(RuntimeError) as cm:
                mnemo.torch.use(_device_type="sim")
        self.assertIn("found torch 1.12.1", str(cm.exception))
        self.assertEqual(t.calls["pluggable"], [])

    def test_no_cuda(self):
        t = fake_torch(cuda=False)
        with modules(torch=t):
            with self.assertRaises(RuntimeError) as cm:
                mnemo.torch.use(_device_type="sim")
        self.assertIn("no CUDA device", str(cm.exception))
        self.assertEqual(t.calls["changed"], [])

    def test_mnemo_without_cuda(self):
        if mnemo.device_count("cuda") > 0:
            self.skipTest("this mnemo has a GPU")
        t = fake_torch()
        with modules(torch=t):
            with self.assertRaises(RuntimeError) as cm:
                mnemo.torch.use()
        self.assertIn("mnemo sees no CUDA device", str(cm.exception))
        self.assertEqual(t.calls["changed"], [])

    def test_already_initialized(self):
        refusal = "Can't swap an already initialized allocator"
        t = fake_torch(refuse=refusal)
        with modules(torch=t):
            with self.assertRaises(RuntimeError) as cm:
                mnemo.torch.use(_device_type="sim")
        msg = str(cm.exception)
        self.assertIn(refusal, msg)
        self.assertIn("before any CUDA tensor", msg)
        self.assertIsInstance(cm.exception.__cause__, RuntimeError)
        self.assertFalse(mnemo.torch.is_used())

    def test_bad_device(self):
        with modules(torch=fake_torch()):
            with self.assertRaises(ValueError):
                mnemo.torch.use(device=7, _device_type="sim")
            with self.assertRaises(ValueError):
                mnemo.torch.use(_device_type="tpu")


class TorchWiring(unittest.TestCase):
    def setUp(self):
        reset_torch_state()

    def tearDown(self):
        reset_torch_state()
        lib.mn_pluggable_set_device_type(MN_DEVICE_CUDA)

    def test_wiring_and_entry_points(self):
        t = fake_torch()
        with modules(torch=t):
            got = mnemo.torch.use(device=0, _device_type="sim")
            self.assertIs(mnemo.torch.use(_device_type="sim"), got)  # a second call: the same
        self.assertTrue(mnemo.torch.is_used())
        self.assertEqual(t.calls["pluggable"], [(mnemo.library_path, "mnemo_torch_alloc", "mnemo_torch_free")])
        self.assertEqual(t.calls["changed"], [got])
        self.assertEqual(len(t.calls["reset_fn"]), 1)
        # The names given to PyTorch are real symbols of that library, with
        # PyTorch's signatures: call them as PyTorch would (SIM serves them).
        path, alloc_name, free_name = t.calls["pluggable"][0]
        so = C.CDLL(path)
        alloc = TORCH_ALLOC(C.cast(getattr(so, alloc_name), C.c_void_p).value)
        free = TORCH_FREE(C.cast(getattr(so, free_name), C.c_void_p).value)
        before = mnemo.torch.memory_stats(0)
        p = alloc(3 << 20, 0, None)
        self.assertTrue(p)
        q = alloc(1000, 0, None)
        self.assertTrue(q)
        s = mnemo.torch.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.current"] - before["allocated_bytes.all.current"], (3 << 20) + 1024)
        self.assertEqual(s["requested_bytes.all.current"] - before["requested_bytes.all.current"], (3 << 20) + 1000)
        self.assertEqual(mnemo.memory_allocated("sim:0"), mnemo.torch.memory_allocated(0))
        self.assertEqual(alloc(0, 0, None), None)  # size 0: NULL
        self.assertIsNone(alloc(100, 9, None))     # no sim:9: NULL, no crash
        free(p, 3 << 20, 0, None)
        free(q, 1000, 0, None)
        free(None, 0, 0, None)                     # NULL: nothing
        free(p + 4096, 1, 0, None)                 # not a block: ignored (the reason in mn_last_error)
        s = mnemo.torch.memory_stats(0)
        self.assertEqual(s["allocated_bytes.all.current"], before["allocated_bytes.all.current"])
        self.assertGreater(mnemo.torch.memory_reserved(0), 0)
        # the empty-cache hook handed to PyTorch empties mnemo's cache
        self.assertEqual(mnemo.torch.memory_allocated(0), 0)  # nothing else lives in sim:0's default
        RESET_FN(t.calls["reset_fn"][0])()
        self.assertEqual(mnemo.torch.memory_reserved(0), 0)
        mnemo.torch.reset_peak_memory_stats(0)
        self.assertEqual(mnemo.torch.max_memory_allocated(0), mnemo.torch.memory_allocated(0))
        self.assertIn("sim:0", mnemo.torch.memory_summary(0))
        mnemo.torch.empty_cache()

    def test_no_reset_hook_in_older_torch(self):
        t = fake_torch(version="2.0.0", reset_hook=False)
        with modules(torch=t):
            mnemo.torch.use(_device_type="sim", empty_cache_hook=True)
        self.assertEqual(len(t.calls["changed"]), 1)

    def test_set_default_serves_torch(self):
        t = fake_torch()
        with modules(torch=t):
            mnemo.torch.use(_device_type="sim")
        so = C.CDLL(mnemo.library_path)
        alloc = TORCH_ALLOC(C.cast(so.mnemo_torch_alloc, C.c_void_p).value)
        free = TORCH_FREE(C.cast(so.mnemo_torch_free, C.c_void_p).value)
        a = mnemo.CachingAllocator("sim:0")
        a.set_default()
        try:
            p = alloc(5000, 0, None)
            self.assertEqual(a.memory_allocated(), 5120)
            self.assertEqual(mnemo.torch.memory_allocated(0), 5120)
            free(p, 5000, 0, None)
            self.assertEqual(a.memory_allocated(), 0)
        finally:
            mnemo.set_default_allocator("sim:0", None)
        a.close()


class Cupy(unittest.TestCase):
    def tearDown(self):
        lib.mn_pluggable_set_device_type(MN_DEVICE_CUDA)

    def test_missing(self):
        with modules(cupy=None):
            with self.assertRaises(ImportError) as cm:
                mnemo.cupy.use()
        self.assertIn("mnemo.cupy needs CuPy", str(cm.exception))

    def test_wiring_default(self):
        cp = fake_cupy()
        with modules(cupy=cp):
            got = mnemo.cupy.use(_device_type="sim")
        param, malloc_addr, free_addr, owner = cp.calls["cfunc"][0]
        self.assertEqual((param, owner), (0, None))
        self.assertEqual(cp.calls["set"], [got.malloc])
        so = C.CDLL(mnemo.library_path)
        self.assertEqual(malloc_addr, C.cast(so.mnemo_cupy_malloc, C.c_void_p).value)
        self.assertEqual(free_addr, C.cast(so.mnemo_cupy_free, C.c_void_p).value)
        malloc, free = CUPY_MALLOC(malloc_addr), CUPY_FREE(free_addr)
        before = mnemo.memory_allocated("sim:0")
        p = malloc(None, 10000, 0)
        self.assertTrue(p)
        self.assertEqual(mnemo.memory_allocated("sim:0") - before, 10240)
        free(None, p, 0)
        self.assertEqual(mnemo.memory_allocated("sim:0"), before)

    def test_wiring_allocator(self):
        cp = fake_cupy()
        a = mnemo.CachingAllocator("sim:0", "expandable_segments:True")
        with modules(cupy=cp):
            mnemo.cupy.use(a, _device_type="sim")
        param, malloc_addr, free_addr, owner = cp.calls["cfunc"][0]
        self.assertEqual(param, a._handle)
        self.assertIs(owner, a)
        self.assertIn(a, mnemo.cupy._kept)
        malloc, free = CUPY_MALLOC(malloc_addr), CUPY_FREE(free_addr)
        p = malloc(param, 3 << 20, 0)
        self.assertEqual(a.memory_allocated(), 3 << 20)
        self.assertTrue(a.memory_snapshot()[0]["is_expandable"])
        self.assertIsNone(malloc(param, 100, 1))  # the allocator is sim:0's, not sim:1's
        free(param, p, 0)
        self.assertEqual(a.memory_allocated(), 0)
        with modules(cupy=fake_cupy()):
            with self.assertRaises(ValueError):
                mnemo.cupy.use(a)                  # a sim allocator for CUDA
            with self.assertRaises(TypeError):
                mnemo.cupy.use("cuda:0")


class ImportIsolation(unittest.TestCase):
    def test_import_mnemo_imports_no_framework(self):
        code = ("import sys, mnemo, mnemo.torch, mnemo.cupy\n"
                "print([m for m in ('torch', 'cupy') if m in sys.modules])\n")
        r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=dict(os.environ))
        out = r.stdout.decode()
        self.assertEqual(r.returncode, 0, out)
        self.assertEqual(out.strip(), "[]")


if __name__ == "__main__":
    unittest.main(verbosity=1)
