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
