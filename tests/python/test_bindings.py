#!/usr/bin/env python3
# tests/python/test_bindings.py: the package's ctypes bindings agree with
# include/mnemo/*.h: every declared C function (restype, argtypes) with its
# MN_API prototype, every mirrored struct (field names, kinds, offsets, sizes,
# sizeof from the compiler; each field's type from the header's declaration)
# and every C constant of mnemo._lib with what the compiler says
# (tests/py_layouts.c, built by CTest).
"""Run: MNEMO_PY_LAYOUTS=<build>/tests/py_layouts MNEMO_INCLUDE_DIR=include
PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_bindings.py
(exit 0 pass, 1 fail). Without MNEMO_PY_LAYOUTS it takes py_layouts from the
build tree beside the package, else compiles tests/py_layouts.c with $CC/cc
(an installed package); without MNEMO_INCLUDE_DIR it reads the repository's
include/ beside this file. It fails (never skips) when it cannot.
Labels cpu."""
import ctypes as C
import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import mnemo
from mnemo import _lib

HERE = os.path.dirname(os.path.abspath(__file__))

# Every ctypes Structure/Union of the package -> the C type it mirrors
# (tests/py_layouts.c prints the C side: add a STRUCT line there too).
MIRRORS = {
    "mnemo._lib.Device": "mn_device_t",
    "mnemo._lib._ScalarValue": "mn_scalar_value_t",  # mn_scalar_t's union `v`
    "mnemo._lib.Scalar": "mn_scalar_t",
    "mnemo.allocator._Stat": "mn_stat_t",
    "mnemo.allocator._AllocStats": "mn_alloc_stats_t",
    "mnemo.allocator._SnapBlock": "mn_snapshot_block_t",
    "mnemo.allocator._SnapSegment": "mn_snapshot_segment_t",
    "mnemo.allocator._Snapshot": "mn_snapshot_t",
    "mnemo.allocator._CachingConfig": "mn_caching_config_t",
    "mnemo.allocator._PinnedConfig": "mn_pinned_config_t",
    "mnemo.allocator._MemPoolOptions": "mn_mempool_options_t",
    "mnemo.device._Props": "mn_device_props_t",
    "mnemo.dtype._Info": "mn_dtype_info_t",
    "mnemo.interop.DLDevice": "DLDevice",
    "mnemo.interop.DLDataType": "DLDataType",
    "mnemo.interop.DLTensor": "DLTensor",
    "mnemo.interop.DLManagedTensor": "DLManagedTensor",
    "mnemo.interop.DLPackVersion": "DLPackVersion",
    "mnemo.interop.DLManagedTensorVersioned": "DLManagedTensorVersioned",
    "mnemo.profiling._Entry": "mn_trace_entry_t",
    "mnemo.profiling._Meta": "mn_trace_meta_t",
    "mnemo.profiling._Frame": "mn_trace_frame_t",
    "mnemo.profiling._Annotation": "mn_trace_annotation_t",
    "mnemo.profiling._Trace": "mn_trace_t",
    "mnemo.profiling._RecorderStats": "mn_trace_recorder_stats_t",
    "mnemo.profiling._ReplayStep": "mn_replay_step_t",
    "mnemo.profiling._ReplayOom": "mn_replay_oom_t",
    "mnemo.profiling._ReplayOptions": "mn_replay_options_t",
    "mnemo.profiling._ReplayResult": "mn_replay_result_t",
    "mnemo.profiling._TraceDevice": "mn_trace_device_t",
    "mnemo.profiling._SimConfig": "mn_sim_config_t",
    "mnemo.profiling._ReportOptions": "mn_report_options_t",
    "mnemo.profiling._DiffOptions": "mn_diff_options_t",
    "mnemo.profiling._Report": "mn_report_t",
    "mnemo.serialize._NamedViews": "mn_named_views_t",
}

# Modules that import an optional framework at import time are imported when
# it is there; the others always.
OPTIONAL = {"mnemo.cupy": "cupy"}


def _import_all():
    """Imports every module of the package (declarations happen at import)."""
    for m in pkgutil.iter_modules(mnemo.__path__, "mnemo."):
        if m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
        except ImportError:
            if m.name not in OPTIONAL:
                raise


