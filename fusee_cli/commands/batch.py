"""`fusee batch`: one act on every run a filter matches (cancel, terminate, signal, reset,
resume), durably and once per run; and `fusee batch describe ID`.

A batch is a run of the engine's own workflow `fusee.batch`
(`fusee_runtime.engine.batches`): through the home's owner when one runs
(`fusee serve`), else in this process, which drives the home until the batch
ends (as `fusee start` does; Ctrl-C leaves it durable, and it goes on the next
time the home is driven). On a terminal a progress bar follows it.
"""

from __future__ import annotations

import asyncio
import enum
from pathlib import Path
from typing import Annotated, Any

import typer

from fusee_cli import session, suggest
from fusee_cli.options import (
    DEFAULT_HOME,
    App,
    Home,
    Json,
    Store,
    Where,
    WorkflowFilter,
    app_module,
)
from fusee_cli.session import CliError, Code

FOLLOW_S = 0.25
"""How often a followed batch is asked how far it is."""


class Action(enum.StrEnum):
    CANCEL = "cancel"
    TERMINATE = "terminate"
    SIGNAL = "signal"
    RESET = "reset"
    RESUME = "resume"
    DESCRIBE = "describe"


def batch(
    action: Annotated[
        Action,
        typer.Argument(
            help="cancel, terminate, signal, reset or resume every run the filter matches; "
            "describe: a batch's progress and each run's outcome."
        ),
    ],
    batch_id: Annotated[
        str | None,
        typer.Argument(metavar="[ID]", help="describe: the batch.", show_default=False),
    ] = None,
    where: Where = None,
    workflow: WorkflowFilter = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="Only runs in this status (open: every status not closed); default: every status.",
            autocompletion=suggest.statuses,
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Count the runs that match now; act on none."),
    ] = False,
    rate: Annotated[
        float | None,
        typer.Option("--rate", help="At most this many runs a second; default: no limit."),
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(
            "--reason", help="cancel, terminate: why (recorded); default: the batch's id."
        ),
    ] = None,
    signal: Annotated[
        str | None,
        typer.Option("--signal", metavar="NAME", help="signal: the signal's name; no default."),
    ] = None,
    value: Annotated[
        str | None,
        typer.Option(
            "--value", help="signal: its value, JSON (a plain word is a string); default: null."
        ),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="SEQ|NAME|@first-failed|@last-completed",
            help="reset: where each run starts again, as `fusee reset --to` takes it: a step's "
            "name, @first-failed (the first step that failed) or @last-completed (the last "
            "step that completed). No default.",
        ),
    ] = None,
    new_id: Annotated[
        str | None,
        typer.Option("--id", help="The batch's id (sent again: the same batch); default: new."),
    ] = None,
    no_wait: Annotated[
        bool,
        typer.Option("--no-wait", help="Record the batch and return its id; do not follow it."),
    ] = False,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Act on every run a filter matches, once each, in a durable batch; or describe one.

    A batch takes a filter (--where, --workflow or --status). cancel, terminate,
    signal and resume act on open runs (--status open unless given); reset on the
    newest run of each id. It runs through the home's owner, or here until it ends.

    Exit 1 when the batch followed failed or was cancelled, or a run it listed was
    refused or broke (its table says which); 4 when its driver stopped while it was
    followed (the batch goes on where the home is driven next).

    Example: fusee batch cancel --workflow order --status open --dry-run

    Example: fusee batch reset --workflow order --status failed --to @first-failed --rate 50

    Example: fusee batch describe batch-3f2a9c81d0e4
    """
    with session.reporting():
        module = app_module(app)
        acting = [where, workflow, status, rate, reason, signal, value, to, new_id]
        if action == Action.DESCRIBE:
            if batch_id is None:
                raise CliError(Code.USAGE, "fusee batch describe takes the batch's ID")
            if any(option is not None for option in acting) or dry_run or no_wait:
                raise CliError(Code.USAGE, "fusee batch describe takes an ID, and --json")
            doc = _describe(home, session.check_id(batch_id))
            _say(doc, as_json)
            return
        if batch_id is not None:
            raise CliError(
                Code.USAGE, f"fusee batch {action} takes no ID argument (name a batch with --id)"
            )
        from fusee_cli.commands.list import where_of

        if not where and workflow is None and status is None:
            raise CliError(
                Code.USAGE,
                "a batch takes a filter: --where, --workflow or --status (--status open for "
                "every open run)",
            )
        sent, _ = session.json_or_string(value)
        if value is not None:
            session.check_depth(sent, "the signal's value")
            session.check_payload(sent, "the signal's value")
        spec: dict[str, Any] = {"where": where_of(where or []), "workflow": workflow}
        spec.update(status=status, reason=reason, signal=signal, value=sent, to=to, rate=rate)
        followed = _Followed()
        try:
            doc = asyncio.run(
                _run(home, module, action.value, spec, new_id, dry_run, no_wait, followed)
            )
        except KeyboardInterrupt:
            if followed.id is None:
                session.echo_err("interrupted before the batch was recorded")
                raise typer.Exit(130) from None
            session.echo_err(
                f"stopped following batch {followed.id}: it is durable and goes on where the "
                f"home is driven; `fusee batch describe {followed.id}` shows how far it is"
            )
            raise typer.Exit(Code.OK) from None
        if no_wait and not dry_run and not as_json:
            typer.echo(doc["id"])  # (what it did is said on stderr)
            return
        _say(doc, as_json)
        refused = {"refused", "error"} & set(doc.get("outcomes", {}))
        if not dry_run and (doc.get("status") in _ENDED_BADLY or refused):
            raise typer.Exit(Code.FAILED)


_ENDED_BADLY = ("failed", "cancelled", "terminated", "timed_out")


class _Followed:
    """The batch being followed, once recorded: what an interruption names."""

    id: str | None = None


async def _run(
    home: Path,
    app: str,
    action: str,
    spec: dict[str, Any],
    new_id: str | None,
    dry_run: bool,
    no_wait: bool,
    followed: _Followed,
) -> dict[str, Any]:
    from fusee_runtime.errors import Rejected

    if not session.has_journal(home):
        # No run to act on: as a batch that matched none, and nothing recorded.
        from fusee_runtime.engine.batches import check, shown

        try:
            checked = check(action, **spec)
        except Rejected as e:
            raise CliError(Code.USAGE, str(e)) from None
        session.echo_err(f"no runs in {home}: no batch recorded")
        return {"dry_run": True, **shown(checked), "count": 0, "runs": []}
    follow = not (dry_run or no_wait)
    async with session.control(home, app, drive=follow) as ctl:
        given = {key: value for key, value in spec.items() if value is not None}
        try:
            doc = await ctl.batch(action, id=new_id, dry_run=dry_run, **given)  # type: ignore[arg-type]
        except Rejected as e:
            raise CliError(Code.USAGE, str(e)) from None
        if not follow:
            if not dry_run:
                who = (
                    f"now, in {session.owner_named(ctl.owner)}"
                    if ctl.owner is not None
                    else "when a process next drives the home (fusee serve)"
                )
                session.echo_err(f"batch {doc['id']} recorded; it runs {who}")
            return doc
        followed.id = str(doc["id"])
        return await _follow(ctl, doc)


async def _follow(ctl: Any, doc: dict[str, Any]) -> dict[str, Any]:
    """Asks the batch how far it is until it closes; a bar on a terminal meanwhile."""
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from fusee_runtime import Status

    bar = Progress(
        TextColumn(f"batch {doc['id']} ({doc['action']})"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not sys.stderr.isatty(),
    )
    from fusee_runtime.control.client import OwnerGone, OwnerLost, OwnerUnanswered

    with bar:
        task = bar.add_task("acting", total=None)
        while Status(doc["status"]).is_open:
            bar.update(task, total=doc["total"], completed=doc["acted"])
            await asyncio.sleep(FOLLOW_S)
            try:
                doc = await ctl.batch_describe(doc["id"])
            except (OwnerGone, OwnerLost, OwnerUnanswered):
                raise CliError(
                    Code.TIMED_OUT,
                    f"stopped following batch {doc['id']}: the process that drove it stopped; "
                    f"it goes on where the home is driven next (`fusee batch describe "
                    f"{doc['id']}`)",
                ) from None
    return doc


def _describe(home: Path, batch_id: str) -> dict[str, Any]:
    from fusee_runtime import NotFound

    if not session.has_journal(home):
        raise CliError(Code.NOT_FOUND, f"no batch {batch_id!r}")

    async def main() -> dict[str, Any]:
        async with session.control(home, None, drive=False) as ctl:
            try:
                return await ctl.batch_describe(batch_id)
            except NotFound as e:
                why = str(e) if "not a batch" in str(e) else f"no batch {batch_id!r}"
                raise CliError(Code.NOT_FOUND, why) from None

    return asyncio.run(main())


def _say(doc: dict[str, Any], as_json: bool) -> None:
    """The batch for people: a line of what it did, then a table of each run's outcome."""
    if as_json:
        session.print_json(doc)
        return
    import orjson

    shown = {k: v for k, v in doc["filter"].items() if v is not None}
    which = " ".join(
        f"--{k} {orjson.dumps(v).decode() if k == 'where' else v}" for k, v in shown.items()
    )
    which = which or "every run"
    if doc.get("dry_run"):
        first = f"; the first {len(doc['runs'])}:" if doc["count"] > len(doc["runs"]) else ""
        session.echo_err(
            f"{doc['count']} run(s) match {which}; a batch would {doc['action']} each{first}"
        )
        for run in doc["runs"]:
            typer.echo(run["id"])
        return
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(doc["outcomes"].items()))
    total = "?" if doc["total"] is None else doc["total"]
    session.echo_err(
        f"batch {doc['id']} ({doc['action']} {which}): {doc['status']}; acted on "
        f"{doc['acted']} of {total} run(s){': ' + counts if counts else ''}"
    )
    if doc.get("error"):
        session.echo_err(f"  {doc['error']}")
    if doc["runs"]:
        from fusee_cli import tables

        tables.batch_table(doc["runs"])
