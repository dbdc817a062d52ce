"""`fusee start`: start a run, follow it live, print its result."""

from __future__ import annotations

import re
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
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            metavar="NAME",
            help="Wait, queued, until queue NAME lets the run in (fusee queues); default: "
            "the workflow's (@workflow(queue=...)), else none.",
            show_default=False,
        ),
    ] = None,
    queue_key: Annotated[
        str | None,
        typer.Option(
            "--queue-key",
            metavar="KEY",
            help="The run's key in its queue (a tenant, an account); default: none.",
            show_default=False,
        ),
    ] = None,
    priority: Annotated[
        int,
        typer.Option(
            "--priority",
            metavar="N",
            help="Within its key, a higher priority goes in first; default: 0.",
            show_default=False,
        ),
    ] = 0,
    debounce: Annotated[
        float | None,
        typer.Option(
            "--debounce",
            metavar="SECONDS",
            help="Starts of WORKFLOW (and --debounce-key) less than SECONDS apart make one "
            "run, which begins SECONDS after the last with its input; default: none.",
            show_default=False,
        ),
    ] = None,
    debounce_key: Annotated[
        str | None,
        typer.Option(
            "--debounce-key",
            metavar="KEY",
            help="Starts of one key debounce together; default: none.",
            show_default=False,
        ),
    ] = None,
    debounce_max: Annotated[
        float | None,
        typer.Option(
            "--debounce-max",
            metavar="SECONDS",
            help="A burst's run begins at most SECONDS after its first start; default: none.",
            show_default=False,
        ),
    ] = None,
    throttle: Annotated[
        str | None,
        typer.Option(
            "--throttle",
            metavar="N/SECONDS",
            help="At most N runs of WORKFLOW (of --throttle-key) begin in any SECONDS; "
            "one more begins at the next free slot, e.g. 10/60; default: none.",
            show_default=False,
        ),
    ] = None,
    throttle_key: Annotated[
        str | None,
        typer.Option(
            "--throttle-key",
            metavar="KEY",
            help="Each key has a throttle window of its own; default: none.",
            show_default=False,
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

    Example: fusee start sync --input '"acme"' --queue sync --queue-key acme --detach
    """
    with session.reporting():
        value = session.load_input(input_file, inline=True)
        session.check_payload(value)
        flow: dict[str, Any] = {"queue": queue, "queue_key": queue_key, "priority": priority}
        flow.update(debounce=debounce, debounce_key=debounce_key, debounce_max=debounce_max)
        flow["throttle"] = _throttle(throttle, throttle_key)
        module = app_module(app)
        session.check_workflow(module, workflow)
        wid = session.check_id(workflow_id) if workflow_id is not None else uuid.uuid4().hex
        started = _Started(wid)
        try:
            session.run(
                _start(home, module, workflow, value, started, detach, timeout, as_json, flow)
            )
        except KeyboardInterrupt:
            # The run is durable once started: it resumes the next time any
            # process opens the home.
            wid = started.workflow_id
            if not started.durable:
                echo_err(f"interrupted before the start of {wid} was durable")
                raise typer.Exit(130) from None
            where = (
                f"goes on in {session.owner_named(started.owner)}"
                if started.owner is not None
                else "resumes when the home is next opened"
            )
            echo_err(
                f"detached: run {wid} is durable and {where}; "
                f"follow it with `fusee result {wid} --wait`"
            )
            raise typer.Exit(Code.OK) from None


THROTTLE_FORM = re.compile(r"([0-9]{1,20})/([0-9]{1,20}(?:\.[0-9]{1,20})?)")
"""What --throttle takes: N/SECONDS (10/60, 1/0.5)."""


def _throttle(given: str | None, key: str | None) -> dict[str, Any] | None:
    """The start's throttle (`--throttle N/SECONDS`, `--throttle-key KEY`) as the control
    API takes it; the engine says whether its numbers make a rate.

    Raises:
        CliError: not N/SECONDS, or a key without a throttle (exit 2).
    """
    if given is None:
        if key is not None:
            raise CliError(Code.USAGE, "--throttle-key goes with --throttle N/SECONDS")
        return None
    found = THROTTLE_FORM.fullmatch(given.strip())
    if found is None:
        raise CliError(
            Code.USAGE, f"--throttle takes N/SECONDS (10/60: 10 runs in any 60 s), not {given!r}"
        )
    return {"n": int(found[1]), "per": float(found[2]), "key": key, "name": None}


async def _start(
    home: Path,
    app: str,
    workflow: str,
    value: Any,
    started: _Started,
    detach: bool,
    timeout_s: float | None,
    as_json: bool,
    flow: dict[str, Any],
) -> None:
    """Starts the run, with its flow control (`flow`: queue, debounce and throttle, as
    the control API takes them), then follows it unless `detach`."""
    from fusee_cli.follow import follow_home, report
    from fusee_cli.render import Progress
    from fusee_runtime import NotFound
    from fusee_runtime.control.api import run_json

    asked = started.workflow_id
    # --detach only records the start: no run's code runs in this process.
    async with session.control(home, app, drive=not detach, gives_way=not detach) as ctl:
        started.owner = ctl.owner
        try:
            info, existed = await ctl.start(workflow, value, id=asked, **flow)
        except NotFound as e:
            # The owner's app does not know the workflow this command's app knows.
            raise CliError(Code.USAGE, f"{session.owner_named(ctl.owner)}: {e}") from None
        started.durable = True
        started.owner = ctl.owner  # the driver of the run's journal, with several
        # A debounced start that joins its burst answers with the burst's run.
        wid = started.workflow_id = info.id
        if wid != asked:
            then = "" if detach else "; following it"
            echo_err(f"joined the debounced run {wid} ({info.workflow}, run {info.run_id}){then}")
        elif existed:
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
