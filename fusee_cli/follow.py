"""Following a run until it closes, stops, or the wait runs out.

`start` and `result --wait` drive the run in this process (they opened its
home) and wait on `RunHandle.result()`, which reports only durable
outcomes. A stuck or paused run is still open, so `result()` would wait for
it forever; the follower looks at the run's status between waits and
reports such a run instead, with the reason the engine gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fusee_cli.session import Code, echo_err, error, print_json

if TYPE_CHECKING:
    from fusee_runtime import Engine

POLL_S = 0.1
"""How often the follower looks at the run's status and progress."""


@dataclass
class Outcome:
    """How following a run ended."""

    code: Code
    result: Any = None
    message: str | None = None
    failure: dict[str, Any] | None = None


async def follow(
    engine: Engine,
    workflow_id: str,
    timeout_s: float | None,
    progress: Callable[[str | None], None] | None = None,
) -> Outcome:
    """Waits for the newest run of `workflow_id`; `progress` gets its current step.

    Returns the result once it is durable, or why there is none: the run
    failed, was cancelled or terminated, is stuck or paused, or the wait
    passed `timeout_s` seconds.
    """
    from fusee_runtime import Cancelled, RunFailed, Status, Terminated, TimedOut

    waiter = asyncio.ensure_future(engine.handle(workflow_id).result(timeout=timeout_s))
    try:
        while not waiter.done():
            run = engine._latest_run(workflow_id)
            if run.status in (Status.STUCK, Status.PAUSED):
                why = run.error or "no reason recorded"
                return Outcome(Code.FAILED, message=f"run {workflow_id} is {run.status}: {why}")
            if progress is not None:
                progress(run.current)
            await asyncio.wait({waiter}, timeout=POLL_S)
        return Outcome(Code.OK, result=waiter.result())
    except RunFailed as e:
        return Outcome(
            Code.FAILED,
            message=f"run {workflow_id} failed: {e.failure}",
            failure=e.failure.to_json(),
        )
    except (Cancelled, Terminated) as e:
        return Outcome(Code.FAILED, message=str(e))
    except TimedOut as e:
        status = engine._latest_run(workflow_id).status
        if status == Status.TIMED_OUT:
            return Outcome(Code.FAILED, message=str(e))
        return Outcome(
            Code.TIMED_OUT,
            message=f"run {workflow_id} has not finished (status {status}); "
            f"keep waiting with `fusee result {workflow_id} --wait`",
        )
    finally:
        if not waiter.done():
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        # The engine fails a run's `closed` future when it closes before the
        # run does; with this waiter gone nobody would retrieve that, and
        # asyncio would log "Future exception was never retrieved".
        closed = engine._latest_run(workflow_id).closed
        if closed is not None:
            closed.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


async def report(engine: Engine, workflow_id: str, outcome: Outcome, as_json: bool) -> Code:
    """Prints an outcome: the result (JSON) on stdout, why there is none on stderr."""
    if as_json:
        info = await engine.handle(workflow_id).describe()
        doc: dict[str, Any] = {**run_json(info)}
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


def run_json(info: Any) -> dict[str, Any]:
    """A `RunInfo` as a JSON object."""
    return {
        "id": info.id,
        "run_id": info.run_id,
        "workflow": info.workflow,
        "status": str(info.status),
        "started_at": info.started_at.isoformat(),
        "closed_at": info.closed_at.isoformat() if info.closed_at else None,
        "error": info.error,
        "attributes": info.attributes,
    }
