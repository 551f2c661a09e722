"""The package is typed (py.typed): mypy --strict finds nothing in it, nor in
a program using it as meant (tests/typing/use.py), and refuses every mistake
of tests/typing/misuse.py (a misspelt keyword, a wrong type, a missing
argument), each on its own line."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO

TYPING = REPO / "python" / "tests" / "typing"


def mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", *paths],
                          cwd=REPO / "python", capture_output=True, text=True, timeout=300)


def test_mypy_strict() -> None:
    r = mypy("src/scistream")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_refuses_each_misuse_and_accepts_the_use() -> None:
    marked = {i for i, line in enumerate((TYPING / "misuse.py").read_text().splitlines(), 1) if line.endswith("# error")}
    assert len(marked) >= 15, marked
    r = mypy("tests/typing/use.py", "tests/typing/misuse.py")
    assert r.returncode == 1, r.stdout + r.stderr
    reported: dict[str, set[int]] = {}
    for m in re.finditer(r"^tests/typing/(\w+)\.py:(\d+): error:", r.stdout, re.M):
        reported.setdefault(m.group(1), set()).add(int(m.group(2)))
    assert "use" not in reported, r.stdout  # the API used as meant: no error
    assert reported.get("misuse") == marked, r.stdout
    # The misspelt keyword of the issue, refused before the program runs.
    assert re.search(r'misuse\.py:\d+: error: Unexpected keyword argument "numconn" for "stream"; did you mean "num_conn"\?',
                     r.stdout), r.stdout
