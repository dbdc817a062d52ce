"""What `pip install` puts in site-packages: fusee's two packages, and no `workflows`.

The examples in workflows/ stay in the checkout. A top-level `workflows` package
in site-packages would collide with a user's own and run the examples from any
directory; the CLI imports the app from the current directory instead (as
uvicorn and flask do), so the README's first command works from the checkout's
root, and only there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

from processes import fusee_script
from setuptools import find_namespace_packages, find_packages

ROOT = Path(__file__).resolve().parents[2]


def packages() -> list[str]:
    """The packages a build of this checkout includes, as setuptools finds them from
    `[tool.setuptools]` in pyproject.toml (what `pip wheel .` would put in the wheel)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = config.get("packages", {})
    if isinstance(listed, list):
        return listed
    find = listed.get("find", {})
    # In pyproject.toml, find means find_namespace_packages unless namespaces = false.
    finder = find_namespace_packages if find.get("namespaces", True) else find_packages
    (where,) = find.get("where", ["."])
    return finder(
        where=str(ROOT / where), include=find.get("include", ["*"]), exclude=find.get("exclude", ())
    )


def test_a_build_holds_fusee_runtime_and_fusee_cli_and_nothing_else() -> None:
    found = packages()
    assert {"fusee_runtime", "fusee_runtime.engine", "fusee_cli", "fusee_cli.commands"} <= set(
        found
    )
    assert {name.split(".")[0] for name in found} == {"fusee_runtime", "fusee_cli"}, found


def _clean_env() -> dict[str, str]:
    """The environment of a user's shell: no FUSEE_ variable, nothing added to the path."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_") and k != "PYTHONPATH"}


def _run(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` run from `cwd` as a user's shell would run it."""
    return subprocess.run(list(command), cwd=cwd, env=_clean_env(), capture_output=True, text=True)


def test_the_installed_package_has_no_workflows_module(tmp_path: Path) -> None:
    imported = _run(sys.executable, "-c", "import workflows", cwd=tmp_path)
    assert imported.returncode == 1, "`workflows` is installed: pip install -e . again"
    assert "No module named 'workflows'" in imported.stderr
    # The default app is looked for in the current directory, and only there.
    started = _run(fusee_script(), "start", "order", "--home", str(tmp_path / "home"), cwd=tmp_path)
    assert started.returncode == 2, started.stderr
    assert "cannot import app module 'workflows'" in started.stderr


def test_the_readmes_first_command_runs_from_the_checkouts_root(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```sh\n(.*)\n", readme)
    assert first is not None
    install, command = first.group(1).split(" && ")
    assert install == "pip install -e ."
    words = shlex.split(command)
    assert words[:3] == ["fusee", "start", "order"]
    home = ["--home", str(tmp_path / "home")]
    done = _run(fusee_script(), *words[1:], *home, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["order"], result["payment"]["cents"]) == ("o-1", 1800)
    # The id the workflow's docstring and the README go on with.
    logs = _run(fusee_script(), "logs", "o-1", *home, cwd=ROOT)
    assert logs.returncode == 0, logs.stderr
    assert "order o-1: 2 of tea-earl-grey-250g" in logs.stdout


def test_ci_runs_the_readmes_test_command_and_nothing_weaker() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, flags=re.DOTALL)
    assert block is not None
    (tests,) = [line for line in block.group(1).splitlines() if ".[test]" in line]
    install, *commands = tests.split(" && ")
    assert install == "pip install -e '.[test]'"
    assert commands == ['pytest -m "not slow"', "pytest -m slow"], tests
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    ran = [line for line in ci if line.startswith("pytest")]
    assert ran == commands
    # Both run in parallel: `-n auto` is in pytest's addopts.
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "addopts"
    ]
    assert "-n auto" in addopts
