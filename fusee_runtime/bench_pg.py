"""`fusee bench --store URL`: the same measurements with the journal in PostgreSQL.

Each measurement gets a schema of its own in the database (`fusee_bench_<name>`,
chosen through the URL's `search_path`), so each starts from an empty journal
as it does on local disk; every schema is dropped at the end. The probe that
the local bench takes from the disk (a 100-byte write and its `fdatasync`) is
here what a commit costs on this server: an INSERT of 100 bytes and its
COMMIT, in a table of its own.
"""

from __future__ import annotations

import statistics
import time
import urllib.parse
from pathlib import Path
from typing import Any

PREFIX = "fusee_bench_"


def with_schema(url: str, schema: str) -> str:
    """`url` with its `search_path` set to `schema` (libpq's `options`)."""
    option = urllib.parse.quote(f"-c search_path={schema}", safe="")
    return f"{url}{'&' if '?' in url else '?'}options={option}"


class Schemas:
    """Schemas made in the database for one bench, dropped when it ends."""

    def __init__(self, url: str) -> None:
        from fusee_runtime.journal.postgres import PgJournal

        self.url = url
        self._pg = PgJournal(url)
        self.made: list[str] = []

    def __enter__(self) -> Schemas:
        self._conn = self._pg.connect()
        self._conn.autocommit = True
        return self

    def make(self, name: str) -> str:
        schema = PREFIX + name
        self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._conn.execute(f'CREATE SCHEMA "{schema}"')
        self.made.append(schema)
        return with_schema(self.url, schema)

    def __exit__(self, *exc: object) -> None:
        try:
            for schema in self.made:
                self._conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            self._conn.close()


class Places:
    """Where each measurement runs: a fresh home beside, and a fresh schema."""

    def __init__(self, scratch: Path, schemas: Schemas) -> None:
        self.scratch = scratch
        self.schemas = schemas

    def __call__(self, name: str) -> tuple[Path, str | None]:
        return self.scratch / name, self.schemas.make(name)

    def probe(self, count: int) -> CommitProbe:
        return CommitProbe(self.schemas.make("probe"), count)


class CommitProbe:
    """The server's own commit latency: an INSERT of 100 bytes, then COMMIT."""

    def __init__(self, url: str, count: int) -> None:
        from fusee_runtime.journal.postgres import PgJournal

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

    def close(self) -> dict[str, Any]:
        self._conn.close()
        ordered = sorted(self._times)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return {"median": round(statistics.median(ordered), 1), "p99": round(p99, 1)}
