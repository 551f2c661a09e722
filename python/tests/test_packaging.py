"""What installing the package leaves and needs: `pip install ./python`
builds in the tree (python/build/, src/scistream.egg-info), which git
ignores; the `test` extra names every package the tests and the examples
they run import."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from conftest import REPO

#: The distribution of each module an example imports.
DISTRIBUTION = {"numpy": "numpy", "zmq": "pyzmq", "PIL": "Pillow", "nbclient": "nbclient", "nbformat": "nbformat",
                "pytest": "pytest", "tqdm": "tqdm", "httpx": "httpx", "yaml": "PyYAML"}


def test_what_pip_install_builds_is_ignored() -> None:
    paths = ["python/build/lib/scistream/__init__.py", "python/build/bdist.linux-x86_64/wheel/x",
             "python/src/scistream.egg-info/PKG-INFO"]
    r = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True)
    assert sorted(r.stdout.split()) == sorted(paths), r.stdout + r.stderr


def imports(path: str) -> set[str]:
    """The top-level modules a file imports (at its top or in a function)."""
    tree = ast.parse((REPO / path).read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
    return out


def test_the_test_extra_names_what_the_examples_import() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "python" / "pyproject.toml").read_text())["project"]
    named = {d.split(";")[0].split("[")[0].split(">")[0].split("<")[0].split("=")[0].strip().lower()
             for d in project["optional-dependencies"]["test"] + project["dependencies"]}
    used: set[str] = set()
    for path in ("examples/detector/detector.py", "examples/detector/analysis.py", "python/tests/test_examples.py"):
        used |= {m for m in imports(path) if m not in sys.stdlib_module_names and m not in ("scistream", "conftest")}
    assert {"numpy", "zmq", "PIL"} <= used, used  # the walk sees the detector's imports
    unknown = used - DISTRIBUTION.keys()
    assert not unknown, f"add the distributions of {unknown} to DISTRIBUTION and to the test extra"
    missing = {DISTRIBUTION[m] for m in used if DISTRIBUTION[m].lower() not in named}
    assert not missing, f"pip install './python[test]' would not install {missing}: add them to the test extra"
