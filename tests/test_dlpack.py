#!/usr/bin/env python3
# tests/test_dlpack.py: hands mnemo views to numpy (and torch on a GPU) through a
# tiny __dlpack__ shim over libmnemo.so (ctypes) and imports numpy arrays back.
"""Usage: test_dlpack.py LIBMNEMO_SO [--gpu]

CPU mode (CTest label cpu): exports CPU views as legacy "dltensor" capsules to
numpy.from_dlpack and checks values, strides, shared memory, writes both ways
and the storage lifetime; imports numpy arrays (strided, 0-d, empty) back
without a copy. --gpu (label gpu): the same hand-off of a cuda:0 view to
torch.from_dlpack; exits 77 when there is no CUDA device or no CUDA torch.
"""
import ctypes as C
import gc
import os
import sys

SKIP = 77
GPU = "--gpu" in sys.argv[2:]


def skip(why):
    """Skips (77), or fails in --gpu mode where MNEMO_REQUIRE_GPU=1 says the GPU
    and a CUDA torch must be there (the GPU script sets it)."""
    if GPU and os.environ.get("MNEMO_REQUIRE_GPU", "0") not in ("", "0"):
        print(f"FAILED (MNEMO_REQUIRE_GPU is set): {why} ({sys.executable})")
        sys.exit(1)
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


try:
    import numpy as np
except ImportError:
    skip("numpy is not installed")

lib = C.CDLL(sys.argv[1])


class Device(C.Structure):
    _fields_ = [("type", C.c_int), ("index", C.c_int)]


class Scalar(C.Structure):
    _fields_ = [("kind", C.c_int), ("v", C.c_double * 2)]


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int), ("device_id", C.c_int32)]


