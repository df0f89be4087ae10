# tests/chains_index.py: the advanced-indexing op family of view_diff.py
# (docs/VIEW_CHAINS.md, "Advanced indexing"): index_select, take, gather,
# masked_select, index, index_put, scatter, scatter_add with literal index
# lists, run after random view ops; valid, negative and out-of-range indices,
# int32/int64 indices, bool/uint8 masks, indices made on the CPU.
"""Op family module for view_diff.py (see its docstring for the module API).

Known differences handled here (torch 1.13 crashes on index_select of a 0-d
tensor with several indices: the torch side refuses that, as later versions do), as documented in docs/VIEWS.md:
- mnemo takes int32 indices everywhere; PyTorch 1.13 takes them only in
  index_select, so the torch side uses int64 elsewhere.
- index_put_ on a view with internal overlap (stride 0 on a dim of size > 1)
  is refused by mnemo and only warned about by PyTorch: a Deviation.
- The result of a gather (index, take, ...) is contiguous in mnemo; PyTorch's
  TensorIterator may give it the input's layout: the torch side compares
  a contiguous clone.
- Without accumulate, PyTorch leaves duplicate targets undefined: the
  generator makes none for index_put and scatter.

Mixed with other families (view_diff.py FAMILY quant+index, meta+index):
- quantized views: index_select and index run (torch 1.13 has quantized
  kernels for them); take, gather and masked_select are refused by both
  (torch: no quantized kernel); writes are refused by both.
- the meta device: mnemo reads no index there, checks every shape as on the
  CPU and refuses a non-empty index into a dim of size 0 (any value is out
  of range there). torch 1.13's meta kernels check less (index_select,
  gather, scatter and index_put_ accept an index into an empty dim;
  index_put_ checks nothing) and take has none: the torch side runs the op
  on a CPU tensor of the same geometry with every index value 0 and moves
  the result to meta. Masks are refused by mnemo on meta (the result's size
  depends on their values): a Deviation.
"""
import math

import torch

NAME = "index"
DTYPES = {}

_VD = None


def _vd():
    global _VD
    if _VD is None:
        import view_diff
        _VD = view_diff
    return _VD


def _main():
    import __main__
    return __main__ if hasattr(__main__, "Deviation") else _vd()


def parse_list(s):
    return [] if s == "-" else [int(x) for x in s.split(",")]


def flags(tok):
    f = set()
    while tok and tok[-1] in ("int32", "uint8", "cpu"):
        f.add(tok.pop())
    return f


# Set while an op of a meta chain runs on its CPU stand-in: every integer
# index value reads as 0 (mnemo reads none on meta).
ZERO = [False]

OPS = ("index_select", "take", "gather", "masked_select", "index", "index_put", "scatter", "scatter_add")


def index_tensor(s, mask, f, long_only=True):
    shape, vals = s.split("/")
    shape, vals = parse_list(shape), parse_list(vals)
    if ZERO[0] and not mask:
        vals = [0] * len(vals)
    if mask:
        # uint8 masks index as bool masks (PyTorch's deprecated byte masks, same
        # meaning); the torch side uses bool to keep its deprecation warning quiet.
        dt = torch.uint8 if "uint8" in f and not long_only else torch.bool
        return torch.tensor(vals, dtype=torch.int64).ne(0).to(dt).view(shape)
    dt = torch.int32 if "int32" in f and not long_only else torch.int64
    return torch.tensor(vals, dtype=torch.int64).to(dt).view(shape)


def values(shape_s, dtype):
    shape = parse_list(shape_s)
    return torch.arange(math.prod(shape)).to(dtype).view(shape)


def entries(toks, f):
    out = []
    for e in toks:
        if e == ":":
            out.append(None)
        elif e.startswith("m"):
            out.append(index_tensor(e[1:], True, f))
        else:
            out.append(index_tensor(e, False, f))
    return out


def check_index_dims(t, idx):
    # aten::index asserts on more entries than dims (with Nones); mnemo refuses: say so as torch does.
    covered = sum(x.dim() if x is not None and x.dtype in (torch.bool, torch.uint8) else 1 for x in idx)
    if covered > t.dim():
        raise IndexError("too many indices for tensor of dimension %d (got %d)" % (t.dim(), covered))
    for x in idx:
        if x is not None and x.dtype in (torch.bool, torch.uint8) and x.dim() == 0:
            raise IndexError("0-d mask")