def _find_layouts(include, tmp):
    """The py_layouts program: $MNEMO_PY_LAYOUTS (CTest's), the build tree's
    beside a staged package, else tests/py_layouts.c compiled here with $CC or
    cc (the package installed from a wheel, scripts/test_wheel.sh)."""
    path = os.environ.get("MNEMO_PY_LAYOUTS")
    if path:
        return path
    # the build tree's staged package: <build>/python/mnemo -> <build>/tests/py_layouts
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(mnemo.__file__))))
    path = os.path.join(build, "tests", "py_layouts")
    if os.path.exists(path):
        return path
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise AssertionError("no py_layouts program (set MNEMO_PY_LAYOUTS) and no C compiler to build "
                             "tests/py_layouts.c")
    path = os.path.join(tmp, "py_layouts")
    subprocess.run([cc, "-std=c11", "-I", include, os.path.join(os.path.dirname(HERE), "py_layouts.c"), "-o", path],
                   check=True)
    return path


def _find_include():
    return os.environ.get("MNEMO_INCLUDE_DIR") or os.path.join(os.path.dirname(os.path.dirname(HERE)), "include")


# ---- the headers' prototypes ---------------------------------------------------
def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _split_params(text):
    """Top-level comma split (function-pointer parameters hold commas)."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [] if out == ["void"] else out


class CType:
    """A parsed C type: base name (without const/struct), pointer depth, or a
    function pointer (fn = (return CType, [param CType])); enum True for
    typedef'd enums."""

    def __init__(self, base, depth=0, fn=None):
        self.base, self.depth, self.fn = base, depth, fn

    def pointee(self):
        return CType(self.base, self.depth - 1, self.fn)

    def __repr__(self):
        return ("fnptr" if self.fn else self.base) + "*" * self.depth


def _parse_type(decl, name_expected=True):
    """The CType of a declaration ("const char *name", "int64_t sizes[]",
    "void (*fn)(void *, int)")."""
    decl = decl.strip()
    m = re.match(r"^(.*?)\(\s*\*\s*\w*\s*\)\s*\((.*)\)$", decl, re.S)
    if m:  # a function pointer
        ret = _parse_type(m.group(1), name_expected=False)
        params = [_parse_type(p) for p in _split_params(m.group(2))]
        return CType("fnptr", 1, (ret, params))
    depth = decl.count("*")
    if re.search(r"\[\s*\w*\s*\]$", decl):
        depth += 1
        decl = re.sub(r"\[\s*\w*\s*\]$", "", decl)
    words = [w for w in re.split(r"[\s*]+", decl) if w and w not in ("const", "struct", "volatile", "restrict")]
    if name_expected and len(words) > 1 and words[-1] not in ("int", "long", "char", "short", "unsigned", "double"):
        words = words[:-1]  # the parameter's name
    return CType(" ".join(words), depth)


def header_texts(include):
    """The text of every include/mnemo/*.h, comments and preprocessor lines removed."""
    folder = os.path.join(include, "mnemo")
    for fname in sorted(os.listdir(folder)):
        if not fname.endswith(".h"):
            continue
        with open(os.path.join(folder, fname)) as f:
            text = _strip_comments(f.read())
        yield re.sub(r"^\s*#.*?(?<!\\)$", " ", text, flags=re.M | re.S)


def parse_headers(include):
    """{name: (return CType, [param CType])} of every MN_API function, and
    {typedef name: CType} of function-pointer typedefs, and the set of enum
    typedef names."""
    protos, fnptrs, enums = {}, {}, set()
    for text in header_texts(include):
        for m in re.finditer(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text):
            enums.add(m.group(1))
        for m in re.finditer(r"typedef\s+([^;{}]*?\(\s*\*\s*(\w+)\s*\)\s*\([^;]*?\))\s*;", text):
            fnptrs[m.group(2)] = _parse_type(m.group(1))
        for m in re.finditer(r"\bMN_API\b([^;{}]*?)\(([^;{}]*)\)\s*;", text, re.S):
            head = m.group(1).replace("MN_NODISCARD", " ").strip()
            hm = re.match(r"^(.*?)(\w+)\s*$", head, re.S)
            ret, name = hm.group(1), hm.group(2)
            protos[name] = (_parse_type(ret, name_expected=False), [_parse_type(p) for p in _split_params(m.group(2))])
    return protos, fnptrs, enums


