"""The real `fusee` entry point, in child processes: first run, Ctrl-C, lazy imports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def fusee_command() -> list[str]:
    """The installed console script, next to this interpreter when it is a venv's."""
    beside = Path(sys.executable).with_name("fusee")
    found = str(beside) if beside.exists() else shutil.which("fusee")
    if found is None:
        pytest.fail("the `fusee` console script is not installed: pip install -e .")
    return [found]


def child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env.update(extra)
    return env


def test_first_run_from_the_readme(tmp_path: Path):
    home = tmp_path / "home"
    done = subprocess.run(
        [
            *fusee_command(),
            "start",
            "order",
            "--input",
            "workflows/order.json",
            "--home",
            str(home),
        ],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["order"] == "o-1"
    assert result["hold"] == "hold-tea-earl-grey-250g-2"
    assert result["payment"]["cents"] == 1800
    assert result["tracking"].startswith("trk-o-1-")
    assert "started" in done.stderr
    assert "Traceback" not in done.stderr


def test_ctrl_c_during_start_detaches_and_the_run_stays_durable(tmp_path: Path, cli):
    home = tmp_path / "home"
    args = ["start", "cli_hang", "--id", "i-1", "--home", str(home), "--app", "fusee_cli_testapp"]
    # The run's step sends SIGINT to its own process: Ctrl-C, once the start is durable.
    env = child_env(FUSEE_TEST_SIGINT="1", PYTHONPATH=str(HERE))
    done = subprocess.run(
        [*fusee_command(), *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    started, detached = done.stderr.splitlines()
    assert started.startswith("started i-1 (cli_hang, run ")
    assert detached.startswith("detached: run i-1 is durable")
    assert detached.endswith("follow it with `fusee result i-1 --wait`")
    assert done.stdout == ""
    r = cli("describe", "i-1", "--json", "--home", str(home), "--app", "fusee_cli_testapp")
    assert json.loads(r.stdout)["status"] == "running"


def test_a_wait_that_runs_out_prints_only_its_own_lines(tmp_path: Path):
    args = ["start", "cli_hang", "--id", "t-1", "--timeout", "0", "--home", str(tmp_path / "h")]
    done = subprocess.run(
        [*fusee_command(), *args, "--app", "fusee_cli_testapp"],
        cwd=tmp_path,
        env=child_env(PYTHONPATH=str(HERE)),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 4, done.stderr
    started, waited = done.stderr.splitlines()  # nothing logged by asyncio or the engine
    assert started.startswith("started t-1")
    assert waited == (
        "run t-1 has not finished (status running); keep waiting with `fusee result t-1 --wait`"
    )


def test_importing_the_cli_imports_neither_the_engine_nor_rich():
    # `fusee --help` pays for typer only; commands import the rest when they run.
    code = (
        "import sys, fusee_cli.app\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('rich', 'fusee_runtime')]\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
