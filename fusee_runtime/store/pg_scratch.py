"""Scratch schemas for `fusee bench --store URL` (`fusee_runtime/bench_pg.py`).

Each measurement gets a schema of its own in the database (`fusee_bench_<name>`,
chosen through the URL's `search_path`), so each starts from an empty journal
as it does on local disk; every schema is dropped at the end. The probe that
the local bench takes from the disk (a 100-byte write and its `fdatasync`) is
here what a commit costs on this server: an INSERT of 100 bytes and its
COMMIT, in a table of its own (`CommitProbe`).
"""

from __future__ import annotations

import statistics
import time

from fusee_runtime.store.pg_shards import layout, prepare_shard
from fusee_runtime.store.postgres import PgJournal
from fusee_runtime.store.shards import Layout, with_schema

PREFIX = "fusee_bench_"


class Schemas:
    """Schemas made in the database for one bench, dropped when it ends."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._pg = PgJournal(url)
        self.made: list[str] = []

    def __enter__(self) -> Schemas:
        self._conn = self._pg.connect()
        self._conn.autocommit = True
        return self

    def make(self, name: str) -> str:
        """A new, empty schema; returns the URL of a journal in it."""
        schema = PREFIX + name
        self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._conn.execute(f'CREATE SCHEMA "{schema}"')
        self.made.append(schema)
        return with_schema(self.url, schema)

    def lay_out(self, name: str, shards: int) -> Layout:
        """A new schema laid out as `shards` journals, each one's schema made."""
        url = self.make(name)
        with PgJournal(url).connect() as conn:
            conn.autocommit = True
            laid = layout(conn, url, shards)
            for k in range(1, shards):
                prepare_shard(conn, laid, k)
                self.made.append(laid.schema_of(k))
        return laid

    def probe(self, count: int) -> CommitProbe:
        """The server's commit latency, in a schema of its own."""
        return CommitProbe(self.make("probe"), count)

    def __exit__(self, *exc: object) -> None:
        try:
            for schema in self.made:
                self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            self._conn.close()


class CommitProbe:
    """The server's own commit latency: an INSERT of 100 bytes, then COMMIT."""

    def __init__(self, url: str, count: int) -> None:
        self._conn = PgJournal(url).connect()
        self._conn.execute("CREATE TABLE probe (id bigserial PRIMARY KEY, body bytea)")
        self._conn.commit()
        self._count = count
        self._times: list[float] = []
        self.sample()

    def sample(self) -> None:
        body = bytes(100)
        for _ in range(self._count):
            t = time.perf_counter()
            self._conn.execute("INSERT INTO probe (body) VALUES (%s)", (body,))
            self._conn.commit()
            self._times.append((time.perf_counter() - t) * 1e6)

    def close(self) -> dict[str, float]:
        self._conn.close()
        ordered = sorted(self._times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return {"median": round(statistics.median(ordered), 1), "p99": round(p99, 1)}
