"""`fusee prune`: delete old closed runs from the history store, by hand.

`fusee serve --retention` does the same on its own, on start and hourly.
Through the home's owner when one runs, else on the home opened passively.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, app_module, duration


def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Delete the runs that closed longer ago than this: 30d, 12h, 90m, 45s, 2w, "
            "or plain seconds; 0 deletes every closed run.",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Delete the runs that closed longer ago than --older-than from the history store;
    open runs are never deleted, however old.

    Example: fusee prune --older-than 7d
    """
    with session.reporting():
        older_than_s = duration(older_than, "--older-than", zero=True)
        module = app_module(app)
        recorded = session.has_journal(home)
        pruned, owner = 0, None
        if recorded:  # a home where nothing was ever recorded is not created
            pruned, owner = _prune(home, module, older_than_s)
        if as_json:
            session.print_json({"pruned": pruned, "older_than_s": older_than_s})
        elif not recorded:
            session.echo_err(f"no runs to prune: nothing was ever recorded in {home}")
        else:
            runs = "run" if pruned == 1 else "runs"
            when = "closed so far" if older_than_s == 0 else f"closed over {older_than} ago"
            by = f" (by its owner, pid {owner})" if owner is not None else ""
            session.echo_err(f"pruned {pruned} {runs} {when} from the history of {home}{by}")


def _prune(home: Path, app: str, older_than_s: float) -> tuple[int, int | None]:
    """How many runs were pruned, and the pid of the owner that pruned them (None: here)."""
    import asyncio

    async def main() -> tuple[int, int | None]:
        # With no owner, opened passively: no run's code runs and no timer fires.
        async with session.control(home, app, drive=False) as ctl:
            return await ctl.prune(older_than_s), ctl.owner

    return asyncio.run(main())
