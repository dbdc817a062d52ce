"""`fusee list`: runs, newest first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, app_module
from fusee_cli.session import CliError, Code


def list_runs(
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="Only runs in this status, e.g. running; default: every status."
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option("--workflow", help="Only runs of this workflow; default: every workflow."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many; default: no limit.")
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            metavar="KEY=VALUE",
            help="Only runs whose search attribute KEY is VALUE (not available yet: exits 2); "
            "default: no filter.",
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    app: App = None,
) -> None:
    """List runs, newest first.

    Example: fusee list --status running --json
    """
    from fusee_runtime import Status
    from fusee_runtime.engine.engine import LIST_LIMIT_MAX

    with session.reporting():
        if limit is not None and limit > LIST_LIMIT_MAX:
            given = str(limit)  # typer's int() took it: at most 4,300 digits
            shown = given if len(given) <= 40 else given[:39] + "…"
            raise CliError(Code.USAGE, f"--limit takes at most {LIST_LIMIT_MAX}, not {shown}")
        if status is not None and status not in {s.value for s in Status}:
            known = ", ".join(s.value for s in Status)
            raise CliError(Code.USAGE, f"unknown status {status!r}; statuses: {known}")
        if where:
            missing = "set search attributes (ctx.set_attributes)"
            raise session.not_available("list --where", missing)
        module = app_module(app)
        infos: list[Any] = []
        if session.has_journal(home):
            infos = _collect(home, module, status, workflow, limit)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json([run_json(info) for info in infos])
        elif not infos:
            session.echo_err("no runs")
        else:
            from fusee_cli import render

            render.runs_table(infos)


def _collect(
    home: Path, app: str, status: str | None, workflow: str | None, limit: int | None
) -> list[Any]:
    out: list[Any] = []

    async def collect() -> None:
        # With no owner, opened passively: reading runs no run's code and fires no timer.
        async with session.control(home, app, drive=False) as ctl:
            out.extend(await ctl.list(status=status, workflow=workflow, limit=limit))

    session.run(collect())
    return out
