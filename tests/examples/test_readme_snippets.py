"""The README's snippets of the shipped workflows say what `workflows/` does."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _start_child_calls(source: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "start_child"
    ]


def test_the_readmes_child_workflow_snippet_passes_what_parcels_py_passes() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)
    (snippet,) = [b for b in blocks if "async def shipment" in b]
    shipped = (ROOT / "workflows" / "parcels.py").read_text()
    (said,) = _start_child_calls(snippet)
    (done,) = _start_child_calls(shipped)
    # The child's input: a parcel takes {"order", "item"}, not the item alone.
    assert ast.unparse(said.args[2]) == ast.unparse(done.args[2])
    assert ast.unparse(said.args[1]) == ast.unparse(done.args[1])
