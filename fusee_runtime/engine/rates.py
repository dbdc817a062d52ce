"""Rates over time: at most n attempts of a step start in any window of `per`.

A step with `rate=Rate(n, per)` takes a slot of its rate before each attempt
(after its limit's permit, if it has one), in a window of its own per rate and
key (`Rate.label`). A slot is free when fewer than n were taken in the last
`per`; otherwise the attempt waits, on the engine's clock, until the oldest of
the last n is `per` old. Waiters of one window take their slots in the order
they came.

A slot taken is recorded (`RateTaken`, a record of no run) and durable before
its attempt runs: a crash, a restart or a takeover finds every slot an attempt
may have used, in the journal or in the checkpoint (`snapshot`), and counts it.
So no restart bursts past the rate; a slot whose record the crash lost was used
by no attempt. What a slot costs: one record, in the next group commit.

`set(name, permits, per_s)` (`Engine.rate`, `fusee limits NAME N --per S`) gives
rate `name` and each of its keys a size of its own from then on, whatever its
steps' `Rate` says: recorded (`RateSet`) and held in checkpoints, so it holds
after a restart; waiters look again at once.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fusee_runtime.model.records import RateSet, RateTaken, Record


@dataclass
class _Window:
    """The slots of one rate (and key) taken lately: (when, lsn), oldest first."""

    permits: int
    per_s: float
    slots: deque[tuple[float, int]] = field(default_factory=deque)
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Held by the waiter whose turn it is: the others wait in the order they came."""
    waiting: int = 0
    resized: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the rate's size is set at run time: the waiter whose turn it is looks
    again."""


@dataclass(frozen=True)
class RateInfo:
    """One rate window as `Engine.rates()` shows it: `name` (`"<rate>"` or
    `"<rate>/<key>"`), its `permits` slots per `per_s` seconds, the slots `taken` in the
    last window, the attempts `waiting`, and when the next slot frees (`next_at`, Unix
    seconds; None: one is free now)."""

    name: str
    permits: int
    per_s: float
    taken: int
    waiting: int
    next_at: float | None
    set: bool = False
    """Its size was set at run time (`Engine.rate`), not by its steps' `Rate`."""


