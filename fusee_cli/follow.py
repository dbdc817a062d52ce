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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fusee_cli import session
from fusee_cli.session import Code, echo_err, error, print_json

if TYPE_CHECKING:
    from fusee_runtime import RunInfo
    from fusee_runtime.control.client import ControlApi

T = TypeVar("T")

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
    """Follows a run through whoever owns the home, taking over when that owner goes away
    (`through_owners`). `first` is a control already open to start with; `timeout_s`
    counts from the first try. `say` prints the line that tells of a takeover: a live
    progress line (`render.Progress.say`) must print it above itself, not over itself.

    Raises:
        CliError: no run of that id (exit 3), or what `session.control` raises.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s

    async def watch(ctl: ControlApi, info: RunInfo | None) -> Outcome:
        left = None if deadline is None else max(deadline - loop.time(), 0.0)
        return await follow(ctl, workflow_id, left, progress)

    return await through_owners(home, app, workflow_id, watch, first=first, say=say)


async def through_owners(
    home: Path,
    app: str | None,
    workflow_id: str,
    body: Callable[[ControlApi, RunInfo | None], Awaitable[T]],
    *,
    first: ControlApi | None = None,
    drive: bool = True,
    say: Callable[[str], None] = echo_err,
) -> T:
    """`body(control, run)` on the home's owner, again on the next one each time an owner
    goes away before it returns; `run` is the newest run of `workflow_id` as the owner
    found it (None for `first`, a control already open to start with).

    An owner that closes or dies leaves its runs to the next process that opens the
    home: this one (with `drive`), unless another got there first. A home this one
    opened is given to a server that starts and asks for it (`Control.give_way`), and
    the run is followed on through that server. `body` must be safe to call again: a
    follower (a watch, a followed stream) records nothing. Each takeover is told with
    `say`.

    Raises:
        CliError: no run of that id (exit 3), or what `session.control` raises.
    """
    from fusee_runtime import EngineClosed
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.client import OwnerGone, OwnerLost

    while True:
        owner = None
        ctl: ControlApi | None = None
        try:
            if first is not None:
                ctl, first = first, None
                owner = ctl.owner
                return await body(ctl, None)
            async with session.control(home, app, drive=drive, gives_way=drive) as ctl:
                owner = ctl.owner
                info = await session.find_run(ctl, workflow_id)
                owner = ctl.owner  # (after a call about the run: its journal's driver)
                return await body(ctl, info)
        except (OwnerGone, OwnerLost, EngineClosed):
            if owner is not None:
                said = session.owner_named(owner, past=True)
                say(f"{said} went away; following {workflow_id} on")
            elif isinstance(ctl, Control) and ctl.gave_way:
                await ctl.given_way()
                first = await _server(home)
                to = f"the server that asked for it (pid {first.owner})" if first else "no one"
                say(f"gave the home to {to}; following {workflow_id} on")
            else:
                raise  # this process's own engine closed under it: nobody to hand over to


async def _server(home: Path) -> ControlApi | None:
    """The server this process gave the home to, once it serves it (None: none did within
    `connect.LOCK_WAIT_S`: following takes the home again)."""
    import asyncio
    import os

    from fusee_runtime.control.client import ControlClient
    from fusee_runtime.control.connect import LOCK_WAIT_S, RETRY_OPEN_S

    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_WAIT_S
    while loop.time() < deadline:
        client = await ControlClient.connect(home)
        if client is not None and client.owner != os.getpid():
            return client
        await asyncio.sleep(RETRY_OPEN_S)
    return None


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
