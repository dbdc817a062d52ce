"""`fusee queues`: the queues of runs (`start(queue=...)`), and setting one's sizes.

Through the home's owner when one runs, else on the home opened passively:
sizes set are recorded either way (they hold across restarts), and the owner
lets waiting runs in at once if they grew. An option not given keeps the size
the queue has (a queue never set: one run at a time, any number per key).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, Home, Json, ReadApp, Store
from fusee_cli.session import CliError, Code

ANY = "none"
"""What `--concurrency` and `--per-key` take for "any number"."""


def queues(
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The queue to set.", show_default=False),
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            "--concurrency",
            metavar="N",
            help="How many of its runs run at once: a whole number (0 lets none in), or "
            f"{ANY} for any number; default: as the queue has it.",
            show_default=False,
        ),
    ] = None,
    per_key: Annotated[
        str | None,
        typer.Option(
            "--per-key",
            metavar="K",
            help="How many runs of each key (queue_key) run at once, within N: a whole "
            f"number, or {ANY} for any number; default: as the queue has it.",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: ReadApp = None,
) -> None:
    """List the queues of runs (sizes, runs in, runs queued, keys), or set one's sizes.

    A run started with a queue waits, queued, until its queue lets it in; a
    queue never set lets in one run at a time. Sizes are recorded: they hold
    after a restart.

    Example: fusee queues sync --concurrency 10 --per-key 1; fusee queues sync --concurrency none
    """
    import asyncio

    with session.reporting():
        sizes = [_size(given, option) for given, option in _given(concurrency, per_key)]
        if name is not None and not sizes:
            raise CliError(Code.USAGE, f"fusee queues {name} needs --concurrency or --per-key")
        if name is None and sizes:
            raise CliError(Code.USAGE, "--concurrency and --per-key set a queue: NAME too")
        if name is None and not session.has_journal(home):
            rows: list[dict[str, Any]] = []  # nothing recorded: no home is created to say so
            owner = None
        else:

            async def main() -> tuple[list[dict[str, Any]], int | None]:
                async with session.control(home, None, drive=False) as ctl:
                    if name is None:
                        return await ctl.queues(), ctl.owner
                    now = _sizes_now(await ctl.queues(), name)
                    n = now[0] if concurrency is None else _size(concurrency, "--concurrency")
                    k = now[1] if per_key is None else _size(per_key, "--per-key")
                    return [await ctl.queue(name, n, k)], ctl.owner

            rows, owner = asyncio.run(main())
        if as_json:
            session.print_json(rows[0] if name is not None else rows)
        elif name is not None:
            by = f" (by its owner, pid {owner})" if owner is not None else ""
            row = rows[0]
            session.echo_err(
                f"queue {name}: concurrency {_shown(row['concurrency'])}, "
                f"per key {_shown(row['per_key'])}{by}"
            )
        else:
            _table(rows)


def _given(concurrency: str | None, per_key: str | None) -> list[tuple[str, str]]:
    """The size options given, each with its name."""
    options = (("--concurrency", concurrency), ("--per-key", per_key))
    return [(given, option) for option, given in options if given is not None]


def _size(given: str, option: str) -> int | None:
    """A size option's value: a whole number, or None for `ANY` (any number).

    Raises:
        CliError: anything else (exit 2); the engine says which numbers it takes.
    """
    if given.strip().lower() == ANY:
        return None
    digits = given.strip()
    # ASCII digits only, and no more than fit: int() takes other scripts' digits too.
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 20:
        raise CliError(Code.USAGE, f"{option} takes a whole number or {ANY}, not {given!r}")
    return int(digits)


def _sizes_now(rows: list[dict[str, Any]], name: str) -> tuple[int | None, int | None]:
    """Queue `name`'s (concurrency, per_key) as listed; a queue not listed has the
    default: one run at a time."""
    from fusee_runtime.engine.queues import DEFAULT_CONCURRENCY

    for row in rows:
        if row["name"] == name:
            return row["concurrency"], row["per_key"]
    return DEFAULT_CONCURRENCY, None


def _shown(size: int | None) -> str:
    return "any" if size is None else str(size)


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    console = stdout()
    if not rows:
        console.print("no queues set or in use")
        return
    table = Table(box=None)
    for col in ("queue", "concurrency", "per key", "running", "queued", "keys"):
        table.add_column(col)
    for r in rows:
        concurrency = _shown(r["concurrency"]) + ("" if r["set"] else " (not set)")
        table.add_row(
            r["name"],
            concurrency,
            _shown(r["per_key"]),
            str(r["running"]),
            str(r["queued"]),
            str(r["keys"]),
        )
    console.print(table)
