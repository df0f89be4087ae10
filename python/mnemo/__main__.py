"""mnemo.__main__: ``python -m mnemo ARGS`` and the ``mnemo`` console script
(pyproject.toml's [project.scripts]) run the package's own command-line tool,
the one named in ``mnemo/_paths.py`` (inside the wheel: mnemo/_native/bin/mnemo;
from the build tree: the build's), with ARGS; its exit status is theirs.

Threading: runs once, on the main thread, and replaces the process (os.execv).
"""
from __future__ import annotations

import os
import sys
from typing import List, Optional

from ._lib import built_path

__all__ = ["cli", "main"]


def cli() -> Optional[str]:
    """The path of the package's own ``mnemo`` executable (from mnemo/_paths.py),
    or None when the package has none (a package copied without its build)."""
    path = built_path("CLI")
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return path
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the package's ``mnemo`` CLI with ``argv`` (default: this process's
    arguments) in place of this process; returns 1 with a message on stderr
    only when the package has no CLI or it cannot be started."""
    args = sys.argv[1:] if argv is None else list(argv)
    path = cli()
    if path is None:
        print(f"mnemo: this package has no mnemo executable (mnemo/_paths.py names {built_path('CLI')!r}); "
              "reinstall it with `pip install .` from mnemo's source", file=sys.stderr)
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(path, ["mnemo", *args])
    except OSError as e:
        print(f"mnemo: cannot run {path}: {e.strerror}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
