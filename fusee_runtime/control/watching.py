"""Following a run for the control API's `watch`: progress, then one outcome.

`start` and `result --wait` follow a run so (fusee_cli/follow.py), in the process
that drives it or through its socket, the database or HTTP: only durable outcomes
are reported, and a stuck or paused run (still open, so its result would never come)
is reported with the reason the engine gave.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from fusee_runtime.control.wire import run_json
from fusee_runtime.errors import Cancelled, RunFailed, Terminated, TimedOut
from fusee_runtime.model.run import Status

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine

POLL_S = 0.1
"""How often a watch looks at the run's status and progress."""


async def watch(
    engine: Engine, id: str, timeout: float | None = None
) -> AsyncGenerator[dict[str, Any], None]:
    """Follows the newest run of `id` until it closes, stops, or `timeout` seconds pass.

    Yields `{"progress": {"status", "current"}}` when either changes,
    then one `{"outcome": ...}`: `code` is "ok" with the durable
    `result`, or "failed" (the run failed, was cancelled or terminated,
    timed out, or is stuck or paused) or "timed_out" (the wait ran out)
    with a `message`; `run` is the run as `describe` shows it then.

    Raises:
        NotFound: no run of that id.
    """
    engine.runs.latest(id)
    waiter = asyncio.ensure_future(engine.handle(id).result(timeout=timeout))
    shown: tuple[str, str | None] | None = None
    outcome: dict[str, object]
    try:
        while not waiter.done():
            run = engine.runs.latest(id)
            # A run recorded stuck whose code runs again here (the home opened to
            # drive it, with code fixed since) says it only once it stops again.
            replaying = run.live.task is not None and not run.live.task.done()
            if run.status == Status.PAUSED or (run.status == Status.STUCK and not replaying):
                why = run.error or "no reason recorded"
                outcome = {"code": "failed", "message": f"run {id} is {run.status}: {why}"}
                break
            now = (str(run.status), run.live.current)
            if now != shown:
                shown = now
                yield {"progress": {"status": now[0], "current": now[1]}}
            await asyncio.wait({waiter}, timeout=POLL_S)
        else:
            try:
                outcome = {"code": "ok", "result": waiter.result()}
            except RunFailed as e:
                outcome = {
                    "code": "failed",
                    "message": f"run {id} failed: {e.failure}",
                    "failure": e.failure.to_json(),
                }
            except (Cancelled, Terminated) as e:
                outcome = {"code": "failed", "message": str(e)}
            except TimedOut as e:
                status = engine.runs.latest(id).status
                if status == Status.TIMED_OUT:
                    outcome = {"code": "failed", "message": str(e)}
                else:
                    outcome = {
                        "code": "timed_out",
                        "message": f"run {id} has not finished (status {status}); "
                        f"keep waiting with `fusee result {id} --wait`",
                    }
    finally:
        if not waiter.done():
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
        # The engine fails a run's `closed` future when it closes before
        # the run does; with this waiter gone nobody would retrieve that,
        # and asyncio would log "Future exception was never retrieved".
        closed = engine.runs.latest(id).live.closed
        if closed is not None:
            closed.add_done_callback(_retrieve)
    outcome["run"] = run_json(engine.runs.latest(id).info())
    yield {"outcome": outcome}


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
