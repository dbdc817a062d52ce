"""The engine's only source of time.

Everything in the engine that reads the time or waits for it (retry backoff,
step timeouts, timers) goes through a `Clock`, so tests inject `FakeClock`
and move time by hand instead of sleeping.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    """Where the engine reads the time and waits for it."""

    def now(self) -> float:
        """Unix time in seconds."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Returns once `now() >= deadline`."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        while True:
            left = deadline - time.time()
            if left <= 0:
                return
            await asyncio.sleep(left)


class FakeClock:
    """A clock that moves only when a test calls `advance` or `set`.

    Sleepers are woken in deadline order. `sleepers()` tells a test how many
    waits are pending, and `wait_for_sleepers(n)` lets it wait, on the
    engine's own progress rather than on real time, until the engine is
    parked on at least `n` of them.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self._ids = itertools.count()
        self._changed: asyncio.Event | None = None

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (deadline, next(self._ids), fut))
        self._notify()
        await fut

    def sleepers(self) -> int:
        """How many sleeps are pending."""
        return sum(1 for _, _, f in self._heap if not f.done())

    def next_deadline(self) -> float | None:
        """The earliest pending deadline."""
        live = [d for d, _, f in self._heap if not f.done()]
        return min(live) if live else None

    def advance(self, seconds: float) -> None:
        """Moves time forward and wakes every sleeper now due."""
        self.set(self._now + seconds)

    def set(self, now: float) -> None:
        """Moves time to `now` (never backwards) and wakes the sleepers due."""
        self._now = max(self._now, now)
        while self._heap and self._heap[0][0] <= self._now:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)

    async def wait_for_sleepers(self, n: int = 1) -> None:
        """Waits until at least `n` sleeps are pending."""
        while self.sleepers() < n:
            if self._changed is None:
                self._changed = asyncio.Event()
            await self._changed.wait()
            self._changed.clear()

    async def run_until_idle(self, max_steps: int = 10_000) -> None:
        """Advances to each next deadline until nothing sleeps."""
        for _ in range(max_steps):
            await asyncio.sleep(0)
            d = self.next_deadline()
            if d is None:
                return
            self.set(d)

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
