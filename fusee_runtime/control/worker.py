"""A worker of a sharded database: `fusee serve --store URL` beside other workers.

A database laid out as N journals (`journal/shards.py`) is driven by as many
`fusee serve --store URL` processes as its operators start, on any hosts.
Each worker holds an advisory lock of its own while it lives, so the workers
count one another in `pg_locks` (a killed worker stops counting the moment
its session ends), and drives its fair share of the journals, ceil(N ÷
workers), one engine per journal (home `<home>/shard-<k>`):

- it takes free journals while it has fewer than its share, and any journal
  left free for two rounds whatever its share (so none stays undriven);
- it gives one back per round while it has more (a worker that joined gets it:
  the engine closes with its grace, and the next driver replays the runs);
- a journal whose engine failed (its session lost) is closed and free again.

A journal is taken as any is (its lock, `journal/postgres.py`), so two workers
never drive one, and one that dies is taken over within a round of its
session's end. Cron schedules fire in shard 0's engine alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

from fusee_runtime.engine.config import Config
from fusee_runtime.errors import HomeLocked, StoreUnavailable
from fusee_runtime.journal.postgres import LOCK_CLASS, PgJournal, import_psycopg
from fusee_runtime.journal.shards import Layout, prepare_shard

if TYPE_CHECKING:
    import psycopg

    from fusee_runtime.engine.engine import Engine

log = logging.getLogger("fusee")

ROUND_S = 0.25
"""How often a worker looks at who drives what: the delay before a free journal is
taken (after its driver's session ended, at once for a killed process)."""
KEEP_S = 30.0
"""How long a worker keeps a journal it took beyond its share (nobody else did) before
it may give it back: a worker counted but unable to open any costs a churn this often."""
_LOCKS = (
    "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
    "AND granted AND objsubid = 2 AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


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
        self._pg = PgJournal(layout.url, lease)
        self._round_s = round_s
        self.threads_left = False
        """A step function's thread of a closed engine still runs (cut off at the end of
        its grace): the process should exit without waiting for it."""
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}
        self._free_before: set[int] = set()
        self._kept: dict[int, float] = {}  # taken beyond its share: kept until then
        self._closing: set[Engine] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Takes and gives journals until `stop` is set, then closes its engines.

        Raises:
            StoreUnavailable: the server cannot be reached at the start.
            AppImportError, JournalCorrupt: as a journal's engine opens.
        """
        failed = import_psycopg().Error
        first = await asyncio.to_thread(self._connect)
        try:
            keys = await asyncio.to_thread(self._register, first)
        except failed as e:
            first.close()
            raise StoreUnavailable(f"cannot join {self._pg.name}: {self._pg.said(e)}") from None
        conn: psycopg.Connection[Any] | None = first
        try:
            while not stop.is_set():
                try:
                    if conn is None:  # its session was lost: count itself in again
                        conn = await asyncio.to_thread(self._connect)
                        keys = await asyncio.to_thread(self._register, conn)
                    await self._round(conn, keys)
                except (failed, StoreUnavailable) as e:
                    # The server restarted, or the network blipped: the engines whose
                    # sessions went too stop on their own and are given back.
                    log.warning("fusee: worker lost its session (%s); reconnecting", e)
                    if conn is not None:
                        await asyncio.to_thread(conn.close)
                    conn = None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._round_s)
        finally:
            # Together: a stop takes one grace, not one a journal.
            giving = [self._give(k, "stopping") for k in sorted(self.engines, reverse=True)]
            await asyncio.gather(*giving, return_exceptions=True)
            if conn is not None:
                await asyncio.to_thread(conn.close)

    def _connect(self) -> psycopg.Connection[Any]:
        conn = self._pg.connect()
        conn.autocommit = True
        return conn

    def _register(self, conn: psycopg.Connection[Any]) -> tuple[int, list[int]]:
        """Takes this worker's own lock; returns the workers' lock class and each
        journal's lock key, as `pg_locks` shows them."""
        schemas = [self.layout.schema_of(k) for k in range(self.layout.shards)]
        row = conn.execute(
            "SELECT hashtext(%s)::bigint & 4294967295, "
            "array_agg(hashtext(s)::bigint & 4294967295 ORDER BY k) "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t(s, k)",
            (self.layout.schema + "/workers", schemas),
        ).fetchone()
        assert row is not None
        workers, journals = row
        while True:  # a key no other worker holds
            key = random.randrange(1, 2**31)
            (got,) = conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (_signed(workers), key)
            ).fetchone() or (False,)
            if got:
                return workers, list(journals)

    async def _round(self, conn: psycopg.Connection[Any], keys: tuple[int, list[int]]) -> None:
        for shard, engine in list(self.engines.items()):
            if engine.durability.failed is not None:
                await self._give(shard, "failed", error=str(engine.durability.failed))
        locks = await asyncio.to_thread(lambda: conn.execute(_LOCKS).fetchall())
        workers_class, journal_keys = keys
        workers = max(1, sum(1 for c, _ in locks if c == workers_class))
        held = {o for c, o in locks if c == LOCK_CLASS}
        free = {k for k, key in enumerate(journal_keys) if key not in held}
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
            if await self._take(conn, k) and len(self.engines) > share:
                self._kept[k] = now + KEEP_S

    async def _take(self, conn: psycopg.Connection[Any], shard: int) -> bool:
        stack = contextlib.AsyncExitStack()
        try:
            await asyncio.to_thread(prepare_shard, conn, self.layout, shard)
            engine = await stack.enter_async_context(self._open_shard(shard))
        except HomeLocked:
            return False  # another worker was quicker
        except (StoreUnavailable, import_psycopg().Error) as e:  # a restart: next round
            log.warning("fusee: cannot take shard %d: %s", shard, e)
            return False
        self.engines[shard] = engine
        self._stacks[shard] = stack
        self._event("shard_taken", shard=shard, runs_open=int(engine.counters()["runs_open"]))
        return True

    async def _give(self, shard: int, why: str, **fields: Any) -> None:
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


def _signed(key: int) -> int:
    """An advisory lock key as int4 (`pg_locks` shows it unsigned)."""
    return key - 2**32 if key >= 2**31 else key
