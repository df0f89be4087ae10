#!/usr/bin/env python3
# tests/python/test_gpu.py: the Python package on cuda:0: CUDA views and their
# operations, host reads, __cuda_array_interface__, and zero-copy round trips
# with a CUDA build of PyTorch through DLPack.
"""Run: PYTHONPATH=<build>/python python3 tests/python/test_gpu.py (label gpu).
Exits 77 (skipped) when there is no CUDA device, no numpy, or no CUDA torch;
with MNEMO_REQUIRE_GPU=1 (the GPU script) those are failures (exit 1)."""
import gc
import os
import sys
import unittest


def skip(why):
    if os.environ.get("MNEMO_REQUIRE_GPU", "0") not in ("", "0"):
        print(f"FAILED (MNEMO_REQUIRE_GPU is set): {why} ({sys.executable})")
        sys.exit(1)
    print(f"SKIPPED: {why}")
    sys.exit(77)


try:
    import numpy as np
except ImportError:
    skip("numpy is not installed")

import mnemo

if mnemo.device_count("cuda") == 0:
    if mnemo.build_has_cuda() and (os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus")):
        print("FAILED: an NVIDIA GPU is present but mnemo's CUDA build cannot use it")
        sys.exit(1)
    skip("no CUDA device" + ("" if mnemo.build_has_cuda() else " (libmnemo built without CUDA)"))
try:
    import torch
except ImportError:
    skip("torch is not installed")
if not torch.cuda.is_available():
    skip(f"torch {torch.__version__} has no CUDA")

CUDA = "cuda:0"


class CudaViews(unittest.TestCase):
    def test_factories_and_reads(self):
        x = mnemo.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=CUDA)
        self.assertEqual((str(x.device), x.is_cuda, x.shape), (CUDA, True, (3, 4)))
        self.assertEqual(x.tolist(), np.arange(12).reshape(3, 4).tolist())
        self.assertEqual(x[2, 3].item(), 11.0)
        self.assertEqual(mnemo.full((2,), 1.5, mnemo.bfloat16, CUDA).tolist(), [1.5, 1.5])
        self.assertEqual(mnemo.zeros(2, 2, device=CUDA, dtype=mnemo.int8).fill_(-3).tolist(), [[-3, -3], [-3, -3]])
        self.assertEqual(repr(x), "tensor([[ 0.,  1.,  2.,  3.],\n        [ 4.,  5.,  6.,  7.],\n"
                                  "        [ 8.,  9., 10., 11.]], device='cuda:0')")
        self.assertEqual(repr(x[0, :2].to(mnemo.float16)), "tensor([0., 1.], device='cuda:0', dtype=mnemo.float16)")
        self.assertEqual(repr(mnemo.empty(0, 2, device=CUDA)), "tensor([], device='cuda:0', size=(0, 2))")
        with self.assertRaises(TypeError) as cm:
            x.numpy()
        self.assertIn('.to("cpu")', str(cm.exception))
        with self.assertRaises(AttributeError):
            x.__array_interface__
        with self.assertRaises(TypeError):
            np.asarray(x)
        self.assertEqual(x.to("cpu").numpy().tolist(), x.tolist())

    def test_ops_against_torch(self):
        ref = torch.arange(24, dtype=torch.float32, device="cuda").reshape(2, 3, 4)
        x = mnemo.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), device=CUDA)
        for name, f in (("t", lambda v: v[0].t()), ("permute", lambda v: v.permute(2, 0, 1)),
                        ("slices", lambda v: v[1:, ::2, 1:]), ("diagonal", lambda v: v.diagonal(0, 1, 2)),
                        ("unfold", lambda v: v.unfold(2, 2, 1)), ("expand", lambda v: v[:, :1].expand(2, 3, 4)),
                        ("reshape copy", lambda v: v.transpose(0, 2).reshape(6, 4)),
                        ("clone", lambda v: v.transpose(0, 2).clone()), ("contiguous", lambda v: v[:, 1].contiguous())):
            with self.subTest(op=name):
                got, want = f(x), f(ref)
                self.assertEqual((got.shape, got.stride(), got.storage_offset()),
                                 (tuple(want.shape), want.stride(), want.storage_offset()))
                self.assertEqual(got.tolist(), want.cpu().tolist())

    def test_copies_across_devices(self):
        src = np.array([[1.5, -2.25], [3.0, 100.75]], np.float32)
        c = mnemo.tensor(src).to(CUDA, mnemo.float16)
        s = c.t().to("sim:0", mnemo.float64)
        self.assertEqual(s.tolist(), src.astype(np.float16).T.astype(np.float64).tolist())
        d = mnemo.zeros(2, 2, device=CUDA)
        d.copy_(mnemo.tensor([5, 6], dtype=mnemo.int32, device="sim"))
        self.assertEqual(d.tolist(), [[5.0, 6.0], [5.0, 6.0]])
        d[0] = mnemo.tensor([7.0, 8.0])
        self.assertEqual(d.cpu().tolist(), [[7.0, 8.0], [5.0, 6.0]])
        p = mnemo.Storage.from_buffer(b"0123").pin_memory(CUDA)
        self.assertTrue(p.is_pinned())

    def test_cuda_array_interface(self):
        x = mnemo.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=CUDA)
        cai = x.__cuda_array_interface__
        self.assertEqual((cai["version"], cai["typestr"], cai["data"], cai["shape"], cai["strides"], cai["stream"]),
                         (3, "<f4", (x.data_ptr(), False), (2, 3), None, 1))
        self.assertEqual(x.t().__cuda_array_interface__["strides"], (4, 12))
        t = torch.as_tensor(x.t(), device="cuda")
        self.assertEqual(t.data_ptr(), x.data_ptr())
        self.assertTrue(torch.equal(t.cpu(), torch.arange(6.0).reshape(2, 3).t()))
        with self.assertRaises(AttributeError):
            mnemo.zeros(1).__cuda_array_interface__

        class OnlyCai:
            def __init__(self, t):
                self.t = t
                self.__cuda_array_interface__ = t.__cuda_array_interface__

        tt = torch.arange(4, dtype=torch.int32, device="cuda")
        v = mnemo.asarray(OnlyCai(tt))
        self.assertEqual((str(v.device), v.data_ptr(), v.tolist()), (CUDA, tt.data_ptr(), [0, 1, 2, 3]))

    def test_save_load(self):
        x = mnemo.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=CUDA)
        got = mnemo.load_bytes(mnemo.save_bytes({"x": x, "xt": x.t()}), device=CUDA)
        self.assertTrue(got["x"].shares_storage(got["xt"]))
        self.assertEqual(got["xt"].tolist(), x.t().tolist())
        st = mnemo.safetensors.load_bytes(mnemo.safetensors.save_bytes({"x": x}), device=CUDA)
        self.assertEqual((str(st["x"].device), st["x"].tolist()), (CUDA, x.tolist()))


