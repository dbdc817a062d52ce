"""What the engine does with a run right now (`Live`), apart from what its journal
says of it (`fusee_runtime.model.run.RunRecord`).

None of it is recorded, and the fold never touches it: it is made fresh when a
run is loaded, and written by the side that drives runs (the driver, the run's
`Execution`, the handlers), never by folding a record. `Run.status` is read from
these facts and the record's; nothing assigns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fusee_runtime.execution import Execution
    from fusee_runtime.model.ops import Op


@dataclass(slots=True)
class Live:
    """One run's state in this process now."""

    # The task running the run's code, and the future its `result()` callers wait on.
    task: asyncio.Task[None] | None = None
    closed: asyncio.Future[None] | None = None
    # Futures of live code waiting for a pending operation, by seq.
    waiters: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    # No code of the run runs here: it waits to be woken (or this engine drives none).
    parked: bool = False
    # The run shows as parked (`Status.PARKED`): its code parked here, or, in an
    # engine that drives no code, it waits for a timer or a wait of its journal.
    shown_parked: bool = False
    # Started with a delay that has not passed (`RunRecord.begin_at`): no code runs yet.
    scheduled: bool = False
    # Started in a queue that has not let it in (`engine.queues`): no code runs yet.
    # Says where it stands, for people ("2nd of 5 in key 'acme'").
    queued: Callable[[], str] | None = None
    # Its close is durable, so it shows as closed (`Status` of its closing record).
    close_durable: bool = False
    # Why its code stopped, when that could not be recorded (the journal failed):
    # it shows as stuck until resumed.
    stuck: str | None = None
    # The execution of the run's code now (none while parked, or with no code running here).
    execution: Execution | None = None
    # What the run is doing now, for people (`fusee start` shows it).
    current: str | None = None
    # Its steps waiting for a permit of a limit now: by seq, the step's name and the
    # limit's (with its key: "name/key").
    permit_waits: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Its steps waiting for a slot of a rate now: by seq, the step's name, the rate's
    # (with its key) and when its next slot frees.
    rate_waits: dict[str, tuple[str, str, float]] = field(default_factory=dict)
    # Its steps offered to a worker with their labels that no worker holds now: by seq,
    # the step's name and the labels ("gpu,eu").
    worker_waits: dict[str, tuple[str, str]] = field(default_factory=dict)
    # `ctx.on_query` and `ctx.on_update` handlers ((handle, validate) for updates),
    # as the code registered them last (kept while parked).
    queries: dict[str, Any] = field(default_factory=dict)
    updates: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # Top-level operations the code has asked for so far, and the kind of the last:
    # where an update applied now happens, as a replay will see it.
    position: int = 0
    position_kind: type[Op] | None = None
    # Callers waiting for an accepted update to be applied, by update id: each gets
    # its `UpdateApplied`'s lsn (0: not applied, as the run closed or the engine stopped).
    update_waiters: dict[str, asyncio.Future[int]] = field(default_factory=dict)

    def stop_update_waiters(self) -> None:
        """No accepted update will be applied here now: its callers get 0."""
        for waiter in self.update_waiters.values():
            if not waiter.done():
                waiter.set_result(0)
        self.update_waiters.clear()
