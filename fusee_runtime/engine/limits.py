"""Named limits: how many attempts of the steps with `limit=` run at once.

A step with `limit="stripe"` takes a permit of limit "stripe" before each
attempt and gives it back when the attempt's function returns; an attempt
given up on whose thread runs on keeps it until the thread returns, so the
limit counts what really runs. With `limit_key`, each key (a tenant, an
account) has permits of its own, as many as the limit's size: a pool made on
first use and dropped once idle.

The size is set by `engine.limit(name, permits)`, recorded in the journal
(`LimitSet`) and in checkpoints, so it holds after a restart; a limit never
set has `DEFAULT_PERMITS`. Permits are not recorded: they belong to the
process, and a restarted engine holds none of a dead one's.

While waiting for a permit, a higher `priority` goes first; waiters of one
priority take turns by `fairness` key, a turn giving its key at most its
`fairness_weight` permits (the weight of the waiter served, at most
`FAIRNESS_WEIGHT_MAX`), so a tenant with 10,000 waiting steps does not starve
one with 10. A run counts once: while some of its waiters queue under one key,
its waiters with other keys queue behind them, under that key, so code that
makes a key per step does not take a turn per step. One key's waiters go in
arrival order. A waiter who gives up (its run cancelled, the engine closing)
leaves the queue, and a permit granted to it at that moment is given back.
"""

from __future__ import annotations

import asyncio
import builtins
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from fusee_runtime.engine.queues import Queues
from fusee_runtime.engine.rates import Rates
from fusee_runtime.errors import Rejected
from fusee_runtime.model.records import LimitSet, Record
from fusee_runtime.scope import check_name

DEFAULT_PERMITS = 1
"""The size of a limit that `engine.limit` never set: one attempt at a time."""
PERMITS_MAX = 1_000_000
"""The largest size of a limit."""
FAIRNESS_WEIGHT_MAX = 10
"""The largest `fairness_weight`: a key's turn is at most 10 permits, so a key with
one waiter is served within 10 permits a key before it in the ring."""


@dataclass(frozen=True)
class LimitInfo:
    """One limit as `engine.limits()` and `fusee limits` show it.

    `name` is the limit's, or `"name/key"` for the permits of one `limit_key`.
    `permits` is its size (`set`: by `engine.limit`, else `DEFAULT_PERMITS`);
    `in_use` the permits held now, `waiting` the attempts waiting for one.
    Counted since the engine opened: `max_in_use`, the most held at once, and
    `granted`, the permits given, by fairness key ("" for steps without one).
    """

    name: str
    permits: int
    set: bool
    in_use: int = 0
    waiting: int = 0
    max_in_use: int = 0
    granted: dict[str, int] = field(default_factory=dict)


class _Waiter:
    __slots__ = ("fairness", "future", "gone", "run", "weight")

    def __init__(self, future: asyncio.Future[None], fairness: str, weight: int, run: str) -> None:
        self.future = future
        self.fairness = fairness
        self.weight = weight
        self.run = run
        self.gone = False


class _Level:
    """The waiters of one priority: a queue per fairness key, the keys taking turns."""

    __slots__ = ("queues", "ring", "runs", "taken")

    def __init__(self) -> None:
        self.ring: deque[str] = deque()
        self.queues: dict[str, deque[_Waiter]] = {}
        self.taken = 0  # permits the key at the head of the ring took this turn
        # run id: [the key its waiters queue under, how many of them are queued]
        self.runs: dict[str, list[Any]] = {}

    def enqueue(self, waiter: _Waiter) -> None:
        """Queues `waiter` under its key, or under the key its run's waiters queue."""
        counted = self.runs.get(waiter.run)
        if counted is None:
            counted = self.runs[waiter.run] = [waiter.fairness, 0]
        counted[1] += 1
        queue = self.queues.get(counted[0])
        if queue is None:
            queue = self.queues[counted[0]] = deque()
            self.ring.append(counted[0])
        queue.append(waiter)

    def dequeued(self, waiter: _Waiter) -> None:
        counted = self.runs[waiter.run]
        counted[1] -= 1
        if counted[1] == 0:
            del self.runs[waiter.run]


