"""`fusee limits`: the named limits of steps (`limit=`), and setting one's size.

Through the home's owner when one runs, else on the home opened passively:
a size set is recorded either way (it holds across restarts), and the
owner lets waiting steps in at once if it grew.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, Home, Json, ReadApp, Store
from fusee_cli.session import CliError, Code


def limits(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The limit to set.", show_default=False),
    ] = None,
    permits: Annotated[
        int | None,
        typer.Argument(
            metavar="PERMITS",
            help="How many attempts of its steps run at once (of each key, for a limit "
            "with limit_key); 0 lets none in.",
            show_default=False,
        ),
    ] = None,
    per: Annotated[
        float | None,
        typer.Option(
            "--per",
            metavar="SECONDS",
            min=0.001,
            help="Set rate NAME instead (Rate): PERMITS attempts start in any window of "
            "SECONDS, whatever its steps say; default: none (NAME is a limit).",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: ReadApp = None,
) -> None:
    """List the named limits and rates (size, in use, attempts waiting), or set one.

    A step with limit=NAME takes one of its permits for each attempt; a limit
    never set has 1. The size is recorded: it holds after a restart.

    Example: fusee limits stripe 5; fusee limits stripe 100 --per 60
    """
    import asyncio

    with session.reporting():
        if name is not None and permits is None:
            what = "the rate's slots per window" if per is not None else "the limit's size"
            raise CliError(Code.USAGE, f"fusee limits {name} needs PERMITS, {what}")
        if per is not None and permits is None:
            raise CliError(Code.USAGE, "fusee limits --per SECONDS sets a rate: NAME PERMITS too")
        if name is None and not session.has_journal(home):
            rows: list[dict[str, Any]] = []  # nothing recorded: no home is created to say so
            owner = None
        else:

            async def main() -> tuple[list[dict[str, Any]], int | None]:
                async with session.control(home, None, drive=False) as ctl:
                    if name is None:
                        return await ctl.limits(), ctl.owner
                    assert permits is not None
                    return [await ctl.limit(name, permits, per)], ctl.owner

            rows, owner = asyncio.run(main())
        if as_json:
            session.print_json(rows[0] if name is not None else rows)
        elif name is not None:
            by = f" (by its owner, pid {owner})" if owner is not None else ""
            if per is not None:
                session.echo_err(f"rate {name}: {rows[0]['permits']} per {per:g} s{by}")
            else:
                session.echo_err(f"limit {name}: {rows[0]['permits']} permits{by}")
        else:
            _table(rows)


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    console = stdout()
    if not rows:
        console.print("no limits set or in use")
        return
    table = Table(box=None)
    for col in ("limit", "permits", "in use", "waiting"):
        table.add_column(col)
    for r in rows:
        if "per_s" in r:  # a rate over time: its slots per window, those taken lately
            size = f"{r['permits']} per {r['per_s']:g} s (rate)"
            table.add_row(r["name"], size, f"{r['taken']} taken", str(r["waiting"]))
            continue
        size = str(r["permits"]) if r["set"] else f"{r['permits']} (not set)"
        table.add_row(r["name"], size, str(r["in_use"]), str(r["waiting"]))
    console.print(table)
