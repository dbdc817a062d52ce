"""`fusee schedules`: the cron schedules the app declares, and pausing or triggering them.

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


def schedules(
    action: Annotated[
        Action,
        typer.Argument(help="list, pause, unpause or trigger (start a run now)."),
    ] = Action.LIST,
    workflow: Annotated[
        str | None,
        typer.Argument(
            metavar="WORKFLOW",
            help="The scheduled workflow (for pause, unpause and trigger).",
            show_default=False,
            autocompletion=suggest.workflow_names,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """List the cron schedules, or pause, unpause or trigger one.

    A paused schedule fires nothing until unpaused, and instants that came
    due meanwhile are not caught up. trigger starts a run now whatever the
    schedule's overlap.

    Example: fusee schedules pause nightly-report
    """
    import asyncio

    with session.reporting():
        module = app_module(app)
        if action != Action.LIST and not workflow:
            raise CliError(Code.USAGE, f"fusee schedules {action} needs the WORKFLOW")
        if action == Action.LIST and workflow:
            raise CliError(Code.USAGE, "fusee schedules list takes no WORKFLOW")

        async def main() -> Any:
            if action == Action.LIST and not session.has_journal(home):
                # Nothing recorded yet: the app's schedules as declared, no home created.
                from fusee_runtime import Engine
                from fusee_runtime.engine.registry import AppImportError, load_app

                try:
                    load_app(module)
                except AppImportError as e:
                    raise CliError(Code.USAGE, str(e)) from None
                return Engine(app=None).schedules.list(), None
            if workflow is not None:
                # An unknown workflow is bad input (exit 2), as for `fusee start`.
                session.check_workflow(module, workflow)
            async with session.control(home, module, drive=False) as ctl:
                if action == Action.LIST:
                    return await ctl.schedules(), ctl.owner
                assert workflow is not None
                verb = cast(Literal["pause", "unpause", "trigger"], action.value)
                return await ctl.schedule(workflow, verb), ctl.owner

        value, owner = asyncio.run(main())
        if action == Action.TRIGGER:
            from fusee_runtime.control.api import run_json

            doc = run_json(value)
            if as_json:
                session.print_json(doc)
            else:
                session.echo_err(
                    f"started {doc['id']}; it runs {session.goes_on(doc['id'], owner)}"
                )
        elif as_json:
            session.print_json(value)
        elif action == Action.LIST:
            _table(value)
        else:
            session.echo_err(f"{workflow}: {'paused' if value['paused'] else 'active'}")


def _table(rows: list[dict[str, Any]]) -> None:
    from rich.table import Table

    from fusee_cli.render import stdout

    console = stdout()
    if not rows:
        console.print("no cron schedules in this app")
        return
    table = Table(box=None)
    for col in ("workflow", "cron", "timezone", "overlap", "catchup", "state", "last", "next"):
        table.add_column(col)
    for r in rows:
        table.add_row(
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
