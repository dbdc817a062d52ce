"""`fusee query` and `fusee update`: call a run's query or update handler.

Handlers are the run's code. The process that drives the run answers
(`fusee serve`, or the `fusee start` that follows it), once the run's code
has replayed its journal to where it waits. With none, a query replays the
run in memory here (no step runs, nothing is written) and asks its handler;
an update opens the home and drives its runs until the update is applied
and durable, as `fusee result --wait` does. A query records nothing; an
update is recorded, and answered once that is durable. The help's examples run on the example
workflow `expenses` (workflows/expenses.py), started with
`fusee start expenses --id trip-9 --detach` beside a `fusee serve`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi

Arg = Annotated[
    str | None,
    typer.Argument(
        metavar="ARG",
        help="The handler's argument: JSON, else taken as a string (one that starts like "
        'JSON, with { [ or ", must parse); default: null. '
        "Put -- before an argument that starts with a dash.",
        show_default=False,
    ),
]


def query(
    workflow_id: Id,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The query's name, as the workflow declares its handler (ctx.on_query).",
            show_default=False,
        ),
    ],
    arg: Arg = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Ask run ID's query handler NAME, with ARG, and print its answer; nothing is recorded.

    The process that drives the run answers (fusee serve); with none, the run is
    replayed in memory here (no step runs) and its handler answers.

    Example: fusee query trip-9 total
    """
    with session.reporting():
        payload, _ = session.json_or_string(arg)
        session.check_depth(payload, "the query's argument")  # not recorded: no size limit
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def ask(ctl: ControlApi, info: RunInfo) -> Any:
            return await ctl.query(wid, name, payload)

        answer, _ = session.act(home, module, wid, ask)
        _answer(answer, as_json)


def update(
    workflow_id: Id,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The update's name, as the workflow declares its handler (ctx.on_update).",
            show_default=False,
        ),
    ],
    arg: Arg = None,
    update_id: Annotated[
        str | None,
        typer.Option(
            "--update-id",
            metavar="ID",
            help="Id of this update: an update sent again with the same id is applied "
            "once and answered the same; default: a fresh id.",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Send update NAME, with ARG, to run ID; print its answer once the update is durable.

    The process that drives the run applies it (fusee serve); with none, this
    command drives the home's runs until the update is applied. It exits 2
    when the workflow's validator refuses the update.

    Example: fusee update trip-9 set-limit 50000 --update-id raise-1
    """
    with session.reporting():
        payload, _ = session.json_or_string(arg)
        session.check_payload(payload, "the update's argument")
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def send(ctl: ControlApi, info: RunInfo) -> Any:
            return await ctl.update(wid, name, payload, update_id=update_id)

        answer, _ = session.act(home, module, wid, send, drive=True)
        _answer(answer, as_json)


def _answer(answer: Any, as_json: bool) -> None:
    if as_json:
        session.print_json(answer)
    else:
        import orjson

        typer.echo(orjson.dumps(answer).decode())
