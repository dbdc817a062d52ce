"""`fusee logs`: the `ctx.log` lines of an id's runs, and following them.

The lines are read from `<home>/logs/` (see `fusee_runtime.store.log_files`),
not through the engine, so they can be read and followed while another
process owns the home. The journal is asked only what the files cannot
say: whether an id without lines has a run at all, and which of its runs
is the newest (a follower stops when that one closes for good).

With `--store`, the lines are in the store (`fusee_logs` of the id's
journal in the database: `SharedStore.log_lines`), written by whichever
host drives the run, and read from there; a follower looks for new ones
every `POLL_S`.

Output. Readable lines by default, following or not, each run's lines after
a `── run RUN_ID (WORKFLOW)` line (without the workflow for lines written
before it was recorded); `--json` prints one JSON object per line, the
stored line with `ts` as an ISO 8601 instant (docs/json.md gives the shape).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Store, app_module
from fusee_cli.session import CliError, Code, echo_err

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi
    from fusee_runtime.store.shared import LogLines

POLL_S = 0.25
"""How often a follower of lines in a database asks for new ones."""
ASK_EVERY = 8
"""A follower of lines in a database asks whether the run closed after this many polls
without a line."""
RESCAN_MS = 1000
"""How often a follower rereads the log when no change was reported (a change it
missed while it started watching, a file system that drops events)."""


def logs(
    workflow_id: Id,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing new lines until the newest run of ID closes for good; "
            "default: print the lines there are and stop.",
        ),
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help='One JSON object per line, with or without -f: {"ts": ISO 8601 instant, '
            '"level", "id", "workflow", "run_id", "step", "attempt", "msg"}, and "event": '
            '"closed" with the run\'s "status" on the line of its close (see docs/json.md); '
            "default: readable lines (time in UTC, level, step#attempt, message), each "
            "run's after a line with its run id and workflow.",
        ),
    ] = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Print the ctx.log lines of every run of ID, oldest first.

    Example: fusee logs o-1 -f

    Example: fusee logs o-1 --json | jq -r .msg
    """
    with session.reporting():
        module = app_module(app)
        session.check_id(workflow_id)
        if not follow:
            _print_kept(home, module, workflow_id, as_json)
            return
        try:
            missing = session.no_run(workflow_id)
            url = session.store()
            if url is not None:
                session.run(_follow_store(home, module, url, workflow_id, as_json))
                return
            if session.has_journal(home):
                try:
                    session.run(_follow_driven(home, module, workflow_id, as_json))
                    return
                except CliError as e:
                    if e.code != Code.NOT_FOUND:
                        raise
            # Lines may outlive the journal's record of the id: show those. A run the
            # journal does not know is not driven (and no home is made for it).
            session.run(_follow(home / "logs", workflow_id, None, missing, as_json))
        except KeyboardInterrupt:
            echo_err(f"stopped following the logs of {workflow_id}")
            raise typer.Exit(130) from None


@dataclass(frozen=True)
class _Runs:
    """What the journal says of the runs of an id when the command starts."""

    newest: str
    newest_open: bool
    older: frozenset[str]


async def _look(ctl: ControlApi, info: RunInfo) -> _Runs:
    older = {r["run_id"] for r in await ctl.history(info.id)} - {info.run_id}
    return _Runs(info.run_id, info.status.is_open, frozenset(older))


async def _found(ctl: ControlApi, info: RunInfo) -> None:
    """Nothing more to do: `session.act` found the run."""


async def _follow_driven(home: Path, app: str, workflow_id: str, as_json: bool) -> None:
    """Looks the runs up and follows their lines in one open of the home: through its
    owner, else driving it here, so the run goes on and writes the lines being followed.

    Raises:
        CliError: no run with that id (exit 3), or what `session.control` raises.
    """
    async with session.control(home, app, drive=True) as ctl:
        runs = await _look(ctl, await session.find_run(ctl, workflow_id))
        await _follow(home / "logs", workflow_id, runs, None, as_json)


def _print_kept(home: Path, app: str, workflow_id: str, as_json: bool) -> None:
    import contextlib

    from fusee_runtime.store.log_files import read_all

    url = session.store()
    if url is None:
        kept = read_all(home / "logs")
    else:
        with contextlib.closing(_lines_of(url, workflow_id)) as lines:
            kept = [line for _, line in lines.read()]
    show = _Printer(as_json)
    for raw in kept:
        show.line(raw, workflow_id)
    if not show.printed:
        session.act(home, app, workflow_id, _found)  # exit 3 when there is no such run
        echo_err(f"no log lines for {workflow_id} yet")


def _lines_of(url: str, workflow_id: str) -> LogLines:
    """The lines of `workflow_id` in the journal of the database at `url` that keeps
    its runs."""
    from fusee_runtime.store.shared import open_shared

    layout = open_shared(url).layout()
    return open_shared(layout.url_of(layout.shard_of(workflow_id))).log_lines(workflow_id)


