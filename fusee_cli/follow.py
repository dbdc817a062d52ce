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
from typing import TYPE_CHECKING, Any

from fusee_cli.session import Code, echo_err, error, print_json

if TYPE_CHECKING:
    from fusee_runtime.engine.control import Control, ControlClient

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
    ctl: Control | ControlClient,
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