def cpu_stand_in(t):
    """A CPU tensor of t's sizes, strides and offset (zeros)."""
    extent = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 1 if t.numel() else 0
    return torch.zeros(max(extent, t.storage_offset()), dtype=t.dtype).as_strided(t.shape, t.stride(),
                                                                                  t.storage_offset())


def apply_meta(t, root, tok):
    n, a = tok[0], list(tok[1:])
    flags(a)
    if n == "masked_select" or (n in ("index", "index_put") and any(e.startswith("m") for e in a)):
        raise _main().Deviation()  # mnemo refuses masks on meta (their values size the result)
    c = cpu_stand_in(t)
    ZERO[0] = True
    try:
        r = apply(c, root, tok)
    finally:
        ZERO[0] = False
    return t if n in ("index_put", "scatter", "scatter_add") else r.to("meta")


def apply(t, root, tok):
    if t.is_meta and tok[0] in OPS:
        return apply_meta(t, root, tok)
    r = apply_op(t, root, tok)
    if r is NotImplemented or tok[0] in ("index_put", "scatter", "scatter_add"):
        return r
    # mnemo's gathers are contiguous; PyTorch's may follow the input's layout
    return r.clone(memory_format=torch.contiguous_format)


def apply_op(t, root, tok):
    n = tok[0]
    a = list(tok[1:])
    if n not in OPS:
        return NotImplemented
    f = flags(a)
    if n == "index_select":
        idx = index_tensor(a[1], False, f, long_only=False)
        if t.dim() == 0 and idx.numel() != 1:
            # torch 1.13 writes past its result here (heap corruption); later
            # versions refuse, as mnemo does
            raise IndexError("index_select(): Index to scalar can have only 1 value")
        return t.index_select(int(a[0]), idx)
    if n == "take":
        return t.take(index_tensor(a[0], False, f))
    if n == "gather":
        return t.gather(int(a[0]), index_tensor(a[1], False, f))
    if n == "masked_select":
        m = a[0][1:] if a[0].startswith("m") else a[0]
        return t.masked_select(index_tensor(m, True, f, long_only=False))
    if n == "index":
        idx = entries(a, f)
        check_index_dims(t, idx)
        if all(x is None for x in idx):
            return t.clone(memory_format=torch.contiguous_format)
        return torch.ops.aten.index(t, idx)
    m = _main()
    if n == "index_put":
        idx = entries(a[2:], f)
        check_index_dims(t, idx)
        vals = values(a[0], t.dtype)
        if torch._debug_has_internal_overlap(t) == 1:
            raise m.Deviation()
        m.written(t)
        if all(x is None for x in idx):
            # no index: values broadcast over t (index_put_ with an empty index list)
            e = vals.expand(t.shape)
            return t.add_(e) if a[1] == "accumulate" and t.dtype != torch.bool else (
                t.logical_or_(e) if a[1] == "accumulate" else t.copy_(e))
        if vals.numel() == 1 and any(x is not None and x.dtype == torch.bool for x in idx):
            # torch 1.13 sends a 1-element value with a mask to masked_fill_,
            # which aligns a mask with trailing ':' wrongly: the same indices
            # as nonzero positions (after index's own checks of the mask)
            torch.ops.aten.index(t, idx)
            idx = [list(x.nonzero().unbind(1)) if x is not None and x.dtype == torch.bool else [x] for x in idx]
            idx = [y for ys in idx for y in ys]
        return torch.ops.aten.index_put_(t, idx, vals, a[1] == "accumulate")
    # scatter / scatter_add D IDX SSHAPE
    idx = index_tensor(a[1], False, f)
    src = values(a[2], t.dtype)
    if torch._debug_has_internal_overlap(t) != 1:
        m.written(t)
    if n == "scatter":
        return t.scatter_(int(a[0]), idx, src)
    return t.scatter_add_(int(a[0]), idx, src)


