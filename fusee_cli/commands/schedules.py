"""`fusee schedules`: the cron schedules (declared by the app, or made at run time), and
pausing, triggering, making, changing, deleting and backfilling them.

Through the home's owner when one runs (`fusee serve`), else on the home
opened passively: a pause is recorded either way and holds across
restarts; a triggered run starts at once under an owner, or the next time
a process drives the home.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, cast

import typer

from fusee_cli import session, suggest
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, app_module
from fusee_cli.session import CliError, Code


class Action(enum.StrEnum):
    LIST = "list"
    PAUSE = "pause"
    UNPAUSE = "unpause"
    TRIGGER = "trigger"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    BACKFILL = "backfill"


_FIELDS = {Action.CREATE, Action.UPDATE}
"""The actions that take a schedule's fields (--cron, --workflow, ...)."""


def schedules(
    action: Annotated[
        Action,
        typer.Argument(
            help="list; pause, unpause, trigger (start a run now); create, update, delete "
            "a schedule made at run time; backfill (start the runs of a past range)."
        ),
    ] = Action.LIST,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="NAME",
            help="The schedule: a scheduled workflow's name, or one made by create.",
            show_default=False,
            autocompletion=suggest.workflow_names,
        ),
    ] = None,
    cron: Annotated[
        str | None,
        typer.Option(
            "--cron", help="create, update: five fields, e.g. '0 3 * * *'; default: unchanged."
        ),
    ] = None,
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            help="create, update: the workflow each firing starts; default: unchanged.",
            autocompletion=suggest.workflow_names,
        ),
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="create, update: each run's input (a JSON file, - for stdin, or JSON "
            "text); default: the instant it fires for.",
        ),
    ] = None,
    timezone: Annotated[
        str | None, typer.Option("--timezone", help="create, update: default UTC.")
    ] = None,
    overlap: Annotated[
        str | None,
        typer.Option("--overlap", help="create, update: skip (default), allow or buffer_one."),
    ] = None,
    catchup: Annotated[
        str | None,
        typer.Option("--catchup", help="create, update: one (default), all or none."),
    ] = None,
    start: Annotated[
        str | None,
        typer.Option(
            "--from", help="backfill: the range's start, ISO 8601 (UTC if no offset); no default."
        ),
    ] = None,
    end: Annotated[
        str | None,
        typer.Option(
            "--to", help="backfill: the range's end, excluded, not after now; no default."
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """List the cron schedules; pause, unpause or trigger one; create, update or delete
    one made at run time; backfill one.

    A paused schedule fires nothing until unpaused, and instants that came
    due meanwhile are not caught up. trigger starts a run now whatever the
    schedule's overlap. A schedule made with create is recorded: it fires
    wherever the home is driven, across restarts, until deleted. backfill
    starts the runs of the instants in [--from, --to) by the schedule's
    overlap; run again, it starts none twice.

    A schedule is made with `fusee schedules create hourly-sync --cron '0 * * * *'
    --workflow sync`, and a day of it backfilled with `fusee schedules backfill
    hourly-sync --from 2026-12-01T00:00 --to 2026-12-02T00:00`.

    Example: fusee schedules pause nightly-report
    """
    import asyncio

    with session.reporting():
        module = app_module(app)
        _check_usage(
            action, name, cron, workflow, input_file, timezone, overlap, catchup, start, end
        )
        # Said before the home is opened: a wrong command leaves no trace in it.
        if workflow is not None:
            session.check_workflow(module, workflow)
        _check_fields(name or "", cron, timezone, overlap, catchup)
        window = None
        if start is not None and end is not None:
            window = (_instant(start, "--from"), _instant(end, "--to"))
        given = input_file is not None
        value_in = session.load_input(input_file, inline=True) if given else None
        fields = {
            "workflow": workflow,
            "cron": cron,
            "timezone": timezone,
            "overlap": overlap,
            "catchup": catchup,
            "input": value_in,
        }

        async def main() -> Any:
            if action == Action.LIST and not session.has_journal(home):
                # Nothing recorded yet: the app's schedules as declared, no home created.
                from fusee_runtime import Engine
                from fusee_runtime.engine.registry import AppImportError, load_app

                try:
                    load_app(module)
                except AppImportError as e:
                    raise CliError(Code.USAGE, session.said(e)) from None
                return Engine(app=None).schedules.list(), None
            async with session.control(home, module, drive=False) as ctl:
                if action == Action.LIST:
                    return await ctl.schedules(), ctl.owner
                assert name is not None
                if action in _FIELDS:
                    made = ctl.schedule_set(name, action == Action.CREATE, **fields)
                    return await made, ctl.owner
                if action == Action.DELETE:
                    return await ctl.schedule_delete(name), ctl.owner
                if action == Action.BACKFILL:
                    assert window is not None
                    return await ctl.schedule_backfill(name, *window), ctl.owner
                verb = cast(Literal["pause", "unpause", "trigger"], action.value)
                return await ctl.schedule(name, verb), ctl.owner

        value, owner = asyncio.run(main())
        _say(action, name, value, owner, as_json)


def _say(action: Action, name: str | None, value: Any, owner: int | None, as_json: bool) -> None:
    """What the command answers: JSON on stdout, or a table or a line for people."""
    if as_json:
        from fusee_runtime.control.api import run_json

        session.print_json(run_json(value) if action == Action.TRIGGER else value)
    elif action == Action.TRIGGER:
        from fusee_runtime.control.api import run_json

        doc = run_json(value)
        session.echo_err(f"started {doc['id']}; it runs {session.goes_on(doc['id'], owner)}")
    elif action == Action.LIST:
        _table(value)
    elif action == Action.DELETE:
        session.echo_err(f"{name}: deleted; it fires no more")
    elif action == Action.BACKFILL:
        done = [outcome for _, outcome in value]
        counts = ", ".join(f"{done.count(o)} {o}" for o in ("started", "existed", "skipped"))
        session.echo_err(f"{name}: {len(value)} instant(s): {counts}")
    elif action in _FIELDS:
        session.echo_err(f"{name}: {'created' if action == Action.CREATE else 'updated'}")
    else:
        session.echo_err(f"{name}: {'paused' if value['paused'] else 'active'}")


def _check_usage(action: Action, name: str | None, *options: str | None) -> None:
    """Refuses (exit 2) a NAME or an option the action does not take, or one it needs."""
    cron, workflow, input_file, timezone, overlap, catchup, start, end = options
    if action == Action.LIST:
        if name:
            raise CliError(Code.USAGE, "fusee schedules list takes no NAME")
    elif not name:
        raise CliError(Code.USAGE, f"fusee schedules {action} needs the NAME")
    fields = (cron, workflow, input_file, timezone, overlap, catchup)
    if action not in _FIELDS and any(f is not None for f in fields):
        raise CliError(Code.USAGE, f"fusee schedules {action} takes no schedule fields")
    if action == Action.CREATE and (cron is None or workflow is None):
        raise CliError(Code.USAGE, "fusee schedules create needs --cron and --workflow")
    if action == Action.UPDATE and all(f is None for f in fields):
        raise CliError(Code.USAGE, "fusee schedules update needs a field to change")
    if (action == Action.BACKFILL) != (start is not None and end is not None):
        if action == Action.BACKFILL:
            raise CliError(Code.USAGE, "fusee schedules backfill needs --from and --to")
        raise CliError(Code.USAGE, f"fusee schedules {action} takes no --from or --to")


def _check_fields(
    name: str, cron: str | None, timezone: str | None, overlap: str | None, catchup: str | None
) -> None:
    """Refuses (exit 2) a schedule field given that is not valid (an update's others are
    checked where the schedule is)."""
    if cron is None and timezone is None and overlap is None and catchup is None:
        return
    from fusee_runtime.dsl import check_cron

    every = cron or "0 * * * *"
    try:
        check_cron(name, every, timezone, overlap or "skip", catchup or "one", "schedule")
    except ValueError as e:
        raise CliError(Code.USAGE, str(e)) from None


def _instant(text: str, option: str) -> str:
    """An ISO 8601 instant (UTC when it has no offset), as the control API takes it."""
    from datetime import UTC, datetime

    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(Code.USAGE, f"{option} is an ISO 8601 instant, not {text!r}") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    console = stdout()
    if not rows:
        console.print("no cron schedules in this app")
        return
    table = Table(box=None)
    columns = (
        "name",
        "workflow",
        "cron",
        "timezone",
        "overlap",
        "catchup",
        "state",
        "last",
        "next",
    )
    for col in columns:
        table.add_column(col)
    for r in rows:
        table.add_row(
            r.get("name", r["workflow"]),  # (an owner of an older version says no name)
            r["workflow"],
            r["cron"],
            r["timezone"],
            r["overlap"],
            r["catchup"],
            "paused" if r["paused"] else "active",
            r["last"] or "-",
            r["next"] or "-",
        )
    console.print(table)