class TorchCudaDlpack(unittest.TestCase):
    def test_mnemo_to_torch(self):
        x = mnemo.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=CUDA)
        s = x.untyped_storage()
        self.assertEqual(x.__dlpack_device__(), (2, 0))
        t = torch.from_dlpack(x.t())
        self.assertEqual((t.is_cuda, tuple(t.shape), t.stride(), t.data_ptr()), (True, (4, 3), (1, 4), x.data_ptr()))
        self.assertTrue(torch.equal(t.cpu(), torch.arange(12.0).reshape(3, 4).t()))
        t.fill_(3)
        torch.cuda.synchronize()
        self.assertEqual(x.tolist(), [[3.0] * 4] * 3, "torch's write seen by mnemo")
        x.fill_(4.5)
        self.assertEqual(t.cpu().tolist(), [[4.5] * 3] * 4, "mnemo's write seen by torch (default streams)")
        del x
        gc.collect()
        self.assertEqual(s.refcount, 2)
        del t
        gc.collect()
        self.assertEqual(s.refcount, 1)

    def test_torch_to_mnemo(self):
        t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
        v = mnemo.from_dlpack(t[:, 1:])
        self.assertEqual((str(v.device), v.shape, v.stride(), v.data_ptr()),
                         (CUDA, (3, 3), (4, 1), t.data_ptr() + 4))
        self.assertEqual(v.tolist(), t[:, 1:].cpu().tolist())
        v.fill_(-1)
        torch.cuda.synchronize()
        self.assertEqual(t[:, 1:].cpu().tolist(), [[-1.0] * 3] * 3)
        del t
        gc.collect()
        self.assertEqual(v.tolist(), [[-1.0] * 3] * 3, "mnemo keeps torch's memory alive")
        b = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16, device="cuda")
        vb = mnemo.from_dlpack(b)
        self.assertEqual((vb.dtype, vb.tolist()), (mnemo.bfloat16, [1.5, -2.0, 3.25]))
        self.assertTrue(torch.equal(torch.from_dlpack(vb), b))

    def test_side_stream(self):
        x = mnemo.zeros(1 << 16, device=CUDA).fill_(2.0)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            t = torch.from_dlpack(x)  # asks for stream s: mnemo synchronizes
            total = t.sum().item()
        self.assertEqual(total, 2.0 * (1 << 16))
        with self.assertRaises(ValueError):
            x.__dlpack__(stream=0)
        cap = x.__dlpack__(stream=-1)
        del cap


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
