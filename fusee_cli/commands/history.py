"""`fusee history`: a run's journal as a timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, Home, Id, Json, ReadApp, Store, Verbose
from fusee_cli.session import CliError, Code


def history(
    workflow_id: Id,
    as_json: Json = False,
    verbose: Verbose = False,
    export: Annotated[
        Path | None,
        typer.Option(
            "--export",
            metavar="FILE",
            help="Write the newest run's journal to FILE as a history document, for "
            "fusee replay --history FILE and replay() in tests; - writes it on stdout; "
            "default: none (show the timeline).",
        ),
    ] = None,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: ReadApp = None,
) -> None:
    """Show the journal of run ID as a timeline of steps and attempts.

    A failure shows the line of code that raised it; --verbose shows its
    whole traceback (and values uncut), as --json always does.

    Example: fusee history o-1 --verbose

    Example: fusee history o-1 --export tests/histories/o-1.json
    """
    with session.reporting():
        session.check_id(workflow_id)
        if export is not None and (as_json or verbose):
            raise CliError(
                Code.USAGE, "--export writes the history document: not with --json or --verbose"
            )
        if not session.has_journal(home):
            raise session.no_run(workflow_id)
        if export is not None:
            session.run(_export(home, workflow_id, export))
            return
        records: list[dict[str, Any]] = []
        session.run(_history(home, workflow_id, records))
        if as_json:
            session.print_json(records)
        else:
            from fusee_cli.history_table import history_table

            history_table(records, verbose)


async def _history(home: Path, workflow_id: str, out: list[dict[str, Any]]) -> None:
    from fusee_runtime import NotFound

    # With no owner, opened passively: reading runs no run's code and fires no timer.
    async with session.control(home, None, drive=False) as ctl:
        try:
            out.extend(await ctl.history(workflow_id))
        except NotFound:
            raise session.no_run(workflow_id) from None


async def _export(home: Path, workflow_id: str, path: Path) -> None:
    import orjson

    from fusee_runtime import NotFound

    async with session.control(home, None, drive=False) as ctl:
        try:
            doc = await ctl.journal(workflow_id)
        except NotFound:
            raise session.no_run(workflow_id) from None
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    if str(path) == "-":
        typer.echo(data.decode(), nl=False)
        return
    try:
        path.write_bytes(data)
    except OSError as e:
        raise CliError(Code.USAGE, f"cannot write {path}: {e.strerror or e}") from None
    records = len(doc["records"])
    session.echo_err(
        f"wrote the journal of {workflow_id} (run {doc['run_id']}, {doc['status']}, "
        f"{records} records) to {path}"
    )
