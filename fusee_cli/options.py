"""The options every command takes, and where their defaults come from.

Typer reads these annotations when the command is called; nothing here
imports the engine, so `fusee --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fusee_cli import suggest
from fusee_cli.session import CliError, Code

DEFAULT_HOME = Path(".fusee")
DEFAULT_APP = "workflows"
DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
"""What each unit of a duration option is worth, in seconds."""
DURATION_FORMS = "30d, 12h, 90m, 45s, 2w or plain seconds (3600)"
DURATION_WEEKS_MAX = 5200
"""The longest duration an option takes (100 years): longer is a typo, and far longer
would not fit a float."""

Home = Annotated[
    Path,
    typer.Option(
        "--home",
        envvar="FUSEE_HOME",
        help="The fusee home: journal, lock and history of the runs.",
        file_okay=False,
    ),
]


def _store_given(ctx: typer.Context, value: str | None) -> str | None:
    # The engine is opened far from here (session.open_engine, session.control): a
    # --store after the command reaches it as FUSEE_STORE, put back when the command ends.
    if value is not None:
        from fusee_cli.app import hand_down

        hand_down(ctx, "FUSEE_STORE", value)
    return value


Store = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Where the journal lives: a PostgreSQL URL (postgresql://user@host/db); "
        "default: FUSEE_STORE, else the local journal in the home.",
        callback=_store_given,
        show_default=False,
    ),
]
App = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="FUSEE_APP",
        help="Module that registers the workflows; default: tool.fusee.app in "
        "./pyproject.toml, else workflows.",
        show_default=False,
    ),
]
ReadApp = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="FUSEE_APP",
        help="Not needed: reading the home imports none of the app's code (taken, and "
        "unused, so that scripts can give --app to every command); default: none.",
        show_default=False,
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
Where = Annotated[
    list[str] | None,
    typer.Option(
        "--where",
        metavar="KEY=VALUE",
        help="Only runs whose search attributes (ctx.set_attributes) meet this "
        "condition: KEY=VALUE, or another operator of != < <= > >= (amount>100). "
        'VALUE is a number, true, false, a "quoted" string, an ISO 8601 instant '
        "with its offset, or else text as written. Repeat for more conditions; "
        "all must hold. Default: no filter.",
    ),
]
"""`--where` of the commands that filter runs (`fusee list`, `fusee batch`)."""
WorkflowFilter = Annotated[
    str | None,
    typer.Option(
        "--workflow",
        help="Only runs of this workflow; default: every workflow.",
        autocompletion=suggest.workflow_names,
    ),
]
Verbose = Annotated[
    bool,
    typer.Option("--verbose", "-v", help="Show failures' whole tracebacks and values uncut."),
]
ValueFile = Annotated[
    str | None,
    typer.Option(
        "--input",
        "-i",
        help="JSON file holding the value, instead of VALUE; - reads stdin; default: none.",
    ),
]
Id = Annotated[
    str,
    typer.Argument(
        metavar="ID",
        help="The workflow id of the run.",
        show_default=False,
        autocompletion=suggest.run_ids,
    ),
]


def app_module(app: str | None) -> str:
    """The app module to load: `--app`/`FUSEE_APP`, else `[tool.fusee] app`, else workflows.

    Raises:
        CliError: ./pyproject.toml exists but cannot be read as TOML.
    """
    if app:
        return app
    import tomllib

    pyproject = Path("pyproject.toml")
    if not pyproject.is_file():
        return DEFAULT_APP
    try:
        config = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CliError(Code.USAGE, f"cannot read {pyproject}: {e}") from None
    configured = config.get("tool", {}).get("fusee", {}).get("app")
    return configured if isinstance(configured, str) and configured else DEFAULT_APP


def duration(text: str, option: str, *, zero: bool = False) -> float:
    """Seconds of a duration option: a whole number, then w, d, h, m or s (none: seconds).

    Zero is taken only with `zero`.

    Raises:
        CliError: any other text, or zero where it is not taken (exit 2).
    """
    import re

    # ASCII digits only: re's \d, and int(), would take other scripts' digits too.
    found = re.fullmatch(r"([0-9]+)([wdhms]?)", text)
    if found is None:
        raise CliError(
            Code.USAGE, f"{option} takes a duration such as {DURATION_FORMS}, not {text!r}"
        )
    digits = found[1].lstrip("0")
    # Only digits that can fit go to int(), which refuses over 4300 of them.
    value_s = int(digits[:12] or "0") * DURATION_UNITS_S[found[2] or "s"]
    if len(digits) > 12 or value_s > DURATION_WEEKS_MAX * DURATION_UNITS_S["w"]:
        raise CliError(
            Code.USAGE, f"{option} takes at most {DURATION_WEEKS_MAX}w (100 years), not {text!r}"
        )
    if value_s == 0 and not zero:
        raise CliError(Code.USAGE, f"{option} takes a duration of more than zero, not {text!r}")
    return float(value_s)