# ---- generation -------------------------------------------------------------

def lst(xs):
    return ",".join(str(x) for x in xs) if xs else "-"


def idx_tok(shape, vals):
    return "%s/%s" % (lst(shape), lst(vals))


def some_values(rng, size, count, allow_neg=True, unique=False):
    """count indices into a dim of `size`: valid, sometimes negative, rarely out of range."""
    if size == 0:
        return [rng.choice([0, 1, -1]) for _ in range(count)] if count else []
    if unique:
        vals = rng.sample(range(size), min(count, size))
    else:
        vals = [rng.randrange(size) for _ in range(count)]
    if allow_neg:
        vals = [v - size if rng.random() < 0.3 else v for v in vals]
    if vals and rng.random() < 0.04:
        vals[rng.randrange(len(vals))] = rng.choice([size, -size - 1, size + 3])
    return vals


def rshape(rng, nd, hi=3):
    return [rng.randint(0, hi) if rng.random() < 0.1 else rng.randint(1, hi) for _ in range(nd)]


def flag_str(rng, masks=False):
    f = []
    if rng.random() < 0.3:
        f.append("int32")
    if masks and rng.random() < 0.3:
        f.append("uint8")
    if rng.random() < 0.3:
        f.append("cpu")
    return (" " + " ".join(f)) if f else ""


def rdim(rng, nd):
    if nd == 0:
        return rng.choice([0, -1])
    return rng.randrange(-nd, nd) if rng.random() < 0.97 else rng.choice([nd, -nd - 1])


def mask_vals(rng, n):
    p = rng.random()
    return [1 if rng.random() < p else 0 for _ in range(n)]


def gen_entries(rng, shape, unique):
    """Entries of index / index_put: ':' , integer indices and masks."""
    nd = len(shape)
    if nd == 0:
        return []
    n = rng.randint(1, nd)
    ents, pos = [], 0
    ints = []
    while pos < n:
        r = rng.random()
        if r < 0.3 and pos > 0 or (r < 0.15):
            ents.append(":")
            pos += 1
        elif r < 0.5:
            k = rng.randint(1, min(2, n - pos))
            ms = shape[pos:pos + k]
            if rng.random() < 0.05:
                ms = [x + 1 for x in ms]
            ents.append("m" + idx_tok(ms, mask_vals(rng, math.prod(ms))))
            pos += k
        else:
            ints.append((len(ents), shape[pos]))
            ents.append(None)
            pos += 1
    # integer indices: one broadcast shape B; unique targets when asked
    if ints:
        if unique:
            bs = [rng.randint(0, 3)]
            m = min([bs[0]] + [s for _, s in ints])
            bs = [m]
            for i, s in ints:
                ents[i] = idx_tok(bs, some_values(rng, s, m, unique=True))
            if len(ints) > 1:
                # each index its own distinct values along B: targets distinct through the first alone
                pass
        else:
            bs = rshape(rng, rng.randint(0, 2))
            for i, s in ints:
                sh = [x if rng.random() < 0.7 else 1 for x in bs][rng.randint(0, len(bs)) if bs and rng.random() < 0.2 else 0:]
                if rng.random() < 0.03:
                    sh = sh + [2]
                ents[i] = idx_tok(sh, some_values(rng, s, math.prod(sh)))
    return ents


