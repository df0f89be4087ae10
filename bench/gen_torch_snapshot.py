#!/usr/bin/env python3
# bench/gen_torch_snapshot.py: writes a big, realistic PyTorch memory snapshot
# (the pickle torch.cuda.memory._dump_snapshot writes) for the profiler's scale
# benchmark (bench/profiler_scale.sh). Single-threaded; standard library only.
"""Generate a PyTorch-shaped memory snapshot with N trace events.

Usage: gen_torch_snapshot.py OUT.pickle [--events N] [--seed S] [--streams K] [--stacks M]

The events come from a small simulation of PyTorch's caching allocator on one
device, so the importer's block-layout reconstruction accepts them: a small
pool (requests up to 1 MiB rounded to 512 B, 2 MiB segments) and a large pool
(20 MiB segments for requests under 10 MiB, else the request rounded to 2 MiB),
best fit among a stream's free blocks, PyTorch's split rule (a remainder of at
least 512 B in the small pool, over 1 MiB in the large one), frees merging with
free neighbours. The workload is a training loop: each iteration allocates
activations (a forward pass), frees most of them in about reverse order while
allocating gradients (a backward pass), and frees the gradients; some blocks
are used on a side stream and freed through free_requested ... free_completed
later (record_stream); every few iterations the cache is emptied (segment_free
of every idle segment). Events carry stack frames drawn from a fixed set of
shared stacks (PyTorch's pickler shares frame dicts and lists by identity).
The dump's `segments` hold the allocator's state after the last event.

The pickle is written opcode by opcode (protocol 4 opcodes), streamed, so
making a 10M-event file needs little memory. Deterministic: the same options
give the same bytes.
"""

import argparse
import bisect
import random
import struct
import sys

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20
BASE_ADDR = 0x7F0000000000


class PickleWriter:
    """Pickle opcodes straight to a file, with a memo for shared objects."""

    def __init__(self, f):
        self.f = f
        self.buf = []
        self.size = 0
        self.nmemo = 0
        self.strs = {}
        self.objs = {}   # id(shared list or dict) -> memo index

    def raw(self, b):
        self.buf.append(b)
        self.size += len(b)
        if self.size > 1 << 20:
            self.flush()

    def flush(self):
        self.f.write(b"".join(self.buf))
        self.buf, self.size = [], 0

    def memoize(self):
        """Stores the object on top of the stack in the memo; returns its index."""
        i = self.nmemo
        self.nmemo += 1
        self.raw(b"\x94")  # MEMOIZE (protocol 4)
        return i

    def get(self, i):
        self.raw(b"h" + bytes((i,)) if i < 256 else b"j" + struct.pack("<I", i))

    def string(self, s):
        """A str, memoized: the second time a BINGET."""
        i = self.strs.get(s)
        if i is not None:
            self.get(i)
            return
        b = s.encode("utf-8")
        self.raw((b"\x8c" + bytes((len(b),)) if len(b) < 256 else b"X" + struct.pack("<I", len(b))) + b)
        self.strs[s] = self.memoize()

    def int(self, v):
        if 0 <= v < 256:
            self.raw(b"K" + bytes((v,)))
        elif 0 <= v < 65536:
            self.raw(b"M" + struct.pack("<H", v))
        elif -(1 << 31) <= v < 1 << 31:
            self.raw(b"J" + struct.pack("<i", v))
        else:
            n = (v.bit_length() + 8) // 8
            self.raw(b"\x8a" + bytes((n,)) + v.to_bytes(n, "little", signed=True))

    def value(self, v):
        if isinstance(v, bool):
            self.raw(b"\x88" if v else b"\x89")
        elif isinstance(v, int):
            self.int(v)
        elif isinstance(v, str):
            self.string(v)
        elif isinstance(v, float):
            self.raw(b"G" + struct.pack(">d", v))
        elif isinstance(v, dict):
            self.dict(v)
        elif isinstance(v, list):
            self.raw(b"]")
            self.memoize()
            for k in range(0, len(v), 1000):
                self.raw(b"(")
                for x in v[k:k + 1000]:
                    self.value(x)
                self.raw(b"e")
        elif isinstance(v, Frames):
            self.frames(v.frames)
        else:
            raise TypeError(type(v))

    def frames(self, st):
        """A shared frame list: written (its frame dicts too, each once) the
        first time, a memo reference after that."""
        i = self.objs.get(id(st))
        if i is not None:
            self.get(i)
            return
        self.raw(b"]")
        self.objs[id(st)] = self.memoize()
        self.raw(b"(")
        for fr in st:
            j = self.objs.get(id(fr))
            if j is not None:
                self.get(j)
            else:
                self.objs[id(fr)] = self.nmemo   # the dict's own memo index (its strings come after)
                self.dict(fr)
        self.raw(b"e")

    def dict(self, d):
        self.raw(b"}")
        self.memoize()
        if d:
            self.raw(b"(")
            for k, v in d.items():
                self.string(k)
                self.value(v)
            self.raw(b"u")


