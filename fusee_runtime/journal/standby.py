"""Standbys: several `fusee serve --store URL` share one journal in PostgreSQL.

One drives it (it holds the journal's advisory lock); the others wait here
until the lock is free, then open the engine as any process would, and one of
them wins (the others wait again). The driver's session ends at once when it
is killed, and after `Config.lease` when it is cut off the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import StoreUnavailable
from fusee_runtime.journal.postgres import (
    LOCK_CLASS,
    TRY_LOCK,
    UNLOCK,
    PgJournal,
    import_psycopg,
    one_row,
)

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("fusee")

STANDBY_POLL_S = 0.1
"""How often a standby (`wait_for_journal`) asks whether the journal is free: the
takeover delay after its owner let go (the server ends a killed process's session at
once; a silent one after the owner's lease)."""


async def wait_for_journal(
    url: str,
    stop: asyncio.Event,
    waiting: Callable[[str], None],
    poll_s: float = STANDBY_POLL_S,
) -> bool:
    """Waits, as a standby, until no process holds the journal in `url`; True then (open
    it at once: another standby may be quicker, and `open` then raises `HomeLocked`),
    False if `stop` was set first. Calls `waiting(holder)` once if it has to wait.

    Raises:
        StoreUnavailable: the server cannot be reached.
    """
    pg = PgJournal(url)
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
                    "fusee: standby lost its session to %s (%s); reconnecting", pg.name, pg.said(e)
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


def _free(conn: psycopg.Connection[Any]) -> bool:
    """Whether the journal's lock is free now (taken and given back at once)."""
    (got,) = one_row(conn, TRY_LOCK, (LOCK_CLASS,))
    if got:
        conn.execute(UNLOCK, (LOCK_CLASS,))
    conn.commit()
    return bool(got)
