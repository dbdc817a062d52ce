"""`fusee complete` and `fusee fail`: finish a step that awaits a completion.

Workflows cannot await a completion (`ctx.await_completion`) in this
version, so no token exists to finish: both commands refuse, with exit 2,
before they open the home or import the engine. The signatures and help
are what later versions keep.
"""

from __future__ import annotations

from typing import Annotated

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Json

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
            help="The step's result: JSON, else taken as a string; default: null. "
            "Put -- before a value that starts with a dash.",
            show_default=False,
        ),
    ] = None,
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    app: App = None,
) -> None:
    """Finish the await_completion step of TOKEN with VALUE as its result, durably.

    Not available yet: workflows cannot await completions (ctx.await_completion)
    in this version, so it exits 2 without opening the home.

    Example: fusee complete 4f1c2b7e '{"approved": true}'
    """
    with session.reporting():
        raise session.not_available("complete", _MISSING)


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
    app: App = None,
) -> None:
    """Fail the await_completion step of TOKEN with MESSAGE, durably.

    Not available yet: workflows cannot await completions (ctx.await_completion)
    in this version, so it exits 2 without opening the home.

    Example: fusee fail 4f1c2b7e "the reviewer rejected it"
    """
    with session.reporting():
        raise session.not_available("fail", _MISSING)


_MISSING = "await completions (ctx.await_completion)"
