#!/usr/bin/env python3
# tests/python/test_package.py: the package as a package (pyproject.toml,
# python/CMakeLists.txt): one version (CMakeLists.txt's project(VERSION) = the
# library's mn_version = mnemo.__version__ = the installed distribution's), the
# `mnemo` console script and `python -m mnemo` running the package's own CLI
# with its exit status, the CLI finding its importer script and sample traces,
# py.typed. From the build tree (ctest) and against the installed wheel
# (scripts/test_wheel.sh sets MNEMO_EXPECT_INSTALLED=1: then the package must
# come from an installed distribution, its CLI and files inside the package).
# Single-threaded.
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import unittest
from contextlib import redirect_stderr

import mnemo
import mnemo.__main__ as main_mod
from mnemo._lib import built_path

SRC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PKG = os.path.dirname(os.path.abspath(mnemo.__file__))
INSTALLED = os.environ.get("MNEMO_EXPECT_INSTALLED", "0") not in ("", "0")


def project_version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        m = re.search(r"project\(mnemo\s+VERSION\s+([0-9.]+)", f.read())
    assert m, "CMakeLists.txt has no project(mnemo VERSION ...)"
    return m.group(1)


def distribution():
    """The installed distribution `mnemo` whose files hold this package's
    __init__.py, or None (the build tree's staged package)."""
    try:
        dist = importlib.metadata.distribution("mnemo")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.as_posix() == "mnemo/__init__.py" and os.path.realpath(dist.locate_file(f)) == \
                os.path.realpath(mnemo.__file__):
            return dist
    return None


def run(args, **kw):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, **kw)


class Version(unittest.TestCase):
    def test_one_version(self):
        """mnemo.__version__ is the library's mn_version and CMakeLists.txt's project(VERSION)."""
        self.assertEqual(mnemo.__version__, mnemo._clib.mn_version().decode())
        self.assertEqual(mnemo.__version__, project_version())

    def test_distribution_version(self):
        """Installed: the distribution's metadata version (read from CMakeLists.txt by
        pyproject.toml's regex) is the same; numpy is declared."""
        dist = distribution()
        if dist is None:
            self.assertFalse(INSTALLED, f"MNEMO_EXPECT_INSTALLED is set but {mnemo.__file__} belongs to no "
                             "installed distribution `mnemo`")
            return
        self.assertEqual(dist.version, mnemo.__version__)
        self.assertIn("numpy", [re.split(r"[ ;<>=!\[]", r, maxsplit=1)[0] for r in dist.requires or []])
        scripts = [e for e in dist.entry_points if e.group == "console_scripts"]
        self.assertEqual([(e.name, e.value) for e in scripts], [("mnemo", "mnemo.__main__:main")])


class Layout(unittest.TestCase):
    def test_paths(self):
        """The library and the CLI are the ones mnemo/_paths.py names: inside the
        package when installed from the wheel."""
        lib, cli = built_path("LIBRARY"), built_path("CLI")
        self.assertTrue(lib and os.path.isfile(lib), lib)
        self.assertTrue(cli and os.access(cli, os.X_OK), cli)
        if "MNEMO_LIBRARY" not in os.environ:
            self.assertEqual(os.path.realpath(mnemo.library_path), os.path.realpath(lib))
        self.assertTrue(os.path.isfile(os.path.join(PKG, "py.typed")))
        if INSTALLED:
            for p in (lib, cli):
                self.assertTrue(os.path.realpath(p).startswith(os.path.realpath(PKG) + os.sep), p)

    def test_cli_finds_its_files(self):
        """`mnemo info` (run as python -m mnemo) finds the PyTorch snapshot importer
        and the sample traces; installed, both inside the package."""
        r = run([sys.executable, "-m", "mnemo", "info"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"build: CUDA {'on' if mnemo.build_has_cuda() else 'off'}", r.stdout)
        found = dict(re.findall(r"^(PyTorch snapshot importer|sample traces): (.*)$", r.stdout, re.M))
        self.assertEqual(len(found), 2, r.stdout)
        for what, where in found.items():
            self.assertNotIn("(not found)", where, what)
            self.assertTrue(os.path.exists(where), where)
            if INSTALLED:
                self.assertTrue(os.path.realpath(where).startswith(os.path.realpath(PKG) + os.sep), where)


class Entry(unittest.TestCase):
    def test_python_m(self):
        """python -m mnemo runs the CLI: its output and its exit status."""
        r = run([sys.executable, "-m", "mnemo", "--version"])
        self.assertEqual((r.returncode, r.stdout), (0, f"mnemo {mnemo.__version__}\n"), r.stderr)
        direct = run([built_path("CLI"), "no-such-command"])
        r = run([sys.executable, "-m", "mnemo", "no-such-command"])
        self.assertNotEqual(direct.returncode, 0)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (direct.returncode, direct.stdout, direct.stderr))

    def test_console_script(self):
        """Installed: the `mnemo` console script next to the interpreter runs the CLI."""
        script = shutil.which("mnemo", path=os.path.dirname(sys.executable))
        if script is None:
            self.assertFalse(INSTALLED, f"no mnemo console script next to {sys.executable}")
            return
        r = run([script, "version"])
        self.assertEqual((r.returncode, r.stdout), (0, f"mnemo {mnemo.__version__}\n"), r.stderr)
        r = run([script, "replay"])    # a usage error: the CLI's status and message, unchanged
        self.assertEqual(r.returncode, run([built_path("CLI"), "replay"]).returncode)
        self.assertNotEqual(r.returncode, 0)

    def test_main_without_cli(self):
        """A package without its CLI: main() says so and returns 1 (no exec)."""
        saved = main_mod.built_path
        main_mod.built_path = lambda name: "/nonexistent/mnemo-cli"
        try:
            err = io.StringIO()
            with redirect_stderr(err):
                self.assertEqual(main_mod.main(["version"]), 1)
            self.assertIn("/nonexistent/mnemo-cli", err.getvalue())
            self.assertIsNone(main_mod.cli())
        finally:
            main_mod.built_path = saved


if __name__ == "__main__":
    unittest.main()
