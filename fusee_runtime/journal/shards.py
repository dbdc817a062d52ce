"""Several journals in one PostgreSQL database, so several workers drive runs at once.

A journal has one driver at a time (`journal/postgres.py`). To let N processes
drive at once, a database holds a fixed number of journals, its *shards*: shard
0 in the URL's own schema (so a database of one journal is today's), shard k in
the schema `<that schema>_shard<k>`. A workflow id belongs to one shard,
`crc32(id) % shards` of its part before the first `#`, for good: a start, a
signal or a query for that id goes to that shard's driver, and a shard's engine
refuses to start a run of an id of another (`owned_id`). A child runs in its
parent's shard, so its id must belong there (`f"{parent id}#{name}"` does);
cron runs are started in shard 0 under ids that belong to it (`beside`).

The count is laid out once, in `fusee_layout` of the URL's schema, by the first
worker given `--shards N` (`layout`); a journal laid out alone, or from before
shards, is one shard of one. Each journal's own `fusee_layout` row says which
shard of how many it is, so a worker that opened the wrong one finds out.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import urllib.parse
import uuid
import zlib
from typing import TYPE_CHECKING, Any

from fusee_runtime.errors import Rejected, StoreUnavailable
from fusee_runtime.journal.pg_schema import LAYOUT
from fusee_runtime.scope import check_id

if TYPE_CHECKING:
    import psycopg

    from fusee_runtime.journal.postgres import PgJournal

SHARDS_MAX = 256


def shard_of(id: str, shards: int) -> int:
    """The shard whose journal keeps the runs of workflow id `id`: decided by its part
    before the first `#`, so `f"{parent}#{name}"` is always beside `parent`."""
    return zlib.crc32(id.partition("#")[0].encode()) % shards if shards > 1 else 0


def beside(id: str, shard: tuple[int, int]) -> str:
    """`id` if it belongs to shard `shard[0]`, else the first of `id~1`, `id~2`... that
    does (the same one each time for one layout, so a replay finds it again)."""
    k, n = shard
    if shard_of(id, n) == k:
        return id
    head, sep, tail = id.partition("#")
    found = (f"{head}~{i}{sep}{tail}" for i in itertools.count(1))
    return next(c for c in found if shard_of(c, n) == k)


def owned_id(id: str | None, shard: tuple[int, int]) -> str:
    """The id a new run of this shard's engine gets: `id`, checked (it must belong to
    this shard), or a fresh one that belongs to it.

    Raises:
        Rejected: a bad id, or one that belongs to another shard.
    """
    k, n = shard
    if id is None:
        while True:  # n tries on average
            fresh = uuid.uuid4().hex
            if shard_of(fresh, n) == k:
                return fresh
    check_id(id)
    if shard_of(id, n) != k:
        raise Rejected(
            f"id {id!r} belongs to journal {shard_of(id, n)} of the {n} in this database, "
            f"not to this one ({k}): start it through `fusee --store URL` or a worker "
            "that drives that journal"
        )
    return id


def with_schema(url: str, schema: str) -> str:
    """`url` with its `search_path` set to `schema`: added to the URL's libpq `options`
    (which takes one `options=`, the last one), the others kept."""
    base, _, query = url.partition("?")
    items = [item for item in query.split("&") if item]
    given = [
        urllib.parse.unquote(value)  # not unquote_plus: libpq reads "+" as itself
        for key, _, value in (item.partition("=") for item in items)
        if key == "options"
    ]
    kept = [item for item in items if item.partition("=")[0] != "options"]
    option = urllib.parse.quote(" ".join([*given, f"-c search_path={schema}"]), safe="")
    return f"{base}?{'&'.join([*kept, f'options={option}'])}"


@dataclasses.dataclass(frozen=True)
class Layout:
    """How many journals a database holds, and where each is."""

    url: str
    schema: str
    shards: int

    def url_of(self, shard: int) -> str:
        """The URL of shard `shard`'s journal (the base URL for shard 0)."""
        return self.url if shard == 0 else with_schema(self.url, self.schema_of(shard))

    def schema_of(self, shard: int) -> str:
        return self.schema if shard == 0 else f"{self.schema}_shard{shard}"

    def shard_of(self, id: str) -> int:
        return shard_of(id, self.shards)


def read_layout(journal: PgJournal, wanted: int | None = None) -> Layout:
    """The layout of the database of `journal`, as `layout` says (on a connection of
    its own)."""
    from fusee_runtime.journal.postgres import import_psycopg

    with journal.connect() as conn:
        conn.autocommit = True
        try:
            return layout(conn, journal.url, wanted)
        except import_psycopg().Error as e:
            raise StoreUnavailable(f"cannot lay out {journal.name}: {journal.said(e)}") from None


def layout(conn: psycopg.Connection[Any], url: str, wanted: int | None) -> Layout:
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


def prepare(journal: PgJournal, layout: Layout, shard: int) -> None:
    """`prepare_shard` on a connection of its own (to the database of `journal`)."""
    from fusee_runtime.journal.postgres import import_psycopg

    with journal.connect() as conn:
        conn.autocommit = True
        try:
            prepare_shard(conn, layout, shard)
        except import_psycopg().Error as e:
            raise StoreUnavailable(
                f"cannot make {layout.schema_of(shard)}: {journal.said(e)}"
            ) from None


def prepare_shard(conn: psycopg.Connection[Any], layout: Layout, shard: int) -> None:
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
