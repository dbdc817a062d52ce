"""The engine's timer queue: durable timers, wait deadlines and run deadlines.

Deadlines live in one heap; one task sleeps on the engine's clock until the
earliest and hands each due entry to the engine, which checks it still
matters (the op may be resolved, the run closed) before recording anything.
The heap is rebuilt from the journal on open, so a timer that came due while
no engine ran fires as soon as one opens the home.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable

from fusee_runtime.clock import Clock

TIMERS_MAX = 10_000_000
"""Pending deadlines one engine holds; past this, new timers are refused."""


class TimerQueue:
    """Calls `fire(run_id, seq, at)` once the clock passes each entry's instant `at`."""

    def __init__(self, clock: Clock, fire: Callable[[str, str | None, float], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._heap: list[tuple[float, int, str, str | None]] = []
        self._ids = itertools.count()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def add(self, at: float, run_id: str, seq: str | None) -> None:
        """Schedules `fire(run_id, seq, at)`; `seq` None is the run's own deadline."""
        if len(self._heap) >= TIMERS_MAX:
            raise OverflowError(f"more than {TIMERS_MAX} pending timers")
        if not self._heap or at < self._heap[0][0]:
            self._changed.set()
        heapq.heappush(self._heap, (at, next(self._ids), run_id, seq))

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fusee:timers")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        heap = self._heap
        while True:
            now = self._clock.now()
            while heap and heap[0][0] <= now:
                at, _, run_id, seq = heapq.heappop(heap)
                self._fire(run_id, seq, at)
            self._changed.clear()
            if not heap:
                await self._changed.wait()
                continue
            sleeper = asyncio.ensure_future(self._clock.sleep_until(heap[0][0]))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({sleeper, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeper.cancel()
                changed.cancel()
