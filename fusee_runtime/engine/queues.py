"""Queues of runs: how many runs of a queue, and of each of its keys, run at once.

A run started with `queue=NAME` (`engine.start`, or `@workflow(queue=...)`) is
recorded at once and shows as `queued`: no code of it runs until its queue lets
it in. Then `RunAdmitted` is recorded and its code runs; it holds its place until
it closes, however long it parks. `queue_key` splits a queue (a tenant, an
account): each key has `per_key` places of its own, within the queue's
`concurrency`.

Who goes in next: within a key, the highest `priority` first, then the order of
the starts; between keys, the highest priority at the head of a key first, and
keys of one priority take turns (a key with 1,000 runs waiting does not hold up
a key with one). A run let in is recorded before its code runs, and a run's
place is given back when its close is appended: so after a crash the runs let
in are the journal's, and the same ones hold the places again (a run let in
whose `RunAdmitted` did not reach the disk ran no step that did).

The sizes are set by `engine.queue(name, concurrency, per_key)`, recorded
(`QueueSet`) and held in checkpoints; a queue never set lets in
`DEFAULT_CONCURRENCY` run at a time. 0 lets none in (the queue is paused).
A queue is the journal's: on PostgreSQL with several journals each journal's
runs queue apart (`docs/flow.md`).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fusee_runtime.errors import JournalFailed, Rejected
from fusee_runtime.model.records import QueueSet, Record
from fusee_runtime.scope import check_name

if TYPE_CHECKING:
    from fusee_runtime.engine.state import Run

DEFAULT_CONCURRENCY = 1
"""How many runs of a queue that `engine.queue` never set run at once."""
RUNS_MAX = 1_000_000
"""The largest `concurrency` or `per_key` of a queue."""


@dataclass(frozen=True)
class QueueInfo:
    """One queue as `engine.queues()` and `fusee queues` show it: its sizes (None: any
    number; `set`: by `engine.queue`), the runs it let in that are open (`running`),
    the runs waiting (`queued`) and the keys with either."""

    name: str
    concurrency: int | None
    per_key: int | None
    running: int
    queued: int
    keys: int
    set: bool = False


@dataclass
class _Key:
    # Runs waiting, in the order they go in: (-priority, start lsn, run id).
    waiting: list[tuple[int, int, str]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)


@dataclass
class _Queue:
    keys: dict[str, _Key] = field(default_factory=dict)
    running: int = 0
    # The keys with runs waiting, in the order they take turns.
    ring: deque[str] = field(default_factory=deque)


class Queues:
    """The queues of an engine's runs. On the engine's loop only."""

    def __init__(
        self,
        now: Callable[[], float],
        append: Callable[[Record], int],
        durable: Callable[[int], Awaitable[None]],
        changed: Callable[[], None],
    ) -> None:
        """`append` records a `QueueSet`, `durable(lsn)` waits until it is durable and
        `changed` wakes whoever follows the engine. The driver sets `admit`: it records
        a run's `RunAdmitted` and runs its code (an engine that drives no code sets
        none, and lets no run in)."""
        self._now = now
        self._append = append
        self._durable = durable
        self._changed = changed
        self._sizes: dict[str, tuple[int | None, int | None, int]] = {}
        """By name: (concurrency, per_key, lsn of its `QueueSet`)."""
        self._set: builtins.list[tuple[int, str, int | None, int | None]] = []
        self._queues: dict[str, _Queue] = {}
        self._waiting: dict[str, Run] = {}
        self._urgent: set[str] = set()
        """Waiting runs to let in whatever the size: cancelled, with compensations to run."""
        self._soon = False
        self.admit: Callable[[Run], None] | None = None
        self.admitting: Callable[[], bool] = lambda: True
        """Whether runs may go in now (not while the engine closes, or its journal failed)."""

    # -- runs ------------------------------------------------------------------------

    def holds(self, run: Run) -> bool:
        """Whether open `run` waits in its queue (then its code does not run now: it
        runs when `admit` lets it in). A run let in counts against its queue."""
        line = self._line(run, make=True)
        if line is None:
            return False
        queue, name, key = line
        if run.admitted:
            if run.run_id not in key.running:
                _count_in(queue, key, run)
            return False
        if run.run_id not in self._waiting:
            self._waiting[run.run_id] = run
            if not key.waiting:
                queue.ring.append(name)
            entry = _entry(run)
            bisect.insort(key.waiting, entry)
            run.live.queued = lambda: _place(key, entry, name)
            if run.cancel_reason is not None and run.ops:
                self._urgent.add(run.run_id)  # (see `let_in_now`: after a reopen)
        self._look()
        return True

    def let_in_now(self, run: Run) -> None:
        """Lets waiting `run` in at once, whatever its queue's size (a cancelled run whose
        code must run its compensations)."""
        line = self._line(run, make=False)
        if line is None or run.run_id not in self._waiting or self.admit is None:
            return
        queue, name, key = line
        self._unwait(queue, key, name, run)
        _count_in(queue, key, run)
        self.admit(run)

    def _line(self, run: Run, make: bool) -> tuple[_Queue, str, _Key] | None:
        """`run`'s queue, the name of its key ("" for none) and the key (None: it is in no
        queue, or, unless `make`, in none this engine has seen)."""
        spec = run.queue
        if spec is None:
            return None
        name = spec.get("key") or ""
        if make:
            queue = self._queues.setdefault(spec["name"], _Queue())
            return queue, name, queue.keys.setdefault(name, _Key())
        found = self._queues.get(spec["name"])
        key = found.keys.get(name) if found is not None else None
        return None if found is None or key is None else (found, name, key)

    def _unwait(self, queue: _Queue, key: _Key, name: str, run: Run) -> None:
        """Takes waiting `run` out of its key's line (found by its place, not searched)."""
        del self._waiting[run.run_id]
        entry = _entry(run)
        at = bisect.bisect_left(key.waiting, entry)
        if at < len(key.waiting) and key.waiting[at] == entry:
            del key.waiting[at]
        if not key.waiting:
            queue.ring.remove(name)

    def closed(self, run: Run) -> None:
        """Open `run` closed (its close appended): the place it held, or waited for, is
        free."""
        line = self._line(run, make=False)
        if line is None:
            return
        queue, name, key = line
        run.live.queued = None
        if run.run_id in key.running:
            key.running.discard(run.run_id)
            queue.running -= 1
        elif run.run_id in self._waiting:
            self._unwait(queue, key, name, run)
        if not key.running and not key.waiting:
            del queue.keys[name]
        self._look()

    def _look(self) -> None:
        """Lets runs in soon (once all of what happens now is known: on open, every run
        is seen before any goes in)."""
        if not self._soon and self.admit is not None and self._waiting:
            self._soon = True
            asyncio.get_running_loop().call_soon(self._let_in)

    def _let_in(self) -> None:
        self._soon = False
        admit = self.admit
        if admit is None or not self.admitting():
            return
        for run_id in sorted(self._urgent):
            if run_id in self._waiting:
                self.let_in_now(self._waiting[run_id])
        self._urgent.clear()
        for name, queue in builtins.list(self._queues.items()):
            concurrency, per_key = self.size(name)
            while queue.ring and (concurrency is None or queue.running < concurrency):
                run = self._next(queue, per_key)
                if run is None:
                    break
                try:
                    admit(run)
                except JournalFailed:
                    return  # nothing more is recorded: the runs stay queued for the next life
        self._changed()

    def _next(self, queue: _Queue, per_key: int | None) -> Run | None:
        """Takes the next run of `queue` that may go in (None: none may) and counts it in."""
        best: tuple[tuple[int, int, str], int] | None = None
        for i, name in enumerate(queue.ring):
            key = queue.keys[name]
            if per_key is not None and len(key.running) >= per_key:
                continue
            head = key.waiting[0]
            if best is None or head[0] < best[0][0]:  # a higher priority; else the turn's
                best = (head, i)
        if best is None:
            return None
        (_, _, run_id), i = best
        name = queue.ring[i]
        del queue.ring[i]
        key = queue.keys[name]
        key.waiting.pop(0)
        if key.waiting:
            queue.ring.append(name)
        run = self._waiting.pop(run_id)
        _count_in(queue, key, run)
        return run

    # -- sizes -------------------------------------------------------------------------

    def size(self, name: str) -> tuple[int | None, int | None]:
        """Queue `name`'s (concurrency, per_key), set or the default."""
        if name in self._sizes:
            return self._sizes[name][:2]
        return DEFAULT_CONCURRENCY, None

    async def set(self, name: str, concurrency: int | None, per_key: int | None) -> None:
        """Records queue `name`'s sizes and applies them at once (runs go in if they
        grew; if they shrank, runs in keep their places); returns once durable.

        Raises:
            Rejected: not a queue name, or a size not None nor from 0 to `RUNS_MAX`.
        """
        check_queue(name)
        for what, n in (("concurrency", concurrency), ("per_key", per_key)):
            if n is not None and (type(n) is not int or not 0 <= n <= RUNS_MAX):
                shown = "a larger number" if type(n) is int and n > 2**64 else repr(n)
                raise Rejected(
                    f"queue {name!r}: {what} is None or a whole number from 0 to "
                    f"{RUNS_MAX}, not {shown}"
                )
        if name in self._sizes and self._sizes[name][:2] == (concurrency, per_key):
            # As it is: an app that sets its queues at each start records nothing more.
            await self._durable(self._sizes[name][2])
            return
        lsn = self._append(QueueSet(name, concurrency, per_key, self._now()))
        self._apply(lsn, name, concurrency, per_key)
        self._look()
        self._changed()
        await self._durable(lsn)

    def replay(self, lsn: int, rec: QueueSet) -> None:
        """A `QueueSet` read from the journal on open."""
        self._apply(lsn, rec.name, rec.concurrency, rec.per_key)

    def restore(self, snapshot: dict[str, builtins.list[int | None]]) -> None:
        """The sizes a checkpoint holds (`snapshot`)."""
        for name, (concurrency, per_key, lsn) in snapshot.items():
            self._apply(lsn or 0, name, concurrency, per_key)

    def snapshot(self, lsn: int) -> dict[str, builtins.list[int | None]]:
        """The sizes as of `lsn`, for a checkpoint at `lsn`: {name: [concurrency, per_key,
        lsn]}. A size set later is in the segments after it."""
        out: dict[str, builtins.list[int | None]] = {}
        for at, name, concurrency, per_key in self._set:  # in lsn order
            if at <= lsn:
                out[name] = [concurrency, per_key, at]
        return out

    def _apply(self, lsn: int, name: str, concurrency: int | None, per_key: int | None) -> None:
        if name not in self._sizes or self._sizes[name][2] < lsn:
            self._sizes[name] = (concurrency, per_key, lsn)
            self._set.append((lsn, name, concurrency, per_key))  # rare: all kept

    def list(self) -> builtins.list[QueueInfo]:
        """Every queue set or in use, by name."""
        out = []
        for name in sorted(self._sizes.keys() | self._queues.keys()):
            queue = self._queues.get(name, _Queue())
            waiting = sum(len(key.waiting) for key in queue.keys.values())
            concurrency, per_key = self.size(name)
            out.append(
                QueueInfo(
                    name,
                    concurrency,
                    per_key,
                    queue.running,
                    waiting,
                    len(queue.keys),
                    name in self._sizes,
                )
            )
        return out