def _split_top(text, sep):
    """Splits at `sep` outside (), [] and {}."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def parse_structs(include):
    """{typedef name: (exact, [(field, CType or None, array length text or None)])}
    of every `typedef struct ... { ... } name;` of the headers. exact is False
    where a macro expands to fields (MN_ALLOC_STATS_MAP): the list then misses
    those. A nested struct/union field has CType None."""
    out = {}
    for text in header_texts(include):
        for m in re.finditer(r"typedef\s+struct\s*\w*\s*\{", text):
            depth, i = 1, m.end()
            while depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end():i - 1]
            nm = re.match(r"\s*(\w+)\s*;", text[i:])
            if not nm:
                continue
            exact = not re.search(r"\b[A-Z_][A-Z0-9_]*\([^()]*\)", body)
            body = re.sub(r"\b[A-Z_][A-Z0-9_]*\([^()]*\)", " ", body)
            fields = []
            for decl in _split_top(body, ";"):
                if "{" in decl:  # a nested struct or union: its name only
                    fields.append((re.search(r"(\w+)\s*$", decl).group(1), None, None))
                    continue
                if re.search(r"\(\s*\*", decl):  # a function pointer
                    fields.append((re.search(r"\(\s*\*\s*(\w+)", decl).group(1), _parse_type(decl), None))
                    continue
                parts = _split_top(decl, ",")
                first = re.match(r"^(.*?)([\s*]*)(\w+)\s*(\[[^\]]*\])?$", parts[0], re.S)
                base = first.group(1)
                for k, part in enumerate(parts):
                    pm = re.match(r"^(.*?)([\s*]*)(\w+)\s*(?:\[([^\]]*)\])?$", part if k == 0 else base + " " + part, re.S)
                    ptr = pm.group(2).count("*")
                    fields.append((pm.group(3), _parse_type(pm.group(1) + "*" * ptr, name_expected=False), pm.group(4)))
            out[nm.group(1)] = (exact, fields)
    return out


# ---- comparing ctypes with C types -----------------------------------------------
_INTS = {  # C integer type -> (signed, size)
    "char": (True, 1), "signed char": (True, 1), "unsigned char": (False, 1), "short": (True, 2),
    "unsigned short": (False, 2), "int": (True, C.sizeof(C.c_int)), "unsigned": (False, C.sizeof(C.c_uint)),
    "unsigned int": (False, C.sizeof(C.c_uint)), "long": (True, C.sizeof(C.c_long)),
    "unsigned long": (False, C.sizeof(C.c_ulong)), "long long": (True, 8), "unsigned long long": (False, 8),
    "int8_t": (True, 1), "uint8_t": (False, 1), "int16_t": (True, 2), "uint16_t": (False, 2), "int32_t": (True, 4),
    "uint32_t": (False, 4), "int64_t": (True, 8), "uint64_t": (False, 8), "size_t": (False, C.sizeof(C.c_size_t)),
    "ssize_t": (True, C.sizeof(C.c_ssize_t)), "uintptr_t": (False, C.sizeof(C.c_void_p)),
    "intptr_t": (True, C.sizeof(C.c_void_p)), "ptrdiff_t": (True, C.sizeof(C.c_void_p)),
}
_CT_INTS = {}
for _t in (C.c_byte, C.c_ubyte, C.c_short, C.c_ushort, C.c_int, C.c_uint, C.c_long, C.c_ulong, C.c_longlong,
           C.c_ulonglong, C.c_int8, C.c_uint8, C.c_int16, C.c_uint16, C.c_int32, C.c_uint32, C.c_int64, C.c_uint64,
           C.c_size_t, C.c_ssize_t):
    _CT_INTS[_t] = (_t(-1).value < 0, C.sizeof(_t))
_CT_INTS[C.c_char] = (True, 1)


def _name(t):
    return getattr(t, "__name__", repr(t))


class Checker:
    def __init__(self, fnptrs, enums):
        self.fnptrs, self.enums = fnptrs, enums
        self.mirrors = {}  # ctypes class -> C name

    def same(self, ct, c, where):
        """None when ctypes type ct can stand for C type c, else why not."""
        if c.depth == 0 and c.base in self.fnptrs:  # a function-pointer typedef
            c = self.fnptrs[c.base]
        if c.depth > 0:
            if ct is C.c_void_p:
                return None  # any pointer (opaque handles, buffers)
            if c.fn is not None and c.depth == 1:
                if not (isinstance(ct, type) and issubclass(ct, C._CFuncPtr)):
                    return f"{where}: a function pointer is declared as {_name(ct)}"
                ret, params = c.fn
                why = self.result(ct._restype_, ret, where + " (callback result)")
                if why:
                    return why
                if len(ct._argtypes_) != len(params):
                    return f"{where}: callback takes {len(params)} arguments in C, {len(ct._argtypes_)} in ctypes"
                for i, (a, p) in enumerate(zip(ct._argtypes_, params)):
                    why = self.same(a, p, f"{where} (callback argument {i})")
                    if why:
                        return why
                return None
            if ct is C.c_char_p:
                return None if c.depth == 1 and c.base == "char" else f"{where}: c_char_p for {c!r}"
            if isinstance(ct, type) and issubclass(ct, C._Pointer):
                return self.same(ct._type_, c.pointee(), where)
            return f"{where}: {_name(ct)} for the pointer {c!r}"
        if c.base == "void":
            return f"{where}: void is not a value"
        if c.base == "bool" or c.base == "_Bool":
            return None if ct is C.c_bool else f"{where}: {_name(ct)} for bool"
        if c.base in ("double", "float"):
            want = C.c_double if c.base == "double" else C.c_float
            return None if ct is want else f"{where}: {_name(ct)} for {c.base}"
        if c.base in self.enums or c.base == "mn_status":
            return None if ct is C.c_int else f"{where}: {_name(ct)} for the enum {c.base} (c_int)"
        if c.base in _INTS:
            got = _CT_INTS.get(ct)
            return None if got == _INTS[c.base] else f"{where}: {_name(ct)} for {c.base}"
        if isinstance(ct, type) and issubclass(ct, (C.Structure, C.Union)):
            cname = self.mirrors.get(ct)
            return None if cname == c.base else f"{where}: {_name(ct)} (mirrors {cname}) for {c.base}"
        return f"{where}: {_name(ct)} for {c!r} (unknown C type)"

    def result(self, ct, c, where):
        if c.base == "void" and c.depth == 0:
            return None if ct is None else f"{where}: returns void, declared {_name(ct)}"
        if ct is None:
            return f"{where}: returns {c!r}, declared None"
        return self.same(ct, c, where)


def _struct_kind(ct):
    if ct is C.c_bool:
        return "b"
    if ct in (C.c_double, C.c_float):
        return "f"
    if ct in _CT_INTS:
        return "i"
    return "o"


class Bindings(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        _import_all()
        include = _find_include()
        if not os.path.isdir(os.path.join(include, "mnemo")):
            raise AssertionError(f"no headers at {include}/mnemo (set MNEMO_INCLUDE_DIR)")
        with tempfile.TemporaryDirectory() as tmp:
            layouts = _find_layouts(include, tmp)
            if not os.path.exists(layouts):
                raise AssertionError(f"no py_layouts program at {layouts} (build the py_layouts target)")
            cls.layouts = json.loads(subprocess.run([layouts], check=True, capture_output=True, text=True).stdout)
        cls.protos, fnptrs, enums = parse_headers(include)
        cls.header_structs = parse_structs(include)
        cls.checker = Checker(fnptrs, enums)
        cls.structs = {}
        for name, mod in sorted(sys.modules.items()):
            if name != "mnemo" and not name.startswith("mnemo."):
                continue
            for v in list(vars(mod).values()):
                if (isinstance(v, type) and issubclass(v, (C.Structure, C.Union)) and v.__module__ == name
                        and v not in cls.structs.values()):
                    cls.structs[f"{name}.{v.__qualname__}"] = v
        for key, v in cls.structs.items():
            if key in MIRRORS:
                cls.checker.mirrors[v] = MIRRORS[key]

    def test_parser_sees_the_api(self):
        # the header parser is itself checked: it finds the calls the package uses
        for name in ("mn_storage_create", "mn_view_create", "mn_status_name", "mn_trace_replay"):
            self.assertIn(name, self.protos)
        ret, params = self.protos["mn_storage_from_buffer"]
        self.assertEqual((ret.base, [p.base for p in params]),
                         ("mn_status", ["mn_device_t", "void", "size_t", "mn_storage_deleter_t", "void",
                                        "mn_storage_t"]))
        self.assertEqual([p.depth for p in params], [0, 1, 0, 0, 1, 2])
        self.assertIn("mn_dtype", self.checker.enums)

    def test_every_struct_is_mirrored(self):
        unmapped = sorted(set(self.structs) - set(MIRRORS))
        self.assertEqual(unmapped, [], "ctypes structs without a C type in MIRRORS (and a STRUCT line in "
                                       "tests/py_layouts.c)")
        gone = sorted(set(MIRRORS) - set(self.structs))
        self.assertEqual(gone, [], "MIRRORS names classes the package no longer has")

    def test_struct_layouts(self):
        for key, cname in MIRRORS.items():
            ct = self.structs[key]
            with self.subTest(struct=key, c=cname):
                self.assertIn(cname, self.layouts["structs"], f"tests/py_layouts.c has no STRUCT line for {cname}")
                c = self.layouts["structs"][cname]
                py = [(f[0], getattr(ct, f[0]).offset, getattr(ct, f[0]).size, _struct_kind(f[1]))
                      for f in ct._fields_]
                self.assertEqual(py, [tuple(f) for f in c["fields"]], f"{key} vs {cname}: (name, offset, size, kind)")
                self.assertEqual(C.sizeof(ct), c["size"], f"sizeof {key} vs {cname}")

    def test_struct_field_types(self):
        # each field's ctypes type against the type the header declares
        # (pointers to their pointee, callbacks by signature, arrays by element),
        # and the field names against the header's where it lists them all
        self.assertIn("mn_replay_options_t", self.header_structs)
        checked = 0
        for key, cname in MIRRORS.items():
            if cname not in self.header_structs:
                continue  # mn_scalar_value_t (an anonymous union): layout only
            ct = self.structs[key]
            exact, cfields = self.header_structs[cname]
            with self.subTest(struct=key, c=cname):
                if exact:
                    self.assertEqual([f[0] for f in ct._fields_], [f[0] for f in cfields],
                                     f"{key}: fields vs the header's {cname}")
                ctypes_of = dict((f[0], f[1]) for f in ct._fields_)
                for fname, ctype, array in cfields:
                    if ctype is None or fname not in ctypes_of:
                        continue
                    pt = ctypes_of[fname]
                    where = f"{key}.{fname}"
                    if array is not None:
                        self.assertTrue(issubclass(pt, C.Array), f"{where}: not an array as in C")
                        pt = pt._type_
                    why = self.checker.same(pt, ctype, where)
                    self.assertIsNone(why, why)
                    checked += 1
        self.assertGreater(checked, 150, checked)

    def test_constants(self):
        names = [n for n in vars(_lib) if re.match(r"^(MN_[A-Z0-9_]+|kDL\w+|DLPACK_\w+)$", n)]
        self.assertGreater(len(names), 40)
        values = self.layouts["values"]
        for n in names:
            with self.subTest(name=n):
                self.assertIn(n, values, f"tests/py_layouts.c prints no VALUE({n})")
                self.assertEqual(getattr(_lib, n), values[n], n)
        # the name tables indexed by enum values
        for i, t in enumerate(_lib.DEVICE_TYPE_NAMES):
            self.assertEqual(values[f"MN_DEVICE_{t.upper()}"], i)
        self.assertEqual(len(_lib.DEVICE_TYPE_NAMES), values["MN_DEVICE_TYPE_COUNT"])
        for i, k in enumerate(_lib.DTYPE_KIND_NAMES):
            self.assertEqual(values[f"MN_KIND_{k.upper()}"], i)
        from mnemo import allocator
        self.assertEqual([values[n] for n in ("MN_POOL_ALL", "MN_POOL_SMALL", "MN_POOL_LARGE")],
                         list(range(len(allocator._POOLS))))
        self.assertEqual(len(allocator._POOLS), values["MN_POOL_COUNT"])

    def test_status_names(self):
        # every status the library has is one MnemoError knows by value and name
        statuses = {n: v for n, v in self.layouts["values"].items() if n == "MN_OK" or n.startswith("MN_ERR_")}
        self.assertEqual({n: getattr(_lib, n, None) for n in statuses}, statuses)
        for n, v in statuses.items():
            if v:
                e = _lib._error(v)
                self.assertIsInstance(e, mnemo.OutOfMemoryError if n == "MN_ERR_OUT_OF_MEMORY" else mnemo.MnemoError)
                self.assertNotEqual(e.status_name, "unknown")

    def test_functions(self):
        declared = {k: v for k, v in vars(_lib.lib).items() if not k.startswith("_")}
        self.assertGreater(len(declared), 150)
        for name, fn in sorted(declared.items()):
            with self.subTest(function=name):
                self.assertIn(name, self.protos, f"{name} is declared in Python but is no MN_API call of the headers")
                ret, params = self.protos[name]
                self.assertIsNotNone(fn.argtypes, f"{name}: argtypes never set")
                if getattr(fn, "errcheck", None) is not None:
                    self.assertEqual((ret.base, ret.depth), ("mn_status", 0), f"{name}: checked as a status")
                    self.assertIs(fn.restype, C.c_int)
                else:
                    why = self.checker.result(fn.restype, ret, f"{name} result")
                    self.assertIsNone(why, why)
                self.assertEqual(len(fn.argtypes), len(params),
                                 f"{name}: {len(params)} parameters in C, {len(fn.argtypes)} declared")
                for i, (a, p) in enumerate(zip(fn.argtypes, params)):
                    why = self.checker.same(a, p, f"{name} argument {i}")
                    self.assertIsNone(why, why)

    def test_every_used_function_declared(self):
        # a call written in the package's source (lib.mn_x) but declared
        # nowhere would run with ctypes' defaults (int arguments and result)
        used = set()
        folder = os.path.dirname(os.path.abspath(mnemo.__file__))
        for fname in sorted(os.listdir(folder)):
            if fname.endswith(".py"):
                with open(os.path.join(folder, fname)) as f:
                    used |= set(re.findall(r"\blib\.((?:mn|mnemo)_\w+)", f.read()))
        self.assertGreater(len(used), 100)
        declared = {k for k, v in vars(_lib.lib).items() if not k.startswith("_") and v.argtypes is not None}
        self.assertEqual(sorted(used - declared), [], "called in python/mnemo but never declared")

    def test_status_results_raise(self):
        # every mn_status call declared without the raising errcheck is one that
        # reads a status (mn_last_status) rather than failing with one
        declared = {k: v for k, v in vars(_lib.lib).items() if not k.startswith("_")}
        loose = sorted(n for n, fn in declared.items() if self.protos.get(n, (None,))[0] is not None
                       and self.protos[n][0].base == "mn_status" and self.protos[n][0].depth == 0
                       and getattr(fn, "errcheck", None) is None)
        self.assertEqual(loose, [n for n in loose if n in ("mn_last_status",)])

    def test_checker_catches_drift(self):
        # the comparison refuses what it should (a test of the test)
        ch = self.checker
        self.assertIsNotNone(ch.same(C.c_int, CType("int64_t"), "x"))
        self.assertIsNotNone(ch.same(C.c_double, CType("int64_t"), "x"))
        self.assertIsNotNone(ch.same(C.POINTER(C.c_int), CType("int64_t", 1), "x"))
        self.assertIsNotNone(ch.same(C.c_char_p, CType("char", 2), "x"))
        self.assertIsNotNone(ch.same(_lib.Scalar, CType("mn_device_t"), "x"))
        self.assertIsNotNone(ch.same(C.c_size_t, CType("int64_t"), "x"))
        self.assertIsNone(ch.same(C.POINTER(C.c_int64), CType("int64_t", 1), "x"))
        self.assertIsNone(ch.same(_lib.Device, CType("mn_device_t"), "x"))
        bad_cb = C.CFUNCTYPE(None, C.c_void_p)
        self.assertIsNotNone(ch.same(bad_cb, CType("mn_storage_deleter_t"), "x"))
        good_cb = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p)
        self.assertIsNone(ch.same(good_cb, CType("mn_storage_deleter_t"), "x"))


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
