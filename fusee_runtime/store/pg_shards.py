"""The SQL of a database of several journals (`store/shards.py` says what its layout
is): laying it out, making a shard's schema, and the workers counting one another.

Laying out (`layout`) and making a shard (`prepare_shard`) each take an
advisory lock for the length of one transaction, so that any number of
workers may do it at once and one layout results. A worker
(`control/worker.py` says how it shares the journals out) holds an advisory
lock of its own while it lives, in a class of the base schema's own
(`PgSeat`), so the workers count one another in `pg_locks` (a killed
worker stops counting the moment its session ends), and a journal is free
when no session holds the journal's lock (`postgres.LOCK_CLASS`).
"""

from __future__ import annotations

import random
import re
from typing import TYPE_CHECKING

from fusee_runtime.errors import StoreUnavailable
from fusee_runtime.store.pg_schema import LAYOUT
from fusee_runtime.store.postgres import LOCK_CLASS
from fusee_runtime.store.shards import SHARDS_MAX, Layout

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.postgres import PgJournal

_LOCKS = (
    "SELECT classid::bigint, objid::bigint FROM pg_locks WHERE locktype = 'advisory' "
    "AND granted AND objsubid = 2 AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def layout(conn: psycopg.Connection[TupleRow], url: str, wanted: int | None) -> Layout:
    """The layout of the database `conn` (a connection to `url`, in autocommit) is on,
    laid out as `wanted` shards if nothing is yet; a client (`wanted` None) finds one
    shard where nothing is laid out.

    Raises:
        StoreUnavailable: the database is laid out with another count than `wanted`,
            or `url` names a shard's schema rather than the base one.
    """
    if wanted is not None and not 1 <= wanted <= SHARDS_MAX:
        raise StoreUnavailable(f"the shards of a database are 1 to {SHARDS_MAX}, not {wanted}")
    (schema,) = conn.execute("SELECT current_schema()").fetchone() or (None,)
    if schema is None:
        raise StoreUnavailable(
            f"{url.partition('@')[2] or 'the database'} has no schema for fusee's tables: "
            "the search_path names none that exists (CREATE SCHEMA it first)"
        )
    if wanted is not None and wanted > 1 and not re.fullmatch(r"[a-z_][a-z0-9_]{0,40}", schema):
        raise StoreUnavailable(
            f"the schema {schema!r} names shards badly: lay several journals out in a schema "
            "named in lower-case letters, digits and _ (up to 41 of them)"
        )
    with conn.transaction():
        # One layout however many workers start at once.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema() || '/layout'))")
        absent = conn.execute("SELECT to_regclass('fusee_layout') IS NULL").fetchone()
        if absent and absent[0]:
            if wanted is None:
                return Layout(url, schema, 1)
            conn.execute(LAYOUT)
        if wanted is not None:
            old = conn.execute("SELECT to_regclass('fusee_journal') IS NOT NULL").fetchone()
            first = 1 if old and old[0] else wanted  # a journal from before shards is one
            conn.execute(
                "INSERT INTO fusee_layout (shard, shards) VALUES (0, %s) ON CONFLICT DO NOTHING",
                (first,),
            )
        row = conn.execute("SELECT shard, shards FROM fusee_layout").fetchone()
    if row is None:
        return Layout(url, schema, 1)
    shard, shards = row
    if shard != 0:
        raise StoreUnavailable(
            f"the schema {schema} holds shard {shard} of a database's journals: give the "
            "URL of the first (its search_path unset, or the schema the shards are named after)"
        )
    if wanted is not None and shards != wanted:
        raise StoreUnavailable(
            f"the database is laid out as {shards} journal{'s' if shards > 1 else ''}, not "
            f"the {wanted} asked: a layout is made once (every run's id is placed by it); "
            "leave --shards out to serve it as it is"
        )
    return Layout(url, schema, shards)


def prepare_shard(conn: psycopg.Connection[TupleRow], layout: Layout, shard: int) -> None:
    """Makes shard `shard`'s schema, if it is not there, and says in it which shard it
    is, before its journal first opens (`conn` in autocommit, on the base schema).

    Raises:
        StoreUnavailable: the schema says it is another shard.
    """
    schema = layout.schema_of(shard)
    quoted = '"' + schema.replace('"', '""') + '"'
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema + "/layout",))
        if conn.execute("SELECT to_regnamespace(%s) IS NULL", (quoted,)).fetchone() == (True,):
            conn.execute(f"CREATE SCHEMA {quoted}")
        conn.execute(f"SET LOCAL search_path TO {quoted}")
        if conn.execute(
            "SELECT to_regclass('fusee_journal') IS NOT NULL "
            "AND to_regclass('fusee_layout') IS NULL"
        ).fetchone() == (True,):
            raise StoreUnavailable(
                f"the schema {schema} holds a journal of its own already: it cannot be shard "
                f"{shard} of {layout.shards} (move it away, or lay the database out elsewhere)"
            )
        conn.execute(LAYOUT)
        conn.execute(
            "INSERT INTO fusee_layout (shard, shards) VALUES (%s, %s) ON CONFLICT DO NOTHING",
            (shard, layout.shards),
        )
        row = conn.execute("SELECT shard, shards FROM fusee_layout").fetchone()
    if row != (shard, layout.shards):
        raise StoreUnavailable(
            f"the schema {schema} says it holds shard {row and row[0]} of {row and row[1]}, "
            f"not shard {shard} of {layout.shards}"
        )


