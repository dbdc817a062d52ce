"""Following a run until it closes, stops, or the wait runs out.

`start` and `result --wait` follow a run through the control API's
`watch`: in the process that owns the home, over its socket, or in this
one when the command opened the home itself and drives the run. Either
way the watch reports only durable outcomes, and reports a stuck or paused
run (still open, so its result would never come) with the reason the
engine gave.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fusee_cli import session
from fusee_cli.session import Code, echo_err, error, print_json

if TYPE_CHECKING:
    from fusee_runtime.control.client import ControlApi

_CODES = {"ok": Code.OK, "failed": Code.FAILED, "timed_out": Code.TIMED_OUT}


@dataclass
class Outcome:
    """How following a run ended."""

    code: Code
    run: dict[str, Any]
    """The run as `describe --json` shows it, when following ended."""
    result: Any = None
    message: str | None = None
    failure: dict[str, Any] | None = None


async def follow(
    ctl: ControlApi,
    workflow_id: str,
    timeout_s: float | None,
    progress: Callable[[str | None], None] | None = None,
) -> Outcome:
    """Waits for the newest run of `workflow_id`; `progress` gets what it is doing now.

    Returns the result once it is durable, or why there is none: the run
    failed, was cancelled or terminated, is stuck or paused, or the wait
    passed `timeout_s` seconds.
    """
    done: dict[str, Any] = {}
    async with contextlib.aclosing(ctl.watch(workflow_id, timeout_s)) as events:
        async for event in events:
            if "outcome" in event:
                done = event["outcome"]
            elif progress is not None:
                progress(event["progress"]["current"])
    return Outcome(
        _CODES[done["code"]],
        done["run"],
        done.get("result"),
        done.get("message"),
        done.get("failure"),
    )


async def follow_home(
    home: Path,
    app: str,
    workflow_id: str,
    timeout_s: float | None,
    progress: Callable[[str | None], None] | None = None,
    first: ControlApi | None = None,
    say: Callable[[str], None] = echo_err,
) -> Outcome:
    """Follows a run through whoever owns the home, taking over when that owner goes away.

    An owner that closes or dies leaves the run to the next process that
    opens the home: this one, unless another got there first. A watch
    records nothing, so following again is safe. `first` is a control
    already open to start with; `timeout_s` counts from the first try.
    `say` prints the line that tells of a takeover: a live progress line
    (`render.Progress.say`) must print it above itself, not over itself.

    Raises:
        CliError: no run of that id (exit 3), or what `session.control` raises.
    """
    import asyncio

    from fusee_runtime import EngineClosed
    from fusee_runtime.control.client import OwnerGone, OwnerLost

    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while True:
        left = None if deadline is None else max(deadline - loop.time(), 0.0)
        owner = None
        try:
            if first is not None:
                ctl, first = first, None
                owner = ctl.owner
                return await follow(ctl, workflow_id, left, progress)
            async with session.control(home, app, drive=True) as ctl:
                owner = ctl.owner
                await session.find_run(ctl, workflow_id)
                owner = ctl.owner  # (after a call about the run: its journal's driver)
                return await follow(ctl, workflow_id, left, progress)
        except (OwnerGone, OwnerLost, EngineClosed):
            if owner is None:
                raise  # this process's own engine closed under it: nobody to hand over to
            say(
                f"the process that owned the home (pid {owner}) went away; "
                f"following {workflow_id} on"
            )


def report(outcome: Outcome, as_json: bool) -> Code:
    """Prints an outcome: the result (JSON) on stdout, why there is none on stderr."""
    if as_json:
        doc = dict(outcome.run)
        if outcome.code == Code.OK:
            doc["result"] = outcome.result
        else:
            doc["error"] = outcome.message
            doc["failure"] = outcome.failure
        print_json(doc)
    elif outcome.code == Code.OK:
        print_json(outcome.result)
    if outcome.code != Code.OK and outcome.message:
        (echo_err if outcome.code == Code.TIMED_OUT else error)(outcome.message)
    return outcome.code
