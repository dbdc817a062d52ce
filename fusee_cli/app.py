"""The `fusee` command: a thin layer over `fusee_runtime`.

Only typer is imported here. Each command imports the engine, and rich for
what it shows, when it runs, so `fusee --help` starts fast. Options go after
the command name (`fusee start order --home DIR`).
"""

from __future__ import annotations

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


@app.callback()
def _before_any_command() -> None:
    # The CLI reports what the engine logs (a stuck run, a failed journal)
    # itself, as one line; without this, logging's last-resort handler would
    # print it a second time. (Not imported for `fusee --help`.)
    import logging

    logging.getLogger("fusee").addHandler(logging.NullHandler())


def main() -> None:
    """The `fusee` console script."""
    app(prog_name="fusee")
