"""`fusee signal`: deliver a signal to a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session, suggest
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, ValueFile, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi

SHOWN_CHARS_MAX = 72
"""Longest value echoed on stderr; the journal holds all of it."""


def signal(
    workflow_id: Id,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME",
            help="The signal's name, as the workflow waits for it (ctx.wait_for).",
            show_default=False,
            autocompletion=suggest.signal_names,
        ),
    ],
    value: Annotated[
        str | None,
        typer.Argument(
            metavar="VALUE",
            help="The signal's value: JSON; a plain word that is not JSON is taken as a "
            'string, but one that starts like JSON ({, [, ") must parse; default: null. '
            "Put -- before a value that starts with a dash.",
            show_default=False,
        ),
    ] = None,
    input_file: ValueFile = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Deliver signal NAME, with VALUE, to run ID; return once it is durable.

    Example: fusee signal expense-7 approve true
    """
    with session.reporting():
        if not name:
            raise CliError(Code.USAGE, "a signal name is a non-empty string")
        payload, as_string = _value(value, input_file)
        session.check_payload(payload, "the signal's value")
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def deliver(ctl: ControlApi, info: RunInfo) -> None:
            # Raises Rejected, naming the status, when the run is closed.
            await ctl.signal(wid, name, payload)

        _, owner = session.act(home, module, wid, deliver)
        if as_json:
            session.print_json({"id": wid, "signal": name, "delivered": True})
        else:
            shown = _shown(payload)
            if as_string:
                shown += " (VALUE is not JSON: sent as a string)"
            session.echo_err(
                f"delivered signal {name!r} to {wid}: {shown}; "
                f"the run takes it {session.goes_on(wid, owner)}"
            )


def _shown(value: Any) -> str:
    import orjson

    text = orjson.dumps(value).decode()
    return text if len(text) <= SHOWN_CHARS_MAX else text[: SHOWN_CHARS_MAX - 1] + "…"


def _value(value: str | None, input_file: str | None) -> tuple[Any, bool]:
    """The signal's value, and whether VALUE was taken as a string because it is not JSON.

    Raises:
        CliError: both VALUE and --input, or an --input that is missing or not JSON.
    """
    if value is not None and input_file is not None:
        raise CliError(Code.USAGE, "give the signal's value as VALUE or with --input, not both")
    if input_file is not None:
        return session.load_input(input_file), False
    return session.json_or_string(value)
