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


# ---- area: storage's inner floors and file-level circles ----


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
    r"|(?:f16|bf16|half|bfloat16|e4m3\w*|e5m2)_to_(?:f32|f64|float|double)|nf_round\w*|nf_from_\w+))"
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
                                "static uint8_t f32_to_e4m3_slow(float f) { return 0; }\n")
        bad = rule_narrow_float(ctx)
        for want in ("kernels/old.c: defines mn__nf_round", "kernels/old.c: a narrow-float format table (mbits",
                     "kernels/old.c: spells the narrow-float encoding 0x7C00",
                     "storage/wide.c: defines mn_float_to_bfloat16", "storage/wide.c: defines f32_to_e4m3_slow"):
            assert any(want in b for b in bad), (want, bad)
        assert not any(b.startswith(("NARROW FLOAT: runtime/", "NARROW FLOAT: " + NF_HOME)) for b in bad), bad



# ---- area: the simulated device and the allocators ----


# ---- area: naming (static functions, prefixes) ----


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