class DLDataType(C.Structure):
    _fields_ = [("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32), ("dtype", DLDataType),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)), ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    pass


DELETER = C.CFUNCTYPE(None, C.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p), ("deleter", DELETER)]

VP = C.c_void_p
I64P = C.POINTER(C.c_int64)
for name, res, args in [
    ("mn_device_cpu", Device, []), ("mn_device_cuda", Device, [C.c_int]),
    ("mn_device_count", C.c_int, [C.c_int, C.POINTER(C.c_int)]),
    ("mn_view_empty", C.c_int, [Device, C.c_int, C.c_int, I64P, C.POINTER(VP)]),
    ("mn_view_destroy", None, [VP]), ("mn_view_data", VP, [VP]),
    ("mn_view_ndim", C.c_int, [VP]), ("mn_view_size", C.c_int64, [VP, C.c_int]),
    ("mn_view_stride", C.c_int64, [VP, C.c_int]), ("mn_view_offset", C.c_int64, [VP]),
    ("mn_view_dtype", C.c_int, [VP]), ("mn_view_storage", VP, [VP]),
    ("mn_storage_refcount", C.c_long, [VP]),
    ("mn_view_view", C.c_int, [VP, C.c_int, I64P, C.POINTER(VP)]),
    ("mn_view_t2d", C.c_int, [VP, C.POINTER(VP)]),
    ("mn_view_slice", C.c_int, [VP, C.c_int, C.c_int64, C.c_int64, C.c_int64, C.POINTER(VP)]),
    ("mn_view_select", C.c_int, [VP, C.c_int, C.c_int64, C.POINTER(VP)]),
    ("mn_view_to", C.c_int, [VP, Device, C.c_int, C.c_bool, VP, C.POINTER(VP)]),
    ("mn_view_fill", C.c_int, [VP, Scalar, VP]),
    ("mn_scalar_float", Scalar, [C.c_double]),
    ("mn_view_to_dlpack", C.c_int, [VP, C.POINTER(VP)]),
    ("mn_view_from_dlpack", C.c_int, [VP, C.POINTER(VP)]),
    ("mn_last_error", C.c_char_p, []),
    ("mn_device_synchronize", C.c_int, [Device]),
    ("mn_build_has_cuda", C.c_bool, []),
]:
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = args

api = C.pythonapi
api.PyCapsule_New.restype = C.py_object
api.PyCapsule_New.argtypes = [VP, C.c_char_p, VP]
api.PyCapsule_IsValid.restype = C.c_int
api.PyCapsule_IsValid.argtypes = [VP, C.c_char_p]
api.PyCapsule_GetPointer.restype = VP
api.PyCapsule_GetPointer.argtypes = [VP, C.c_char_p]
api.PyCapsule_SetName.restype = C.c_int
api.PyCapsule_SetName.argtypes = [C.py_object, C.c_char_p]


@C.CFUNCTYPE(None, VP)
def capsule_destructor(cap):
    # An unconsumed "dltensor" capsule owns the tensor: give it back.
    if api.PyCapsule_IsValid(cap, b"dltensor"):
        p = api.PyCapsule_GetPointer(cap, b"dltensor")
        m = C.cast(p, C.POINTER(DLManagedTensor))
        m.contents.deleter(m)


failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("CHECK failed:", what, "|", lib.mn_last_error().decode())


def ok(status, what):
    check(status == 0, "%s -> %d" % (what, status))


DT = {"int64": 5, "float32": 8, "float16": 6, "complex64": 10, "uint8": 1, "int16": 3, "float64": 9}


def arange_view(n, dt, dev=None):
    dev = dev or lib.mn_device_cpu()
    v = VP()
    host = VP()
    sizes = (C.c_int64 * 1)(n)
    ok(lib.mn_view_empty(lib.mn_device_cpu(), DT[dt], 1, sizes, C.byref(host)), "empty")
    src = np.arange(n).astype(dt)
    C.memmove(lib.mn_view_data(host), src.ctypes.data, src.nbytes)
    if dev.type == 0:
        return host
    ok(lib.mn_view_to(host, dev, DT[dt], False, None, C.byref(v)), "to device")
    lib.mn_view_destroy(host)
    return v


def op(fn, *args):
    out = VP()
    ok(fn(*args, C.byref(out)), fn.__name__)
    return out


class Shim:
    """The smallest object numpy.from_dlpack / torch.from_dlpack accept."""

    def __init__(self, view, device):
        self.view, self.device = view, device

    def __dlpack__(self, stream=None):
        p = VP()
        ok(lib.mn_view_to_dlpack(self.view, C.byref(p)), "to_dlpack")
        return api.PyCapsule_New(p, b"dltensor", C.cast(capsule_destructor, VP))

    def __dlpack_device__(self):
        return self.device


def elems(v):
    n = lib.mn_view_ndim(v)
    return tuple(lib.mn_view_size(v, d) for d in range(n)), tuple(lib.mn_view_stride(v, d) for d in range(n))


def cpu_tests():
    # arange(12) as 3x4, transposed: numpy sees strides (8, 32) over the same bytes.
    a = arange_view(12, "int64")
    m = op(lib.mn_view_view, a, 2, (C.c_int64 * 2)(3, 4))
    t = op(lib.mn_view_t2d, m)
    storage = lib.mn_view_storage(t)
    refs = lib.mn_storage_refcount(storage)
    arr = np.from_dlpack(Shim(t, (1, 0)))
    check(arr.shape == (4, 3) and arr.strides == (8, 32), "transposed shape/strides %s %s" % (arr.shape, arr.strides))
    check((arr == np.arange(12).reshape(3, 4).T).all(), "transposed values")
    check(arr.ctypes.data == lib.mn_view_data(t), "no copy: same address")
    check(lib.mn_storage_refcount(storage) == refs + 1, "the export holds a storage reference")
    # numpy 1.24 marks DLPack arrays read-only: write at the address of arr[1, 0].
    C.cast(arr.ctypes.data + arr.strides[0], C.POINTER(C.c_int64))[0] = 99
    check(C.cast(lib.mn_view_data(a), C.POINTER(C.c_int64))[1] == 99 and arr[1, 0] == 99, "arr[1, 0] is storage[1]")
    C.cast(lib.mn_view_data(a), C.POINTER(C.c_int64))[4] = -5
    check(arr[0, 1] == -5, "mnemo's write seen by numpy")
    for v in (t, m):
        lib.mn_view_destroy(v)
    check(lib.mn_storage_refcount(storage) == 2, "a and the numpy array hold the storage")
    del arr
    gc.collect()
    check(lib.mn_storage_refcount(storage) == 1, "numpy's deleter released the storage")

    # a[1:3, 0:2] of the 3x4 view: offset 4 elements, strides (4, 1).
    m = op(lib.mn_view_view, a, 2, (C.c_int64 * 2)(3, 4))
    r = op(lib.mn_view_slice, m, 0, 1, 3, 1)
    s = op(lib.mn_view_slice, r, 1, 0, 2, 1)
    check(lib.mn_view_offset(s) == 4, "slice offset 4")
    arr = np.from_dlpack(Shim(s, (1, 0)))
    check(arr.shape == (2, 2) and arr.strides == (32, 8), "slice strides")
    check(arr.ctypes.data == lib.mn_view_data(a) + 32, "slice address")
    check(arr.tolist() == [[-5, 5], [8, 9]], "slice values %s" % arr.tolist())
    # 0-d and empty views.
    z = op(lib.mn_view_select, s, 0, 1)
    z0 = op(lib.mn_view_select, z, 0, -1)
    arr0 = np.from_dlpack(Shim(z0, (1, 0)))
    check(arr0.shape == () and int(arr0) == 9, "0-d view")
    e = op(lib.mn_view_slice, m, 0, 2, 2, 1)
    arre = np.from_dlpack(Shim(e, (1, 0)))
    check(arre.shape == (0, 4), "empty view")
    for v in (z0, z, e, s, r, m):
        lib.mn_view_destroy(v)
    del arr, arr0, arre
    gc.collect()
    check(lib.mn_storage_refcount(storage) == 1, "all exports released")
    lib.mn_view_destroy(a)

    # Other dtypes, values equal.
    for dt in ("float32", "float16", "complex64", "uint8", "int16", "float64"):
        v = arange_view(10, dt)
        arr = np.from_dlpack(Shim(v, (1, 0)))
        check(arr.dtype == np.dtype(dt) and (arr == np.arange(10).astype(dt)).all(), "dtype " + dt)
        lib.mn_view_destroy(v)
        del arr
    gc.collect()

    # numpy -> mnemo without a copy: strided, then written through mnemo.
    base = np.arange(20, dtype=np.float64).reshape(4, 5)
    arr = base[:, 1:4]
    cap = arr.__dlpack__()
    v = VP()
    ok(lib.mn_view_from_dlpack(api.PyCapsule_GetPointer(C.c_void_p(id(cap)), b"dltensor"), C.byref(v)), "import")
    api.PyCapsule_SetName(cap, b"used_dltensor")  # mnemo owns it now
    check(lib.mn_view_data(v) == arr.ctypes.data, "import: same address")
    check(elems(v) == ((4, 3), (5, 1)), "import: sizes/strides in elements %s" % (elems(v),))
    check(lib.mn_view_dtype(v) == DT["float64"], "import: dtype")
    ok(lib.mn_view_fill(v, lib.mn_scalar_float(2.5), None), "fill imported view")
    check((base[:, 1:4] == 2.5).all() and (base[:, 0] == [0, 5, 10, 15]).all(), "mnemo's fill seen by numpy")
    lib.mn_view_destroy(v)  # runs numpy's deleter
    del cap
    gc.collect()
    check(base.sum() > 0, "base still alive")

    # 0-d and empty arrays import; negative strides are refused, capsule kept.
    for a_np, shape in ((np.array(7, dtype=np.int32), ()), (np.zeros((0, 3), dtype=np.float32), (0, 3))):
        cap = a_np.__dlpack__()
        v = VP()
        ok(lib.mn_view_from_dlpack(api.PyCapsule_GetPointer(C.c_void_p(id(cap)), b"dltensor"), C.byref(v)),
           "import %s" % (shape,))
        api.PyCapsule_SetName(cap, b"used_dltensor")
        check(elems(v)[0] == shape, "import shape %s" % (shape,))
        lib.mn_view_destroy(v)
    rev = np.arange(6, dtype=np.int64)[::-1]
    cap = rev.__dlpack__()
    v = VP()
    st = lib.mn_view_from_dlpack(api.PyCapsule_GetPointer(C.c_void_p(id(cap)), b"dltensor"), C.byref(v))
    check(st == 4 and b"negative" in lib.mn_last_error(), "negative strides refused")
    del cap  # numpy's own destructor frees it (still named "dltensor")
    gc.collect()


def gpu_tests():
    n = C.c_int(0)
    if lib.mn_device_count(1, C.byref(n)) != 0 or n.value == 0:
        if lib.mn_build_has_cuda() and (os.path.exists("/dev/nvidia0") or os.path.exists("/proc/driver/nvidia/gpus")):
            print("FAILED: an NVIDIA GPU is present but mnemo's CUDA build cannot use it")
            sys.exit(1)
        skip("no CUDA device")
    try:
        import torch
    except ImportError:
        skip("torch is not installed")
    if not torch.cuda.is_available():
        skip("torch has no CUDA")
    cuda = lib.mn_device_cuda(0)
    a = arange_view(12, "float32", cuda)
    m = op(lib.mn_view_view, a, 2, (C.c_int64 * 2)(3, 4))
    t = op(lib.mn_view_t2d, m)
    x = torch.from_dlpack(Shim(t, (2, 0)))
    check(x.is_cuda and x.shape == (4, 3) and x.stride() == (1, 4), "torch view of a cuda view")
    check(x.data_ptr() == lib.mn_view_data(t), "torch: same address")
    check(torch.equal(x.cpu(), torch.arange(12, dtype=torch.float32).view(3, 4).t()), "torch values")
    x.fill_(3)
    torch.cuda.synchronize()
    h = op(lib.mn_view_to, a, lib.mn_device_cpu(), DT["float32"], False, None)
    check(C.cast(lib.mn_view_data(h), C.POINTER(C.c_float))[11] == 3.0, "torch's write seen by mnemo")
    for v in (h, t, m, a):
        lib.mn_view_destroy(v)
    del x
    gc.collect()


gpu_tests() if GPU else cpu_tests()
print("%d checks, %d failed" % (checks, failures))
sys.exit(1 if failures else 0)