def gen_op(rng, t):
    nd, shape = t.dim(), list(t.shape)
    k = rng.choice(["index_select", "take", "gather", "masked_select", "index", "index", "index_put", "index_put",
                    "scatter", "scatter_add"])
    if k == "index_select":
        d = rdim(rng, nd)
        size = shape[d] if nd and -nd <= d < nd else 1
        r = rng.random()
        sh = [] if r < 0.1 else ([2, 1] if r < 0.13 else [rng.randint(0, 4) if nd else 1])
        return "index_select %d %s%s" % (d, idx_tok(sh, some_values(rng, size, math.prod(sh), allow_neg=False)),
                                         flag_str(rng))
    if k == "take":
        sh = rshape(rng, rng.randint(0, 3))
        return "take %s%s" % (idx_tok(sh, some_values(rng, t.numel(), math.prod(sh))), flag_str(rng))
    if k == "gather":
        d = rdim(rng, nd)
        dd = d % nd if nd and -nd <= d < nd else 0
        sh = [rng.randint(0, s) if i != dd else rng.randint(0, 4) for i, s in enumerate(shape)] or (
            [] if rng.random() < 0.5 else [1])
        if sh and rng.random() < 0.04:
            sh[rng.randrange(len(sh))] += 1
        if rng.random() < 0.06:  # an empty index of any number of dims: not checked (PyTorch)
            sh = [rng.randint(0, 2) for _ in range(rng.randint(1, 3))]
            sh[rng.randrange(len(sh))] = 0
        size = shape[dd] if nd else 1
        return "gather %d %s%s" % (d, idx_tok(sh, some_values(rng, size, math.prod(sh), allow_neg=False)),
                                   flag_str(rng))
    if k == "masked_select":
        sh = shape[rng.randint(0, nd):] if nd else []
        sh = [1 if rng.random() < 0.2 else x for x in sh]
        if rng.random() < 0.2:
            sh = [rng.randint(1, 2)] + sh
        if sh and rng.random() < 0.04:
            sh[-1] += 1
        if not sh:
            sh = [rng.randint(1, 3)]
        return "masked_select %s%s" % (idx_tok(sh, mask_vals(rng, math.prod(sh))), flag_str(rng, True))
    if k == "index":
        ents = gen_entries(rng, shape, unique=False)
        if not ents and rng.random() < 0.2:
            ents = [":"] if rng.random() < 0.5 else ["1/0"]
        return "index %s%s" % (" ".join(ents), flag_str(rng, True))
    if k == "index_put":
        acc = rng.random() < 0.5
        ents = gen_entries(rng, shape, unique=not acc)
        # the result shape, to pick a values shape that broadcasts (usually)
        try:
            idx = entries(ents, set())
            check_index_dims(t, idx)
            rs = list(torch.ops.aten.index(torch.empty(t.shape), idx).shape) if any(
                x is not None for x in idx) else shape
        except Exception:
            rs = [2]
        vs = rs[rng.randint(0, len(rs)):] if rs else []
        vs = [1 if rng.random() < 0.2 else x for x in vs]
        if rng.random() < 0.04:
            vs = vs + [3]
        return "index_put %s %s %s%s" % (lst(vs), "accumulate" if acc else "set", " ".join(ents),
                                         flag_str(rng, True))
    # scatter / scatter_add
    d = rdim(rng, nd)
    dd = d % nd if nd and -nd <= d < nd else 0
    size = shape[dd] if nd else 1
    sh = [rng.randint(0, s) for s in shape] if nd else ([] if rng.random() < 0.5 else [1])
    if sh and rng.random() < 0.04:
        sh[rng.randrange(len(sh))] += 1
    if rng.random() < 0.06:  # an empty index of any number of dims: not checked (PyTorch)
        sh = [rng.randint(0, 2) for _ in range(rng.randint(1, 3))]
        sh[rng.randrange(len(sh))] = 0
    vals = []
    if k == "scatter":
        if nd and dd < len(sh):
            sh[dd] = min(sh[dd], size)
        # distinct targets along dim for every line
        lines = {}
        for flat in range(math.prod(sh)):
            pos, rem = [], flat
            for s in reversed(sh):
                pos.append(rem % s)
                rem //= s
            pos.reverse()
            key = tuple(p for i, p in enumerate(pos) if i != dd)
            if key not in lines:
                lines[key] = some_values(rng, size, sh[dd] if nd else 1, allow_neg=False, unique=True)
            vals.append(lines[key][pos[dd] if nd else 0])
    else:
        vals = some_values(rng, size, math.prod(sh), allow_neg=False)
    ss = [x + (rng.random() < 0.3) for x in sh]
    if rng.random() < 0.04 and ss:
        ss[0] = max(ss[0] - 1, 0)
    if rng.random() < 0.1:  # a 0-d src: size 1 in every dim (more than one index refused)
        ss = []
    return "%s %d %s %s%s" % (k, d, idx_tok(sh, vals), lst(ss), flag_str(rng))
