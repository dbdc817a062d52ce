"""`fusee tail-stream`: the items of a run's stream, as JSON lines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Store, app_module
from fusee_cli.session import CliError, Code


def tail_stream(
    workflow_id: Id,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The stream's name, as the workflow writes it (ctx.stream).",
            show_default=False,
        ),
    ],
    no_follow: Annotated[
        bool,
        typer.Option(
            "--no-follow",
            help="Print the items durable now and stop; default: follow until the stream "
            "or the run closes.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='Print each item as {"index": its position in the stream, from 0, "item": '
            "the item} (see docs/json.md); default: the item alone.",
        ),
    ] = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Print the items of stream NAME of run ID, one JSON line each, following until it closes.

    An item is printed once it is durable. With no process owning the home,
    following runs the run here until the stream closes.

    Example: fusee tail-stream dg-1 entries

    Example: fusee tail-stream dg-1 entries --json --no-follow | jq .index
    """
    from fusee_runtime import Rejected
    from fusee_runtime.streams import check_stream_name

    with session.reporting():
        try:
            check_stream_name(name)
        except Rejected as e:
            raise CliError(Code.USAGE, str(e)) from None
        module = app_module(app)
        wid = session.check_id(workflow_id)
        if not session.has_journal(home):
            raise session.no_run(wid)
        try:
            session.run(_tail(home, module, wid, name, not no_follow, as_json))
        except KeyboardInterrupt:
            session.echo_err(f"stopped following stream {name!r} of {wid}")
            raise typer.Exit(130) from None


async def _tail(
    home: Path, app: str, workflow_id: str, name: str, follow: bool, as_json: bool
) -> None:
    import contextlib

    import orjson

    # Following with no owner drives the home here, so the run writes on.
    async with session.control(home, app, drive=follow) as ctl:
        await session.find_run(ctl, workflow_id)
        async with contextlib.aclosing(ctl.stream(workflow_id, name, follow)) as items:
            index = 0
            async for item in items:
                line = {"index": index, "item": item} if as_json else item
                sys.stdout.write(orjson.dumps(line).decode() + "\n")
                sys.stdout.flush()
                index += 1
