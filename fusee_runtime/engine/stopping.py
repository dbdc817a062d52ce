"""Stopping the code an engine runs, as `Engine.close` does it: the step functions
running now get a grace period to finish (their results are recorded), then every
run's task is cancelled; the runs resume from their journal on the next open."""

from __future__ import annotations

import asyncio

from fusee_runtime.engine.durability import Durability
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.steps import StepWorkers


async def let_steps_finish(
    workers: StepWorkers, durability: Durability, grace: float, hurry: asyncio.Event
) -> None:
    """Returns once no step function runs, the journal failed, `hurry` is set, or
    `grace` seconds passed, whichever comes first."""
    if not (grace > 0 and workers.attempts):
        return
    finished = asyncio.ensure_future(
        durability.wait_until(lambda: workers.attempts == 0 or durability.failed is not None)
    )
    hurried = asyncio.ensure_future(hurry.wait())
    try:
        await asyncio.wait({finished, hurried}, timeout=grace, return_when="FIRST_COMPLETED")
    finally:
        finished.cancel()
        hurried.cancel()


async def cancel_run_tasks(runs: RunTable) -> None:
    """Cancels the task of every run whose code is running, and waits for them to end."""
    tasks = [
        r.live.task
        for r in runs.by_run_id.values()
        if r.live.task is not None and not r.live.task.done()
    ]
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
