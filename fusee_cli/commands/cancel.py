"""`fusee cancel`: cancel a run; its compensations run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi


def cancel(
    workflow_id: Id,
    reason: Annotated[
        str,
        typer.Option("--reason", help="Why, as recorded in the journal and shown by describe."),
    ] = "requested with fusee cancel",
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Cancel run ID: its code gets Cancelled, its compensations run, it closes as cancelled.

    Example: fusee cancel o-1 --reason "customer withdrew the order"
    """
    with session.reporting():
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def cancel_run(ctl: ControlApi, info: RunInfo) -> RunInfo:
            # Raises Rejected, with how it closed, when the run is closed. Answers with
            # the run as the cancel left it: no read after it, so nothing can fail then.
            return await ctl.cancel(wid, reason)

        after, owner = session.act(home, module, wid, cancel_run)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json(run_json(after))
        elif after.status.is_open:
            session.echo_err(
                f"cancel of {wid} recorded ({reason}); it runs its compensations and closes "
                f"as cancelled {session.goes_on(wid, owner)}"
            )
        else:
            session.echo_err(f"cancelled {wid} ({reason}); it is {after.status}")
