"""mnemo._format: the text of a View as PyTorch prints a tensor
(``tensor([1., 2., 3.])``), following the rules of torch/_tensor_str.py:
precision 4; scientific notation when the nonzero finite magnitudes span more
than 1000x, exceed 1e8, or (non-integer values) go below 1e-4; integral
floats printed as ``1.``; ints, bools and complex numbers as PyTorch; lines
of at most ``linewidth`` (80) characters; views of more than ``threshold``
(1000) elements summarized to ``edgeitems`` (3) per dim edge with ``...``;
nested dims indented under their bracket; suffixes (``device='sim:0'``,
``dtype=mnemo.float16``, ``size=(0, 3)``) after the values, as PyTorch's
(``dtype=`` only for dtypes other than float32, complex64, int64 and bool).

``set_printoptions`` / ``get_printoptions`` are PyTorch's (``profile``
"default", "short", "full"). ``format_tensor(view, suffixes)`` is the one
entry for other modules (mnemo.quantized prints its dequantized values with
its own suffixes through it).

Threading: the print options are process-wide, as PyTorch's; formatting
reads them without a lock (set them before printing from several threads).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

__all__ = ["set_printoptions", "get_printoptions", "format_tensor", "view_repr"]


class _Options:
    """The print options (PyTorch's defaults)."""

    __slots__ = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")

    def __init__(self) -> None:
        self.precision: int = 4
        self.threshold: float = 1000
        self.edgeitems: int = 3
        self.linewidth: int = 80
        self.sci_mode: Optional[bool] = None


_OPTS = _Options()
_DEFAULT_DTYPES = ("float32", "complex64", "int64", "bool")  # torch prints no dtype= for these


def set_printoptions(precision: Optional[int] = None, threshold: Optional[float] = None,
                     edgeitems: Optional[int] = None, linewidth: Optional[int] = None,
                     profile: Optional[str] = None, sci_mode: Optional[bool] = None) -> None:
    """PyTorch's ``torch.set_printoptions``: ``precision`` (digits after the
    point, 4), ``threshold`` (more elements than this are summarized, 1000),
    ``edgeitems`` (elements kept at each edge of a summarized dim, 3),
    ``linewidth`` (80), ``profile`` ("default", "short": precision 2 and
    edgeitems 2, "full": no summarizing) applied first, and ``sci_mode``
    (True/False forces scientific notation on/off; None, also when not
    given, lets the values decide, as PyTorch)."""
    # Every argument is checked before any option changes: a refused call changes nothing.
    presets = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80), "full": (4, math.inf, 3, 80)}
    if profile is not None and (not isinstance(profile, str) or profile not in presets):
        raise ValueError(f"mnemo: set_printoptions: unknown profile {profile!r} "
                         f"(expected 'default', 'short' or 'full')")
    for name, value in (("precision", precision), ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError(f"mnemo: set_printoptions: {name} must be a non-negative int, got {value!r}")
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, (int, float))
                                  or not threshold >= 0):
        raise ValueError(f"mnemo: set_printoptions: threshold must be a non-negative number, got {threshold!r}")
    if sci_mode is not None and not isinstance(sci_mode, bool):
        raise ValueError(f"mnemo: set_printoptions: sci_mode must be True, False or None, got {sci_mode!r}")
    if profile is not None:
        _OPTS.precision, _OPTS.threshold, _OPTS.edgeitems, _OPTS.linewidth = presets[profile]
    for name, value in (("precision", precision), ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(_OPTS, name, value)
    if threshold is not None:
        _OPTS.threshold = threshold
    _OPTS.sci_mode = sci_mode


def get_printoptions() -> Dict[str, Any]:
    """The current print options as a dict (``precision``, ``threshold``,
    ``edgeitems``, ``linewidth``, ``sci_mode``), as ``torch.get_printoptions``."""
    return {name: getattr(_OPTS, name) for name in _Options.__slots__}


class _Formatter:
    """Width and style of every number of one (real) array, as torch's _Formatter."""

    def __init__(self, values: Any, floating: bool) -> None:
        import numpy as np
        self.floating = floating
        self.int_mode = True
        self.sci_mode = False
        self.max_width = 1
        flat = values.reshape(-1)
        if not floating:
            for v in flat.tolist():
                self.max_width = max(self.max_width, len(str(v)))
            return
        finite = flat[np.isfinite(flat) & (flat != 0)]
        if finite.size == 0:
            return  # (as PyTorch: the sci_mode option is not applied then)
        absv = np.abs(finite).astype(np.float64)
        lo, hi = float(absv.min()), float(absv.max())
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        p = _OPTS.precision
        vals = finite.tolist()
        if self.int_mode:
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.sci_mode = True
                self.max_width = max([self.max_width] + [len(f"{v:.{p}e}") for v in vals])
            else:
                self.max_width = max([self.max_width] + [len(f"{v:.0f}") + 1 for v in vals])
        elif hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
            self.sci_mode = True
            self.max_width = max([self.max_width] + [len(f"{v:.{p}e}") for v in vals])
        else:
            self.max_width = max([self.max_width] + [len(f"{v:.{p}f}") for v in vals])
        if _OPTS.sci_mode is not None:
            self.sci_mode = _OPTS.sci_mode

    def format(self, value: Any) -> str:
        p = _OPTS.precision
        if self.floating:
            if self.sci_mode:
                s = f"{value:{self.max_width}.{p}e}"
            elif self.int_mode:
                s = f"{value:.0f}"
                if not (math.isinf(value) or math.isnan(value)):
                    s += "."
            else:
                s = f"{value:.{p}f}"
        else:
            s = str(value)
        return (self.max_width - len(s)) * " " + s


def _summarized(a: Any) -> Any:
    """The elements a summarized print shows (edgeitems at each edge of every dim)."""
    import numpy as np
    e = _OPTS.edgeitems
    idx = [list(range(e)) + list(range(n - e, n)) if n > 2 * e else list(range(n)) for n in a.shape]
    # every dim cut at once: only the small result is made (one dim at a time would copy
    # the others whole: an expanded view of 2^63 - 1 elements holds 1 byte)
    return a[np.ix_(*idx)] if a.ndim else a


class _Printer:
    def __init__(self, arr: Any, kind: str) -> None:
        self.summarize = arr.size > _OPTS.threshold
        sample = _summarized(arr) if self.summarize else arr
        self.complex = kind == "complex"
        if self.complex:
            self.f1 = _Formatter(sample.real, True)
            self.f2: Optional[_Formatter] = _Formatter(sample.imag, True)
        else:
            self.f1 = _Formatter(sample, kind == "float")
            self.f2 = None

    def value(self, v: Any) -> str:
        if self.f2 is None:
            return self.f1.format(v)
        re_s = self.f1.format(v.real)
        im_s = (self.f2.format(v.imag) + "j").lstrip()
        return re_s + im_s if im_s[0] in "+-" else re_s + "+" + im_s

    def vector(self, a: Any, indent: int) -> str:
        elem = self.f1.max_width + 2 + (self.f2.max_width + 1 if self.f2 is not None else 0)
        per_line = max(1, (_OPTS.linewidth - indent) // elem)
        e = _OPTS.edgeitems
        if self.summarize and a.shape[0] > 2 * e:
            data = ([self.value(v) for v in a[:e].tolist()] + [" ..."] +
                    [self.value(v) for v in a[a.shape[0] - e:].tolist()])
        else:
            data = [self.value(v) for v in a.tolist()]
        lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
        return "[" + ("," + "\n" + " " * (indent + 1)).join(lines) + "]"

    def tensor(self, a: Any, indent: int) -> str:
        if a.ndim == 0:
            return self.value(a.item())
        if a.ndim == 1:
            return self.vector(a, indent)
        n, e = a.shape[0], _OPTS.edgeitems
        if self.summarize and n > 2 * e:
            slices = ([self.tensor(a[i], indent + 1) for i in range(e)] + ["..."] +
                      [self.tensor(a[i], indent + 1) for i in range(n - e, n)])
        else:
            slices = [self.tensor(a[i], indent + 1) for i in range(n)]
        return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def _values(view: Any) -> Any:
    """The host values as a numpy array of a type torch formats them in
    (float16 and the types numpy lacks as float32, exactly)."""
    import numpy as np
    arr = view._host_numpy()
    if arr.dtype == np.float16:
        arr = arr.astype(np.float32)
    return arr


def _tensor_str(view: Any, indent: int) -> str:
    if view.numel() == 0:
        return "[]"
    arr = _values(view)
    return _Printer(arr, view.dtype.kind).tensor(arr, indent)


def _add_suffixes(text: str, suffixes: List[str], indent: int) -> str:
    out = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > _OPTS.linewidth:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    out.append(")")
    return "".join(out)


def format_tensor(view: Any, suffixes: List[str], prefix: str = "tensor(") -> str:
    """``prefix`` + the values of ``view`` (a non-quantized View) formatted
    as PyTorch's + the given ``suffixes`` (strings such as
    ``"device='sim:0'"``, added as PyTorch adds them: on a new line when the
    line would pass linewidth) + ")". Adds no suffix of its own."""
    return _add_suffixes(prefix + _tensor_str(view, len(prefix)), list(suffixes), len(prefix))


def device_suffixes(view: Any) -> List[str]:
    """``["device='sim:0'"]`` for a view off the CPU, else [] (PyTorch prints
    the device when it is not the default one)."""
    dev = view.device
    return [] if dev.type == "cpu" else [f"device='{dev}'"]


def view_repr(view: Any) -> str:
    """PyTorch's repr of a tensor for a View: ``tensor([1., 2.])``, with
    ``device=`` off the CPU, ``dtype=`` for dtypes other than float32,
    complex64, int64 and bool, ``size=`` for empty views that are not 1-d and
    for meta views (whose values do not exist: ``...``). Quantized views go
    to mnemo.quantized."""
    dt = view.dtype
    if dt.is_quantized:
        try:
            from . import quantized
            fn = quantized._repr
        except (ImportError, AttributeError):
            return (f"tensor(<the values of a {dt.name} view print with mnemo.quantized, which this mnemo lacks>, "
                    f"size={tuple(view.shape)}, dtype={dt!r})")
        return fn(view)
    suffixes = device_suffixes(view)
    prefix = "tensor("
    if view.device.type == "meta":
        suffixes.append(f"size={tuple(view.shape)}")
        if dt.name != "float32":
            suffixes.append(f"dtype={dt!r}")
        return _add_suffixes(prefix + "...", suffixes, len(prefix))
    if view.numel() == 0:
        if view.ndim != 1:
            suffixes.append(f"size={tuple(view.shape)}")
        if dt.name != "float32":
            suffixes.append(f"dtype={dt!r}")
        return _add_suffixes(prefix + "[]", suffixes, len(prefix))
    if dt.name not in _DEFAULT_DTYPES:
        suffixes.append(f"dtype={dt!r}")
    return format_tensor(view, suffixes, prefix)