def _count_in(queue: _Queue, key: _Key, run: Run) -> None:
    """`run` is let in: it holds a place of its queue and its key, and waits no more."""
    key.running.add(run.run_id)
    queue.running += 1
    run.live.queued = None


def _entry(run: Run) -> tuple[int, int, str]:
    """A waiting run's place in its key's line: higher priorities first, then starts."""
    spec = run.queue or {}
    return -int(spec.get("priority") or 0), run.start_lsn, run.run_id


def _place(key: _Key, entry: tuple[int, int, str], name: str) -> str:
    """Where a waiting run stands in its key, for people: "2nd of 5 in key 'acme'"."""
    n = bisect.bisect_left(key.waiting, entry) + 1
    nth = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    where = f" in key {name!r}" if name else ""
    return f"{n}{nth} of {len(key.waiting)}{where}"


def check_queue(name: str) -> str:
    """Raises `Rejected` unless `name` is one a queue may have; returns it."""
    check_name("queue", name)
    return name


PRIORITY_MAX = 2**31 - 1
"""The largest `priority` of a run in a queue (and minus it, the smallest)."""


def queue_spec(
    default: str | None, queue: str | None, key: str | None, priority: int
) -> dict[str, object] | None:
    """What a start records of the queue it names (`queue`, else the workflow's
    `default`): {"name", "key", "priority"}; None: no queue.

    Raises:
        Rejected: a bad queue name, key or priority; a key or priority with no queue.
    """
    name = queue if queue is not None else default
    if name is None:
        if key is not None or priority != 0:
            raise Rejected("queue_key and priority go with a queue (queue=, or @workflow(queue=))")
        return None
    check_queue(name)
    if key is not None:
        check_name("queue key", key)
    if type(priority) is not int or not -PRIORITY_MAX <= priority <= PRIORITY_MAX:
        raise Rejected(f"priority is a whole number from {-PRIORITY_MAX} to {PRIORITY_MAX}")
    return {"name": name, "key": key, "priority": priority}
