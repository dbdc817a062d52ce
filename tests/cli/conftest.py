"""Fixtures for the CLI tests: a runner, the real command, the test app, the journal's bytes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import fusee_script
from typer.testing import CliRunner, Result

from fusee_cli.app import app
from fusee_runtime import Status

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
APP = "fusee_cli_testapp"


@pytest.fixture(autouse=True)
def testapp(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The test app module, importable by name, its knobs reset after each test."""
    monkeypatch.syspath_prepend(str(HERE))
    import fusee_cli_testapp

    monkeypatch.setattr(fusee_cli_testapp, "ENTERED", None)
    monkeypatch.setattr(fusee_cli_testapp, "SHAPE", "a")
    monkeypatch.setattr(fusee_cli_testapp, "FIXED", False)
    monkeypatch.setattr(fusee_cli_testapp, "CALLS", [])
    return fusee_cli_testapp


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """Runs `fusee ARGS...` in this process; stdout and stderr apart."""
    # The defaults must come from the arguments each test passes, not from
    # the environment the suite runs in.
    monkeypatch.delenv("FUSEE_HOME", raising=False)
    monkeypatch.delenv("FUSEE_APP", raising=False)
    monkeypatch.delenv("FUSEE_STORE", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        return runner.invoke(app, list(args), input=input, env=env, prog_name="fusee")

    return invoke


@pytest.fixture
def fusee() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Runs the installed `fusee ARGS...` in a child process, from the repository.

    The child sees no FUSEE_ variable but the ones a test passes, and can
    import the test app.
    """

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [fusee_script(), *args], cwd=REPO, env=_child_env(env), capture_output=True, text=True
        )

    return run


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts the installed `fusee ARGS...` as a child that runs beside the test.

    Its stdout and stderr are pipes; children still running when the test
    ends are killed.
    """
    children: list[subprocess.Popen[str]] = []

    def start(*args: str, **env: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [fusee_script(), *args],
            cwd=REPO,
            env=_child_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A shell that starts the suite in the background leaves SIGINT
            # ignored, and children inherit that; Ctrl-C tests need it back.
            preexec_fn=_default_sigint,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate()


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _child_env(env: dict[str, str]) -> dict[str, str]:
    """The child sees no FUSEE_ variable but the ones a test passes, and can import the test app."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), clean.get("PYTHONPATH")]))
    return {**clean, **env}


@pytest.fixture
def waiting(make_engine, home, journal):
    """A home holding run w-1 (`cli_wait`), parked on its wait for signal `go`; returns the
    journal."""

    async def park() -> None:
        async with make_engine() as engine:
            await engine.start("cli_wait", None, id="w-1")
            await engine.wait_until(lambda: engine.runs.latest("w-1").status == Status.PARKED)

    asyncio.run(park())
    return journal(home)


@pytest.fixture
def make_stuck(make_engine, testapp, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Leaves run s-1 of `cli_shifty` open with its step "a" durable, then changes the
    code under it (its first step becomes "b"): the next replay is stuck."""

    def make() -> None:
        async def first_version() -> None:
            testapp.ENTERED = asyncio.Event()
            async with make_engine() as engine:
                await engine.start("cli_shifty", None, id="s-1")
                await testapp.ENTERED.wait()  # step "a" is durable

        asyncio.run(first_version())
        monkeypatch.setattr(testapp, "ENTERED", None)
        monkeypatch.setattr(testapp, "SHAPE", "b")

    return make


@pytest.fixture
def on(home: Path) -> list[str]:
    """`--home` and `--app` for the test's home and the test app."""
    return ["--home", str(home), "--app", APP]


@pytest.fixture
def journal() -> Callable[[Path], dict[str, bytes] | None]:
    """Reads every journal segment's bytes (None when the home has no journal)."""

    def read(home: Path) -> dict[str, bytes] | None:
        directory = home / "journal"
        if not directory.is_dir():
            return None
        return {p.name: p.read_bytes() for p in sorted(directory.glob("*.seg"))}

    return read


@pytest.fixture
def bad_input() -> Callable[..., str]:
    """Checks a refused command: its exit code, one line on stderr, no traceback."""

    def check(result: Result, code: int, *fragments: str) -> str:
        assert result.exit_code == code, result.output
        assert not isinstance(result.exception, Exception) or isinstance(
            result.exception, SystemExit
        ), result.exception
        assert "Traceback" not in result.output
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        for fragment in fragments:
            assert fragment in lines[0], lines[0]
        return lines[0]

    return check
