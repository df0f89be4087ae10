#!/usr/bin/env python3
# tests/view_diff.py: differential test of mnemo's views against PyTorch: random
# view chains (docs/VIEW_CHAINS.md) run by view_driver and by torch, compared.
"""Usage: view_diff.py VIEW_DRIVER [COUNT] [SEED] [DEVICE] [FAMILY]

Generates COUNT (default 3000) random chains with a fixed SEED (default 6),
runs them through the driver in one process (with its creation ops on DEVICE,
default cpu; sim:0 checks the simulated GPU against PyTorch on the CPU) and through the torch equivalent,
and compares dtype, sizes, strides, storage offset, contiguity (plain and
channels_last / channels_last_3d for 4-d / 5-d views), error-or-not and
the values after contiguous(). Exits 77 (skipped) when torch is missing, 1 on
any mismatch (printing the first ones), 0 otherwise.

FAMILY (default: none, the view ops only) names an op family module,
tests/chains_FAMILY.py (index: advanced indexing; quant: quantized views;
meta: the meta device): every chain then holds at least one of its ops,
mixed with the view ops. Several families joined by "+" (quant+index:
indexing of quantized views; meta+index: indexing on the meta device) mix
their ops; each op goes to the first family (in that order) whose apply
takes it, the first family with a gen_root makes the roots, and a result is
described by the first family whose describe gives one. A family module defines NAME, DTYPES (extra dtype
names), apply(t, root, tok) (a tensor, or NotImplemented for ops that are
not its own), gen_op(rng, t) (an op, or None), and may define
gen_root(rng) (a creation line, or None) and describe(t) (a dict, or None
for the default).

Known deviation (docs/VIEWS.md): fill_/zero_ on a view with internal overlap
(stride 0 on a dim of size > 1) is refused by mnemo but allowed by PyTorch;
such chains must be refused by mnemo.
"""
import importlib
import json
import math
import os
import random
import subprocess
import sys
import warnings

try:
    import torch
except ImportError:
    print("SKIPPED: python3-torch is not installed")
    sys.exit(77)

warnings.simplefilter("ignore")