class Frames:
    """A shared frame list in a value written by PickleWriter.value."""

    def __init__(self, frames):
        self.frames = frames


def make_stacks(rng, nstacks):
    """nstacks frame lists (innermost first) over a shared set of frame dicts;
    written into the pickle at their first use (PickleWriter.frames), then
    referred to, as PyTorch's pickler shares them."""
    files = [f"/home/user/project/model/{n}.py" for n in ("layers", "attention", "mlp", "train", "data", "optim")]
    torchf = [f"/usr/lib/python3/dist-packages/torch/{n}.py" for n in ("nn/modules/module", "nn/functional",
                                                                         "autograd/__init__", "_tensor")]
    names = ["forward", "backward", "_call_impl", "linear", "matmul", "softmax", "layer_norm", "gelu",
             "dropout", "step", "train_step", "__getitem__", "collate", "zeros_like", "empty"]
    frames = []
    for i in range(400):
        f = rng.choice(files + torchf)
        frames.append({"filename": f, "line": rng.randrange(1, 2000), "name": rng.choice(names)})
    cpp = [{"filename": "??", "line": 0, "name": n} for n in (
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(...)",
        "at::empty_strided", "at::native::empty_cuda", "torch::autograd::Engine::evaluate_function",
        "torch::autograd::Engine::thread_main", "execute_native_thread_routine")]
    stacks = []
    for i in range(nstacks):
        depth = rng.randrange(6, 24)
        st = [cpp[0], cpp[1], cpp[2]] + [rng.choice(frames) for _ in range(depth)]
        if i % 3 == 0:   # a backward-pass stack: C++ engine frames outermost
            st += [cpp[3], cpp[4], cpp[5]]
        stacks.append(st)
    return stacks


