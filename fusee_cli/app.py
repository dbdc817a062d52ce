"""The `fusee` command: a thin layer over `fusee_runtime`.

Only typer is imported here. Each command imports the engine, and rich for
what it shows, when it runs, so `fusee --help` starts fast. `--home` and
`--app` go before the command name or after it (`fusee --home DIR start
order`, `fusee start order --home DIR`); after it wins.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer

COMMANDS: dict[str, str] = {
    "start": "start:start",
    "result": "result:result",
    "describe": "describe:describe",
    "list": "list:list_runs",
    "history": "history:history",
    "replay": "replay:replay",
    "signal": "signal:signal",
    "resume": "resume:resume",
    "cancel": "cancel:cancel",
    "terminate": "terminate:terminate",
    "reset": "reset:reset",
    "tail-stream": "tail_stream:tail_stream",
    "logs": "logs:logs",
    "query": "handlers:query",
    "update": "handlers:update",
    "complete": "complete:complete",
    "fail": "complete:fail",
    "check": "check:check",
    "prune": "prune:prune",
    "serve": "serve:serve",
    "batch": "batch:batch",
    "schedules": "schedules:schedules",
    "limits": "limits:limits",
    "queues": "queues:queues",
    "objects": "objects:objects",
    "bench": "bench:bench",
    "workflows": "workflows:workflows",
}
"""Each command's name, in the order `fusee --help` lists them, and its function
(module in `fusee_cli.commands`, then name)."""
GLOBAL_OPTIONS = ("--home", "--app", "--store")
"""The options of the group that take a value (`fusee --home DIR list`)."""


def build(names: Iterable[str] = COMMANDS) -> typer.Typer:
    """The `fusee` command with the commands `names` (default: all of them).

    Typer turns every command it has into a click command before it runs
    one (reading its signature and its annotations), a few milliseconds
    each: `main` gives it only the one on the command line.
    """
    cli = typer.Typer(
        name="fusee",
        help="Durable execution for Python: start workflow runs, follow them, steer them, "
        "look inside.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    cli.callback()(_before_any_command)
    for name in names:
        module, function = COMMANDS[name].split(":")
        command = getattr(importlib.import_module(f"fusee_cli.commands.{module}"), function)
        cli.command(name)(command)
    return cli


@functools.cache
def _whole() -> typer.Typer:
    return build()


def __getattr__(name: str) -> typer.Typer:
    # `app`, the whole CLI, for the tests and for tools that look at it, built
    # when asked for: `main` builds only what the command line names.
    if name == "app":
        return _whole()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        typer.echo(f"fusee {version('fusee')}")
    except PackageNotFoundError:  # run from a source tree that was never installed
        typer.echo("fusee (version unknown: not installed)")
    raise typer.Exit()


def hand_down(ctx: typer.Context, name: str, value: str | None) -> None:
    """Makes a global option the command's default, through the variable it reads.

    The command's own option, after its name, still wins; the variable is put
    back when the command ends, so nothing leaks into the calling process.
    """
    if value is None:
        return
    before = os.environ.get(name)
    os.environ[name] = value

    def restore() -> None:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before

    ctx.call_on_close(restore)


def _before_any_command(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home",
            help="The fusee home for the command, like FUSEE_HOME; a --home after the "
            "command wins; default: FUSEE_HOME, else .fusee.",
            file_okay=False,
            show_default=False,
        ),
    ] = None,
    app_: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="Module that registers the workflows, like FUSEE_APP; an --app after "
            "the command wins; default: FUSEE_APP, else tool.fusee.app in ./pyproject.toml, "
            "else workflows.",
            show_default=False,
        ),
    ] = None,
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            help="Where the journal lives, like FUSEE_STORE: a PostgreSQL URL "
            "(postgresql://user@host/db); default: FUSEE_STORE, else the local journal in "
            "the home.",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print fusee's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    # Each command reads FUSEE_HOME and FUSEE_APP for its own --home and
    # --app, so handing the values down that way keeps one precedence:
    # after the command > before it > the variable > the default.
    hand_down(ctx, "FUSEE_HOME", None if home is None else str(home))
    hand_down(ctx, "FUSEE_APP", app_)
    hand_down(ctx, "FUSEE_STORE", store)
    # The CLI reports what the engine logs (a stuck run, a failed journal)
    # itself, as one line; without this, logging's last-resort handler would
    # print it a second time. (Not imported for `fusee --help`.)
    import logging

    logging.getLogger("fusee").addHandler(logging.NullHandler())


def main() -> None:
    """The `fusee` console script."""
    build(_named(sys.argv[1:]))(prog_name="fusee")


def _named(argv: list[str]) -> Iterable[str]:
    """The command the arguments name, alone, or every command when they name
    none that exists (the group's help, --version, a typo to suggest a fix for)
    or when the shell asks for completions (which may list them all)."""
    if any(key.startswith("_FUSEE_COMPLETE") for key in os.environ):
        return COMMANDS
    args = iter(argv)
    for arg in args:
        if arg in GLOBAL_OPTIONS:
            next(args, None)
        elif not arg.startswith(GLOBAL_OPTIONS):
            return [arg] if arg in COMMANDS else COMMANDS
    return COMMANDS
