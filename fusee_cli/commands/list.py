"""`fusee list`: runs, newest first."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session, suggest
from fusee_cli.options import DEFAULT_HOME, Home, Json, ReadApp, Store, Where, WorkflowFilter
from fusee_cli.session import CliError, Code

DEFAULT_LIMIT = 20
"""How many runs `fusee list` shows when --limit is not given."""
OPEN = "open"
"""The --status that stands for every status not closed (the engine takes it too)."""


def list_runs(
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="Only runs in this status, e.g. running or queued, or open for every run "
            "not closed (scheduled, queued, running, parked, paused, stuck); default: every "
            "status.",
            autocompletion=suggest.statuses,
        ),
    ] = None,
    workflow: WorkflowFilter = None,
    limit: Annotated[
        int,
        typer.Option(
            "--limit",
            min=0,
            help=f"At most this many, the newest; 0 for every run; default: {DEFAULT_LIMIT}.",
        ),
    ] = DEFAULT_LIMIT,
    parent: Annotated[
        str | None,
        typer.Option(
            "--parent",
            metavar="ID",
            help="Only the child workflows (ctx.child) of the runs of workflow id ID "
            "(exit 3 when no run has that id); default: every run.",
            autocompletion=suggest.run_ids,
        ),
    ] = None,
    where: Where = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: ReadApp = None,
) -> None:
    """List runs, newest first: the newest 20 unless --limit says otherwise.

    When more runs match, a line on stderr says so and how to see them.

    Example: fusee list --status open --limit 50 --json

    Example: fusee list --parent o-1

    Example: fusee list --where customer=c-7 --where 'amount>100'
    """
    from fusee_runtime import Status
    from fusee_runtime.engine.engine import LIST_LIMIT_MAX

    with session.reporting():
        if limit > LIST_LIMIT_MAX:
            given = str(limit)  # typer's int() took it: at most 4,300 digits
            shown = given if len(given) <= 40 else given[:39] + "…"
            raise CliError(Code.USAGE, f"--limit takes at most {LIST_LIMIT_MAX}, not {shown}")
        if status is not None and status != OPEN and status not in {s.value for s in Status}:
            known = ", ".join([OPEN, *(s.value for s in Status)])
            raise CliError(Code.USAGE, f"unknown status {status!r}; statuses: {known}")
        conditions = where_of(where or [])
        if parent is not None:
            session.check_id(parent)
        infos: list[Any] = []
        if session.has_journal(home):
            # One more than shown tells whether there are more, without counting them.
            wanted = None if limit == 0 else min(limit + 1, LIST_LIMIT_MAX)
            infos = _collect(home, status, workflow, wanted, parent, conditions)
        elif parent is not None:
            raise session.no_run(parent)
        more = 0 < limit < len(infos)
        if more:
            infos = infos[:limit]
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json([run_json(info) for info in infos])
        elif not infos and session.store() is None and not home.exists():
            # (a typo in --home, or FUSEE_HOME: not an empty home)
            session.echo_err(f"no runs: there is no home at {home} (--home or FUSEE_HOME)")
        elif not infos:
            session.echo_err("no runs")
        else:
            from fusee_cli import tables

            tables.runs_table(infos)
        if more:
            session.echo_err(
                f"showing the newest {limit} runs; there are more: "
                "--limit N shows the newest N, --limit 0 shows all"
            )


def where_of(expressions: list[str]) -> dict[str, Any] | None:
    """The --where expressions as `list(where=)` takes them, or a usage error."""
    if not expressions:
        return None
    from fusee_runtime import search
    from fusee_runtime.errors import Rejected

    try:
        return search.parse(expressions)
    except Rejected as e:
        raise CliError(Code.USAGE, str(e)) from None


def _collect(
    home: Path,
    status: str | None,
    workflow: str | None,
    limit: int | None,
    parent: str | None,
    where: dict[str, Any] | None,
) -> list[Any]:
    """The runs that match, as the home's owner (or the home opened passively) lists them.

    Raises:
        CliError: `parent` names no run (exit 3), or what `session.control` raises.
    """
    out: list[Any] = []

    async def collect() -> None:
        # With no owner, opened passively: reading runs no run's code and fires no timer.
        async with session.control(home, None, drive=False) as ctl:
            got = await ctl.list(
                status=status, workflow=workflow, limit=limit, parent=parent, where=where
            )
            if not got and parent is not None:
                # No children: is it a parent with none, or no run at all (exit 3)?
                await session.find_run(ctl, parent)
            out.extend(got)

    session.run(collect())
    return out
