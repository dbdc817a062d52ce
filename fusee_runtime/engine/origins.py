"""What a new run's `origin` records beside how it began: the version of its code
(`ctx.version()`), its trace (`fusee_runtime.tracing`) and its queue
(`engine/queues.py`). A run made from another (a reset, a continue-as-new) keeps
the other's; a run started fresh takes what its workflow declares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fusee_runtime.tracing import traceparent_of

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver

KEPT = ("traceparent", "version", "queue")
"""What a run that continues as new keeps of its predecessor's origin."""


def origin_of(
    driver: Driver,
    origin: dict[str, Any] | None,
    workflow: str,
    workflow_id: str,
    traceparent: str | None,
) -> dict[str, Any] | None:
    """`origin` with the version, trace and queue a new run of `workflow` records."""
    origin = _traced(driver, origin, workflow, workflow_id, traceparent)
    return _queued(driver, _versioned(driver, origin, workflow), workflow)


def _versioned(
    driver: Driver, origin: dict[str, Any] | None, workflow: str
) -> dict[str, Any] | None:
    """`origin` with the version the run records (`ctx.version()`), where not 1: the
    version of the code loaded now, or a reset's of the run it resets (whose journal
    it keeps)."""
    if origin and "reset" in origin:
        old = driver.runs.by_id(origin["reset"])
        version = (old.origin or {}).get("version", 1) if old is not None else 1
    else:
        wf = driver.workflows.get(workflow)
        version = wf.version if wf is not None else 1
    return origin if version == 1 else {**(origin or {}), "version": version}


def _queued(driver: Driver, origin: dict[str, Any] | None, workflow: str) -> dict[str, Any] | None:
    """`origin` with the queue the run waits in: the one it was started in, a reset's of
    the run it resets, else its workflow's (`@workflow(queue=...)`), if any."""
    if origin and "queue" in origin:
        return origin
    if origin and "reset" in origin:
        old = driver.runs.by_id(origin["reset"])
        queue = old.queue if old is not None else None
    else:
        wf = driver.workflows.get(workflow)
        name = wf.queue if wf is not None else None
        queue = None if name is None else {"name": name, "key": None, "priority": 0}
    return origin if queue is None else {**(origin or {}), "queue": queue}


def _traced(
    driver: Driver,
    origin: dict[str, Any] | None,
    workflow: str,
    workflow_id: str,
    given: str | None,
) -> dict[str, Any] | None:
    """`origin` with the traceparent the run records (`fusee_runtime.tracing`), if any."""
    traceparent = given
    ref = origin.get("parent") if origin else None
    parent = driver.runs.by_run_id.get(ref["run_id"]) if ref else None
    if traceparent is None and origin and "reset" in origin:
        old = driver.runs.by_id(origin["reset"])  # in memory, or in the history store
        traceparent = traceparent_of(old) if old is not None else None
    if traceparent is None and driver.tracing is not None:
        traceparent = driver.tracing.traceparent(workflow, workflow_id, parent)
    if traceparent is None and parent is not None:
        traceparent = traceparent_of(parent)  # traced or not here, the parent's trace
    return origin if traceparent is None else {**(origin or {}), "traceparent": traceparent}
