"""Every command explains itself, and the shell completions match the CLI."""

from __future__ import annotations

import pytest

from fusee_cli import completions
from fusee_cli.app import app

COMMANDS = sorted(c.name for c in app.registered_commands if c.name)


def test_the_commands_of_this_version():
    assert COMMANDS == [
        "cancel",
        "check",
        "complete",
        "describe",
        "fail",
        "history",
        "list",
        "logs",
        "query",
        "reset",
        "result",
        "resume",
        "signal",
        "start",
        "tail-stream",
        "terminate",
        "update",
    ]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(cli, command):
    r = cli(command, "--help")
    assert r.exit_code == 0, r.output
    assert f"Example: fusee {command}" in r.stdout
    for option in ("--home", "--app"):
        assert option in r.stdout


def test_root_help_lists_every_command(cli):
    r = cli("--help")
    assert r.exit_code == 0, r.output
    for command in COMMANDS:
        assert command in r.stdout


@pytest.mark.parametrize("shell", completions.SHELLS)
def test_completion_scripts_are_fresh(shell):
    path = completions.path(shell)
    assert path.is_file(), f"missing {path}: run python -m fusee_cli.completions"
    assert path.read_text() == completions.source(shell), (
        f"{path} is stale: run python -m fusee_cli.completions"
    )