DTYPES = {
    "bool": torch.bool, "uint8": torch.uint8, "int8": torch.int8, "int16": torch.int16,
    "int32": torch.int32, "int64": torch.int64, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
DNAMES = list(DTYPES)
TNAME = {v: k for k, v in DTYPES.items()}


# The op families of this run (FAMILY; none: the view ops only).
EXTS = []


def lst(xs):
    return ",".join(str(x) for x in xs) if xs else "-"


def parse_scalar(s):
    if s in ("true", "false"):
        return s == "true"
    if s.endswith("j"):
        return complex(0, float(s[:-1]))
    try:
        return int(s)
    except ValueError:
        return float(s)


def parse_list(s):
    return [] if s == "-" else [int(x) for x in s.split(",")]


def opt(s, dflt=None):
    return dflt if s == "none" else int(s)


def arange(n, shape, dt):
    return torch.arange(n).to(DTYPES[dt]).view(shape)


def create(tok):
    name, args = tok[0], tok[1:]
    dt = "int64" if name == "arange" else "float32"
    if args and args[-1] in DTYPES:
        dt = args[-1]
        args = args[:-1]
    if name == "arange":
        return arange(int(args[0]), [int(args[0])], dt)
    if name == "full":
        return torch.full([int(a) for a in args[1:]], parse_scalar(args[0]), dtype=DTYPES[dt])
    fn = torch.zeros if name == "zeros" else torch.ones
    return fn([int(a) for a in args], dtype=DTYPES[dt])


class Deviation(Exception):
    pass


# Set when a chain writes into a view whose elements overlap in a way PyTorch
# calls TOO_HARD (e.g. overlapping unfold windows): the result depends on the
# order of the writes, so values are not compared for that chain.
UNORDERED = [False]


def written(t):
    if torch._debug_has_internal_overlap(t) == 2:
        UNORDERED[0] = True
    return t


def apply(t, root, tok):
    n, a = tok[0], tok[1:]
    for fam in EXTS:
        r = fam.apply(t, root, tok)
        if r is not NotImplemented:
            return r
    if n == "view":
        return t.view([int(x) for x in a])
    if n == "reshape":
        return t.reshape([int(x) for x in a])
    if n == "expand":
        return t.expand([int(x) for x in a])
    if n == "view_dtype":
        return t.view(DTYPES[a[0]])
    if n == "t":
        return t.t()
    if n == "transpose":
        return t.transpose(int(a[0]), int(a[1]))
    if n == "permute":
        return t.permute([int(x) for x in a])
    if n == "movedim":
        return torch.movedim(t, parse_list(a[0]), parse_list(a[1]))
    if n == "slice":
        return torch.ops.aten.slice(t, int(a[0]), opt(a[1]), opt(a[2]), opt(a[3], 1))
    if n == "narrow":
        return t.narrow(int(a[0]), int(a[1]), int(a[2]))
    if n == "select":
        return t.select(int(a[0]), int(a[1]))
    if n == "unsqueeze":
        return t.unsqueeze(int(a[0]))
    if n == "squeeze":
        return t.squeeze(int(a[0])) if a else t.squeeze()
    if n == "flatten":
        return t.flatten(int(a[0]), int(a[1])) if a else t.flatten()
    if n == "unflatten":
        return t.unflatten(int(a[0]), parse_list(a[1]))
    if n == "diagonal":
        return t.diagonal(int(a[0]), int(a[1]), int(a[2])) if a else t.diagonal()
    if n == "unfold":
        return t.unfold(int(a[0]), int(a[1]), int(a[2]))
    if n in ("split", "chunk"):
        parts = t.split(int(a[0]), int(a[1])) if n == "split" else t.chunk(int(a[0]), int(a[1]))
        return parts[int(a[2])] if 0 <= int(a[2]) < len(parts) else (_ for _ in ()).throw(IndexError("piece"))
    if n == "real":
        return torch.real(t)
    if n == "imag":
        return torch.imag(t)
    if n == "as_strided":
        return t.as_strided(parse_list(a[0]), parse_list(a[1]), opt(a[2]))
    if n == "contiguous":
        return t.contiguous()
    if n == "clone":
        return t.clone()
    if n == "to":
        return t.to(DTYPES[a[0]])
    if n == "copy":
        shape = parse_list(a[0])
        return written(t).copy_(arange(math.prod(shape), shape, a[1]))
    if n == "copy_self":
        return written(t).copy_(root)
    if n in ("fill", "zero"):
        if torch._debug_has_internal_overlap(t) == 1:
            raise Deviation()
        written(t)
        return t.fill_(parse_scalar(a[0])) if n == "fill" else t.zero_()
    if n == "base":
        return root
    raise ValueError("unknown op " + n)


def run_torch(line):
    UNORDERED[0] = False
    ops = [o.split() for o in line.split("|")]
    root = create(ops[0])
    t = root
    for tok in ops[1:]:
        t = apply(t, root, tok)
    return t


def value(x):
    if isinstance(x, bool):
        return x
    if isinstance(x, complex):
        return [value(x.real), value(x.imag)]
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    return x


def describe(t):
    for fam in EXTS:
        d = fam.describe(t) if hasattr(fam, "describe") else None
        if d is not None:
            return d
    return {
        "dtype": TNAME[t.dtype], "sizes": list(t.shape), "strides": list(t.stride()),
        "offset": t.storage_offset(), "contiguous": t.is_contiguous(),
        "channels_last": (t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)) or
                         (t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d)),
        "values": [value(v) for v in t.contiguous().reshape(-1).tolist()],
    }


# ---- random chains ---------------------------------------------------------

def factor(n, rng, parts):
    """Random shape of `parts` dims with product n (n > 0)."""
    shape = []
    for _ in range(parts - 1):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = rng.choice(divs)
        shape.append(d)
        n //= d
    shape.append(n)
    rng.shuffle(shape)
    return shape


def rdim(rng, nd):
    if nd == 0:
        return rng.choice([0, -1])
    return rng.randrange(-nd, nd) if rng.random() < 0.95 else rng.choice([nd, -nd - 1])


