"""The `fusee` command: a thin layer over `fusee_runtime`.

Only typer is imported here. Each command imports the engine, and rich for
what it shows, when it runs, so `fusee --help` starts fast. `--home` and
`--app` go before the command name or after it (`fusee --home DIR start
order`, `fusee start order --home DIR`); after it wins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from fusee_cli.commands import (
    bench,
    cancel,
    check,
    complete,
    describe,
    handlers,
    history,
    logs,
    prune,
    reset,
    result,
    resume,
    schedules,
    serve,
    signal,
    start,
    tail_stream,
    terminate,
    workflows,
)
from fusee_cli.commands import list as list_cmd

app = typer.Typer(
    name="fusee",
    help="Durable execution for Python: start workflow runs, follow them, steer them, look inside.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("start")(start.start)
app.command("result")(result.result)
app.command("describe")(describe.describe)
app.command("list")(list_cmd.list_runs)
app.command("history")(history.history)
app.command("signal")(signal.signal)
app.command("resume")(resume.resume)
app.command("cancel")(cancel.cancel)
app.command("terminate")(terminate.terminate)
app.command("reset")(reset.reset)
app.command("tail-stream")(tail_stream.tail_stream)
app.command("logs")(logs.logs)
app.command("query")(handlers.query)
app.command("update")(handlers.update)
app.command("complete")(complete.complete)
app.command("fail")(complete.fail)
app.command("check")(check.check)
app.command("prune")(prune.prune)
app.command("serve")(serve.serve)
app.command("schedules")(schedules.schedules)
app.command("bench")(bench.bench)
app.command("workflows")(workflows.workflows)


def _print_version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        typer.echo(f"fusee {version('fusee')}")
    except PackageNotFoundError:  # run from a source tree that was never installed
        typer.echo("fusee (version unknown: not installed)")
    raise typer.Exit()


def _hand_down(ctx: typer.Context, name: str, value: str | None) -> None:
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


@app.callback()
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
    _hand_down(ctx, "FUSEE_HOME", None if home is None else str(home))
    _hand_down(ctx, "FUSEE_APP", app_)
    # The CLI reports what the engine logs (a stuck run, a failed journal)
    # itself, as one line; without this, logging's last-resort handler would
    # print it a second time. (Not imported for `fusee --help`.)
    import logging

    logging.getLogger("fusee").addHandler(logging.NullHandler())


def main() -> None:
    """The `fusee` console script."""
    app(prog_name="fusee")
