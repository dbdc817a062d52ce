"""`fusee objects list|get|call`: the keys of virtual objects (`@object`), their state,
and a call to a handler, on top of the control API's runs, queries and updates (a
key is a run: `fusee_runtime.objects`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime.control.client import ControlApi

ACTIONS = ("list", "get", "describe", "call")


def objects(
    action: Annotated[
        str,
        typer.Argument(metavar="ACTION", help="list, get, describe or call.", show_default=False),
    ],
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The object (@object).", show_default=False),
    ] = None,
    key: Annotated[
        str | None, typer.Argument(metavar="KEY", help="Its key.", show_default=False)
    ] = None,
    handler: Annotated[
        str | None,
        typer.Argument(metavar="HANDLER", help="With call: the handler.", show_default=False),
    ] = None,
    arg: Annotated[
        str | None,
        typer.Argument(
            metavar="ARG",
            help="With call: the handler's argument, JSON (else a string); default: null.",
            show_default=False,
        ),
    ] = None,
    update_id: Annotated[
        str | None,
        typer.Option(
            "--call-id",
            metavar="ID",
            help="With call: a call sent again with the same id reaches the object once; "
            "default: a fresh id.",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """List an object's keys, print a key's state (describe: with its queue of calls), or
    call one of its handlers.

    A call to an exclusive handler waits its turn (one at a time per key) and is
    answered once recorded; a shared one answers at once. The process that drives the
    home runs the handler (fusee serve); with none, this command drives it meanwhile.

    Example: fusee objects call cart alice add '"tea"'; fusee objects get cart alice
    """
    import asyncio

    with session.reporting():
        if action not in ACTIONS:
            said = f"fusee objects takes list, get, describe or call, not {action!r}"
            raise CliError(Code.USAGE, said)
        module = app_module(app)
        from fusee_runtime.engine.registry import load_app
        from fusee_runtime.objects import STATE, object_id, registry

        load_app(module)
        known = registry()
        if name is not None and name not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise CliError(Code.NOT_FOUND, f"no object {name!r} in {module}; objects: {listed}")
        needs = {"list": 0, "get": 2, "describe": 2, "call": 3}[action]
        given = [x for x in (name, key, handler) if x is not None]
        if len(given) < needs or (action != "call" and (handler is not None or arg)):
            usage = {"list": "[NAME]", "call": "NAME KEY HANDLER [ARG]"}.get(action, "NAME KEY")
            raise CliError(Code.USAGE, f"fusee objects {action} takes {usage}")
        if action == "list":
            _list([name] if name is not None else sorted(known), home, as_json)
            return
        assert name is not None and key is not None
        id = session.check_id(object_id(name, key))
        if action == "get":
            state, _ = session.act(home, module, id, lambda ctl, _: ctl.query(id, STATE))
            _print(state, as_json)
            return
        if action == "describe":
            doc, _ = session.act(home, module, id, lambda ctl, _: ctl.object_describe(id))
            _describe(doc, as_json)
            return
        assert handler is not None
        payload, _ = session.json_or_string(arg)
        session.check_payload(payload, "the call's argument")

        async def call(ctl: ControlApi) -> Any:
            return await ctl.object_call(id, handler, payload, update_id)

        _print(asyncio.run(_with(home, module, True, call)), as_json)


def _list(names: list[str], home: Any, as_json: bool) -> None:
    """The open keys of objects `names`: the runs of their workflows."""
    import asyncio

    from fusee_runtime.objects import OBJECT_PREFIX

    async def keys(ctl: ControlApi) -> list[dict[str, Any]]:
        found = []
        for n in names:
            for info in await ctl.list(workflow=OBJECT_PREFIX + n, status="open"):
                found.append({"object": n, "key": info.id.split(":", 2)[2]})
        return found

    rows = asyncio.run(_with(home, None, False, keys)) if session.has_journal(home) else []
    if as_json:
        session.print_json(rows)
        return
    for row in rows:
        typer.echo(f"{row['object']}  {row['key']}")
    if not rows:
        session.echo_err("no keys")


async def _with(home: Any, app: str | None, drive: bool, fn: Any) -> Any:
    async with session.control(home, app, drive=drive) as ctl:
        return await fn(ctl)


def _describe(doc: dict[str, Any], as_json: bool) -> None:
    if as_json:
        session.print_json(doc)
        return
    import orjson

    typer.echo(f"{doc['object']}:{doc['key']}  {doc['status']}  ({doc['applied']} calls applied)")
    typer.echo(f"state: {orjson.dumps(doc['state']).decode()}")
    if not doc["queue"]:
        typer.echo("queue: empty")
    for n, call in enumerate(doc["queue"]):
        arg = orjson.dumps(call["arg"]).decode()
        typer.echo(
            f"{'next' if n == 0 else f'{n + 1:>4}'}  {call['handler']}({arg})  {call['call_id']}"
        )


def _print(answer: Any, as_json: bool) -> None:
    if as_json:
        session.print_json(answer)
    else:
        import orjson

        typer.echo(orjson.dumps(answer).decode())
