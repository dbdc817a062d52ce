"""Heartbeats of running steps: `current_ctx().heartbeat(details)` and `progress()`.

A step function reports progress from wherever it runs (the loop, or a
thread of the step pool). `beat` never waits: it keeps the step's latest
details in memory, and the latest of each step is appended as one
`StepHeartbeat` record, which the next group commit makes durable: the
first `FLUSH_S` after the step's first beat, then at most every `EVERY_S`
(wall time: it bounds the journal's growth, not the step's timeout). So a
step that beats a million times costs one record a second, and after a
crash its next attempt finds the details of the last durable record
(`progress`), folded into the step's op like its other records; the run
keeps only the latest heartbeat record of each step (numbered, so the records
it no longer holds are accounted for). A record is not
appended for a step that ended meanwhile, nor once the journal failed; a
clean close appends what is pending (`flush_now`), a crash loses it.

A heartbeat names the step it beats for, like an `AttemptFailed` does: code
changed after a crash to call another step at that place is a mismatch.

`last` tells when an attempt last beat (or its function started), for
`heartbeat_timeout`: the time of the call itself, not of its record.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.errors import JournalFailed, Rejected
from fusee_runtime.model.op_records import StepHeartbeat
from fusee_runtime.model.ops import StepOp
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import OfRun

if TYPE_CHECKING:
    import asyncio

    from fusee_runtime.clock import Clock
    from fusee_runtime.engine.state import Run

FLUSH_S = 0.05
"""How long a step's first beats gather before the latest is appended."""
EVERY_S = 1.0
"""At most one `StepHeartbeat` record a second for each running step."""


class Beats:
    """The latest heartbeat of each running step, until it is appended."""

    def __init__(
        self,
        clock: Clock,
        loop: Callable[[], asyncio.AbstractEventLoop | None],
        append: Callable[[Run, OfRun], int],
        appends: Callable[[], bool],
    ) -> None:
        """`appends` tells whether the journal takes records now (open, not failed,
        the engine not closing)."""
        self._clock = clock
        self._loop = loop
        self._append = append
        self._appends = appends
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[Run, StepHeartbeat]] = {}
        self._last: dict[tuple[str, str], float] = {}
        self._appended_at: dict[tuple[str, str], float] = {}
        self._scheduled = False
        self._closed = False

    def beat(self, run: Run, seq: str, name: str, attempt: int, details: Any) -> None:
        """Keeps `details` as the step's latest (any thread); appended within `EVERY_S`."""
        now = self._clock.now()
        key = (run.run_id, seq)
        beat = StepHeartbeat(run.run_id, seq, name, attempt, Payload.of(details), now, 0)
        with self._lock:
            self._pending[key] = (run, beat)
            self._last[key] = now
            schedule = not self._scheduled and not self._closed
            self._scheduled = self._scheduled or schedule
        if schedule:
            self._schedule(FLUSH_S)

    def started(self, run: Run, seq: str) -> None:
        """An attempt's function starts now: its `heartbeat_timeout` counts from here."""
        now = self._clock.now()
        with self._lock:
            self._last[(run.run_id, seq)] = now

    def last(self, run: Run, seq: str) -> float | None:
        """When the step at `seq` last beat in this process, or its function started
        (None: its function has not started)."""
        with self._lock:
            return self._last.get((run.run_id, seq))

    def latest(self, run: Run, seq: str) -> Any:
        """A copy of the step's latest details: beaten and not yet appended, else as its
        journal holds them (from an earlier attempt, or before a crash); None if none."""
        with self._lock:
            pending = self._pending.get((run.run_id, seq))
        if pending is not None:
            details = pending[1].details.value
        else:
            op = run.ops.get(seq)
            details = op.progress if isinstance(op, StepOp) else None
        return details if details is None else orjson.loads(orjson.dumps(details))

    def ended(self, run: Run, seq: str) -> None:
        """The attempt ended: its timing is forgotten (a next attempt starts afresh);
        its latest details are still appended, for the next attempt."""
        if not self._last and not self._appended_at:  # no step beats: costs nothing
            return
        key = (run.run_id, seq)
        with self._lock:
            self._last.pop(key, None)
            self._appended_at.pop(key, None)

    @property
    def pending(self) -> int:
        """Steps whose latest heartbeat is not appended yet."""
        return len(self._pending)

    def flush_now(self) -> None:
        """Appends the latest heartbeat of every step now (a clean close, the test kit)."""
        self._flush(at_once=True)

    def close(self, flush: bool) -> None:
        """The journal closes: appends what is pending if `flush` (a clean close; a crash
        loses it), and later beats are kept in memory only."""
        if flush:
            self.flush_now()
        with self._lock:
            self._closed = True

    def _schedule(self, delay: float) -> None:
        loop = self._loop()
        try:
            if loop is None:
                raise RuntimeError("no loop")
            loop.call_soon_threadsafe(lambda: loop.call_later(delay, self._flush))
        except RuntimeError:  # the engine's loop is closed: nothing will append it
            with self._lock:
                self._scheduled = False

    def _flush(self, at_once: bool = False) -> None:
        now = time.monotonic()
        due: list[tuple[Run, StepHeartbeat]] = []
        wait = None
        with self._lock:
            if not at_once:
                self._scheduled = False
            if not self._appends() and not (at_once and not self._closed):
                return  # kept: a clean close appends them (`flush_now`)
            for key, item in list(self._pending.items()):
                after = self._appended_at.get(key, -EVERY_S) + EVERY_S - now
                if at_once or after <= 0:
                    due.append(item)
                    del self._pending[key]
                    if key in self._last:  # the attempt still runs
                        self._appended_at[key] = now
                else:
                    wait = after if wait is None else min(wait, after)
            if wait is not None and not self._scheduled and not self._closed:
                self._scheduled = True
            else:
                wait = None
        for run, beat in due:
            op = run.ops.get(beat.seq)
            # (None: a first attempt's; another kind: a thread given up on, whose run's
            # code moved on to another operation at that number.)
            if run.is_open and (op is None or (isinstance(op, StepOp) and not op.done)):
                number = (op.beats if isinstance(op, StepOp) else 0) + 1
                try:
                    self._append(run, replace(beat, number=number))
                except (JournalFailed, Rejected):  # the journal failed or closed: said elsewhere
                    return
        if wait is not None:
            self._schedule(max(wait, FLUSH_S))
