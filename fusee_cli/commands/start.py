"""`fusee start`: start a run, follow it live, print its result."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session, suggest
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, app_module
from fusee_cli.session import CliError, Code, echo_err


@dataclass
class _Started:
    """What the interrupt handler needs to know: whether the start is durable, and where."""

    workflow_id: str
    durable: bool = False
    owner: int | None = None


def start(
    workflow: Annotated[
        str,
        typer.Argument(
            metavar="WORKFLOW",
            help="Name of a workflow the app registers.",
            autocompletion=suggest.workflow_names,
        ),
    ],
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input",
            "-i",
            help="The input: a JSON file, - to read stdin, or JSON text; default: null.",
        ),
    ] = None,
    workflow_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Workflow id; starting an id again follows its run; default: a new random id.",
        ),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Print the id once the start is durable; don't wait.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0,
            help="Stop waiting after this many seconds (exit 4); default: wait until it closes.",
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Start a run of WORKFLOW, show its progress and print its result.

    Example: fusee start order --input workflows/order.json --id o-1

    Example: fusee start approval --input '{"id": "ex-7", "cents": 4200}' --detach
    """
    with session.reporting():
        value = session.load_input(input_file, inline=True)
        session.check_payload(value)
        module = app_module(app)
        session.check_workflow(module, workflow)
        wid = session.check_id(workflow_id) if workflow_id is not None else uuid.uuid4().hex
        started = _Started(wid)
        try:
            session.run(_start(home, module, workflow, value, started, detach, timeout, as_json))
        except KeyboardInterrupt:
            # The run is durable once started: it resumes the next time any
            # process opens the home.
            wid = started.workflow_id
            if not started.durable:
                echo_err(f"interrupted before the start of {wid} was durable")
                raise typer.Exit(130) from None
            where = (
                f"goes on in the process that owns the home (pid {started.owner})"
                if started.owner is not None
                else "resumes when the home is next opened"
            )
            echo_err(
                f"detached: run {wid} is durable and {where}; "
                f"follow it with `fusee result {wid} --wait`"
            )
            raise typer.Exit(Code.OK) from None


async def _start(
    home: Path,
    app: str,
    workflow: str,
    value: Any,
    started: _Started,
    detach: bool,
    timeout_s: float | None,
    as_json: bool,
) -> None:
    from fusee_cli.follow import follow_home, report
    from fusee_cli.render import Progress
    from fusee_runtime import NotFound
    from fusee_runtime.control.api import run_json

    wid = started.workflow_id
    # --detach only records the start: no run's code runs in this process.
    async with session.control(home, app, drive=not detach) as ctl:
        started.owner = ctl.owner
        try:
            info, existed = await ctl.start(workflow, value, id=wid)
        except NotFound as e:
            # The owner's app does not know the workflow this command's app knows.
            raise CliError(
                Code.USAGE, f"the process that owns the home (pid {ctl.owner}): {e}"
            ) from None
        started.durable = True
        started.owner = ctl.owner  # the driver of the run's journal, with several
        if existed:
            then = "" if detach else "; following it"
            echo_err(f"run {wid} already exists ({info.workflow}, {info.status}){then}")
        elif not detach:
            echo_err(f"started {wid} ({info.workflow}, run {info.run_id})")
        if detach:
            if as_json:
                session.print_json(run_json(info))
            else:
                typer.echo(wid)
            return
        with Progress(wid) as progress:
            outcome = await follow_home(
                home, app, wid, timeout_s, progress, first=ctl, say=progress.say
            )
        code = report(outcome, as_json)
    if code != Code.OK:
        raise typer.Exit(code)
