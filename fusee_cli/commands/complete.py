"""`fusee complete` and `fusee fail`: finish a step that awaits a completion.

A workflow's `ctx.await_completion(name, send)` hands a token to someone
else's work; these commands are how that work reports back from a shell.
They go through the home's owner when one runs (it wakes the run at
once), else they open the home passively and record the outcome, which
the run takes the next time a process drives it.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json, Store, ValueFile, app_module

Token = Annotated[
    str,
    typer.Argument(
        metavar="TOKEN",
        help="The completion token the step handed out (Completion.token).",
        show_default=False,
    ),
]


def complete(
    token: Token,
    value: Annotated[
        str | None,
        typer.Argument(
            metavar="VALUE",
            help="The step's result: JSON; a plain word that is not JSON is taken as a "
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
    """Finish the await_completion step of TOKEN with VALUE as its result, durably.

    Exits 3 for a token this home never issued, 2 for a step that already
    finished, a token a later attempt or a resume replaced, or a paused step
    (`fusee resume ID` sends again with a new token).

    Example: fusee complete 4f1c...-3-1-9a0b... '{"approved": true}'
    """
    with session.reporting():
        if value is not None and input_file is not None:
            raise session.CliError(
                session.Code.USAGE, "give the value as VALUE or with --input, not both"
            )
        if input_file is not None:
            payload = session.load_input(input_file)
        else:
            payload, _ = session.json_or_string(value)
        session.check_payload(payload, "the completion's value")
        _finish(home, app_module(app), as_json, "complete", token, payload)


def fail(
    token: Token,
    message: Annotated[
        str,
        typer.Argument(
            metavar="MESSAGE",
            help="Why the work failed: the step fails with this message.",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Fail the await_completion step of TOKEN with MESSAGE, durably.

    The workflow sees StepFailed at its await_completion. Exit codes as for
    `fusee complete`.

    Example: fusee fail 4f1c...-3-1-9a0b... "the reviewer rejected it"
    """
    with session.reporting():
        _finish(home, app_module(app), as_json, "fail", token, message)


def _finish(home: Any, app: str, as_json: bool, how: str, token: str, value: Any) -> None:
    import asyncio

    if not session.has_journal(home):
        raise session.CliError(session.Code.NOT_FOUND, _unknown(token))

    async def main() -> tuple[dict[str, Any], int | None]:
        async with session.control(home, app, drive=False) as ctl:
            if how == "complete":
                return await ctl.complete(token, value), ctl.owner
            return await ctl.fail(token, value), ctl.owner

    done, owner = asyncio.run(main())
    if as_json:
        session.print_json({**done, "outcome": "completed" if how == "complete" else "failed"})
    else:
        verb = "completed" if how == "complete" else "failed"
        session.echo_err(
            f"{verb} {done['completion']!r} of {done['id']}; the run goes on "
            f"{session.goes_on(done['id'], owner)}"
        )


def _unknown(token: str) -> str:
    return f"{token[:80]!r} is not a completion token of this home"
