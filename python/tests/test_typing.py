"""The package is typed (py.typed): mypy --strict finds nothing in it."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_mypy_strict() -> None:
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "src/scistream"],
                       cwd=REPO / "python", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
