#!/usr/bin/env python3
# tests/test_readme.py: compiles and runs every C snippet of the README, so that
# what a reader pastes builds and runs (and falls back to SIM or the CPU where
# there is no GPU). A snippet holding `int main` is a whole program; any other
# is the body of main() after the README's own TRY macro (taken from the
# README, so the test and the text cannot differ). Warnings are errors: a
# dropped mn_status (MN_NODISCARD) fails the test. Each program runs in a
# scratch folder with a time limit. With $MNEMO_README_PYTHON set (a python
# that imports the build's package), every ```python block that imports mnemo
# and neither torch nor cupy (those need a GPU) runs too, from the source root
# (the README's relative paths). The Python section starts with `pip install .`.
# Single-threaded.
"""Usage: test_readme.py README.md CC INCLUDE_DIR LIBMNEMO_SO [EXTRA_FLAGS]"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

readme, cc, include, libso = sys.argv[1:5]
extra = shlex.split(sys.argv[5]) if len(sys.argv) > 5 else []
text = open(readme, encoding="utf-8").read()
blocks = re.findall(r"^```c\n(.*?)^```", text, flags=re.S | re.M)
if not blocks:
    sys.exit("test_readme: no ```c blocks found in " + readme)
trys = re.findall(r"^#define TRY\(.*$", text, flags=re.M)
if len(trys) != 1:
    sys.exit(f"test_readme: the README must define TRY exactly once (found {len(trys)})")
prelude = ("#include <stdbool.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n"
           "#include <mnemo/mnemo.h>\n" + trys[0] + "\n")
flags = ["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable",
         "-Wno-unused-but-set-variable", "-I" + include] + extra
fails = 0
with tempfile.TemporaryDirectory() as tmp:
    for i, body in enumerate(blocks, 1):
        first = body.strip().splitlines()[0]
        src = body if re.search(r"\bint main\s*\(", body) else \
            prelude + "int main(void) {\n" + body + "  return 0;\n}\n"
        path = os.path.join(tmp, f"snippet{i}.c")
        exe = os.path.join(tmp, f"snippet{i}")
        with open(path, "w") as f:
            f.write(src)
        cmd = [cc, *flags, path, "-o", exe, libso, "-Wl,-rpath," + os.path.dirname(os.path.abspath(libso))]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"FAIL  snippet {i} ({first}): does not compile\n{r.stderr}")
            fails += 1
            continue
        work = os.path.join(tmp, f"run{i}")
        os.mkdir(work)
        try:
            r = subprocess.run([exe], cwd=work, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"FAIL  snippet {i} ({first}): still running after 120 s")
            fails += 1
            continue
        if r.returncode != 0:
            print(f"FAIL  snippet {i} ({first}): exit {r.returncode}\n{r.stdout}{r.stderr}")
            fails += 1
            continue
        print(f"ok    snippet {i} ({first})")
print(f"{len(blocks) - fails} of {len(blocks)} README C snippets compile and run")
python = os.environ.get("MNEMO_README_PYTHON")
if python:
    root = os.path.dirname(os.path.abspath(readme))
    pys = [b for b in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
           if re.search(r"^import mnemo\b", b, flags=re.M) and not re.search(r"^\s*(import|from)\s+(mnemo\.)?(torch|cupy)\b", b, flags=re.M)]
    if not pys:
        print("FAIL  no ```python block of the README imports mnemo alone")
        fails += 1
    for i, body in enumerate(pys, 1):
        first = body.strip().splitlines()[0]
        r = subprocess.run([python, "-c", body], cwd=root, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            print(f"FAIL  python snippet {i} ({first}): exit {r.returncode}\n{r.stdout}{r.stderr}")
            fails += 1
        else:
            print(f"ok    python snippet {i} ({first})")
# The Python section starts with the install a Python user runs: `pip install .`
# (pyproject.toml), then the import.
m = re.search(r"^### Python\n(.*?)(?=^#)", text, flags=re.S | re.M)
code = [ln.strip() for ln in (m.group(1) if m else "").splitlines() if ln.startswith("    ")]
if code[:2] and code[0].split("#")[0].strip() == "pip install ." and "import mnemo" in code[1]:
    print("ok    the Python section starts with `pip install .` and an import")
else:
    print(f"FAIL  the README's Python section must start with `pip install .`, then `python -c \"import mnemo\"` "
          f"(its first code lines: {code[:2]})")
    fails += 1
sys.exit(1 if fails else 0)
