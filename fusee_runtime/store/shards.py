"""Several journals in one PostgreSQL database, so several workers drive runs at once.

A journal has one driver at a time (`store/postgres.py`). To let N processes
drive at once, a database holds a fixed number of journals, its *shards*: shard
0 in the URL's own schema (so a database of one journal is today's), shard k in
the schema `<that schema>_shard<k>`. A workflow id belongs to one shard,
`crc32(id) % shards` of its part before the first `#`, for good: a start, a
signal or a query for that id goes to that shard's driver, and a shard's engine
refuses to start a run of an id of another (`owned_id`). A child runs in its
parent's shard, so its id must belong there (`f"{parent id}#{name}"` does);
cron runs are started in shard 0 under ids that belong to it (`beside`).

The count is laid out once, in `fusee_layout` of the URL's schema, by the first
worker given `--shards N` (`store/pg_shards.py`, through `SharedStore.layout`);
a journal laid out alone, or from before shards, is one shard of one. Each
journal's own `fusee_layout` row says which shard of how many it is, so a
worker that opened the wrong one finds out. This module is what a layout is
and where an id goes, with no I/O: the engine places its runs by it.
"""

from __future__ import annotations

import dataclasses
import itertools
import urllib.parse
import zlib

from fusee_runtime.errors import Rejected
from fusee_runtime.scope import check_id, fresh_id

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
            fresh = fresh_id()
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
