"""`fusee reset`: run a workflow id again from a point in its journal, in a new run."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi

_NUMBER = re.compile(r"[+-]?\d+")
_NESTED = re.compile(r"\d+(?:\.u?\d+)+")  # a position inside an operation: 2.0.1, 3.u1.2


def reset(
    workflow_id: Id,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="SEQ|POSITION|NAME",
            help="Where the new run starts again: an operation number (the seq column of "
            "`fusee history`); a position inside one as that column shows it (2.0.1, in a "
            "ctx.all, ctx.race or update handler), which resets to its top-level operation "
            "(#2), run again whole; or the name of a step, wait (its signal), sleep, child "
            "(its id) or completion: its first occurrence. It keeps the journal before "
            "that point.",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Run ID again from --to in a new run that keeps the journal before it; print its id.

    A child stays its parent's child: the parent gets the new run's result.

    Example: fusee reset o-1 --to charge
    """
    with session.reporting():
        if not to:
            raise CliError(
                Code.USAGE, "--to takes an operation number, a position or an operation's name"
            )
        point: int | str = int(to) if _NUMBER.fullmatch(to) else to
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def reset_run(
            ctl: ControlApi, info: RunInfo
        ) -> tuple[RunInfo, RunInfo, dict[str, Any]]:
            from fusee_runtime import NotFound

            try:
                # Rejected for an operation number out of range; NotFound for a point
                # the run does not have (the run itself exists: an input error), whose
                # message lists what --to takes for this run.
                new = await ctl.reset(wid, point)
            except NotFound as e:
                raise CliError(Code.USAGE, str(e)) from None
            started = [r for r in await ctl.history(wid) if r["run_id"] == new.run_id]
            return info, new, started[0]["origin"]

        (old, new, origin), owner = session.act(home, module, wid, reset_run)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json({**run_json(new), "origin": origin})
        else:
            typer.echo(new.run_id)
            # Only an open run closes as reset; a closed one keeps how it closed.
            was = "closed as reset" if old.status.is_open else f"stays {old.status}"
            before = origin["before"]
            inside = ""
            if isinstance(point, str) and _NESTED.fullmatch(point):
                inside = f" (position {point} is inside operation #{before}: it runs again whole)"
            child = f"; it is still a child of {new.parent[0]}" if new.parent else ""
            session.echo_err(
                f"reset {wid}: run {old.run_id} {was}; new run {new.run_id} "
                f"keeps operations before #{before}{inside} and runs the rest "
                f"{session.goes_on(wid, owner)}{child}"
            )