def gen_op(rng, t):
    nd, shape, numel = t.dim(), list(t.shape), t.numel()
    kinds = ["view", "reshape", "t", "transpose", "permute", "movedim", "slice", "narrow", "select",
             "unsqueeze", "squeeze", "expand", "flatten", "unflatten", "diagonal", "unfold", "split",
             "chunk", "view_dtype", "real", "imag", "as_strided", "contiguous", "clone", "to", "copy",
             "copy_self", "fill", "zero", "base"]
    k = rng.choice(kinds)
    if k in ("view", "reshape"):
        if numel == 0:
            s = [0] + [rng.randint(1, 3) for _ in range(rng.randint(0, 2))]
        else:
            s = factor(numel, rng, rng.randint(1, 4))
        if s and rng.random() < 0.4:
            s[rng.randrange(len(s))] = -1
        if rng.random() < 0.05:
            s.append(rng.choice([2, 5]))
        return k + " " + " ".join(str(x) for x in s)
    if k == "t":
        return "t"
    if k == "transpose":
        return "transpose %d %d" % (rdim(rng, nd), rdim(rng, nd))
    if k == "permute":
        p = list(range(nd))
        rng.shuffle(p)
        if p and rng.random() < 0.3:
            p[0] -= nd
        return "permute " + " ".join(str(x) for x in p)
    if k == "movedim":
        m = rng.randint(0, min(nd, 3)) if nd else 1
        pool = list(range(max(nd, 1)))
        return "movedim %s %s" % (lst(rng.sample(pool, m)), lst(rng.sample(pool, m)))
    if k == "slice":
        d = rdim(rng, nd)
        n = shape[d] if nd and -nd <= d < nd else 3
        st = rng.choice(["none", str(rng.randint(-n - 2, n + 2))])
        en = rng.choice(["none", str(rng.randint(-n - 2, n + 2))])
        return "slice %d %s %s %s" % (d, st, en, rng.choice(["1", "1", "2", "3", "none"]))
    if k == "narrow":
        d = rdim(rng, nd)
        n = shape[d] if nd and -nd <= d < nd else 3
        s = rng.randint(-n, n)
        return "narrow %d %d %d" % (d, s, rng.randint(0, max(n - (s % n if n else 0), 0) + (rng.random() < 0.1)))
    if k == "select":
        d = rdim(rng, nd)
        n = shape[d] if nd and -nd <= d < nd else 3
        return "select %d %d" % (d, rng.randint(-n, max(n - 1 + (rng.random() < 0.1), -n)))
    if k == "unsqueeze":
        return "unsqueeze %d" % rng.randint(-nd - 1, nd)
    if k == "squeeze":
        return "squeeze" if rng.random() < 0.5 else "squeeze %d" % rdim(rng, nd)
    if k == "expand":
        s = [rng.choice([x, -1]) if x != 1 else rng.choice([1, 2, 3, -1]) for x in shape]
        s = [rng.randint(1, 3) for _ in range(rng.choice([0, 0, 1, 2]))] + s
        if s and rng.random() < 0.05:
            s[0] = 4
        return "expand " + " ".join(str(x) for x in s)
    if k == "flatten":
        if rng.random() < 0.3:
            return "flatten"
        a, b = sorted([rdim(rng, nd), rdim(rng, nd)]) if rng.random() < 0.9 else (rdim(rng, nd), rdim(rng, nd))
        return "flatten %d %d" % (a, b)
    if k == "unflatten":
        d = rdim(rng, nd)
        n = shape[d] if nd and -nd <= d < nd else 1
        s = factor(n, rng, rng.randint(1, 3)) if n else [0, rng.randint(1, 3)]
        if rng.random() < 0.3:
            s[rng.randrange(len(s))] = -1
        return "unflatten %d %s" % (d, lst(s))
    if k == "diagonal":
        if rng.random() < 0.2:
            return "diagonal"
        return "diagonal %d %d %d" % (rng.randint(-3, 3), rdim(rng, nd), rdim(rng, nd))
    if k == "unfold":
        d = rdim(rng, nd)
        n = shape[d] if nd and -nd <= d < nd else 1
        return "unfold %d %d %d" % (d, rng.randint(0, n + (rng.random() < 0.1)), rng.randint(1, 3))
    if k in ("split", "chunk"):
        d = rdim(rng, nd)
        return "%s %d %d %d" % (k, rng.randint(1, 4), d, rng.randint(0, 3))
    if k == "view_dtype":
        return "view_dtype " + rng.choice(DNAMES)
    if k in ("real", "imag", "t", "contiguous", "clone", "base", "zero", "copy_self"):
        return k
    if k == "as_strided":
        n = max(t.untyped_storage().nbytes() // t.element_size(), 1) if hasattr(t, "untyped_storage") else 4
        m = rng.randint(0, 3)
        sz = [rng.randint(0, 3) for _ in range(m)]
        st = [rng.randint(0, 4) for _ in range(m)]
        return "as_strided %s %s %s" % (lst(sz), lst(st), rng.choice(["none", str(rng.randint(0, n))]))
    if k == "to":
        return "to " + rng.choice(DNAMES)
    if k == "copy":
        s = shape[rng.randint(0, nd):] if nd else []
        s = [1 if rng.random() < 0.2 else x for x in s]
        if rng.random() < 0.1:
            s = [x + 1 for x in s]
        return "copy %s %s" % (lst(s), rng.choice(DNAMES))
    if k == "fill":
        return "fill " + rng.choice(["0", "1", "-3", "7", "300", "2.5", "-1.5", "true", "false", "1e10", "1.5j"])
    raise AssertionError(k)


def gen_chain(rng):
    dt = rng.choice(DNAMES)
    r = rng.random()
    if r < 0.08:
        # NHWC / NDHWC memory seen as NCHW / NCDHW (channels_last layouts).
        nd = rng.choice([4, 5])
        shape = [rng.randint(1, 3) for _ in range(nd)]
        perm = [0] + list(range(2, nd)) + [1]
        back = [0, nd - 1] + list(range(1, nd - 1))
        line = "arange %d %s | view %s | permute %s | contiguous | permute %s" % (
            math.prod(shape), dt, " ".join(str(x) for x in [shape[i] for i in perm]),
            " ".join(str(x) for x in range(nd)), " ".join(str(x) for x in back))
    elif r < 0.6:
        n = rng.choice([0, 1, 2, 6, 12, 24, 36, 60])
        line = "arange %d %s" % (n, dt)
    else:
        shape = [rng.randint(0, 4) if rng.random() < 0.1 else rng.randint(1, 4) for _ in range(rng.randint(0, 4))]
        kind = rng.choice(["zeros", "ones", "full 2"])
        line = "%s %s %s" % (kind, " ".join(str(x) for x in shape), dt)
    for fam in EXTS:
        if hasattr(fam, "gen_root"):
            root = fam.gen_root(rng)
            if root:
                line = root
                break
    try:
        t = run_torch(line)
    except Exception:
        return line
    nfam = 0
    nops = rng.randint(1, 7)
    for i in range(nops):
        op = None
        if EXTS and (rng.random() < 0.5 or (i == nops - 1 and nfam == 0)):
            fam = EXTS[0] if len(EXTS) == 1 else rng.choice(EXTS)
            op = fam.gen_op(rng, t)
            nfam += op is not None
        if op is None:
            op = gen_op(rng, t)
        line = line + " | " + op
        try:
            t = run_torch(line)
        except Exception:
            break
    return line


def main():
    driver = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 6
    device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
    if len(sys.argv) > 5:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        for name in sys.argv[5].split("+"):
            fam = importlib.import_module("chains_" + name)
            EXTS.append(fam)
            DTYPES.update(fam.DTYPES)
            TNAME.update({v: k for k, v in fam.DTYPES.items()})
    rng = random.Random(seed)
    chains = [gen_chain(rng) for _ in range(count)]
    proc = subprocess.run([driver, device], input="\n".join(chains) + "\n", capture_output=True, text=True)
    outs = proc.stdout.splitlines()
    if proc.returncode != 0 or len(outs) != len(chains):
        print("driver failed (rc %d, %d lines for %d chains): %s" % (proc.returncode, len(outs), len(chains),
                                                                      proc.stderr[-2000:]))
        return 1
    bad = 0
    stats = {"ok": 0, "error": 0, "deviation": 0, "unordered": 0}
    for line, out in zip(chains, outs):
        got = json.loads(out)
        try:
            want = describe(run_torch(line))
        except Deviation:
            want = {"error": "deviation"}
            stats["deviation"] += 1
        except Exception as e:  # noqa: BLE001 - any torch refusal
            if type(e).__name__ == "KnownDeviation":  # a comparison the family says torch cannot make
                stats["skipped"] = stats.get("skipped", 0) + 1
                continue
            want = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
        if "error" in want or "error" in got:
            same = ("error" in want) == ("error" in got)
            if same and "error" in got and got.get("status") in ("internal_error", "format_error"):
                same = False
        elif UNORDERED[0]:
            stats["unordered"] += 1
            same = {k: v for k, v in want.items() if k != "values"} == {k: v for k, v in got.items() if k != "values"}
        else:
            same = want == got
        if "error" in want:
            stats["error"] += 1
        else:
            stats["ok"] += 1
        if not same:
            bad += 1
            if bad <= 20:
                print("MISMATCH: %s\n  mnemo: %s\n  torch: %s" % (line, json.dumps(got), json.dumps(want)))
    if EXTS:
        print("family %s: every chain holds at least one of its ops" % "+".join(f.NAME for f in EXTS))
    if stats.get("skipped"):
        print("%d chains not compared (a known deviation of torch, see the family module)" % stats["skipped"])
    print("%d chains (%d ran, %d of them with values not compared after a write into a self-overlapping view; "
          "%d refused by both; %d known deviations), %d mismatches" % (
              len(chains), stats["ok"], stats["unordered"], stats["error"] - stats["deviation"], stats["deviation"],
              bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