class _Pool:
    """The permits of one limit, or of one key of it."""

    __slots__ = ("granted", "in_use", "label", "levels", "max_in_use", "name", "waiting")

    def __init__(self, name: str, label: str) -> None:
        self.name = name
        self.label = label
        self.in_use = 0
        self.waiting = 0
        self.max_in_use = 0
        self.granted: dict[str, int] = {}
        self.levels: dict[int, _Level] = {}


class Permit:
    """A permit held by one attempt; `release` gives it back (once)."""

    __slots__ = ("_limits", "_pool")

    def __init__(self, limits: Limits, pool: _Pool) -> None:
        self._limits = limits
        self._pool: _Pool | None = pool

    def release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            self._limits._release(pool)


class Limits:
    """The sizes of the named limits and their permits. On the engine's loop only."""

    def __init__(
        self,
        now: Callable[[], float],
        append: Callable[[Record], int],
        durable: Callable[[int], Awaitable[None]],
        changed: Callable[[], None],
        sleep_until: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        """`append` records a `LimitSet`, `durable(lsn)` waits until it is durable and
        `changed` wakes whoever follows the engine (`Engine.wait_until`); the steps'
        rates over time (`rates`) wait on `sleep_until`, the engine's clock."""
        self._now = now
        self._append = append
        self._durable = durable
        self._changed = changed
        self._sizes: dict[str, tuple[int, int]] = {}  # name: (permits, lsn of its LimitSet)
        self._set: list[tuple[int, str, int]] = []  # every (lsn, name, permits), for snapshots
        self._pools: dict[str, _Pool] = {}
        self.rates = Rates(now, sleep_until or _no_clock, append, durable, changed)
        """The windows of the steps' rates over time (`rate=`)."""
        self.queues = Queues(now, append, durable, changed)
        """The queues of runs (`start(queue=...)`)."""

    # -- sizes -------------------------------------------------------------------------

    def size(self, name: str) -> int:
        return self._sizes[name][0] if name in self._sizes else DEFAULT_PERMITS

    async def set(self, name: str, permits: int) -> None:
        """Records limit `name`'s size and applies it at once (waiters go in if it
        grew; if it shrank, holders keep their permits and no one goes in until fewer
        hold them); returns once it is durable.

        Raises:
            Rejected: a name that is not one, or permits not from 0 to `PERMITS_MAX`.
        """
        check_limit(name)
        if type(permits) is not int or not 0 <= permits <= PERMITS_MAX:
            # int's repr refuses a number of over 4,300 digits.
            shown = "a larger number" if type(permits) is int and permits > 2**64 else permits
            raise Rejected(
                f"limit {name!r}: permits is a whole number from 0 to {PERMITS_MAX}, not {shown!r}"
            )
        lsn = self._append(LimitSet(name, permits, self._now()))
        self._apply(lsn, name, permits)
        for pool in builtins.list(self._pools.values()):
            if pool.name == name:
                self._grant(pool)
        self._changed()
        await self._durable(lsn)

    def replay(self, lsn: int, rec: LimitSet) -> None:
        """A `LimitSet` read from the journal on open."""
        self._apply(lsn, rec.name, rec.permits)

    def restore(self, snapshot: dict[str, builtins.list[int]]) -> None:
        """The sizes a checkpoint holds (`snapshot`)."""
        for name, (permits, lsn) in snapshot.items():
            self._apply(lsn, name, permits)

    def snapshot(self, lsn: int) -> dict[str, builtins.list[int]]:
        """The sizes as of `lsn`, for a checkpoint at `lsn`: {name: [permits, lsn]}. A
        size set later is in the segments after it."""
        out: dict[str, builtins.list[int]] = {}
        for at, name, permits in self._set:  # in lsn order
            if at <= lsn:
                out[name] = [permits, at]
        return out

    def _apply(self, lsn: int, name: str, permits: int) -> None:
        if name not in self._sizes or self._sizes[name][1] < lsn:
            self._sizes[name] = (permits, lsn)
            self._set.append((lsn, name, permits))  # rare: all kept

    # -- permits -----------------------------------------------------------------------

    async def acquire(
        self, name: str, key: str | None, priority: int, fairness: str, weight: int, run: str
    ) -> Permit:
        """Waits for a permit of limit `name` (of its `key`) for a step of run `run`;
        cancelled, it takes none."""
        label = name if key is None else f"{name}/{key}"
        pool = self._pools.get(label)
        if pool is None:
            pool = self._pools[label] = _Pool(name, label)
        if pool.waiting == 0 and pool.in_use < self.size(name):
            self._take(pool, fairness)
            self._changed()
            return Permit(self, pool)
        waiter = _Waiter(asyncio.get_running_loop().create_future(), fairness, weight, run)
        level = pool.levels.get(priority)
        if level is None:
            level = pool.levels[priority] = _Level()
        level.enqueue(waiter)
        pool.waiting += 1
        self._changed()
        try:
            await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(pool)  # granted as it gave up: given back
            elif not waiter.gone:  # (`_grant` may have seen its cancel first)
                waiter.gone = True
                pool.waiting -= 1
                self._tidy(pool)
                self._changed()
            raise
        return Permit(self, pool)

    def _take(self, pool: _Pool, fairness: str) -> None:
        pool.in_use += 1
        pool.max_in_use = max(pool.max_in_use, pool.in_use)
        pool.granted[fairness] = pool.granted.get(fairness, 0) + 1

    def _release(self, pool: _Pool) -> None:
        pool.in_use -= 1
        self._grant(pool)
        self._tidy(pool)
        self._changed()

    def _grant(self, pool: _Pool) -> None:
        """Gives free permits to the waiters whose turn it is."""
        size = self.size(pool.name)
        while pool.waiting and pool.in_use < size and pool.levels:
            priority = max(pool.levels)
            level = pool.levels[priority]
            fairness = level.ring[0]
            queue = level.queues[fairness]
            waiter = queue.popleft()
            level.dequeued(waiter)
            if not waiter.gone and waiter.future.done():
                # Cancelled in this same tick, before its task could say so: it is gone.
                waiter.gone = True
                pool.waiting -= 1
            if not waiter.gone:
                pool.waiting -= 1
                waiter.future.set_result(None)
                self._take(pool, waiter.fairness)
                level.taken += 1
            if not queue:  # the key has no one left: the next key's turn
                level.ring.popleft()
                del level.queues[fairness]
                level.taken = 0
                if not level.ring:
                    del pool.levels[priority]
            elif level.taken >= waiter.weight:  # its turn is over
                level.ring.rotate(-1)
                level.taken = 0

    def _tidy(self, pool: _Pool) -> None:
        """An idle pool: its queues go (only given-up waiters are left), and the pool of
        a key goes too."""
        if pool.waiting:
            return
        pool.levels.clear()
        if pool.in_use == 0 and pool.label != pool.name:
            del self._pools[pool.label]

    # -- reading -----------------------------------------------------------------------

    def list(self) -> builtins.list[LimitInfo]:
        """Every limit set or in use, and every key of one in use, by name."""
        out = {name: LimitInfo(name, permits, True) for name, (permits, _) in self._sizes.items()}
        for pool in self._pools.values():
            out[pool.label] = LimitInfo(
                pool.label,
                self.size(pool.name),
                pool.name in self._sizes,
                pool.in_use,
                pool.waiting,
                pool.max_in_use,
                dict(pool.granted),
            )
        return [out[label] for label in sorted(out)]


def check_limit(name: str) -> str:
    """A limit name as given, or `Rejected`: a name as `check_name` takes it, without
    '/' (a limit's key is shown after one)."""
    check_name("limit", name)
    if "/" in name:
        raise Rejected(f"a limit name may not contain '/': {name!r}")
    return name


async def _no_clock(at: float) -> None:
    raise AssertionError("an engine's limits wait for rates on its clock")