class PgSeat:
    """A worker's place among the workers of a sharded database, on a session of its
    own (in autocommit). Its calls raise what psycopg raises: the session is lost
    then, and the worker takes a new seat."""

    def __init__(self, journal: PgJournal, layout: Layout) -> None:
        """Connects (`StoreUnavailable` if it cannot); `register` counts it in."""
        self._conn = journal.connect()
        self._conn.autocommit = True
        self._layout = layout
        self._workers = 0  # the workers' lock class
        self._journals: list[int] = []  # each journal's lock key

    def register(self) -> None:
        """Takes this worker's own lock, and learns the workers' lock class and each
        journal's lock key, as `pg_locks` shows them."""
        layout = self._layout
        schemas = [layout.schema_of(k) for k in range(layout.shards)]
        row = self._conn.execute(
            "SELECT hashtext(%s)::bigint & 4294967295, "
            "array_agg(hashtext(s)::bigint & 4294967295 ORDER BY k) "
            "FROM unnest(%s::text[]) WITH ORDINALITY AS t(s, k)",
            (layout.schema + "/workers", schemas),
        ).fetchone()
        assert row is not None
        workers, journals = row
        while True:  # a key no other worker holds
            key = random.randrange(1, 2**31)
            (got,) = self._conn.execute(
                "SELECT pg_try_advisory_lock(%s, %s)", (_signed(workers), key)
            ).fetchone() or (False,)
            if got:
                self._workers, self._journals = workers, list(journals)
                return

    def look(self) -> tuple[int, set[int]]:
        """How many workers there are (this one too), and the journals no process holds."""
        locks = self._conn.execute(_LOCKS).fetchall()
        workers = max(1, sum(1 for c, _ in locks if c == self._workers))
        held = {o for c, o in locks if c == LOCK_CLASS}
        return workers, {k for k, key in enumerate(self._journals) if key not in held}

    def prepare(self, shard: int) -> None:
        """`prepare_shard` on this seat's session."""
        prepare_shard(self._conn, self._layout, shard)

    def close(self) -> None:
        """Leaves (the session's end lets go of the worker's lock)."""
        self._conn.close()


def _signed(key: int) -> int:
    """An advisory lock key as int4 (`pg_locks` shows it unsigned)."""
    return key - 2**32 if key >= 2**31 else key
