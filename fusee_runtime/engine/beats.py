"""Heartbeats of running steps: `current_ctx().heartbeat(details)` and `progress()`.

A step function reports progress from wherever it runs (the loop, or a
thread of the step pool). `beat` never waits: it keeps the step's latest
details in memory, and at most every `FLUSH_S` the latest of each step is
appended as one `StepHeartbeat` record, which the next group commit makes
durable. So a step that beats a million times costs a few records a
second, and after a crash its next attempt finds the details of the last
durable record (`progress`), folded into the step's op like its other
records. A record is not appended for a step that ended meanwhile, nor once
the engine is closing.

`last` tells when an attempt last beat, for `heartbeat_timeout`: the time
of the call itself, not of its record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fusee_runtime.journal.records import R

if TYPE_CHECKING:
    import asyncio

    from fusee_runtime.clock import Clock
    from fusee_runtime.engine.state import Run

FLUSH_S = 0.05
"""How long beats gather before the latest of each step is appended."""


class Beats:
    """The latest heartbeat of each running step, until it is appended."""

    def __init__(
        self,
        clock: Clock,
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        append: Callable[[Run, list[Any]], int],
        closing: Callable[[], bool],
    ) -> None:
        self._clock = clock
        self._loop = loop
        self._append = append
        self._closing = closing
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[Run, list[Any]]] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._scheduled = False

    def beat(self, run: Run, seq: str, name: str, attempt: int, details: Any) -> None:
        """Keeps `details` as the step's latest (any thread); appended within `FLUSH_S`."""
        now = self._clock.now()
        key = (run.run_id, seq)
        rec = [R.StepHeartbeat, run.run_id, seq, name, attempt, details, now]
        with self._lock:
            self._pending[key] = (run, rec)
            self._last[key] = now
            schedule, self._scheduled = not self._scheduled, True
        loop = self._loop()
        if schedule and loop is not None:
            loop.call_soon_threadsafe(loop.call_later, FLUSH_S, self._flush)

    def last(self, run: Run, seq: str) -> float | None:
        """When the step at `seq` last beat in this process (None: never)."""
        with self._lock:
            return self._last.get((run.run_id, seq))

    def latest(self, run: Run, seq: str) -> Any:
        """The step's latest details: beaten and not yet appended, else as its journal
        holds them (from an earlier attempt, or before a crash); None if none."""
        with self._lock:
            pending = self._pending.get((run.run_id, seq))
        if pending is not None:
            return pending[1][5]
        op = run.ops.get(seq)
        return op.progress if op is not None else None

    def ended(self, run: Run, seq: str) -> None:
        """The attempt ended: its beat time is forgotten (a next attempt starts afresh)."""
        with self._lock:
            self._last.pop((run.run_id, seq), None)

    def _flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._scheduled = False
        if self._closing():
            return
        for run, rec in pending.values():
            op = run.ops.get(rec[2])
            if run.is_open and (op is None or not op.done):
                self._append(run, rec)
