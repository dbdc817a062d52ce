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
    """The size the last slot was taken under (what `fusee limits` shows)."""
    slots: deque[tuple[float, int]] = field(default_factory=deque)
    keep: int = 1
    """How many of the newest slots it keeps: the most any rate of this window counts."""
    span: float = 0.0
    """The longest window of any rate of it: slots older than this count for none."""
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
        """Returns once a slot of window `label` is taken for an attempt and durable: at
        most `permits` in any `per_s` (unless the rate's size was set at run time);
        `waits(at)` is told when the attempt must wait until `at` for it. Cancelled, it
        takes none (or the one it took is used by no attempt: it still counts)."""
        window = self._window(label)
        window.waiting += 1
        try:
            size = self._size(label, permits, per_s)
            if window.waiting > 1 or self._free_at(window, *size) > self._now():
                # Others came first, or no slot is free: it waits, and says so.
                waits(max(self._free_at(window, *size), self._now()))
                self._changed()
            async with window.turn:
                now, size = await self._free(window, label, permits, per_s, waits)
                lsn = self._append(RateTaken(label, *size, now))
                self._add(window, now, lsn, *size)
        finally:
            window.waiting -= 1
        self._changed()
        await self._durable(lsn)

    async def until_free(
        self, label: str, permits: int, per_s: float, waits: Callable[[float], None]
    ) -> None:
        """Returns once window `label` has a free slot, taking none (a step waits so
        before it takes its limit's permit: the slot itself is taken after)."""
        window = self._window(label)
        window.waiting += 1
        try:
            await self._free(window, label, permits, per_s, waits)
        finally:
            window.waiting -= 1

    async def _free(
        self,
        window: _Window,
        label: str,
        permits: int,
        per_s: float,
        waits: Callable[[float], None],
    ) -> tuple[float, tuple[int, float]]:
        """Waits until `window` has a free slot under the size that holds (looked at again
        when it is set at run time); returns the instant and that size."""
        while True:
            size = self._size(label, permits, per_s)
            free_at = self._free_at(window, *size)
            if free_at <= (now := self._now()):
                return now, size
            waits(free_at)
            self._changed()
            window.resized.clear()
            await self._until(free_at, window.resized)

    def next_free(self, label: str, permits: int, per_s: float) -> float:
        """When window `label`'s next slot is free (now, or in the future): the slot
        `reserve` would take now."""
        window = self._windows.get(label)
        now = self._now()
        if window is None:
            return now
        size = self._size(label, permits, per_s)
        last = window.slots[-1][0] if window.slots else now
        return max(self._free_at(window, *size), now, last)  # (slots stay in order)

    def reserve(self, label: str, permits: int, per_s: float, not_before: float) -> float:
        """Takes window `label`'s next free slot at `not_before` or later, in the future if
        it must be (a throttled start begins then), and returns its instant. Its record is
        appended, not yet durable: the start that took it waits for what it appends after."""
        window = self._window(label)
        size = self._size(label, permits, per_s)
        last = window.slots[-1][0] if window.slots else not_before
        at = max(self._free_at(window, *size), not_before, last)  # (slots stay in order)
        lsn = self._append(RateTaken(label, *size, at))
        self._add(window, at, lsn, *size)
        self._changed()
        return at

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
            self._add(self._window(rec.name), rec.taken_at, lsn, rec.permits, rec.per_s)

    def snapshot(self, lsn: int) -> dict[str, Any]:
        """The windows and the sizes set as of `lsn`, for a checkpoint at `lsn`:
        {"windows": {label: [permits, per_s, [[when, lsn], ...]]}, "sizes": {name:
        [permits, per_s, lsn]}}; what came later is in the segments after it."""
        self._sweep()
        windows = {
            label: [w.permits, w.per_s, [[at, n] for at, n in w.slots if n <= lsn], w.keep]
            for label, w in self._windows.items()
        }
        sizes = {name: list(size) for name, size in self._sizes.items() if size[2] <= lsn}
        return {"windows": windows, "sizes": sizes}

    def restore(self, snapshot: dict[str, Any]) -> None:
        """The windows and sizes a checkpoint holds (`snapshot`)."""
        for name, (permits, per_s, lsn) in snapshot.get("sizes", {}).items():
            self._resize(int(lsn), name, int(permits), float(per_s))
        for label, (permits, per_s, slots, keep) in snapshot.get("windows", {}).items():
            window = self._window(label)
            window.keep = max(window.keep, int(keep))
            window.span = max(window.span, float(per_s))
            for at, lsn in slots:
                self._add(window, float(at), int(lsn), int(permits), float(per_s))

    def list(self) -> builtins.list[RateInfo]:
        """Every window, and every size set at run time that no window uses yet, by name."""
        self._sweep()
        now = self._now()
        out = {
            name: RateInfo(name, permits, per_s, 0, 0, None, True)
            for name, (permits, per_s, _) in self._sizes.items()
        }
        for label, w in self._windows.items():
            permits, per_s = self._size(label, w.permits, w.per_s)
            taken = sum(1 for at, _ in w.slots if at > now - per_s)
            free_at = self._free_at(w, permits, per_s)
            next_at = free_at if free_at > now else None
            is_set = label.partition("/")[0] in self._sizes
            out[label] = RateInfo(label, permits, per_s, taken, w.waiting, next_at, is_set)
        return [out[name] for name in sorted(out)]

    def _window(self, label: str) -> _Window:
        """Window `label`, made on first use."""
        window = self._windows.get(label)
        if window is None:
            window = self._windows[label] = _Window(0, 0.0)
        return window

    def _size(self, label: str, permits: int, per_s: float) -> tuple[int, float]:
        """The size a slot of window `label` is taken under: the one set at run time for
        its rate, else the step's own `Rate` (steps that share a rate's name with sizes
        of their own each hold theirs over all of its slots)."""
        size = self._sizes.get(label.partition("/")[0])
        return (size[0], size[1]) if size is not None else (permits, per_s)

    def _sweep(self) -> None:
        """Drops the windows whose every slot is older than their window and that no one
        waits for: keys come and go (a tenant, an order), and none counts any more."""
        now = self._now()
        idle = [
            label
            for label, w in self._windows.items()
            if not w.waiting
            and not w.turn.locked()
            and (not w.slots or w.slots[-1][0] <= now - w.span)
        ]
        for label in idle:
            del self._windows[label]

    def _resize(self, lsn: int, name: str, permits: int, per_s: float) -> None:
        known = self._sizes.get(name)
        if known is not None and known[2] >= lsn:
            return  # (a checkpoint's size, read again from a segment after it)
        self._sizes[name] = (permits, per_s, lsn)
        for label, window in self._windows.items():
            if label.partition("/")[0] == name:
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
    def _free_at(window: _Window, permits: int, per_s: float) -> float:
        """When the window has a free slot for a rate of `permits` per `per_s`: when the
        `permits`-th newest slot is `per_s` old."""
        if len(window.slots) < permits:
            return float("-inf")
        return window.slots[-permits][0] + per_s

    @staticmethod
    def _add(window: _Window, at: float, lsn: int, permits: int, per_s: float) -> None:
        if window.slots and lsn <= window.slots[-1][1]:
            return  # (a checkpoint's slot, read again from a segment after it)
        window.slots.append((at, lsn))
        window.permits, window.per_s = permits, per_s
        window.keep = max(window.keep, permits)
        window.span = max(window.span, per_s)
        # The newest `keep` say when the next slot frees; older ones never will again.
        while len(window.slots) > window.keep:
            window.slots.popleft()
