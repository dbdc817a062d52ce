"""A journal in PostgreSQL as the processes that share its database reach it.

`PgShared` is `SharedStore` (`store/shared.py`) for a `postgresql://` URL:
no process takes the journal through it. It connects as a `PgJournal` of
the URL would (named after this process, given up on within the lease), for
the layout of the database's journals (`store/pg_shards.py`), the control
requests a command makes to the journal's driver (`store/pg_requests.py`),
the run log's lines (`store/pg_log.py`), a worker's seat among the workers,
and the wait of a standby.

Standbys: several `fusee serve --store URL` share one journal. One drives it
(it holds the journal's advisory lock); the others wait here
(`wait_for_journal`) until the lock is free, then open the engine as any
process would, and one of them wins (the others wait again). The driver's
session ends at once when it is killed, and after `Config.lease` when it is
cut off the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusee_runtime.errors import StoreUnavailable
from fusee_runtime.store import pg_requests
from fusee_runtime.store.pg_log import read_lines
from fusee_runtime.store.pg_shards import PgSeat, layout, prepare_shard
from fusee_runtime.store.postgres import (
    HELD,
    LOCK_CLASS,
    TRY_LOCK,
    UNLOCK,
    PgJournal,
    import_psycopg,
    one_row,
)
from fusee_runtime.store.shards import Layout

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.pg_tasks import PgTasks

log = logging.getLogger("fusee")

STANDBY_POLL_S = 0.1
"""How often a standby (`wait_for_journal`) asks whether the journal is free: the
takeover delay after its owner let go (the server ends a killed process's session at
once; a silent one after the owner's lease)."""


class PgShared:
    """The journal in the database at `url`, as the processes sharing it reach it (see
    the module)."""

    def __init__(self, url: str, lease: float = 10.0) -> None:
        self._journal = PgJournal(url, lease)
        self.url = url
        self.name = self._journal.name

    @property
    def error(self) -> type[Exception]:
        """What psycopg raises for a call the server failed (a lost session, a refusal)."""
        error: type[Exception] = import_psycopg().Error
        return error

    def said(self, e: BaseException) -> str:
        return self._journal.said(e)

    def layout(self, wanted: int | None = None) -> Layout:
        """The layout of the database, as `pg_shards.layout` says (on a connection of
        its own)."""
        journal = self._journal
        with journal.connect() as conn:
            conn.autocommit = True
            try:
                return layout(conn, journal.url, wanted)
            except import_psycopg().Error as e:
                raise StoreUnavailable(
                    f"cannot lay out {journal.name}: {journal.said(e)}"
                ) from None

    def prepare(self, layout: Layout, shard: int) -> None:
        """`pg_shards.prepare_shard` on a connection of its own."""
        with self._journal.connect() as conn:
            conn.autocommit = True
            try:
                prepare_shard(conn, layout, shard)
            except import_psycopg().Error as e:
                raise StoreUnavailable(
                    f"cannot make {layout.schema_of(shard)}: {self.said(e)}"
                ) from None

    async def driven(self) -> bool:
        """Whether a process holds the journal (one that serves it, or a command).

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        journal = self._journal
        conn = await journal.connect_async()
        try:
            cur = await conn.execute(HELD, (LOCK_CLASS,))
            row = await cur.fetchone()
        except import_psycopg().Error as e:
            raise StoreUnavailable(f"cannot ask {journal.name}: {journal.said(e)}") from None
        finally:
            await conn.close()
        return bool(row and row[0])

    async def ask(
        self, limit: int, final: Callable[[bytes], bool], untaken: Callable[[str], Exception]
    ) -> tuple[asyncio.StreamReader, pg_requests.Asking]:
        return await pg_requests.ask(self._journal, limit, final, untaken)

    def seat(self, layout: Layout) -> PgSeat:
        return PgSeat(self._journal, layout)

    def tasks(self) -> PgTasks:
        from fusee_runtime.store.pg_tasks import PgTasks

        return PgTasks(PgJournal(self.url, self._journal.lease))

    def log_lines(self, id: str) -> LogLines:
        return LogLines(self._journal, id)

    async def wait_for_journal(
        self,
        stop: asyncio.Event,
        waiting: Callable[[str], None],
        poll_s: float = STANDBY_POLL_S,
    ) -> bool:
        """Waits, as a standby, until no process holds the journal; True then (open it
        at once: another standby may be quicker, and `open` then raises `HomeLocked`),
        False if `stop` was set first. Calls `waiting(holder)` once if it has to wait.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        pg = self._journal
        psycopg = import_psycopg()
        conn = await asyncio.to_thread(pg.connect)
        said = False
        try:
            while not stop.is_set():
                try:
                    if await asyncio.to_thread(_free, conn):
                        return True
                except psycopg.Error as e:
                    # The server restarted, or the network blipped: wait on, on a new session.
                    log.warning(
                        "fusee: standby lost its session to %s (%s); reconnecting",
                        pg.name,
                        pg.said(e),
                    )
                    await asyncio.to_thread(conn.close)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 10 * poll_s)
                    with contextlib.suppress(StoreUnavailable):
                        conn = await asyncio.to_thread(pg.connect)
                    continue
                if not said:
                    said = True
                    waiting(await asyncio.to_thread(pg.holder, conn))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), poll_s)
            return False
        finally:
            await asyncio.to_thread(conn.close)


class LogLines:
    """The run log's lines of one id, read on a session held from the first read to
    `close`."""

    def __init__(self, journal: PgJournal, id: str) -> None:
        self._journal = journal
        self._id = id
        self._conn: psycopg.Connection[TupleRow] | None = None

    def read(self, after: int = 0, last: int | None = None) -> list[tuple[int, bytes]]:
        if self._conn is None:
            self._conn = self._journal.connect()
        return read_lines(self._journal, self._id, after, last, self._conn)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _free(conn: psycopg.Connection[TupleRow]) -> bool:
    """Whether the journal's lock is free now (taken and given back at once)."""
    (got,) = one_row(conn, TRY_LOCK, (LOCK_CLASS,))
    if got:
        conn.execute(UNLOCK, (LOCK_CLASS,))
    conn.commit()
    return bool(got)
