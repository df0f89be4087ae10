#!/usr/bin/env python3
# tests/python/test_api_docs.py: every public name of the package has a
# docstring and full type hints (PEP 484 annotations on every parameter and the
# return).
"""Run: PYTHONPATH=<build>/python /usr/bin/python3 tests/python/test_api_docs.py
(exit 0 pass, 1 fail). Labels cpu.

Public names: mnemo.__all__, the __all__ of every public submodule (mnemo.x,
not mnemo._x), and of each public class its public methods, properties,
class methods and static methods (names without a leading underscore, plus
__init__ for its annotations, and __call__/__getitem__/... dunders the class
defines itself are not required)."""
import importlib
import inspect
import pkgutil
import sys
import typing
import unittest

import mnemo

# Modules whose names are not checked yet: the helpers that rewrite
# them add their hints; the lead empties this list after merging (then every
# module of the package is checked).
NOT_YET_CHECKED = []

OPTIONAL = {"mnemo.cupy"}  # imports CuPy at import time only when used; checked when importable


def _modules():
    mods = {"mnemo": mnemo}
    for m in pkgutil.iter_modules(mnemo.__path__, "mnemo."):
        if m.name.rsplit(".", 1)[1].startswith("_"):
            continue
        try:
            mods[m.name] = importlib.import_module(m.name)
        except ImportError:
            if m.name not in OPTIONAL:
                raise
    for name, mod in list(sys.modules.items()):  # namespaces made at import (mnemo.safetensors)
        if name.startswith("mnemo.") and not name.rsplit(".", 1)[1].startswith("_"):
            mods.setdefault(name, mod)
    return mods


def _defined_in(obj):
    mod = getattr(obj, "__module__", None)
    if isinstance(obj, property):
        mod = getattr(obj.fget, "__module__", None)
    return mod


def _public_names():
    """(qualified name, object) of every public name, each object once."""
    seen, out = set(), []
    for modname, mod in sorted(_modules().items()):
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            out.append((f"{modname}.{name}", obj))
            if inspect.isclass(obj):
                for attr, member in sorted(vars(obj).items()):
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member) or isinstance(member, property):
                        out.append((f"{modname}.{name}.{attr}", member))
    return out


def _problems(qualname, obj):
    """What is missing on one public name: [] when nothing."""
    where = _defined_in(obj) or ""
    if any(where == m or where.startswith(m + ".") for m in NOT_YET_CHECKED):
        return []
    out = []
    if isinstance(obj, property):
        if not (obj.__doc__ or "").strip():
            out.append(f"{qualname}: no docstring")
        if obj.fget is not None and "return" not in getattr(obj.fget, "__annotations__", {}):
            out.append(f"{qualname}: the getter has no return annotation")
        elif obj.fget is not None:
            try:
                typing.get_type_hints(obj.fget)
            except Exception as e:  # noqa: BLE001
                out.append(f"{qualname}: its annotations do not resolve: {type(e).__name__}: {e}")
        return out
    if not inspect.isclass(obj) and not callable(obj):
        return out  # constants, dtype objects: values, documented by their module
    if inspect.isclass(obj) or inspect.isfunction(obj):
        if not (obj.__doc__ or "").strip() and not qualname.endswith(".__init__"):
            out.append(f"{qualname}: no docstring")
    if inspect.isfunction(obj):
        ann = obj.__annotations__
        sig = inspect.signature(obj)
        for i, (pname, p) in enumerate(sig.parameters.items()):
            if i == 0 and pname in ("self", "cls"):
                continue
            if pname not in ann:
                out.append(f"{qualname}: parameter {pname!r} has no annotation")
        if "return" not in ann:
            out.append(f"{qualname}: no return annotation")
        try:  # the hints name real things (string annotations resolve)
            typing.get_type_hints(obj)
        except Exception as e:  # noqa: BLE001 (any failure to resolve is the finding)
            out.append(f"{qualname}: its annotations do not resolve: {type(e).__name__}: {e}")
    return out


class ApiDocs(unittest.TestCase):
    def test_every_public_name_documented_and_annotated(self):
        names = _public_names()
        self.assertGreater(len(names), 100)  # the walk sees the package
        problems = [p for q, o in names for p in _problems(q, o)]
        self.assertEqual(problems, [], f"{len(problems)} public names lack a docstring or type hints:\n  "
                         + "\n  ".join(problems))

    def test_modules_documented(self):
        for modname, mod in _modules().items():
            with self.subTest(module=modname):
                self.assertTrue((mod.__doc__ or "").strip(), f"{modname} has no module docstring")
                self.assertTrue(hasattr(mod, "__all__") or modname == "mnemo", f"{modname} has no __all__")

    def test_checker_sees_missing_hints(self):
        # a test of the test: an unannotated, undocumented function is reported
        def bare(x, y=1):
            return x

        def good(x: int, y: int = 1) -> int:
            """Doc."""
            return x

        self.assertEqual(len(_problems("t.bare", bare)), 4)
        self.assertEqual(_problems("t.good", good), [])


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=1)
    sys.exit(0 if prog.result.wasSuccessful() else 1)
