#!/usr/bin/env python3
# tests/python/fuzz_lifetimes.py: a deterministic random-lifetime test of the
# Python binding (docs/PYTHON.md "Object lifetimes"). A seeded sequence makes,
# derives, copies, deep-copies, pickles, exports (DLPack), fills, releases and
# drops views and storages from several allocators (caching, naive, pinned,
# the defaults), opens and closes memory pools and recorders, closes and drops
# allocators, builds garbage cycles (allocator included) and collects at
# random points. Checked: only the documented exceptions, every live view's
# values against a model of its storage's bytes, the library's reference
# count of every storage (mn_storage_refcount) against the Python objects
# holding it, close() refused exactly while something of the allocator lives,
# and at the end every allocator destroyed and the statistics back to zero.
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/fuzz_lifetimes.py [--seed N] [--steps N]
(exit 0 pass, 1 fail). The normal suite runs it briefly (labels cpu;sim), the
fuzz label longer; a failure names the seed and step to replay."""
import argparse
import copy
import gc
import pickle
import random
import sys
import threading

import mnemo
from mnemo import _owner
from mnemo.profiling import record

try:
    import numpy as np
except ImportError:
    np = None

DEVICES = ("cpu", "sim:0")


class Fam:
    """One C storage: its expected bytes and the allocator record it came from."""

    def __init__(self, model, arec):
        self.model = bytearray(model)
        self.arec = arec


class ARec:
    """An allocator made by the fuzz: the object (None once dropped)."""

    def __init__(self, obj, dev):
        self.obj, self.dev, self.closed, self.pools, self.recs = obj, dev, False, [], []
        self.handle = obj._handle


def positions(v):
    """The storage byte index of every element of a uint8 view, nested like tolist()."""
    shape, stride, off = v.shape, v.stride(), v.storage_offset()

    def rec(d, base):
        if d == len(shape):
            return base
        return [rec(d + 1, base + i * stride[d]) for i in range(shape[d])]
    return rec(0, off)


def flat(x):
    if isinstance(x, list):
        for y in x:
            yield from flat(y)
    else:
        yield x


def expected(v, fam):
    pos = positions(v)

    def rec(p):
        return [rec(q) for q in p] if isinstance(p, list) else fam.model[p]
    return rec(pos)


class Fuzz:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.arecs = []
        # [kind, obj, fam, keep]: kind "view", "storage", "array" (a numpy DLPack
        # import); keep: the Python allocator objects it keeps alive (View._keep)
        self.held = []
        self.step = 0
        self.trace = False

    def hold(self, kind, obj, fam, keep=None):
        self.held.append([kind, obj, fam, getattr(obj, "_keep", ()) if keep is None else keep])

    def fail(self, msg):
        raise AssertionError(f"step {self.step}: {msg}")

    # ---- helpers ------------------------------------------------------------------
    def pick(self, kinds=("view",)):
        c = [h for h in self.held if h[0] in kinds]
        return self.rng.choice(c) if c else None

    def live_arecs(self):
        return [a for a in self.arecs if a.obj is not None and not a.closed]

    def new_family(self, obj, arec):
        st = obj.untyped_storage() if isinstance(obj, mnemo.View) else obj
        return Fam(st.tobytes(), arec)

    def holders_of(self, arec):
        return [h for h in self.held if h[2].arec is arec]

    # ---- operations ---------------------------------------------------------------
    def op_new_allocator(self):
        kind = self.rng.choice(("caching", "naive_sim", "naive_cpu", "pinned"))
        obj, dev = {"caching": (lambda: mnemo.CachingAllocator("sim:0"), "sim:0"),
                    "naive_sim": (lambda: mnemo.NaiveAllocator("sim:0"), "sim:0"),
                    "naive_cpu": (lambda: mnemo.NaiveAllocator("cpu"), "cpu"),
                    "pinned": (lambda: mnemo.PinnedAllocator("cpu"), "cpu")}[kind]
        self.arecs.append(ARec(obj(), dev))

    def op_new_view(self):
        live = self.live_arecs()
        arec = self.rng.choice(live) if live and self.rng.random() < 0.7 else None
        dev = arec.dev if arec else self.rng.choice(DEVICES)
        r, c = self.rng.randint(1, 5), self.rng.randint(1, 6)
        a = arec.obj if arec else None
        pool = None
        if arec and arec.pools and self.rng.random() < 0.5:
            pool = self.rng.choice(arec.pools)
        if self.rng.random() < 0.3:
            obj = mnemo.Storage(r * c, dev, allocator=a)
            obj.fill_(self.rng.randrange(256))
            kind = "storage"
        else:
            if pool is not None:
                with pool.use():
                    obj = mnemo.empty(r, c, dtype=mnemo.uint8, device=dev, allocator=a)
            else:
                obj = mnemo.empty(r, c, dtype=mnemo.uint8, device=dev, allocator=a)
            obj.copy_(mnemo.tensor([[self.rng.randrange(256) for _ in range(c)] for _ in range(r)],
                                   dtype=mnemo.uint8))
            kind = "view"
        self.hold(kind, obj, self.new_family(obj, arec))

    def op_derive(self):
        h = self.pick()
        if not h:
            return
        v, fam = h[1], h[2]
        ops = [lambda x: x.reshape(-1), lambda x: x.flatten(), lambda x: x.contiguous(), lambda x: x.clone(),
               lambda x: x[()], lambda x: x.to("sim:0" if x.device.type == "cpu" else "cpu")]
        if v.ndim >= 1:
            ops += [lambda x: x[1:], lambda x: x[..., ::2]]
        if v.ndim <= 2:
            ops += [lambda x: x.t()]
        if v.ndim < 4:
            ops += [lambda x: x.unsqueeze(0), lambda x: x[None].expand(2, *x.shape)]
        w = self.rng.choice(ops)(v)
        if w is v:  # contiguous() of a contiguous view, to() its own device: the view itself, as PyTorch
            return
        if w.shares_storage(v):
            self.hold("view", w, fam)
        else:  # a copy: the values of the source, a storage of its own
            got = w.tolist()
            src = expected(v, fam)
            if list(flat(got)) != list(flat(src)):
                self.fail(f"a copy holds {got}, its source {src}")
            self.hold("view", w, Fam(w.untyped_storage().tobytes(), self.arec_of(w)))

    def arec_of(self, w):
        """The allocator record a new storage came from (None: mnemo's own)."""
        ah = w.untyped_storage().allocator_handle
        if _owner.box_of(ah) is None:
            return None
        return next(a for a in reversed(self.arecs) if a.handle == ah)

    def op_copy(self):
        h = self.pick(("view", "storage"))
        if not h:
            return
        kind, obj, fam, _ = h
        how = self.rng.choice(("copy", "deepcopy", "pickle", "storage"))
        if how == "copy":
            c = copy.copy(obj)
            if kind == "view":
                self.hold("view", c, fam)
            else:  # a storage copy is a clone (PyTorch)
                self.hold("storage", c, Fam(fam.model, fam.arec))
        elif how == "deepcopy":
            same = [x for x in self.held if x[2] is fam and x[0] in ("view", "storage")][:3]
            objs = copy.deepcopy([x[1] for x in same])
            nf = Fam(fam.model, fam.arec)
            added = set()
            for x, o in zip(same, objs):
                if id(o) not in added:  # Storage objects of one C storage deep-copy to one object (PyTorch's memo)
                    added.add(id(o))
                    self.hold(x[0], o, nf)
        elif how == "pickle":
            c = pickle.loads(pickle.dumps(obj, protocol=self.rng.randint(0, pickle.HIGHEST_PROTOCOL)))
            self.hold(kind, c, Fam(fam.model, None))
        elif kind == "view":
            self.hold("storage", obj.untyped_storage(), fam)

    def op_export(self):
        h = self.pick()
        if not h or np is None or h[1].device.type != "cpu":
            return
        # the export keeps the view's allocator objects, unless it is counted on their box
        self.hold("array", np.from_dlpack(h[1]), h[2], () if h[1]._box is not None else h[3])

    def op_fill(self):
        h = self.pick(("view", "storage"))
        if not h:
            return
        kind, obj, fam, _ = h
        b = self.rng.randrange(256)
        if kind == "storage":
            obj.fill_(b)
            fam.model[:] = bytes([b]) * len(fam.model)
            return
        if any(st == 0 and n > 1 for st, n in zip(obj.stride(), obj.shape)):
            return  # expanded: writes refused
        obj.fill_(b)
        for p in flat(positions(obj)):
            fam.model[p] = b

    def op_release(self):
        h = self.pick(("storage",))
        if not h:
            return
        self.held = [x for x in self.held if x is not h]
        s = h[1]
        if self.rng.random() < 0.3:
            ts = [threading.Thread(target=s.release) for _ in range(3)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        else:
            s.release()
            s.release()
        try:
            s.nbytes()
        except ValueError:
            pass
        else:
            self.fail("a released storage still answers")

    def op_drop(self):
        if self.held:
            self.held.pop(self.rng.randrange(len(self.held)))

    def op_cycle(self):
        """Drops a few objects into a garbage cycle, sometimes with an
        allocator and everything that keeps it alive (so the cycle is garbage)."""
        n = min(len(self.held), self.rng.randint(1, 4))
        items = [self.held.pop(self.rng.randrange(len(self.held)))[1] for _ in range(n)]
        cyc = [items]
        cyc.append(cyc)
        owners = [a for a in self.arecs if a.obj is not None]
        if owners and self.rng.random() < 0.5:
            a = self.rng.choice(owners)
            keeping = [h for h in self.held if any(k is a.obj for k in h[3])]
            self.held = [h for h in self.held if not any(k is a.obj for k in h[3])]
            items += [h[1] for h in keeping]
            a.obj.cycle = cyc
            cyc.append(a.obj)
            for p in a.pools:
                p.cycle = cyc
            a.obj = None  # dropped into the cycle
            a.pools, a.recs = [], []

    def op_close_allocator(self):
        live = self.live_arecs()
        if not live:
            return
        a = self.rng.choice(live)
        for r in a.recs:
            r.close()
        a.recs = []
        for p in list(a.pools):
            try:
                p.close()
                a.pools.remove(p)
            except mnemo.MnemoError:
                pass  # busy: a block of it lives
        mine = self.holders_of(a)
        try:
            a.obj.close()
        except mnemo.MnemoError as e:
            if e.status_name != "invalid_state":
                raise
            if not mine and not a.pools:
                gc.collect()  # what refused may be garbage not collected yet
                a.obj.close()
                a.closed = True
            return
        if mine or a.pools:
            self.fail(f"close() accepted with {len(mine)} holder(s) and {len(a.pools)} pool(s) alive")
        a.closed = True

    def op_drop_allocator(self):
        owners = [a for a in self.arecs if a.obj is not None]
        if owners:
            a = self.rng.choice(owners)
            a.obj, a.pools, a.recs = None, [], []

    def op_pool(self):
        live = [a for a in self.live_arecs() if a.obj.name == "caching"]
        if live:
            a = self.rng.choice(live)
            a.pools.append(mnemo.MemPool(a.obj))

    def op_recorder(self):
        live = [a for a in self.live_arecs() if a.obj.name == "caching"]
        if live:
            a = self.rng.choice(live)
            if a.recs and self.rng.random() < 0.5:
                a.recs.pop().close()
            else:
                a.recs.append(record(a.obj, capacity=64))

    def op_collect(self):
        gc.collect()

    def op_check(self):
        mnemo.synchronize("sim:0")  # queued copies hold their storages until they ran
        gc.collect()
        counts = {}
        for kind, obj, fam, _ in self.held:
            counts[id(fam)] = counts.get(id(fam), 0) + 1
            if kind == "array":
                continue
            if kind == "view":
                got, want = obj.tolist(), expected(obj, fam)
            else:
                got, want = obj.tobytes(), bytes(fam.model)
            if got != want:
                self.fail(f"a {kind} reads {got}, expected {want}")
        seen = set()
        for kind, obj, fam, _ in self.held:
            if kind == "array" or id(fam) in seen:
                continue
            seen.add(id(fam))
            st = obj.untyped_storage() if kind == "view" else obj
            rc = st.refcount - (1 if kind == "view" else 0)
            if rc != counts[id(fam)]:
                self.fail(f"the storage of a {kind} of {obj.device} has refcount {rc}, {counts[id(fam)]} Python "
                          "object(s) hold it")

    OPS = [("op_new_allocator", 3), ("op_new_view", 12), ("op_derive", 12), ("op_copy", 10), ("op_export", 3),
           ("op_fill", 6), ("op_release", 4), ("op_drop", 10), ("op_cycle", 4), ("op_close_allocator", 3),
           ("op_drop_allocator", 2), ("op_pool", 2), ("op_recorder", 2), ("op_collect", 3), ("op_check", 3)]

    def run(self, steps):
        names = [n for n, _ in self.OPS]
        weights = [w for _, w in self.OPS]
        for self.step in range(steps):
            name = self.rng.choices(names, weights)[0]
            if self.trace:
                print(self.step, name, [(k, id(f) % 1000) for k, _, f, _ in self.held])
            try:
                getattr(self, name)()
            except AssertionError:
                raise
            except Exception as e:
                raise AssertionError(f"step {self.step} ({name}): undocumented {type(e).__name__}: {e}") from e
            if len(self.held) > 60:
                self.op_drop()
        self.op_check()

    def finish(self):
        for a in self.arecs:
            for r in a.recs:
                r.close()
            a.recs = []
        self.held.clear()
        gc.collect()
        for a in self.arecs:
            for p in a.pools:
                p.close()
            a.pools = []
            if a.obj is not None and not a.closed:
                if a.obj.name != "naive" and a.obj.memory_stats()["allocation.all.current"]:
                    self.fail(f"a {a.obj.name} allocator still counts allocations after everything went")
                a.obj.close()
        self.arecs.clear()
        gc.collect()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--trace", action="store_true", help="print each step")
    args = ap.parse_args()
    gc.collect()
    base_allocators = _owner.live_allocator_count()
    base_sim = mnemo.memory_stats("sim:0")["allocation.all.current"]
    gc.disable()  # collections only where the sequence says: the run is reproducible
    f = Fuzz(args.seed)
    f.trace = args.trace
    try:
        f.run(args.steps)
        f.finish()
    except AssertionError as e:
        print(f"FAIL (seed {args.seed}): {e}")
        return 1
    finally:
        gc.enable()
    gc.collect()
    left = _owner.live_allocator_count() - base_allocators
    sim = mnemo.memory_stats("sim:0")["allocation.all.current"] - base_sim
    if left or sim:
        print(f"FAIL (seed {args.seed}): {left} allocator(s) never destroyed, {sim} default sim allocation(s) left")
        return 1
    print(f"fuzz_lifetimes: seed {args.seed}, {args.steps} steps: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
