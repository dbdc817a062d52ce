"""The options every command takes, and where their defaults come from.

Typer reads these annotations when the command is called; nothing here
imports the engine, so `fusee --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fusee_cli.session import CliError, Code

DEFAULT_HOME = Path(".fusee")
DEFAULT_APP = "workflows"

Home = Annotated[
    Path,
    typer.Option(
        "--home",
        envvar="FUSEE_HOME",
        help="The fusee home: journal, lock and history of the runs.",
        file_okay=False,
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
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ValueFile = Annotated[
    str | None,
    typer.Option(
        "--input",
        "-i",
        help="JSON file holding the value, instead of VALUE; - reads stdin; default: none.",
    ),
]
Id = Annotated[
    str, typer.Argument(metavar="ID", help="The workflow id of the run.", show_default=False)
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
