#!/usr/bin/env python3
"""tests/test_layers.py: the layers are one-way (docs/ARCHITECTURE.md).

Reads the symbols every object file of every layer defines and uses (nm) and
fails when an object uses a symbol defined by a higher layer, naming the file
and the symbol; also fails when a source file of a layer includes an internal
header of a higher layer ("storage/view_internal.h" from kernels/). Layers,
lowest first: runtime < allocators < kernels < storage < profiling < tools.
A built-in case with a planted upward call checks the checker first.

usage: test_layers.py --nm NM --src SOURCE_DIR LAYER=OBJ[:OBJ...] ...
(layers in order, lowest first; tools is the CLI's objects)
"""
import argparse
import os
import re
import subprocess
import sys

LAYERS = ["runtime", "allocators", "kernels", "storage", "profiling", "tools"]
DEFINED = set("TDBRVWGCSi")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"', re.M)


def read_symbols(nm, obj):
    """(defined, used) external symbol names of one object file."""
    out = subprocess.run([nm, "-P", "-g", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind in ("U", "w", "v"):
            used.add(name)
        elif kind in DEFINED:
            defined.add(name)
    return defined, used


def upward_uses(objects):
    """objects: list of (layer, name, defined, used). Returns the violations:
    (user layer, user object, symbol, definer layer, definer object)."""
    rank = {l: i for i, l in enumerate(LAYERS)}
    owner = {}
    for layer, name, defined, _ in objects:
        for s in defined:
            owner.setdefault(s, (layer, name))
    bad = []
    for layer, name, _, used in objects:
        for s in sorted(used):
            if s in owner and rank[owner[s][0]] > rank[layer]:
                bad.append((layer, name, s, owner[s][0], owner[s][1]))
    return bad


def upward_includes(src):
    """(file, included header) where a layer's source includes a higher layer's."""
    rank = {l: i for i, l in enumerate(LAYERS)}
    bad = []
    for layer in LAYERS:
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            if not f.endswith((".c", ".h", ".cu")):
                continue
            text = open(os.path.join(folder, f), encoding="utf-8").read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                if inc in rank and rank[inc] > rank[layer]:
                    bad.append((f"{layer}/{f}", m.group(0).strip()))
    return bad


# Every rule beyond the folder order registers here: a function of the
# context (src, objects) returning its failures as "KIND: where: what", and a
# self test that plants a violation in a scratch copy and expects the rule to
# name it. Rules are grouped by area below; add a rule under its area.
RULES = []
SELF_TESTS = []


def rule(fn):
    RULES.append(fn)
    return fn


def self_check(fn):
    SELF_TESTS.append(fn)
    return fn


class Context:
    """What a rule reads: the source root and the objects per layer."""

    def __init__(self, src, objects):
        self.src = src
        self.objects = objects

    def sources(self, folders, exts=(".c", ".h", ".cu")):
        """(relative path, text) of every source file under the folders."""
        for folder in folders:
            top = os.path.join(self.src, folder)
            for root, _, files in os.walk(top):
                for f in sorted(files):
                    if f.endswith(exts):
                        path = os.path.join(root, f)
                        rel = os.path.relpath(path, self.src)
                        yield rel, open(path, encoding="utf-8", errors="replace").read()


@rule
def rule_upward_calls(ctx):
    return [f"UPWARD CALL: {name} ({layer}) uses {sym}, defined in {oname} ({olayer})"
            for layer, name, sym, olayer, oname in upward_uses(ctx.objects)]


@rule
def rule_upward_includes(ctx):
    return [f"UPWARD INCLUDE: {f}: {inc}" for f, inc in upward_includes(ctx.src)]


@self_check
def self_test_upward():
    """The checker must flag a planted upward call and pass a downward one."""
    objs = [("runtime", "a.o", {"mn_low"}, {"mn_high"}),
            ("storage", "b.o", {"mn_high"}, {"mn_low"})]
    bad = upward_uses(objs)
    assert bad == [("runtime", "a.o", "mn_high", "storage", "b.o")], bad
    assert upward_uses(objs[1:]) == []


# ---- area: the backend contract (runtime/backend.h, device_internal.h) ----

# The backend contract (runtime/backend.h) is runtime's own: the layers above,
# the optional modules, the bindings, the benchmarks and the tests reach a
# device through the public API and runtime/device_internal.h.
BACKEND_HEADER = re.compile(r'^\s*#\s*include\s*[<"](?:\.\./)*runtime/backend\.h[">]', re.M)
BACKEND_OUTSIDE = ["allocators", "kernels", "storage", "profiling", "tools", "nccl", "python", "bench",
                   "include", "tests"]
SOURCE_EXTS = (".c", ".h", ".cu", ".cc", ".cpp", ".hpp")


@rule
def rule_backend_include(ctx):
    return [f"BACKEND INCLUDE: {f}: includes runtime/backend.h (use runtime/device_internal.h)"
            for f, text in ctx.sources(BACKEND_OUTSIDE, SOURCE_EXTS) if BACKEND_HEADER.search(text)]


# CUDA driver entry points are looked up in one file, the driver table
# (runtime/cuda_driver.c); everyone else calls through mn__cuda_driver().
# The benchmarks are not scanned: their dlsym finds other heaps' malloc.
DRIVER_TABLE = "runtime/cuda_driver.c"
DRIVER_LOOKUP = re.compile(r"\b(dlsym|dlvsym|cuGetProcAddress\w*|cudaGetDriverEntryPoint\w*)\s*\(")
DRIVER_SCANNED = LAYERS + ["nccl", "python", "include", "tests"]


@rule
def rule_driver_lookup(ctx):
    bad = []
    for f, text in ctx.sources(DRIVER_SCANNED, SOURCE_EXTS):
        if f == DRIVER_TABLE:
            continue
        for m in DRIVER_LOOKUP.finditer(text):
            bad.append(f"DRIVER LOOKUP: {f}: calls {m.group(1)} (use mn__cuda_driver(), {DRIVER_TABLE})")
    return bad


@self_check
def self_test_backend_contract():
    """A planted backend.h include above runtime/ and a planted driver lookup
    outside the table are named; the table itself and runtime/ pass."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        def plant(rel, text):
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as fh:
                fh.write(text)
        plant("runtime/device.c", '#include "runtime/backend.h"\n')
        plant(DRIVER_TABLE, 'void *f(void) { return dlsym(0, "cuMemMap"); }\n')
        plant("storage/ok.c", '#include "runtime/device_internal.h"\n')
        ctx = Context(tmp, [])
        assert rule_backend_include(ctx) == [] and rule_driver_lookup(ctx) == []
        plant("storage/bad.c", '#include "runtime/backend.h"\n')
        plant("tests/bad.c", '  #  include <../runtime/backend.h>\n')
        plant("nccl/bad.c", 'static void *g(void) { return cudaGetDriverEntryPointByVersion ("cuMemMap", 0); }\n')
        bad = rule_backend_include(ctx)
        assert any("storage/bad.c" in b for b in bad) and any("tests/bad.c" in b for b in bad), bad
        assert len(bad) == 2 and all(b.startswith("BACKEND INCLUDE:") for b in bad), bad
        bad = rule_driver_lookup(ctx)
        assert bad == ["DRIVER LOOKUP: nccl/bad.c: calls cudaGetDriverEntryPointByVersion "
                       f"(use mn__cuda_driver(), {DRIVER_TABLE})"], bad



# ---- area: storage's inner floors and file-level circles ----

# storage/ is five floors, lowest first (the copy engine in two: its staged
# paths strictly below its entry points), checked like the folders: a file
# uses (nm) and includes ("storage/x.h") only files of its own floor or below.
# Every storage/ source and header is in exactly one floor; a new file fails
# the rule until it is placed here (docs/ARCHITECTURE.md explains each floor).
STORAGE_FLOORS = [
    ("storage", ["storage.c", "storage.h", "storage_internal.h"]),
    ("view", ["view.c", "view_internal.h", "view_ops.c", "view_kernels.c"]),
    ("copy engine: staged paths", ["copy_staged.c", "copy_staged.h"]),  # strictly below copy.c
    ("copy engine: entry points", ["copy.c"]),
    ("operations", ["storage_ops.c", "view_copy.c", "view_index.c", "quantize.c"]),
    ("formats", ["dlpack.c", "crc32.c", "crc32.h", "serialize_util.h", "serialize.c", "serialize_io.c",
                 "safetensors.c"]),
]
LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([A-Za-z0-9_]+\.h)"', re.M)
SOURCE_EXTS = (".c", ".cu", ".h")


def object_source(layer, rel):
    """(folder, source file) of an object: its layer and its name less .o
    ('storage/view.c.o' of storage -> ('storage', 'view.c')); None for others."""
    base = os.path.basename(rel)
    if base.endswith(".o"):
        base = base[:-2]
    return (layer, base) if base.endswith((".c", ".cu")) else None


def floor_violations(floors, uses, includes, files):
    """floors: [(name, [file])] lowest first; uses: [(user file, symbol,
    definer file)]; includes: [(file, included file of the folder)]; files:
    every source of the folder. Returns the failures."""
    rank, bad = {}, []
    for i, (_, members) in enumerate(floors):
        for f in members:
            if f in rank:
                bad.append(f"FLOOR: storage/{f}: listed in two floors")
            rank[f] = i
    for f in sorted(files):
        if f not in rank:
            bad.append(f"FLOOR: storage/{f}: in no floor of STORAGE_FLOORS (place it in test_layers.py)")
    for f in sorted(set(rank) - set(files)):
        bad.append(f"FLOOR: storage/{f}: listed in STORAGE_FLOORS but not in the tree")
    name = [n for n, _ in floors]
    for user, sym, definer in uses:
        if user in rank and definer in rank and rank[definer] > rank[user]:
            bad.append(f"FLOOR CALL: storage/{user} ({name[rank[user]]}) uses {sym}, defined in "
                       f"storage/{definer} ({name[rank[definer]]})")
    for f, inc in includes:
        if f in rank and inc in rank and rank[inc] > rank[f]:
            bad.append(f"FLOOR INCLUDE: storage/{f} ({name[rank[f]]}) includes storage/{inc} "
                       f"({name[rank[inc]]})")
    return bad


def folder_graph_inputs(ctx, folder):
    """(files, uses, includes) of one folder: its source and header names,
    (user file, symbol, definer file) for each symbol an object uses from
    another object of the folder, and (file, header) for each "folder/x.h" a
    file of the folder includes."""
    top = os.path.join(ctx.src, folder)
    files = sorted(f for f in os.listdir(top) if f.endswith(SOURCE_EXTS)) if os.path.isdir(top) else []
    owner, objs = {}, []
    for layer, rel, defined, used in ctx.objects:
        src = object_source(layer, rel)
        if src and src[0] == folder and src[1] in files:
            objs.append((src[1], defined, used))
            for s in defined:
                owner.setdefault(s, src[1])
    uses = [(f, s, owner[s]) for f, _, used in objs for s in sorted(used) if s in owner and owner[s] != f]
    includes = []
    for f in files:
        text = open(os.path.join(top, f), encoding="utf-8", errors="replace").read()
        includes += [(f, m.group(2)) for m in LOCAL_INCLUDE.finditer(text) if m.group(1) == folder]
    return files, uses, includes


@rule
def rule_storage_floors(ctx):
    files, uses, includes = folder_graph_inputs(ctx, "storage")
    return floor_violations(STORAGE_FLOORS, uses, includes, files)


@self_check
def self_test_storage_floors():
    """A view file calling the copy engine, a storage file including a view
    header, and an unplaced file are each named; downward ones are not."""
    floors = [("storage", ["s.c", "s.h"]), ("view", ["v.c", "v.h"]), ("copy engine", ["c.c"])]
    files = ["s.c", "s.h", "v.c", "v.h", "c.c"]
    good = floor_violations(floors, [("c.c", "mn__v", "v.c"), ("v.c", "mn__s", "s.c")], [("v.c", "s.h")], files)
    assert good == [], good
    bad = floor_violations(floors, [("v.c", "mn__c", "c.c")], [("s.c", "v.h")], files + ["new.c"])
    assert any(b.startswith("FLOOR CALL: storage/v.c (view) uses mn__c") for b in bad), bad
    assert any(b.startswith("FLOOR INCLUDE: storage/s.c (storage) includes storage/v.h") for b in bad), bad
    assert any(b.startswith("FLOOR: storage/new.c: in no floor") for b in bad), bad


# No file-level circle inside a library folder: the graph of a folder's files
# has an edge a -> b when a's object uses a symbol b's object defines (nm),
# or when a includes "folder/b.h" and b.c (or b.cu) exists (b.h is b's
# interface). A module split over several files that share one internal
# header is one node (MODULES: folder -> [(node name, file pattern)]); a
# header without its own .c is nobody's interface and adds no edge.
CIRCLE_FOLDERS = ["runtime", "allocators", "kernels", "storage", "profiling", "tools", "nccl"]
MODULES = {
    "allocators": [("caching*", re.compile(r"caching(_[a-z0-9_]+)?\.(c|h)$"))],
    "runtime": [("sim_*", re.compile(r"sim_[a-z0-9_]+\.(c|h)$"))],
}


def node_of(folder, f, modules):
    for name, pattern in modules.get(folder, []):
        if pattern.match(f):
            return name
    return f


def file_graph(folder, files, uses, includes, modules):
    """{node: set(node)} of one folder (see above)."""
    graph = {}
    stems = {os.path.splitext(f)[0]: f for f in files if f.endswith((".c", ".cu"))}
    for f in files:
        if f.endswith((".c", ".cu")):
            graph.setdefault(node_of(folder, f, modules), set())
    edges = [(a, b) for a, _, b in uses]
    for f, inc in includes:
        target = stems.get(os.path.splitext(inc)[0])
        header_node = node_of(folder, inc, modules)
        if target:
            edges.append((f, target))
        elif header_node != inc:  # a module's internal header: the module
            edges.append((f, inc))
    for a, b in edges:
        na, nb = node_of(folder, a, modules), node_of(folder, b, modules)
        if a.endswith(".h"):  # a header's includes are its owner's
            owner = stems.get(os.path.splitext(a)[0])
            if not owner and na == a:
                continue
            na = node_of(folder, owner, modules) if owner else na
        if na != nb:
            graph.setdefault(na, set()).add(nb)
            graph.setdefault(nb, set())
    return graph


def simple_cycles(graph, limit=200):
    """Every elementary cycle, each as [n0, n1, ..., n0] starting at its least
    node (at most `limit`)."""
    out = []
    nodes = sorted(graph)
    for start in nodes:
        stack = [(start, [start])]
        while stack and len(out) < limit:
            node, path = stack.pop()
            for nxt in sorted(graph[node], reverse=True):
                if nxt == start:
                    out.append(path + [start])
                elif nxt > start and nxt not in path:
                    stack.append((nxt, path + [nxt]))
    return sorted(out)


def circle_failures(graphs):
    """graphs: {folder: graph}. Returns one failure per simple cycle."""
    found = set()
    for folder in sorted(graphs):
        for cyc in simple_cycles(graphs[folder]):
            found.add(f"{folder}: " + " -> ".join(cyc))
    return [f"CIRCLE: {c}" for c in sorted(found)]


@rule
def rule_file_circles(ctx):
    graphs = {}
    for folder in CIRCLE_FOLDERS:
        files, uses, includes = folder_graph_inputs(ctx, folder)
        graphs[folder] = file_graph(folder, files, uses, includes, MODULES)
    return circle_failures(graphs)


@self_check
def self_test_file_circles():
    """A planted 2-file circle (by a call one way and an include the other) is
    reported; a module's files calling each other are not."""
    files = ["a.c", "a.h", "b.c", "b.h", "m.c", "m_x.c", "m_internal.h"]
    uses = [("a.c", "mn__b", "b.c"), ("m.c", "mn__mx", "m_x.c"), ("m_x.c", "mn__m", "m.c")]
    includes = [("b.c", "a.h"), ("m_x.c", "m_internal.h"), ("m.c", "m_internal.h"), ("a.c", "m_internal.h")]
    mods = {"lib": [("m*", re.compile(r"m(_[a-z]+)?\.(c|h)$"))]}
    g = file_graph("lib", files, uses, includes, mods)
    assert g == {"a.c": {"b.c", "m*"}, "b.c": {"a.c"}, "m*": set()}, g
    bad = circle_failures({"lib": g})
    assert bad == ["CIRCLE: lib: a.c -> b.c -> a.c"], bad
    g2 = file_graph("lib", files, uses[1:], includes[1:], mods)
    assert circle_failures({"lib": g2}) == []


# ---- area: one narrow-float implementation, host allocation, markers ----

# The narrow floats (binary16, bfloat16, fp8) are rounded in one place,
# runtime/narrow_float.h; dtype.c and the kernels include it. Outside it, a
# library file may not define a narrow-float conversion or rounding function,
# a format table, or spell the formats' encodings. The public entry points of
# mnemo/dtype.h (mn_float_to_half, ...) may be defined only as one-line
# wrappers. Comments are skipped; tests/ keeps its own independent reference.
NF_HOME = "runtime/narrow_float.h"
NF_FOLDERS = LAYERS + ["include"]
NF_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
NF_FUNC_DEF = re.compile(
    r"\b(\w*(?:(?:f32|f64|float|double)_to_(?:f16|bf16|half|bfloat16|e4m3\w*|e5m2)"
    r"|(?:f16|bf16|half|bfloat16|e4m3\w*|e5m2)_to_(?:f32|f64|float|double)|nf_round|nf_from_\w+)\w*)"
    r"\s*\([^;{}()]*\)\s*\{([^\n]*)")
NF_TABLE = re.compile(r"#\s*define\s+MN__NF_ROW_\w+|\bmbits\s*;|\bnf_format\b")
NF_CONST = re.compile(r"\b0x(?:7BFF|7C00|7E00|7F7F|7F80|7FC0|38800000|47800000|3C800000|43E00000)u?\b", re.I)


def narrow_float_failures(files):
    """files: (relative path, text). The NARROW FLOAT failures."""
    bad = []
    for rel, text in files:
        if rel.replace(os.sep, "/") == NF_HOME:
            continue
        code = NF_COMMENT.sub(" ", text)
        for m in NF_FUNC_DEF.finditer(code):
            name, rest = m.group(1), m.group(2)
            # a public entry point whose body is one return on the same line
            wrapper = name.startswith("mn_") and not name.startswith("mn__") and \
                re.match(r"\s*return\b[^;]*;\s*\}", rest)
            if not wrapper:
                bad.append(f"NARROW FLOAT: {rel}: defines {name} (narrow floats live in {NF_HOME})")
        for m in NF_TABLE.finditer(code):
            bad.append(f"NARROW FLOAT: {rel}: a narrow-float format table ({m.group(0).strip().rstrip(';').strip()}; "
                       f"formats live in {NF_HOME})")
        for m in sorted(set(x.group(0) for x in NF_CONST.finditer(code))):
            bad.append(f"NARROW FLOAT: {rel}: spells the narrow-float encoding {m} (use {NF_HOME})")
    return bad


@rule
def rule_narrow_float(ctx):
    return narrow_float_failures(ctx.sources(NF_FOLDERS, exts=(".c", ".h", ".cu", ".cc", ".cpp")))


@self_check
def self_test_narrow_float():
    """A second rounding (a format table, a conversion, an encoding) is named;
    the home file, callers and one-line public wrappers pass."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        def plant(rel, text):
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        plant(NF_HOME, "#define MN__NF_ROW_1(X, A) X(A, 1, 5, 10)\n"
                       "MN__HD uint16_t mn__f32_to_f16(float f) { return (uint16_t)(f > 0 ? 0x7C00u : 0); }\n")
        plant("runtime/dtype.c", "/* mn__f32_to_f16 rounds to 0x7BFF */\n"
                                 "uint16_t mn_float_to_half(float f) { return mn__f32_to_f16(f); }\n"
                                 "static void use(float f) { uint16_t h = mn__f32_to_f16(f); (void)h; }\n")
        ctx = Context(tmp, [])
        assert rule_narrow_float(ctx) == [], rule_narrow_float(ctx)
        plant("kernels/old.c", "typedef struct fmt { int mbits; int emin; } fmt;\n"
                               "static const fmt half = {10, -14};\n"
                               "static uint32_t mn__nf_round(const fmt *f, uint64_t mag) {\n  return 0;\n}\n"
                               "static uint16_t to_h(float x) { return x > 65504.0f ? 0x7C00 : 0; }\n")
        plant("storage/wide.c", "uint16_t mn_float_to_bfloat16(float f) {\n  uint32_t u = 0;\n"
                                "  return (uint16_t)(u >> 16);\n}\n"
                                "static uint8_t f32_to_e4m3_slow(float f) { return 0; }\n"
                                "static float f16_to_f32_scratch(uint16_t h) { return 0; }\n")
        bad = rule_narrow_float(ctx)
        for want in ("kernels/old.c: defines mn__nf_round", "kernels/old.c: a narrow-float format table (mbits",
                     "kernels/old.c: spells the narrow-float encoding 0x7C00",
                     "storage/wide.c: defines mn_float_to_bfloat16", "storage/wide.c: defines f32_to_e4m3_slow",
                     "storage/wide.c: defines f16_to_f32_scratch"):
            assert any(want in b for b in bad), (want, bad)
        assert not any(b.startswith(("NARROW FLOAT: runtime/", "NARROW FLOAT: " + NF_HOME)) for b in bad), bad



# Folders of the library and the CLI (C sources), and where a marker is looked for.
CODE_FOLDERS = ["runtime", "allocators", "kernels", "storage", "profiling", "tools", "nccl"]
MARKER_PLACES = CODE_FOLDERS + ["python", "tests", "bench", "scripts", "docs", "include", "README.md", ".ci"]
MARKER_SKIP = ["bench/results"]  # dated records, kept as written
HOSTMEM = "runtime/hostmem.c"
RAW_ALLOC = re.compile(r"(?<![\w.>])(malloc|calloc|realloc|reallocarray|strdup|strndup|aligned_alloc|"
                       r"posix_memalign|memalign|valloc|pvalloc)\s*\(")
# "issue" (or "issues"), then a number, maybe after "#", "-" or a comment's
# line break; "/issues/" of an address and words that only contain it are not markers.
MARKER = re.compile(r"(?<![\w/.])issues?(?:[\s#*/-])*\d+", re.I)


def strip_c(text):
    """C/C++ text with comments, string literals and character constants
    blanked (newlines kept, so line numbers stay)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c, nxt = text[i], text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def raw_allocations(files):
    """files: (relative path, text). (path, line, name) of every direct libc
    allocation outside runtime/hostmem.c, comments and strings left out."""
    bad = []
    for rel, text in files:
        if rel.replace(os.sep, "/") == HOSTMEM:
            continue
        code = strip_c(text)
        for m in RAW_ALLOC.finditer(code):
            bad.append((rel, code.count("\n", 0, m.start()) + 1, m.group(1)))
    return bad


def text_files(src, places, skip):
    """(relative path, text) of every text file (no NUL byte, UTF-8) under
    places (folders or files), leaving out the skipped folders and caches."""
    for place in places:
        top = os.path.join(src, place)
        paths = [top] if os.path.isfile(top) else []
        for root, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith(".")
                             and os.path.relpath(os.path.join(root, d), src).replace(os.sep, "/") not in skip)
            paths += [os.path.join(root, f) for f in sorted(files)]
        for path in paths:
            data = open(path, "rb").read()
            if b"\0" in data:
                continue
            try:
                yield os.path.relpath(path, src).replace(os.sep, "/"), data.decode("utf-8")
            except UnicodeDecodeError:
                continue


def issue_markers(files):
    """(path, line, marker) of every ticket number written into the tree."""
    bad = []
    for rel, text in files:
        for m in MARKER.finditer(text):
            bad.append((rel, text.count("\n", 0, m.start()) + 1, " ".join(m.group(0).split())))
    return bad


@rule
def rule_raw_allocation(ctx):
    files = ctx.sources(CODE_FOLDERS, exts=(".c", ".h", ".cu", ".cuh", ".cpp"))
    return [f"RAW ALLOCATION: {rel}:{line}: {name}() outside {HOSTMEM} (use runtime/hostmem.h's mn__{name})"
            for rel, line, name in raw_allocations(files)]


@rule
def rule_issue_marker(ctx):
    return [f"ISSUE MARKER: {rel}:{line}: \"{text}\" (say what the code or test does, not the ticket)"
            for rel, line, text in issue_markers(text_files(ctx.src, MARKER_PLACES, MARKER_SKIP))]


@self_check
def self_test_raw_allocation():
    """A planted malloc is named; the seam, comments, strings, members and
    runtime/hostmem.c are not."""
    planted = ("#include \"runtime/hostmem.h\"\n"
               "/* malloc(n) in a comment */\n"
               "static const char *s = \"calloc(1, 2)\";\n"
               "void *f(size_t n) { return mn__malloc(n); }\n"
               "void *g(struct h *h, size_t n) { return h->malloc(n) ? h->realloc(0, n) : 0; }\n"
               "void *k(size_t n) {\n  return malloc (n); // calloc(1, n)\n}\n"
               "char *d(const char *s) { return strdup(s); }\n")
    bad = raw_allocations([("tools/x.c", planted), (HOSTMEM, "void *p = malloc(1);\n")])
    assert bad == [("tools/x.c", 7, "malloc"), ("tools/x.c", 9, "strdup")], bad
    assert raw_allocations([("tools/x.c", planted.replace("malloc (n)", "mn__malloc(n)")
                             .replace("strdup(s)", "mn__strdup(s)"))]) == []


@self_check
def self_test_issue_marker():
    """Planted ticket numbers are named (however written, across a comment's
    line break too); addresses and words that hold the letters are not."""
    import tempfile
    word = "iss" + "ue"
    with tempfile.TemporaryDirectory() as scratch:
        os.makedirs(os.path.join(scratch, "tests"))
        os.makedirs(os.path.join(scratch, "bench", "results"))
        planted = {"tests/a.c": f"/* the fix of {word} 12 */\n/* ({word}\n * 7) */\nint mn_tissue2;\n",
                   "tests/b.py": f"# {word.upper()}S #33 and {word}-34\n# https://github.com/o/r/{word}s/5\n",
                   "README.md": "nothing here\n", "bench/results/old.md": f"{word} 9 (a dated record)\n",
                   "tests/blob.bin": f"\0{word} 1\n"}
        for rel, text in planted.items():
            with open(os.path.join(scratch, rel), "w", encoding="utf-8") as out:
                out.write(text)
        bad = issue_markers(text_files(scratch, ["tests", "bench", "README.md"], MARKER_SKIP))
        assert [(f, line) for f, line, _ in bad] == [("tests/a.c", 1), ("tests/a.c", 2), ("tests/b.py", 1),
                                                     ("tests/b.py", 1)], bad
        assert bad[0][2] == f"{word} 12" and bad[1][2] == f"{word} * 7", bad


# ---- area: the simulated device and the allocators ----

SIM_PRIVATE = "runtime/sim_internal.h"


@rule
def rule_sim_internal_private(ctx):
    """The SIM device's layout (runtime/sim_internal.h) is private to its own
    files, runtime/sim_*.c; the layers above reach SIM only through
    runtime/sim_hook.h and the backend table."""
    inc = re.compile(r'#\s*include\s*"' + re.escape(SIM_PRIVATE) + '"')
    bad = []
    for rel, text in ctx.sources(["runtime", "allocators", "kernels", "storage", "profiling",
                                  "tools", "python", "tests"]):
        base = os.path.basename(rel)
        if inc.search(text) and not (rel.startswith("runtime" + os.sep) and base.startswith("sim_")
                                     and base.endswith(".c")):
            bad.append(f"SIM INTERNAL: {rel}: includes {SIM_PRIVATE} (only runtime/sim_*.c may)")
    return bad


@self_check
def self_test_sim_internal_private():
    """A planted include of sim_internal.h outside runtime/sim_*.c is named;
    the SIM files' own include is not."""
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in [("runtime/sim_pool.c", '#include "runtime/sim_internal.h"\n'),
                          ("allocators/leak.c", '#include "runtime/sim_internal.h"\n')]:
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        bad = rule_sim_internal_private(Context(tmp, []))
        assert len(bad) == 1 and "allocators/leak.c" in bad[0], bad



# ---- area: naming (static functions, prefixes) ----

# `mn__` names what library files share with each other (STYLE.md); a name
# one file keeps to itself is static and unprefixed. Two checks: no static
# `mn__` in a .c/.cu/.cpp file (a static inline in an internal header is
# shared, so headers are exempt), and no global `mn__` symbol that only its
# own object uses. A symbol counts as shared when another library object uses
# it (nm), when tests/, bench/, python/ or nccl/ name it, when a header's
# macro calls it (MN__ASSERT's mn__assert_fail, compiled in only in debug
# builds), or when the build names it (a linker --undefined).
STATIC_MN = re.compile(r"^[ \t]*(?:[A-Z][A-Z0-9_]*[ \t]+)*static\b[^;{}=()]*?(?:\(\s*\*\s*)?\b(mn__\w+)\s*[()\[=;,]", re.M)
SHARED_PLACES = ["tests", "bench", "python", "nccl", "CMakeLists.txt", "cmake"]
MACRO_LINE = re.compile(r"^[ \t]*#[ \t]*define\b(?:[^\n]*\\\n)*[^\n]*", re.M)


def static_mn(files):
    """(path, line, name) of every static definition named mn__ in a source
    file (comments and strings left out)."""
    bad = []
    for rel, text in files:
        code = blank_attributes(strip_c(text))
        for m in STATIC_MN.finditer(code):
            bad.append((rel, code.count("\n", 0, m.start()) + 1, m.group(1)))
    return bad


def blank_attributes(code):
    """code with every __attribute__((...)) blanked (balanced parentheses,
    newlines kept)."""
    out, i = [], 0
    for m in re.finditer(r"\b__attribute__\s*\(", code):
        if m.start() < i:
            continue
        j, depth = m.end(), 1
        while j < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        out.append(code[i:m.start()])
        out.append(re.sub(r"[^\n]", " ", code[m.start():j]))
        i = j
    out.append(code[i:])
    return "".join(out)


def file_local_mn(objects, shared_text, headers):
    """objects: (layer, object, defined, used). (object, symbol) of every
    global mn__ symbol no other object uses and nothing else names."""
    users = {}
    for _, name, _, used in objects:
        for s in used:
            users.setdefault(s, set()).add(name)
    macros = " ".join(m.group(0) for _, text in headers for m in MACRO_LINE.finditer(strip_c(text)))
    named = set(re.findall(r"\bmn__\w+", shared_text)) | set(re.findall(r"\bmn__\w+", macros))
    bad = []
    for _, name, defined, _ in objects:
        for s in sorted(defined):
            if s.startswith("mn__") and not (users.get(s, set()) - {name}) and s not in named:
                bad.append((name, s))
    return bad


@rule
def rule_static_mn(ctx):
    files = ctx.sources(CODE_FOLDERS + ["python"], exts=(".c", ".cu", ".cpp"))
    return [f"STATIC MN__: {rel}:{line}: static {name} (a file-local name takes no mn__ prefix)"
            for rel, line, name in static_mn(files)]


@rule
def rule_file_local_mn(ctx):
    shared = "\n".join(text for _, text in text_files(ctx.src, SHARED_PLACES, set()))
    headers = list(ctx.sources(CODE_FOLDERS + ["include"], exts=(".h", ".cuh")))
    return [f"FILE-LOCAL MN__: {obj}: {sym} is used by no other file (make it static, without mn__)"
            for obj, sym in file_local_mn(ctx.objects, shared, headers)]


@self_check
def self_test_static_mn():
    """Planted static mn__ functions, variables, arrays, function pointers and
    static inlines are named; extern mn__ names, comments, strings and
    unprefixed statics are not."""
    planted = ("static int mn__count;\n"
               "static mn_status\nmn__open(int fd) {\n  return 0;\n}\n"
               "__attribute__((unused)) static int mn__spare(void) { return 1; }\n"
               "MN_UNUSED static __attribute__((format(printf, 1, 2))) void mn__say(const char *f, ...) {}\n"
               "static const char *const mn__names[] = {\"a\"};\n"
               "static void (*mn__hook)(void);\n"
               "static inline int mn__twice(int x) { return 2 * x; }\n"
               "void f(void) {\n  static int mn__calls = 0;\n}\n"
               "/* static int mn__in_comment; */\n"
               "static const char *s = \"static int mn__in_string;\";\n"
               "mn_status mn__shared(int x) { return 0; }\n"
               "static int helper(void) { return mn__shared(1); }\n")
    bad = static_mn([("storage/x.c", planted)])
    assert [(line, name) for _, line, name in bad] == [(1, "mn__count"), (2, "mn__open"), (6, "mn__spare"),
                                                       (7, "mn__say"), (8, "mn__names"), (9, "mn__hook"),
                                                       (10, "mn__twice"), (12, "mn__calls")], bad


@self_check
def self_test_file_local_mn():
    """A global mn__ symbol no other object uses is named; one used by another
    object, by tests, or by a header's macro is not."""
    objects = [("runtime", "runtime/a.c.o", {"mn__alone", "mn__shared", "mn__tested", "mn__macro", "mn_public"},
                {"mn__other"}),
               ("storage", "storage/b.c.o", {"mn__other"}, {"mn__shared", "mn__alone_too"}),
               ("storage", "storage/c.c.o", {"mn__alone_too"}, {"mn__alone_too"})]
    headers = [("runtime/a.h", "/* mn__alone */\nvoid mn__alone(void);\n#define A(x) \\\n  mn__macro(x)\n")]
    bad = file_local_mn(objects, "MN_CHECK(mn__tested() == 0);", headers)
    assert bad == [("runtime/a.c.o", "mn__alone")], bad



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--src", required=True)
    ap.add_argument("layers", nargs="+", help="LAYER=OBJ[:OBJ...]")
    args = ap.parse_args()
    for test in SELF_TESTS:
        test()

    objects, seen = [], []
    for spec in args.layers:
        layer, _, files = spec.partition("=")
        if layer not in LAYERS:
            sys.exit(f"test_layers: unknown layer {layer!r}")
        seen.append(layer)
        for obj in filter(None, files.split(":")):
            d, u = read_symbols(args.nm, obj)
            rel = os.path.basename(os.path.dirname(obj)) + "/" + os.path.basename(obj)
            objects.append((layer, rel, d, u))
    missing = [l for l in LAYERS if l not in seen]
    if missing:
        sys.exit(f"test_layers: no objects given for {missing}")
    if len(objects) < 20:
        sys.exit(f"test_layers: only {len(objects)} objects: the build lists look wrong")

    ctx = Context(args.src, objects)
    failures = []
    for r in RULES:
        failures.extend(r(ctx))
    for line in failures:
        print(line)
    per = {l: sum(1 for o in objects if o[0] == l) for l in LAYERS}
    print("objects per layer: " + ", ".join(f"{l} {per[l]}" for l in LAYERS))
    print(f"rules checked: {len(RULES)} (self tests: {len(SELF_TESTS)})")
    if failures:
        print(f"test_layers: {len(failures)} broken rules")
        return 1
    print("test_layers: every layer uses only the layers below it; every rule holds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