async def _follow_store(home: Path, app: str, url: str, workflow_id: str, as_json: bool) -> None:
    """As `_follow_driven`, with the lines in the database at `url`: the runs looked up
    through their driver (on any host), else driving them here, and the lines asked
    for every `POLL_S` until the newest run closes for good.

    Raises:
        CliError: no run with that id and no lines of it (exit 3), or what
            `session.control` raises.
    """
    import asyncio
    import contextlib

    from fusee_runtime.control.client import OwnerGone, OwnerLost, OwnerUnanswered
    from fusee_runtime.engine.runlog import CONTINUED

    lines = await asyncio.to_thread(_lines_of, url, workflow_id)
    show = _Printer(as_json)
    async with session.control(home, app, drive=True) as ctl:
        try:
            until = _Until(await _look(ctl, await session.find_run(ctl, workflow_id)))
        except CliError as e:
            if e.code != Code.NOT_FOUND:
                raise
            # Lines may outlive the journal's record of the id (pruned): show those.
            try:
                for _, raw in await asyncio.to_thread(lines.read):
                    show.line(raw, workflow_id)
            finally:
                await asyncio.to_thread(lines.close)
            if not show.printed:
                raise
            return
        try:
            after, quiet, closed = 0, 0, False
            while True:
                rows = await asyncio.to_thread(lines.read, after)
                for seq, raw in rows:
                    after = seq
                    doc = show.line(raw, workflow_id)
                    if doc is not None:
                        until.see(doc)
                if until.done or closed:
                    return
                quiet = 0 if rows else quiet + 1
                if quiet % ASK_EVERY == ASK_EVERY - 1:
                    # The lines are not durable: a close line lost with its driver would
                    # keep a follower forever. Once the run says it closed for good, one
                    # more read, and done. (No driver to say it now: ask again later.)
                    with contextlib.suppress(OwnerGone, OwnerLost, OwnerUnanswered):
                        info = await ctl.describe(workflow_id)
                        closed = not info.status.is_open and str(info.status) not in CONTINUED
                await asyncio.sleep(POLL_S)
        finally:
            await asyncio.to_thread(lines.close)


async def _follow(
    directory: Path,
    workflow_id: str,
    runs: _Runs | None,
    missing: CliError | None,
    as_json: bool,
) -> None:
    import asyncio
    import contextlib

    from watchfiles import awatch

    from fusee_runtime.store.log_files import LogTail

    tail = LogTail(directory)
    show = _Printer(as_json)
    until = _Until(runs)

    def pump() -> bool:
        for raw in tail.read():
            doc = show.line(raw, workflow_id)
            if doc is not None:
                until.see(doc)
        return until.done

    try:
        if pump():
            return
        if missing is not None and not show.printed:
            raise missing
        # Made by the owner on its first line; made here so there is something to watch.
        directory.mkdir(mode=0o700, exist_ok=True)
        watcher = awatch(
            directory, watch_filter=None, rust_timeout=RESCAN_MS, yield_on_timeout=True
        )
        async with contextlib.aclosing(watcher) as changes:
            change = asyncio.ensure_future(_next(changes))
            try:
                # The watcher is set up in the first step of `change`; what was
                # written before that is read here, what comes after wakes it.
                await asyncio.sleep(0)
                while not pump():
                    await change
                    change = asyncio.ensure_future(_next(changes))
            finally:
                change.cancel()
                await asyncio.gather(change, return_exceptions=True)
    finally:
        tail.close()


async def _next(changes: AsyncIterator[Any]) -> Any:
    return await changes.__anext__()


class _Until:
    """Tells a follower when to stop: once the id's newest run is closed for good.

    A run closed as `continued_as_new` or `reset` has a successor of the same
    id, so that close does not count; nor does the close of a run older than
    the newest one at the start. When another process owns the home, the
    runs are not known: the last final close in the log counts, unless a
    line of another run follows it.
    """

    def __init__(self, runs: _Runs | None) -> None:
        self.older = runs.older if runs is not None else frozenset()
        # The run whose final close was seen last, if no newer run logged since.
        self.closed: str | None = None
        if runs is not None and not runs.newest_open:
            self.closed = runs.newest  # even if its close line is not in the log

    @property
    def done(self) -> bool:
        return self.closed is not None

    def see(self, doc: dict[str, Any]) -> None:
        from fusee_runtime.engine.runlog import CONTINUED

        run_id = doc.get("run_id")
        if run_id in self.older:
            return
        if doc.get("event") == "closed":
            self.closed = None if doc.get("status") in CONTINUED else run_id
        elif run_id != self.closed:
            self.closed = None


class _Printer:
    """Prints the lines of one id: as JSON lines (`_json_line`), or one readable line each."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.printed = 0
        self._run: str | None = None

    def line(self, raw: bytes, workflow_id: str) -> dict[str, Any] | None:
        """Prints `raw` if it is a line of `workflow_id`; returns it decoded, or None."""
        import orjson

        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None  # a line cut by a crash of the writer
        if not isinstance(doc, dict) or doc.get("id") != workflow_id:
            return None
        self.printed += 1
        if self.as_json:
            typer.echo(_json_line(doc))
            return doc
        if doc.get("run_id") != self._run:
            self._run = doc.get("run_id")
            workflow = doc.get("workflow")  # absent from lines of an older fusee
            typer.echo(f"── run {self._run}" + (f" ({workflow})" if workflow else ""))
        typer.echo(_readable(doc))
        return doc


def _json_line(doc: dict[str, Any]) -> str:
    """A stored line as `--json` prints it: every field as stored, but `ts` in ISO 8601
    (null if the file holds no instant there), as every `--json` output gives instants."""
    import orjson

    at = _at(doc)
    return orjson.dumps({**doc, "ts": at.isoformat() if at else None}).decode()


def _at(doc: dict[str, Any]) -> datetime | None:
    """The instant of a stored line: its `ts`, Unix seconds."""
    from fusee_runtime.engine.waits import utc

    ts = doc.get("ts")
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return None
    try:
        return utc(ts)
    except (OverflowError, OSError, ValueError):  # a line edited by hand: out of range
        return None


def _readable(doc: dict[str, Any]) -> str:
    from fusee_cli.render import when

    at = when(_at(doc))  # "-" for none
    if doc.get("event") == "closed":
        return f"{at} run closed: {doc.get('status')}"
    step, attempt = doc.get("step"), doc.get("attempt")
    where = f" {step or 'step'}#{attempt}" if attempt is not None else ""
    return f"{at} {doc.get('level', '?'):<5}{where} {doc.get('msg', '')}"
