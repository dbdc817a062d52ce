"""Step attempts handed between processes through the database: routing by labels.

A step with `labels` (`@step(labels={"gpu"})`) runs on a worker that has them
(`fusee serve --labels gpu`). The engine that drives its run, when it lacks
one, offers the attempt here (`offer`: a line of `fusee_tasks`, with the
labels it needs and its arguments as JSON) and looks at it until it is
answered (`look`). A worker takes the oldest attempt whose labels it has
(`take`: the row marked with its session's backend pid, skipped by the others
while locked), runs the step function it has under that name, and writes the
answer (`answer`): the result, or the failure, as JSON.

An attempt taken by a worker whose session is gone (killed: its sessions end
with it) is free again, and another worker (or the same, restarted) takes it:
a step's attempt may run twice, as after any crash. The driver withdraws an
attempt it no longer waits for (`withdraw`: cancelled, cut off, its engine
closing); one it never withdrew (its driver killed) is deleted after
`KEEP_S`. The table is in the base schema of a database of several journals
(beside `fusee_layout`), so a worker takes the attempts of every journal.
Both sides poll every `POLL_S`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from fusee_runtime.errors import StoreUnavailable

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.postgres import PgJournal

POLL_S = 0.05
"""How often a driver looks at its offered attempt, and an idle worker for one."""
KEEP_S = 86400
"""An offered attempt left behind (its driver killed) is deleted after this."""

_TABLE = """
    CREATE TABLE IF NOT EXISTS {schema}.fusee_tasks (
        id bigserial PRIMARY KEY,
        labels text[] NOT NULL,
        body bytea NOT NULL,
        taker integer,
        answer bytea,
        offered_at timestamptz NOT NULL DEFAULT now()
    )
"""
_ALIVE = "SELECT pid FROM pg_stat_activity"


def _error() -> type[Exception]:
    """The driver's error class (none is raised without psycopg: `connect_async` says so)."""
    try:
        import psycopg
    except ImportError:
        return _Never
    return psycopg.Error


class _Never(Exception):
    """Raised by nothing."""


class PgTasks:
    """The step attempts offered in the database of `journal` (see the module): a
    connection of its own (made as the journal's are), made on first use."""

    def __init__(self, journal: PgJournal) -> None:
        self._journal = journal
        self._conn: psycopg.AsyncConnection[TupleRow] | None = None
        self._table = ""

    async def _ready(self) -> psycopg.AsyncConnection[TupleRow]:
        if self._conn is None or self._conn.closed:
            conn = await self._journal.connect_async()
            row = await (await conn.execute("SELECT current_schema()")).fetchone()
            schema = str(row[0]) if row and row[0] else "public"
            base = re.sub(r"_shard[0-9]+$", "", schema)  # (a shard's: `Layout.schema_of`)
            self._table = f'"{base}".fusee_tasks'
            await conn.execute(_TABLE.format(schema=f'"{base}"'))
            self._conn = conn
        return self._conn

    async def offer(self, labels: list[str], body: bytes) -> int:
        """Offers an attempt that needs `labels`; returns its number."""
        try:
            conn = await self._ready()
            await conn.execute(
                f"DELETE FROM {self._table} WHERE offered_at < now() - make_interval(secs => %s)",
                (KEEP_S,),
            )
            cur = await conn.execute(
                f"INSERT INTO {self._table} (labels, body) VALUES (%s, %s) RETURNING id",
                (sorted(labels), body),
            )
            row = await cur.fetchone()
        except _error() as e:
            raise StoreUnavailable(f"cannot offer a step: {self._journal.said(e)}") from None
        assert row is not None
        return int(row[0])

    async def look(self, task: int) -> tuple[int | None, bytes | None]:
        """The worker that holds attempt `task` now (its backend pid; None: none alive),
        and its answer once written (None: not yet)."""
        try:
            conn = await self._ready()
            cur = await conn.execute(
                f"SELECT CASE WHEN taker IN ({_ALIVE}) THEN taker END, answer "
                f"FROM {self._table} WHERE id = %s",
                (task,),
            )
            row = await cur.fetchone()
        except _error() as e:
            raise StoreUnavailable(f"cannot look at a step: {self._journal.said(e)}") from None
        if row is None:
            return None, None
        return row[0], (bytes(row[1]) if row[1] is not None else None)

    async def take(self, labels: list[str]) -> tuple[int, bytes] | None:
        """Takes the oldest unanswered attempt whose labels are all in `labels` that no
        live worker holds; returns its number and body (None: none)."""
        try:
            conn = await self._ready()
            cur = await conn.execute(
                f"UPDATE {self._table} SET taker = pg_backend_pid() WHERE id = ("
                f"SELECT id FROM {self._table} WHERE answer IS NULL AND labels <@ %s "
                f"AND (taker IS NULL OR taker NOT IN ({_ALIVE})) "
                "ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id, body",
                (sorted(labels),),
            )
            row = await cur.fetchone()
        except _error() as e:
            raise StoreUnavailable(f"cannot take a step: {self._journal.said(e)}") from None
        return None if row is None else (int(row[0]), bytes(row[1]))

    async def answer(self, task: int, answer: bytes) -> None:
        """Writes the answer of attempt `task` (dropped if it was withdrawn)."""
        try:
            conn = await self._ready()
            await conn.execute(
                f"UPDATE {self._table} SET answer = %s WHERE id = %s AND taker = pg_backend_pid()",
                (answer, task),
            )
        except _error() as e:
            raise StoreUnavailable(f"cannot answer a step: {self._journal.said(e)}") from None

    async def withdraw(self, task: int) -> None:
        """Deletes attempt `task`: its driver no longer waits for it."""
        try:
            conn = await self._ready()
            await conn.execute(f"DELETE FROM {self._table} WHERE id = %s", (task,))
        except _error() as e:
            raise StoreUnavailable(f"cannot withdraw a step: {self._journal.said(e)}") from None

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
