"""`fusee resume`: resume a paused or stuck run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi


def resume(
    workflow_id: Id,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Resume paused run ID: its paused step runs again with a fresh retry budget.

    Example: fusee resume o-1
    """
    with session.reporting():
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def resume_run(ctl: ControlApi, info: RunInfo) -> tuple[RunInfo, RunInfo]:
            from fusee_runtime import Rejected

            try:
                after = await ctl.resume(wid)
            except Rejected as e:
                if not info.status.is_open or ctl.owner is not None:
                    raise
                # Being stuck is not recorded, and a passive open runs no code
                # that could find out again: a stuck run shows as running here.
                raise CliError(
                    Code.USAGE,
                    f"{e}; if it was reported stuck, `fusee result {wid} --wait` "
                    "retries it with the code loaded now",
                ) from None
            return info, after

        (before, after), owner = session.act(home, module, wid, resume_run)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json(run_json(after))
        else:
            was = str(before.status)
            if before.error:
                # A paused run's error already says "paused in step ...".
                was = before.error if before.error.startswith(was) else f"{was}: {before.error}"
            session.echo_err(f"resumed {wid} ({was}); it goes on {session.goes_on(wid, owner)}")