class Rates:
    """The rate windows of an engine. On the engine's loop only."""

    def __init__(
        self,
        now: Callable[[], float],
        sleep_until: Callable[[float], Awaitable[None]],
        append: Callable[[Record], int],
        durable: Callable[[int], Awaitable[None]],
        changed: Callable[[], None],
    ) -> None:
        """`changed` wakes whoever follows the engine (`Engine.wait_until`) when an
        attempt begins to wait for a slot or takes one."""
        self._now = now
        self._sleep_until = sleep_until
        self._append = append
        self._durable = durable
        self._changed = changed
        self._windows: dict[str, _Window] = {}
        self._sizes: dict[str, tuple[int, float, int]] = {}
        """Sizes set at run time, by rate name: (permits, per_s, lsn of its `RateSet`)."""

    async def take(
        self, label: str, permits: int, per_s: float, waits: Callable[[float], None]
    ) -> None:
        """Returns once a slot of window `label` is taken for an attempt and durable;
        `waits(at)` is told when the attempt must wait until `at` for it. Cancelled, it
        takes none (or the one it took is used by no attempt: it still counts)."""
        window = self._window(label, permits, per_s)
        window.waiting += 1
        try:
            if window.turn.locked():  # others came first: it waits behind them
                waits(max(self._free_at(window), self._now()))
                self._changed()
            async with window.turn:
                while (free_at := self._free_at(window)) > (now := self._now()):
                    waits(free_at)
                    self._changed()
                    window.resized.clear()
                    await self._until(free_at, window.resized)
                lsn = self._append(RateTaken(label, permits, per_s, now))
                self._add(window, now, lsn)
        finally:
            window.waiting -= 1
        self._changed()
        await self._durable(lsn)

    async def set(self, name: str, permits: int, per_s: float) -> None:
        """Records rate `name`'s size and applies it at once; returns once durable."""
        lsn = self._append(RateSet(name, permits, per_s, self._now()))
        self._resize(lsn, name, permits, per_s)
        self._changed()
        await self._durable(lsn)

    def replay(self, lsn: int, rec: RateTaken | RateSet) -> None:
        """A `RateTaken` or `RateSet` read from the journal on open."""
        if isinstance(rec, RateSet):
            self._resize(lsn, rec.name, rec.permits, rec.per_s)
        else:
            self._add(self._window(rec.name, rec.permits, rec.per_s), rec.taken_at, lsn)

    def snapshot(self, lsn: int) -> dict[str, Any]:
        """The windows and the sizes set as of `lsn`, for a checkpoint at `lsn`:
        {"windows": {label: [permits, per_s, [[when, lsn], ...]]}, "sizes": {name:
        [permits, per_s, lsn]}}; what came later is in the segments after it."""
        windows = {
            label: [w.permits, w.per_s, [[at, n] for at, n in w.slots if n <= lsn]]
            for label, w in self._windows.items()
        }
        sizes = {name: list(size) for name, size in self._sizes.items() if size[2] <= lsn}
        return {"windows": windows, "sizes": sizes}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """The windows and sizes a checkpoint holds (`snapshot`)."""
        for name, (permits, per_s, lsn) in snapshot.get("sizes", {}).items():
            self._resize(int(lsn), name, int(permits), float(per_s))
        for label, (permits, per_s, slots) in snapshot.get("windows", {}).items():
            window = self._window(label, int(permits), float(per_s))
            for at, lsn in slots:
                self._add(window, float(at), int(lsn))

    def list(self) -> builtins.list[RateInfo]:
        """Every window, and every size set at run time that no window uses yet, by name."""
        now = self._now()
        out = {
            name: RateInfo(name, permits, per_s, 0, 0, None, True)
            for name, (permits, per_s, _) in self._sizes.items()
        }
        for label, w in self._windows.items():
            taken = sum(1 for at, _ in w.slots if at > now - w.per_s)
            free_at = self._free_at(w)
            next_at = free_at if free_at > now else None
            is_set = label.partition("/")[0] in self._sizes
            out[label] = RateInfo(label, w.permits, w.per_s, taken, w.waiting, next_at, is_set)
        return [out[name] for name in sorted(out)]

    def _window(self, label: str, permits: int, per_s: float) -> _Window:
        """Window `label`, made on first use. Its size: the one set at run time for its
        rate, else the newest `Rate` given for it (a step changed in a deploy: its next
        attempt's rate holds)."""
        size = self._sizes.get(label.partition("/")[0])
        if size is not None:
            permits, per_s, _ = size
        window = self._windows.get(label)
        if window is None:
            window = self._windows[label] = _Window(permits, per_s)
        else:
            window.permits, window.per_s = permits, per_s
        return window

    def _resize(self, lsn: int, name: str, permits: int, per_s: float) -> None:
        known = self._sizes.get(name)
        if known is not None and known[2] >= lsn:
            return  # (a checkpoint's size, read again from a segment after it)
        self._sizes[name] = (permits, per_s, lsn)
        for label, window in self._windows.items():
            if label.partition("/")[0] == name:
                window.permits, window.per_s = permits, per_s
                window.resized.set()

    async def _until(self, at: float, resized: asyncio.Event) -> None:
        """Sleeps on the engine's clock until `at`, or until the rate is resized."""
        sleep = asyncio.ensure_future(self._sleep_until(at))
        woken = asyncio.ensure_future(resized.wait())
        try:
            await asyncio.wait({sleep, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleep.cancel()
            woken.cancel()

    @staticmethod
    def _free_at(window: _Window) -> float:
        """When the window has a free slot: when the n-th newest slot is `per` old."""
        if len(window.slots) < window.permits:
            return float("-inf")
        return window.slots[-window.permits][0] + window.per_s

    @staticmethod
    def _add(window: _Window, at: float, lsn: int) -> None:
        if window.slots and lsn <= window.slots[-1][1]:
            return  # (a checkpoint's slot, read again from a segment after it)
        window.slots.append((at, lsn))
        # The newest `permits` say when the next slot frees; older ones never will again.
        while len(window.slots) > max(window.permits, 1):
            window.slots.popleft()
