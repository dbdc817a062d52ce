"""Every command explains itself, and the shell completions match the CLI."""

from __future__ import annotations

import pytest

from fusee_cli import completions
from fusee_cli.app import app

COMMANDS = sorted(c.name for c in app.registered_commands if c.name)


def test_the_commands_of_this_version():
    assert COMMANDS == [
        "batch",
        "bench",
        "cancel",
        "check",
        "complete",
        "describe",
        "fail",
        "history",
        "limits",
        "list",
        "logs",
        "objects",
        "prune",
        "query",
        "queues",
        "replay",
        "reset",
        "result",
        "resume",
        "schedules",
        "serve",
        "signal",
        "start",
        "tail-stream",
        "terminate",
        "update",
        "workflows",
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


def test_every_option_that_takes_a_value_says_its_default():
    import typer.main

    from fusee_cli.app import app

    silent = []
    for name, command in typer.main.get_command(app).commands.items():
        for param in command.params:
            if param.param_type_name != "option" or param.is_flag or param.required:
                continue
            shown = param.default is not None and param.show_default is not False
            if not shown and "default" not in (param.help or "").lower():
                silent.append(f"{name} {param.opts[0]}")
    assert silent == []
