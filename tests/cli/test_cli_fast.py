"""Read-only commands load what reading needs, not what serving needs (issue 17, item 9).

`fusee list` and `fusee describe` on a home that no process owns open it
passively in their own process: they must not load the control socket's
server, the HTTP API or its stack, which only an owner that serves uses.
The evidence is the child's `sys.modules` once the command has run, not
its speed: a test checks behaviour; `fusee bench` (`cli_read_ms`) measures.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest
from conftest import APP, HERE, REPO

from fusee_cli import app

SERVING = (
    "fusee_runtime.control.server",
    "fusee_runtime.control.listening",
    "fusee_runtime.control.http",
    "fusee_runtime.control.routes",
    "fusee_runtime.control.connections",
    "fusee_runtime.control.openapi",
    "starlette",
    "uvicorn",
    "httpx",
    "h11",
    "anyio",
)
"""Modules (and their submodules) that only serving a home needs."""

PROBE = """
import sys
import orjson
for name in sys.argv[2:]:
    __import__(name)
from fusee_cli.app import main
sys.argv = ["fusee", *orjson.loads(sys.argv[1])]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write("\\nMODULES " + orjson.dumps([code, sorted(sys.modules)]).decode())
"""
"""Runs `fusee ARGS` as the console script does (its `main`), then reports its exit code and every
module loaded (the modules given after ARGS are imported first)."""


def probe(args: list[str], *also: str) -> tuple[int, str, list[str]]:
    """Runs `fusee args` in a child; its exit code, stdout and loaded modules."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, orjson.dumps(args).decode(), *also],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    _, marker, report = done.stderr.rpartition("\nMODULES ")
    assert marker, done.stderr
    code, modules = orjson.loads(report)
    return code, done.stdout, modules


def _env() -> dict[str, str]:
    """This environment without FUSEE_ variables, able to import the test app."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    return env


def serving(modules: list[str]) -> list[str]:
    return [m for m in modules if m in SERVING or m.startswith(tuple(s + "." for s in SERVING))]


@pytest.fixture
def stored(fusee, on) -> str:
    """A home that holds one completed run, r-1, and that no process owns."""
    done = fusee("start", "cli_echo", "--input", '"hi"', "--id", "r-1", *on)
    assert done.returncode == 0, done.stderr
    return "r-1"


@pytest.mark.parametrize("command", [["list"], ["list", "--json"], ["describe", "r-1"]])
def test_a_read_loads_nothing_that_serves(on, stored, command) -> None:
    code, out, modules = probe([*command, *on])
    assert code == 0
    assert stored in out  # the run was read: the home was opened, recovered, answered
    assert "fusee_runtime.control.connect" in modules  # opened here, not asked of an owner
    assert serving(modules) == []


def test_the_check_finds_a_serving_module(on, stored) -> None:
    """The check itself: the same read with the socket server loaded is caught."""
    code, _, modules = probe(["list", *on], "fusee_runtime.control.server")
    assert code == 0
    assert "fusee_runtime.control.server" in serving(modules)


@pytest.mark.parametrize(
    "command", [["list"], ["describe", "r-1"], ["history", "r-1"], ["describe", "r-1", "--json"]]
)
def test_a_read_imports_neither_the_app_nor_the_other_commands(on, stored, command) -> None:
    # Reading runs none of the app's code, so it does not import it (a slow or a
    # broken app costs a read nothing); and typer is given the one command named,
    # not all of them to build first.
    code, out, modules = probe(["--home", on[1], *command, "--app", APP])
    assert code == 0
    assert stored in out
    assert APP not in modules
    loaded = sorted(m for m in modules if m.startswith("fusee_cli.commands."))
    assert loaded == [f"fusee_cli.commands.{app.COMMANDS[command[0]].split(':')[0]}"]


def test_the_check_finds_the_app_and_the_other_commands(on, stored) -> None:
    """The check itself: a command that loads the app (and the group's help, which
    builds every command) is caught."""
    code, _, modules = probe(["result", "r-1", *on])
    assert code == 0
    assert APP in modules
    code, _, modules = probe(["--help"])
    assert code == 0
    assert {f"fusee_cli.commands.{v.split(':')[0]}" for v in app.COMMANDS.values()} <= set(modules)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["list"], ["list"]),
        (["--home", "h", "--app=a", "describe", "x"], ["describe"]),
        (["--home=h", "tail-stream", "--help"], ["tail-stream"]),
        (["--help"], None),  # the group's help lists every command
        (["--version"], None),
        (["lsit"], None),  # a typo, for click to suggest the command meant
        ([], None),
        (["--home", "list"], None),  # "list" is --home's value: no command named
    ],
)
def test_main_gives_typer_the_command_named_else_all(argv, named, monkeypatch) -> None:
    monkeypatch.delenv("_FUSEE_COMPLETE", raising=False)
    assert list(app._named(argv)) == (named or list(app.COMMANDS))


def test_completion_gets_every_command(monkeypatch) -> None:
    monkeypatch.setenv("_FUSEE_COMPLETE", "complete_bash")
    assert list(app._named(["list"])) == list(app.COMMANDS)