class Sim:
    """PyTorch's caching allocator, enough of it to make consistent events."""

    def __init__(self, rng, emit, streams):
        self.rng = rng
        self.emit = emit
        self.next_addr = BASE_ADDR
        self.segs = {}        # seg addr -> [size, stream, pool, {addr: [size, allocated, requested, stack]}]
        self.seg_starts = []
        self.free = {}        # (pool, stream) -> sorted [(size, addr)]
        self.streams = streams

    def _seg_of(self, addr):
        i = bisect.bisect_right(self.seg_starts, addr) - 1
        return self.seg_starts[i]

    def _add_free(self, pool, stream, size, addr):
        bisect.insort(self.free.setdefault((pool, stream), []), (size, addr))

    def _del_free(self, pool, stream, size, addr):
        lst = self.free[(pool, stream)]
        i = bisect.bisect_left(lst, (size, addr))
        del lst[i]

    def malloc(self, req, stream, stack):
        size = MIN_BLOCK if req < MIN_BLOCK else (req + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK
        pool = 0 if size <= SMALL_SIZE else 1
        lst = self.free.setdefault((pool, stream), [])
        i = bisect.bisect_left(lst, (size, 0))
        if i < len(lst):
            bsize, addr = lst.pop(i)
        else:
            if pool == 0:
                segsize = SMALL_BUFFER
            elif size < MIN_LARGE_ALLOC:
                segsize = LARGE_BUFFER
            else:
                segsize = (size + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            addr = self.next_addr
            self.next_addr += (segsize + ROUND_LARGE - 1) // ROUND_LARGE * ROUND_LARGE
            self.segs[addr] = [segsize, stream, pool, {addr: [segsize, False, 0, None]}]
            bisect.insort(self.seg_starts, addr)
            self.emit("segment_alloc", addr, segsize, stream, stack)
            bsize = segsize
        seg = self.segs[self._seg_of(addr)]
        blocks = seg[3]
        rem = bsize - size
        if (pool == 0 and rem >= MIN_BLOCK) or (pool == 1 and rem > SMALL_SIZE):
            blocks[addr + size] = [rem, False, 0, None]
            self._add_free(pool, stream, rem, addr + size)
            bsize = size
        blocks[addr] = [bsize, True, req, stack]
        self.emit("alloc", addr, req, stream, stack)
        return addr

    def free_block(self, addr):
        """free_completed: the block goes back, merged with free neighbours."""
        seg = self.segs[self._seg_of(addr)]
        segsize, stream, pool, blocks = seg
        b = blocks[addr]
        self.emit("free_completed", addr, b[2], stream, b[3])
        b[1], b[2], b[3] = False, 0, None
        nxt = addr + b[0]
        nb = blocks.get(nxt)
        if nb is not None and not nb[1]:
            self._del_free(pool, stream, nb[0], nxt)
            b[0] += nb[0]
            del blocks[nxt]
        # the previous block: the one whose end is addr (blocks tile the segment)
        prev = None
        for a, p in blocks.items():
            if a + p[0] == addr:
                prev = a
                break
        if prev is not None and not blocks[prev][1]:
            pb = blocks[prev]
            self._del_free(pool, stream, pb[0], prev)
            pb[0] += b[0]
            del blocks[addr]
            addr = prev
            b = pb
        self._add_free(pool, stream, b[0], addr)

    def empty_cache(self):
        for addr in list(self.seg_starts):
            segsize, stream, pool, blocks = self.segs[addr]
            if len(blocks) == 1 and not blocks[addr][1]:
                self._del_free(pool, stream, segsize, addr)
                del self.segs[addr]
                self.seg_starts.remove(addr)
                self.emit("segment_free", addr, segsize, stream, None)


def request_size(rng):
    r = rng.random()
    if r < 0.45:
        return rng.randrange(1, 64) * 512 + rng.randrange(0, 512)       # small tensors
    if r < 0.70:
        return rng.randrange(64, 2048) * 512                              # up to 1 MiB
    if r < 0.95:
        return rng.randrange(1, 10) * (1 << 20) + rng.randrange(0, 1 << 20)  # 1-10 MiB
    return rng.randrange(10, 200) * (1 << 20)                             # big activations


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1000000)
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--streams", type=int, default=3, help="streams used (the first is the default stream 0)")
    ap.add_argument("--stacks", type=int, default=2000, help="distinct stack traces")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    streams = [0] + [0x5A000000 + 0x100 * k for k in range(1, args.streams)]
    with open(args.out, "wb") as f:
        pw = PickleWriter(f)
        pw.raw(b"\x80\x04")       # PROTO 4
        pw.raw(b"}")              # the top-level dict
        pw.memoize()
        stacks = make_stacks(rng, args.stacks)
        # device_traces: [[events of device 0]]
        pw.string("device_traces")
        pw.raw(b"]")
        pw.memoize()
        pw.raw(b"(")
        pw.raw(b"]")
        pw.memoize()
        state = {"n": 0, "t": 1_700_000_000_000_000, "batch": 0}

        def emit(action, addr, size, stream, stack):
            if state["batch"] == 0:
                pw.raw(b"(")
            state["t"] += rng.randrange(1, 40)
            pw.raw(b"}")
            pw.memoize()
            pw.raw(b"(")
            pw.string("action")
            pw.string(action)
            pw.string("addr")
            pw.int(addr)
            pw.string("size")
            pw.int(size)
            pw.string("stream")
            pw.int(stream)
            pw.string("time_us")
            pw.int(state["t"])
            pw.string("frames")
            if stack is None:
                pw.raw(b"]")
                pw.memoize()
            else:
                pw.frames(stack)
            pw.raw(b"u")
            state["n"] += 1
            state["batch"] += 1
            if state["batch"] == 1000:
                pw.raw(b"e")
                state["batch"] = 0

        sim = Sim(rng, emit, streams)
        pending = []   # (free at event count, addr): record_stream'ed blocks
        it = 0
        fwd_stacks = [s for i, s in enumerate(stacks) if i % 3]
        bwd_stacks = [s for i, s in enumerate(stacks) if i % 3 == 0]
        persistent = [sim.malloc(request_size(rng), 0, rng.choice(fwd_stacks)) for _ in range(200)]  # weights
        while state["n"] < args.events:
            it += 1
            nact = rng.randrange(300, 1200)
            acts = []
            for _ in range(nact):
                stream = streams[0] if rng.random() < 0.85 else rng.choice(streams)
                acts.append((sim.malloc(request_size(rng), stream, rng.choice(fwd_stacks)), stream))
                if rng.random() < 0.3 and acts:   # temporaries die right away
                    a, s = acts.pop(rng.randrange(max(0, len(acts) - 4), len(acts)))
                    emit("free_requested", a, sim.segs[sim._seg_of(a)][3][a][2], s, None)
                    sim.free_block(a)
            grads = []
            while acts:
                a, s = acts.pop()
                blk = sim.segs[sim._seg_of(a)][3][a]
                emit("free_requested", a, blk[2], s, blk[3])
                if rng.random() < 0.05:   # used on another stream: completes later
                    pending.append((state["n"] + rng.randrange(5, 200), a))
                else:
                    sim.free_block(a)
                if rng.random() < 0.4:
                    grads.append(sim.malloc(request_size(rng), streams[0], rng.choice(bwd_stacks)))
                while pending and pending[0][0] <= state["n"]:
                    sim.free_block(pending.pop(0)[1])
                pending.sort()
            for g in grads:
                blk = sim.segs[sim._seg_of(g)][3][g]
                emit("free_requested", g, blk[2], 0, blk[3])
                sim.free_block(g)
            if it % 25 == 0:
                for _, a in pending:
                    sim.free_block(a)
                pending = []
                sim.empty_cache()
        for _, a in pending:   # the side stream's work is done by the dump
            sim.free_block(a)
        if state["batch"]:
            pw.raw(b"e")
        pw.raw(b"e")              # APPENDS: the device list into device_traces
        pw.raw(b"s")              # SETITEM device_traces
        # segments: the state after the last event
        pw.string("segments")
        pw.raw(b"]")
        pw.memoize()
        pw.raw(b"(")
        for addr in sim.seg_starts:
            segsize, stream, pool, blocks = sim.segs[addr]
            bl = []
            for a in sorted(blocks):
                size, allocated, req, stack = blocks[a]
                bl.append({"address": a, "size": size, "requested_size": req if allocated else 0,
                           "state": "active_allocated" if allocated else "inactive",
                           "frames": Frames(stack) if allocated and stack is not None else []})
            alloc_b = sum(b["size"] for b in bl if b["state"] != "inactive")
            req_b = sum(b["requested_size"] for b in bl)
            pw.dict({"device": 0, "address": addr, "total_size": segsize, "allocated_size": alloc_b,
                     "active_size": alloc_b, "requested_size": req_b, "stream": stream,
                     "segment_type": "small" if pool == 0 else "large", "segment_pool_id": (0, 0)[0],
                     "is_expandable": False, "frames": [], "blocks": bl})
        pw.raw(b"e")
        pw.raw(b"s")
        pw.string("allocator_settings")
        pw.dict({"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1, "garbage_collection_threshold": 0.0,
                 "expandable_segments": False, "pinned_num_register_threads": 1,
                 "release_lock_on_cudamalloc": False, "pinned_use_host_register": False,
                 "roundup_power2_divisions": 1})
        pw.raw(b"s")
        pw.raw(b".")              # STOP
        pw.flush()
    print(f"{args.out}: {state['n']} events, {len(sim.seg_starts)} segments at the dump, "
          f"{it} iterations", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
