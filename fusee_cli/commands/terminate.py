"""`fusee terminate`: close a run at once, running nothing more."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi


def terminate(
    workflow_id: Id,
    reason: Annotated[
        str,
        typer.Option("--reason", help="Why, as recorded in the journal and shown by describe."),
    ] = "requested with fusee terminate",
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Terminate run ID: it closes now as terminated; no compensation runs.

    Example: fusee terminate o-1 --reason "stuck on a retired API"
    """
    with session.reporting():
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def terminate_run(ctl: ControlApi, info: RunInfo) -> tuple[RunInfo, RunInfo]:
            # Raises Rejected, with how it closed, when the run is closed.
            return info, await ctl.terminate(wid, reason)

        (before, after), _ = session.act(home, module, wid, terminate_run)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json(run_json(after))
        else:
            session.echo_err(f"terminated {wid} (it was {before.status}): {reason}")
