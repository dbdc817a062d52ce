"""The README's "From Python" example, as a reader would use it: saved as checkout.py,
run as a script (twice), and imported as an app module by `fusee`."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from processes import fusee_script

README = Path(__file__).resolve().parents[2] / "README.md"


def from_python() -> str:
    """The first Python block under the README's "From Python" heading."""
    section = README.read_text().split("\n## From Python\n", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert found is not None, "no python block under ## From Python"
    return found.group(1)


def test_the_from_python_example_runs_as_a_script_and_as_an_app(tmp_path: Path) -> None:
    source = from_python()
    ast.parse(source)
    (tmp_path / "checkout.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)

    first = run(sys.executable, "checkout.py")
    assert first.returncode == 0, first.stderr
    printed = ast.literal_eval(first.stdout.strip())
    assert printed["hold"] == "hold-tea"
    assert printed["paid"]["cents"] == 900
    # Run again: the journal answers; the same instant, the same idempotency key.
    again = run(sys.executable, "checkout.py")
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout

    # As an app module, importing it registers `checkout` and runs nothing.
    listed = run(fusee_script(), "list", "--app", "checkout", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(r["id"], r["workflow"], r["status"]) for r in json.loads(listed.stdout)] == [
        ("c-1", "checkout", "completed")
    ]
    shown = run(fusee_script(), "history", "c-1", "--app", "checkout", "--json")
    assert shown.returncode == 0, shown.stderr
    steps = [r for r in json.loads(shown.stdout) if r["type"] == "StepCompleted"]
    assert len(steps) == 2  # each step ran once, in the first run
