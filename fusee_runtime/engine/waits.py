"""What an open run waits for (`RunInfo.waiting`), and the engine's instants.

`waiting(run)` reads it from the run's state, as the journal folded it:
its pending timers, waits, paused steps, completions and children, its
steps between attempts, sending heartbeats or waiting for a permit of a
limit, and a cancel not closed on.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.errors import Failure
from fusee_runtime.model.ops import ChildOp, CompletionOp, StepOp, TimerOp, WaitOp
from fusee_runtime.model.run import Waiting, WaitKind

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run

INSTANT_MAX = 253402300799.0
"""The last second a `datetime` holds (9999-12-31 23:59:59 UTC). A wake-up past it
(`timedelta.max`, say) means "never": the run waits with no timer."""


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def wake_at(at: float) -> float | None:
    """A wake-up instant as it is recorded: None ("never") past `INSTANT_MAX`."""
    return at if at < INSTANT_MAX else None


def until(at: float | None) -> str:
    """Until when a run waits, for people, in what it says it is doing."""
    if at is None or wake_at(at) is None:
        return "forever"
    return f"until {utc(at):%Y-%m-%d %H:%M:%S} UTC"


def _utc(at: float | None) -> datetime | None:
    return None if at is None else utc(at)


def waiting(run: Run) -> tuple[Waiting, ...]:
    """What open `run` waits for: the begin of a delayed start, its queue, its pending
    timers, waits, paused steps and completions, its steps between attempts, and a
    cancel it has not closed on."""
    out = _before_begin(run)
    if run.cancel_reason is not None:
        out.append(
            Waiting(
                WaitKind.CANCEL,
                "delivered" if run.cancel_delivered else None,
                None,
                run.cancel_reason,
            )
        )
    for op in run.pending.values():
        match op:
            case WaitOp():
                out.append(Waiting(WaitKind.SIGNAL, op.name, _utc(op.fire_at)))
            case TimerOp():
                out.append(Waiting(WaitKind.TIMER, op.name, _utc(op.fire_at)))
            case StepOp(paused=True):
                out.append(Waiting(WaitKind.RESUME, op.name, detail=_failed(op.failure)))
            case CompletionOp(done=False):
                out.append(Waiting(WaitKind.COMPLETION, op.name))
            case ChildOp():
                out.append(Waiting(WaitKind.CHILD, op.name, _utc(op.deadline), op.workflow))
    for step in run.ops.values():
        if type(step) is not StepOp or step.done or step.paused:
            continue
        if step.retry_at is not None:
            out.append(
                Waiting(WaitKind.RETRY, step.name, utc(step.retry_at), _failed(step.failure))
            )
        elif step.beat_at is not None:
            beat = f"{utc(step.beat_at):%H:%M:%S} UTC"
            shown = _shown(step.progress)
            out.append(Waiting(WaitKind.STEP, step.name, None, f"heartbeat at {beat}: {shown}"))
    for name, limit in run.live.permit_waits.values():
        out.append(Waiting(WaitKind.PERMIT, name, None, limit))
    for name, rate, at in run.live.rate_waits.values():
        out.append(Waiting(WaitKind.RATE, name, utc(at), rate))
    for name, labels in run.live.worker_waits.values():
        out.append(Waiting(WaitKind.WORKER, name, None, labels))
    return tuple(out)


def _before_begin(run: Run) -> list[Waiting]:
    """What a run waits for before its code runs: a delayed start's begin, its queue."""
    if run.live.scheduled:
        return [Waiting(WaitKind.BEGIN, None, _utc(run.begin_at))]
    if run.live.queued is not None and run.queue is not None:
        return [Waiting(WaitKind.QUEUE, run.queue["name"], None, run.live.queued())]
    return []


def _shown(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 200 else text[:199] + "…"


def _failed(failure: dict[str, Any] | None) -> str | None:
    return str(Failure.from_json(failure)) if failure else None
