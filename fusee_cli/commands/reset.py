"""`fusee reset`: run a workflow id again from a point in its journal, in a new run."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fusee_cli import session
from fusee_cli.options import DEFAULT_HOME, App, Home, Id, Json, Store, app_module
from fusee_cli.session import CliError, Code

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.client import ControlClient

_NUMBER = re.compile(r"[+-]?\d+")
_STEP_RECORDS = ("StepCompleted", "StepFailed", "AttemptFailed", "StepPaused")


def reset(
    workflow_id: Id,
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="SEQ|STEP",
            help="Where the new run starts again: an operation number (the seq column of "
            "`fusee history`), or a step's name (its first call). It keeps the journal "
            "before that point.",
            show_default=False,
        ),
    ],
    as_json: Json = False,
    home: Home = DEFAULT_HOME,
    store: Store = None,
    app: App = None,
) -> None:
    """Run ID again from --to in a new run that keeps the journal before it; print its id.

    Example: fusee reset o-1 --to charge
    """
    with session.reporting():
        if not to:
            raise CliError(Code.USAGE, "--to takes an operation number or a step name")
        point: int | str = int(to) if _NUMBER.fullmatch(to) else to
        module = app_module(app)
        wid = session.check_id(workflow_id)

        async def reset_run(
            ctl: Control | ControlClient, info: RunInfo
        ) -> tuple[RunInfo, RunInfo, dict[str, Any]]:
            from fusee_runtime import NotFound

            try:
                # Rejected for an operation number below 1; NotFound for a step
                # the run never called (the run itself exists: an input error).
                new = await ctl.reset(wid, point)
            except NotFound as e:
                steps = await _steps(ctl, info)
                known = f"its steps: {', '.join(steps)}" if steps else "it has called no step"
                raise CliError(Code.USAGE, f"{e}; {known}") from None
            started = [r for r in await ctl.history(wid) if r["run_id"] == new.run_id]
            return info, new, started[0]["origin"]

        (old, new, origin), owner = session.act(home, module, wid, reset_run)
        if as_json:
            from fusee_runtime.control.api import run_json

            session.print_json({**run_json(new), "origin": origin})
        else:
            typer.echo(new.run_id)
            # Only an open run closes as reset; a closed one keeps how it closed.
            was = "closed as reset" if old.status.is_open else f"stays {old.status}"
            session.echo_err(
                f"reset {wid}: run {old.run_id} {was}; new run {new.run_id} "
                f"keeps operations before #{origin['before']} and runs the rest "
                f"{session.goes_on(wid, owner)}"
            )


async def _steps(ctl: Control | ControlClient, info: RunInfo) -> list[str]:
    """The names of the steps `info`'s run called, in the order it first called them.

    These are the names `--to` takes. A run that is itself a reset called
    the steps it ran and also those its journal kept from the run it reset
    (the operations before its `origin["before"]`), recorded under that
    older run's id: the chain of resets is followed back.
    """
    records = await ctl.history(info.id)
    calls: list[tuple[int, str]] = []
    run_id: str | None = info.run_id
    before: float = math.inf
    while run_id is not None:
        mine = [rec for rec in records if rec["run_id"] == run_id]
        calls += [
            (top, rec["name"])
            for rec in mine
            if rec["type"] in _STEP_RECORDS and (top := rec["seq"]) < before
        ]
        origin = next((rec["origin"] for rec in mine if rec["type"] == "RunStarted"), None)
        run_id = None
        if origin and "reset" in origin:
            run_id, before = origin["reset"], min(before, origin["before"])
    names: dict[str, None] = {}
    for _, name in sorted(calls, key=lambda call: call[0]):  # sort is stable
        names.setdefault(name, None)
    return list(names)
