# bench/gpu/mnemo_ctypes.py: what the GPU scripts (compare_torch.py,
# torch_alloc.py) share to call libmnemo.so through ctypes: mn_device_t, a
# loader that declares each entry point's result and argument types, and
# status checking with mnemo's own message (mn_last_error).
# Threading: mn_last_error is per thread; call ok/out on the thread that made the call.
import ctypes as C

MN_DEVICE_CPU, MN_DEVICE_CUDA, MN_DEVICE_SIM = 0, 1, 2  # mn_device_type


class Dev(C.Structure):  # mn_device_t
    _fields_ = [("type", C.c_int), ("index", C.c_int)]


class Lib:
    """libmnemo.so at `path` with the entry points of `sigs` ({name: (restype,
    argtypes)}) typed; loading the path a framework already loaded gives the same
    instance (and the same allocators)."""

    def __init__(self, path, sigs):
        self.lib = C.CDLL(path)
        for name, (res, args) in {"mn_last_error": (C.c_char_p, []), **sigs}.items():
            f = getattr(self.lib, name)
            f.restype, f.argtypes = res, args

    def last_error(self):
        return (self.lib.mn_last_error() or b"").decode(errors="replace")

    def ok(self, status, what):
        """Raises with mnemo's message when `status` (an mn_status) is not MN_OK."""
        if status != 0:
            raise RuntimeError(f"{what}: mnemo status {status}: {self.last_error()}")

    def out(self, fn, *args, what=None):
        """Calls fn(*args, &p) for a pointer result p; raises on failure."""
        p = C.c_void_p()
        self.ok(fn(*args, C.byref(p)), what or fn.__name__)
        return p
