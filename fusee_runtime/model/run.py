"""What a run is, as everyone outside the engine sees it: its status, `RunInfo`, and
what an open run waits for (`Waiting`, of a `WaitKind`).

Part of `fusee_runtime.model`, the engine's vocabulary: it imports nothing of the
engine, the journal or the control surface.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any


class Status(enum.StrEnum):
    """A run's status; the values are the lowercase names."""

    RUNNING = "running"
    PARKED = "parked"
    PAUSED = "paused"
    STUCK = "stuck"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    TERMINATED = "terminated"
    CONTINUED_AS_NEW = "continued_as_new"
    RESET = "reset"

    @property
    def is_open(self) -> bool:
        return self in (Status.RUNNING, Status.PARKED, Status.PAUSED, Status.STUCK)


@dataclass(frozen=True)
class RunInfo:
    """One run, as `describe()` and `list()` show it.

    `failure` is the recorded failure of a failed run (its `kind`, `message`,
    `traceback` and `cause`, as `Failure.to_json` writes it); `waiting` says
    what an open run waits for, oldest first. `parent` is `(id, run_id)` of the
    run that started this one as its child (`ctx.child`), or None.
    """

    id: str
    run_id: str
    workflow: str
    status: Status
    started_at: datetime
    closed_at: datetime | None
    error: str | None
    attributes: dict[str, Any]
    failure: dict[str, Any] | None = None
    waiting: tuple[Waiting, ...] = ()
    parent: tuple[str, str] | None = None


class WaitKind(enum.StrEnum):
    """What an open run waits for (`Waiting.kind`, which says what each means); the
    values are the lowercase names."""

    SIGNAL = "signal"
    TIMER = "timer"
    RETRY = "retry"
    RESUME = "resume"
    COMPLETION = "completion"
    CHILD = "child"
    STEP = "step"
    PERMIT = "permit"
    CANCEL = "cancel"


@dataclass(frozen=True)
class Waiting:
    """One thing an open run waits for, as `RunInfo.waiting` lists them.

    `kind` says what (`WaitKind`; its value is the lowercase name):

    - `signal`: a `ctx.wait_signal` for signal `name`, `until` its timeout (None: none);
    - `timer`: a `ctx.sleep` (timer `name`) that fires at `until` (None: never);
    - `retry`: step `name` runs its next attempt at `until`; `detail` is the last
      failure;
    - `resume`: step `name` is paused until `fusee resume`; `detail` is its failure;
    - `completion`: the `ctx.await_completion` of step `name` waits for its token
      to be completed from outside;
    - `child`: child workflow `name` (its id) has not closed; `until` is its deadline;
    - `step`: step `name` is running and has sent a heartbeat: `detail` says when,
      and its details (`current_ctx().heartbeat`);
    - `permit`: step `name` waits for a permit of the limit `detail` names
      (`limit=`, with its key after a '/');
    - `cancel`: a cancel was recorded (`detail`, its reason) and the run has not
      closed: its code has not acted on it yet (`name` None), or it was delivered
      (`name` "delivered") and the code is cleaning up.
    """

    kind: WaitKind
    name: str | None = None
    until: datetime | None = None
    detail: str | None = None
