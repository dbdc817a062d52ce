"""`fusee tail-stream`: the items of a run's stream, as JSON lines."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Store, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi


NOTICE_AFTER_S = 1.0
"""How long a follower of an open run waits for a first item before it looks whether
the run has a stream of that name at all."""


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
    following runs the run here until the stream closes; when the process that
    drives the run goes away (killed, stopped), following goes on with the next
    one, or takes the home over, and prints each item once.

    A NAME the run has not written: a closed run's exits 3, naming the streams it
    has; an open run is followed all the same (its code may still write it), with
    a line on stderr that names them.

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
    """Prints the items, following the run on to the next owner when its owner goes away
    (the items already printed are skipped there: the run is pinned by its run id)."""
    import asyncio
    import contextlib

    import orjson

    from fusee_cli.follow import through_owners

    printed = 0
    pinned: str | None = None
    run_open = False
    said = False

    async def say_if_absent(ctl: ControlApi, info: RunInfo) -> None:
        """Says on stderr that the open run has written no stream `name` yet, and which
        it has, once followed for `NOTICE_AFTER_S` without an item: a misspelled name
        would otherwise wait in silence (a run just started has written nothing yet)."""
        nonlocal said
        await asyncio.sleep(NOTICE_AFTER_S)
        try:
            names = await _names(ctl, info)
        except Exception:  # (the owner went away meanwhile: following says so)
            return
        if name not in names and printed == 0:
            said = True
            session.echo_err(_absent(workflow_id, name, names, closed=False))

    async def tail(ctl: ControlApi, info: RunInfo | None) -> None:
        nonlocal printed, pinned, run_open
        if pinned is None:
            assert info is not None  # (the first call is made with the run found)
            pinned, run_open = info.run_id, info.status.is_open
        index = 0
        notice = None
        if info is not None and follow and run_open and printed == 0 and not said:
            notice = asyncio.create_task(say_if_absent(ctl, info))
        try:
            async with contextlib.aclosing(ctl.stream(workflow_id, name, follow, pinned)) as items:
                async for item in items:
                    if index >= printed:
                        line = {"index": index, "item": item} if as_json else item
                        sys.stdout.write(orjson.dumps(line).decode() + "\n")
                        sys.stdout.flush()
                        printed += 1
                    index += 1
        finally:
            if notice is not None:
                notice.cancel()

    # Following with no owner drives the home here, so the run writes on.
    await through_owners(home, app, workflow_id, tail, drive=follow)
    if printed == 0:
        # Nothing: an empty stream, or one the run does not have. Asked afresh: the
        # driver may have gone once the run closed (with no word, as its run is done).
        async def look(ctl: ControlApi, info: RunInfo | None) -> tuple[RunInfo, list[str]]:
            assert info is not None
            return info, await _names(ctl, info)

        info, names = await through_owners(
            home, None, workflow_id, look, drive=False, say=lambda _: None
        )
        if name not in names:
            closed = info.run_id != pinned or not info.status.is_open
            if closed:
                raise CliError(Code.NOT_FOUND, _absent(workflow_id, name, names, closed=True))
            session.echo_err(_absent(workflow_id, name, names, closed=False, waiting=False))


async def _names(ctl: ControlApi, info: RunInfo) -> list[str]:
    """The names of the streams the runs of `info`'s id wrote (a reset run keeps the
    streams of the run it was reset from), in the order they first wrote."""
    names: dict[str, None] = {}
    for rec in await ctl.history(info.id):
        if rec["type"] in _STREAM_RECORDS:
            names[rec["name"]] = None
    return list(names)


def _absent(
    workflow_id: str, name: str, names: list[str], closed: bool, waiting: bool = True
) -> str:
    has = "its streams: " + ", ".join(repr(n) for n in names) if names else "it has written none"
    if closed:
        return f"run {workflow_id} has no stream {name!r} ({has})"
    said = f"run {workflow_id} has no stream {name!r} yet ({has})"
    return f"{said}; waiting for its code to write one, Ctrl-C to stop" if waiting else said


_STREAM_RECORDS = {"StreamAppended", "StepStreamAppended", "StreamClosed"}
