"""`fusee result`: a run's result, waiting for it with `--wait`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module
from fusee_cli.session import Code


@dataclass
class _Waited:
    """What the interrupt handler says: who runs the run while this command waits."""

    owner: int | None = None


def result(
    workflow_id: Id,
    wait: Annotated[
        bool, typer.Option("--wait", help="Run it here until it closes, if it is still open.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0,
            help="With --wait, give up after this many seconds (exit 4); default: wait until it "
            "closes.",
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Print the result of run ID, once it is durable.

    With --wait on a terminal, the run's current step shows on a live line
    on stderr, as `fusee start` shows it. Ctrl-C stops waiting and exits 0,
    as it does for `start`: the run stays durable and goes on.

    Example: fusee result o-1 --wait
    """
    with session.reporting():
        module = app_module(app)
        session.check_id(workflow_id)
        if not session.has_journal(home):
            raise session.no_run(workflow_id)
        waited = _Waited()
        try:
            session.run(_result(home, module, workflow_id, timeout if wait else 0, as_json, waited))
        except KeyboardInterrupt:
            where = (
                f"goes on in {session.owner_named(waited.owner)}"
                if waited.owner is not None
                else "resumes when the home is next opened"
            )
            session.echo_err(
                f"stopped waiting: run {workflow_id} is durable and {where}; "
                f"`fusee result {workflow_id} --wait` picks it up again"
            )
            raise typer.Exit(Code.OK) from None


async def _result(
    home: Path,
    app: str,
    workflow_id: str,
    timeout_s: float | None,
    as_json: bool,
    waited: _Waited,
) -> None:
    from fusee_cli.follow import follow, follow_home, report
    from fusee_cli.render import Progress
    from fusee_runtime.control.client import OwnerGone, OwnerLost

    if timeout_s == 0:
        # No --wait: look, passively; no run's code runs in this process.
        async with session.control(home, app, drive=False) as ctl:
            await session.find_run(ctl, workflow_id)
            outcome = await follow(ctl, workflow_id, 0)
    else:
        # With no owner serving the home, this process runs the run while it waits.
        async with session.control(home, app, drive=True, gives_way=True) as ctl:
            first: Any = ctl
            try:
                await session.find_run(ctl, workflow_id)
            except (OwnerGone, OwnerLost):
                if ctl.owner is None:
                    raise
                first = None  # it went away before answering (its run closed): look again
            # After the call about the run: a database of several journals names the
            # driver of the run's.
            waited.owner = ctl.owner
            with Progress(workflow_id) as progress:
                # The live line on a terminal only: into a pipe, nothing but the result.
                outcome = await follow_home(
                    home,
                    app,
                    workflow_id,
                    timeout_s,
                    progress if progress.live else None,
                    first=first,
                    say=progress.say,
                )
    code = report(outcome, as_json)
    if code != Code.OK:
        raise typer.Exit(code)
