#!/usr/bin/env python3
# tests/python/test_hooks_gpu.py: mnemo.torch.use() with a real PyTorch >= 2.0
# on a real GPU: CUDA tensors then live in mnemo's caching allocator (its
# statistics move by the tensors' sizes, the snapshot holds their blocks,
# torch.cuda.empty_cache() empties mnemo's cache), and use() after CUDA memory
# exists gives PyTorch's refusal with a hint. Each case runs in a fresh child
# process (PyTorch's allocator can be swapped only before its first use).
# Exit 77 (skipped) without a GPU or a CUDA torch >= 2.0; 1 instead when
# MNEMO_REQUIRE_GPU=1 says they must be there. Single-threaded.
"""Run: PYTHONPATH=<build>/python python3 tests/python/test_hooks_gpu.py"""
import os
import subprocess
import sys

SKIP = 77
MiB = 1 << 20


def skip(why):
    if os.environ.get("MNEMO_REQUIRE_GPU", "0") not in ("", "0"):
        print(f"FAILED (MNEMO_REQUIRE_GPU is set): {why} ({sys.executable})")
        sys.exit(1)
    print(f"SKIPPED: {why}")
    sys.exit(SKIP)


CHILD_USE = r"""
import torch, mnemo, mnemo.torch
alloc = mnemo.torch.use()
assert mnemo.torch.is_used()
before = mnemo.torch.memory_stats(0)
x = torch.empty(1 << 20, dtype=torch.float32, device="cuda")      # 4 MiB
y = torch.ones(1000, dtype=torch.float32, device="cuda")           # 4000 B -> a 4096 B block
torch.cuda.synchronize()
s = mnemo.torch.memory_stats(0)
d_alloc = s["allocated_bytes.all.current"] - before["allocated_bytes.all.current"]
d_req = s["requested_bytes.all.current"] - before["requested_bytes.all.current"]
assert d_alloc == 4 * 1048576 + 4096, ("allocated moved by", d_alloc)
assert d_req == 4 * 1048576 + 4000, ("requested moved by", d_req)
assert s["num_device_alloc"] >= 2, s["num_device_alloc"]
live = {b["address"] for seg in mnemo.torch.memory_snapshot(0) for b in seg["blocks"]
        if b["state"] == "active_allocated"}
assert x.data_ptr() in live and y.data_ptr() in live, "tensors are not mnemo blocks"
assert float(y.sum().item()) == 1000.0
x.fill_(2.0)
assert float(x[12345].item()) == 2.0
z = x * 3                                                           # a kernel's output: mnemo memory too
torch.cuda.synchronize()
assert mnemo.torch.memory_allocated(0) - before["allocated_bytes.all.current"] == 2 * 4 * 1048576 + 4096
del x, y, z
torch.cuda.synchronize()
after = mnemo.torch.memory_stats(0)
assert after["allocated_bytes.all.current"] == before["allocated_bytes.all.current"], after
assert after["reserved_bytes.all.current"] > 0                     # cached, as PyTorch's allocator
torch.cuda.empty_cache()
hooked = mnemo.torch._state["hook"] is not None
if hooked and mnemo.torch.memory_allocated(0) == 0:
    assert mnemo.torch.memory_reserved(0) == 0, mnemo.torch.memory_reserved(0)
mnemo.torch.empty_cache()
if mnemo.torch.memory_allocated(0) == 0:
    assert mnemo.torch.memory_reserved(0) == 0
print("ok: torch", torch.__version__, "on", torch.cuda.get_device_name(0), "empty_cache hook:", hooked)
"""

CHILD_TOO_LATE = r"""
import torch, mnemo.torch
x = torch.zeros(16, device="cuda")
try:
    mnemo.torch.use()
except RuntimeError as e:
    msg = str(e)
    assert "before any CUDA tensor" in msg, msg
    assert not mnemo.torch.is_used()
    print("ok: refused:", msg[:120])
else:
    raise SystemExit("use() after CUDA memory was allocated did not fail")
"""


def run_child(code, name):
    r = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=dict(os.environ), timeout=300)
    out = r.stdout.decode("utf-8", "replace")
    print(f"--- {name}: exit {r.returncode}\n{out.rstrip()}")
    return r.returncode == 0


def main():
    try:
        import mnemo
    except ImportError as e:
        print(f"FAILED: cannot import mnemo: {e}")
        return 1
    if mnemo.device_count("cuda") == 0:
        skip("mnemo sees no CUDA device" + ("" if mnemo.build_has_cuda() else " (built without CUDA)"))
    # Checked in a child: importing torch here is harmless, but keep this process clean.
    probe = subprocess.run([sys.executable, "-c",
                            "import torch, sys; print(torch.__version__); "
                            "sys.exit(0 if torch.cuda.is_available() else 3)"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if probe.returncode != 0:
        why = "torch is not installed" if b"No module named" in probe.stderr else "torch has no CUDA"
        skip(f"{why} for {sys.executable}")
    version = probe.stdout.decode().strip()
    major = int(version.split(".")[0]) if version.split(".")[0].isdigit() else 0
    if major < 2:
        skip(f"torch {version} < 2.0 has no CUDAPluggableAllocator")
    ok = run_child(CHILD_USE, "use() then CUDA tensors")
    ok = run_child(CHILD_TOO_LATE, "use() after CUDA memory exists") and ok
    print("PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
