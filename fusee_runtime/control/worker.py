"""A worker of a sharded database: `fusee serve --store URL` beside other workers.

A database laid out as N journals (`store/shards.py`) is driven by as many
`fusee serve --store URL` processes as its operators start, on any hosts.
Each worker holds a seat while it lives (`SharedStore.seat`: in PostgreSQL an
advisory lock of its own, `store/pg_shards.py`), so the workers count one
another (a killed worker stops counting the moment its session ends), and
drives its fair share of the journals, ceil(N ÷ workers), one engine per
journal (home `<home>/shard-<k>`):

- it takes free journals while it has fewer than its share, and any journal
  left free for two rounds whatever its share (so none stays undriven);
- it gives one back per round while it has more (a worker that joined gets it:
  the engine closes with its grace, and the next driver replays the runs);
- a journal whose engine failed (its session lost) is closed and free again.

A journal is taken as any is (its lock, `store/postgres.py`), so two workers
never drive one, and one that dies is taken over within a round of its
session's end. Cron schedules fire in shard 0's engine alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

from fusee_runtime.control.router import WorkerRouter, relay
from fusee_runtime.engine.config import Config
from fusee_runtime.errors import HomeLocked, StoreUnavailable
from fusee_runtime.store.shards import Layout
from fusee_runtime.store.shared import Seat, open_shared

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine

log = logging.getLogger("fusee")

ROUND_S = 0.25
"""How often a worker looks at who drives what: the delay before a free journal is
taken (after its driver's session ended, at once for a killed process)."""
KEEP_S = 30.0
"""How long a worker keeps a journal it took beyond its share (nobody else did) before
it may give it back: a worker counted but unable to open any costs a churn this often."""


class ShardWorker:
    """Drives a fair share of a sharded database's journals until stopped (see the
    module). `open_shard(k)` opens shard k's engine (`HomeLocked` when another
    worker was quicker); `event(name, **fields)` is told what it takes and gives."""

    def __init__(
        self,
        layout: Layout,
        open_shard: Callable[[int], AbstractAsyncContextManager[Engine]],
        event: Callable[..., None],
        lease: float = Config.lease,
        round_s: float = ROUND_S,
    ) -> None:
        self.layout = layout
        self.lease = lease
        self.engines: dict[int, Engine] = {}
        """The engines this worker drives, by shard."""
        self._open_shard = open_shard
        self._event = event
        self._shared = open_shared(layout.url, lease)
        self._round_s = round_s
        self.threads_left = False
        """A step function's thread of a closed engine still runs (cut off at the end of
        its grace): the process should exit without waiting for it."""
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}
        self._free_before: set[int] = set()
        self._kept: dict[int, float] = {}  # taken beyond its share: kept until then
        self._closing: set[Engine] = set()
        self._peers = WorkerRouter(layout, lease, self.engines.get, Path("."))
        """Every journal's driver, as this worker's engines reach one another's."""

    async def run(self, stop: asyncio.Event) -> None:
        """Takes and gives journals until `stop` is set, then closes its engines.

        Raises:
            StoreUnavailable: the server cannot be reached at the start.
            AppImportError, JournalCorrupt: as a journal's engine opens.
        """
        shared = self._shared
        failed = shared.error
        first = await asyncio.to_thread(shared.seat, self.layout)
        try:
            await asyncio.to_thread(first.register)
        except failed as e:
            first.close()
            raise StoreUnavailable(f"cannot join {shared.name}: {shared.said(e)}") from None
        seat: Seat | None = first
        try:
            while not stop.is_set():
                try:
                    if seat is None:  # its session was lost: count itself in again
                        seat = await asyncio.to_thread(shared.seat, self.layout)
                        await asyncio.to_thread(seat.register)
                    await self._round(seat)
                except (failed, StoreUnavailable) as e:
                    # The server restarted, or the network blipped: the engines whose
                    # sessions went too stop on their own and are given back.
                    log.warning("fusee: worker lost its session (%s); reconnecting", e)
                    if seat is not None:
                        await asyncio.to_thread(seat.close)
                    seat = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._round_s)
        finally:
            # Together: a stop takes one grace, not one a journal.
            giving = [self._give(k, "stopping") for k in sorted(self.engines, reverse=True)]
            await asyncio.gather(*giving, return_exceptions=True)
            if seat is not None:
                await asyncio.to_thread(seat.close)

    async def _round(self, seat: Seat) -> None:
        for shard, engine in list(self.engines.items()):
            if engine.durability.failed is not None:
                await self._give(shard, "failed", error=str(engine.durability.failed))
        workers, free = await asyncio.to_thread(seat.look)
        share = math.ceil(self.layout.shards / workers)
        long_free, self._free_before = free & self._free_before, free
        now = asyncio.get_running_loop().time()
        if len(self.engines) > share:
            # One a round, and not one it took because nobody did (a worker counted but
            # unable to open any would have it given back and taken again forever).
            given = [k for k in self.engines if self._kept.get(k, 0.0) <= now]
            if given:
                await self._give(max(given), "rebalancing")
            return
        start = random.randrange(self.layout.shards)
        for k in sorted(free, key=lambda k: (k - start) % self.layout.shards):
            if k in self.engines or (len(self.engines) >= share and k not in long_free):
                continue
            if await self._take(seat, k) and len(self.engines) > share:
                self._kept[k] = now + KEEP_S

    async def _take(self, seat: Seat, shard: int) -> bool:
        stack = contextlib.AsyncExitStack()
        try:
            await asyncio.to_thread(seat.prepare, shard)
            engine = await stack.enter_async_context(self._open_shard(shard))
        except HomeLocked:
            return False  # another worker was quicker
        except (StoreUnavailable, self._shared.error) as e:  # a restart: next round
            log.warning("fusee: cannot take shard %d: %s", shard, e)
            return False
        self.engines[shard] = engine
        self._stacks[shard] = stack
        # A call to an object's key of another journal reaches that journal's driver.
        engine.objects.peers = functools.partial(
            relay, self._peers, closing=lambda: engine.driver.closing
        )
        self._event("shard_taken", shard=shard, runs_open=int(engine.counters()["runs_open"]))
        return True

    async def _give(self, shard: int, why: str, **fields: object) -> None:
        engine = self.engines.pop(shard)
        stack = self._stacks.pop(shard)
        self._kept.pop(shard, None)
        self._closing.add(engine)
        try:
            await stack.aclose()
        finally:
            self._closing.discard(engine)
            self.threads_left = self.threads_left or bool(engine.driver.workers.threads_busy)
            self._event("shard_given", shard=shard, why=why, **fields)

    def end_grace(self) -> None:
        """Cuts short the grace of the engines closing now (a second SIGTERM)."""
        for engine in [*self.engines.values(), *self._closing]:
            engine.end_grace()
