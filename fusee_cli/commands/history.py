"""`fusee history`: a run's journal as a timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, Home, Id, Json, ReadApp, Verbose


def history(
    workflow_id: Id,
    as_json: Json = False,
    verbose: Verbose = False,
    home: Home = DEFAULT_HOME,
    app: ReadApp = None,
) -> None:
    """Show the journal of run ID as a timeline of steps and attempts.

    A failure shows the line of code that raised it; --verbose shows its
    whole traceback (and values uncut), as --json always does.

    Example: fusee history o-1 --verbose
    """
    with session.reporting():
        session.check_id(workflow_id)
        if not session.has_journal(home):
            raise session.no_run(workflow_id)
        records: list[dict[str, Any]] = []
        session.run(_history(home, workflow_id, records))
        if as_json:
            session.print_json(records)
        else:
            from fusee_cli import tables

            tables.history_table(records, verbose)


async def _history(home: Path, workflow_id: str, out: list[dict[str, Any]]) -> None:
    from fusee_runtime import NotFound

    # With no owner, opened passively: reading runs no run's code and fires no timer.
    async with session.control(home, None, drive=False) as ctl:
        try:
            out.extend(await ctl.history(workflow_id))
        except NotFound:
            raise session.no_run(workflow_id) from None
