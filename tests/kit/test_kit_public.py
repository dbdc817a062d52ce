"""The kit's own tests, and the tests of the examples, are written as a user would
write them (issue 19): they import fusee from `fusee_runtime` and
`fusee_runtime.testing` only, and touch no private name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
FILES = sorted([*TESTS.joinpath("kit").glob("test_*.py"), *TESTS.joinpath("examples").glob("*.py")])
PUBLIC = {"fusee_runtime", "fusee_runtime.testing"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_only_the_public_api(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fusee"):
            assert node.module in PUBLIC, f"{path.name}:{node.lineno} imports {node.module}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("fusee"), f"{path.name}:{node.lineno}"
        if isinstance(node, ast.Attribute):
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            assert not private, f"{path.name}:{node.lineno} reads {node.attr}"


def test_there_are_tests_to_look_at() -> None:
    names = {p.name for p in FILES}
    assert {"test_kit.py", "test_examples.py"} <= names
