"""Closed runs in PostgreSQL: the history store of a journal kept there.

With `Config.store`, the runs that closed leave the journal's checkpoint
for `fusee_runs`, beside the journal, and not for a `history.db` of the
process that drove them: whichever process drives the journal next (a
standby that took it over, a command on another host) finds them, so a
`start` with the id of a run that completed answers it instead of running
it again. It offers what `HistoryStore` offers (`engine/history.py`), with
the same promises:

- one thread writes the closed runs in batches, one transaction each
  (`INSERT ... ON CONFLICT DO UPDATE` by run id: writing a run again is
  harmless), off the durability path, and calls `on_stored` after each
  commit; a batch that fails (the server gone) is kept and written again
  every `RETRY_S`, and memory and the checkpoints keep its runs meanwhile;
- reads answer from the loop, on a connection of their own; a read that
  fails raises `HistoryDamaged` naming the database and why;
- `prune` remembers in `fusee_pruned` the runs opening may find closed
  again, and keeps those a reset that opening may replay started from.

Search attributes are the `attributes` column (jsonb, with a GIN index):
an equality is a containment (`@>`, by the index); a range compares
numbers as numbers and text in code point order (`COLLATE "C"`, as
Python and SQLite compare it), each only against a value of its kind, as
`search` says.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from fusee_runtime.engine.history import Closed, HistoryStore, Row, failure_of
from fusee_runtime.errors import HistoryDamaged, Rejected
from fusee_runtime.search import RANGES, Condition

if TYPE_CHECKING:
    import psycopg

    from fusee_runtime.journal.postgres import PgJournal

log = logging.getLogger("fusee")

COLUMNS = (
    "run_id, workflow_id, workflow, status, started_at, closed_at, start_lsn, close_lsn, "
    "error, parent_id, parent_run_id, attributes, failure"
)
_UPSERT = (
    f"INSERT INTO fusee_runs ({COLUMNS}, creation, records) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*COLUMNS.split(", ")[1:], "creation", "records"))
)


class PgHistory(HistoryStore):
    """`fusee_runs`: the writer thread of `HistoryStore` for closed runs, and reads for
    the loop, in PostgreSQL."""

    def __init__(self, journal: PgJournal, on_stored: Callable[[list[str]], None]) -> None:
        """`on_stored(run_ids)` is called on the writer thread after each commit."""
        super().__init__(Path("."), on_stored)
        self._journal = journal
        self.path = Path(f"{journal.name}, table fusee_runs")
        self._reads: psycopg.Connection[Any] | None = None
        self._reads_lock = threading.Lock()
        # `damage` stays None: a database has no damaged file to set aside (a failed
        # read raises, and the next one tries again).

    def open(self) -> None:
        """Starts the writer thread (the journal's `open` made the tables)."""
        self._thread = threading.Thread(target=self._run, name="fusee-history-pg", daemon=True)
        self._thread.start()

    def _connect_writer(self) -> psycopg.Connection[Any]:
        """A connection of the store's own, in autocommit: each `transaction()` block is
        one transaction (without it, the first statement would open one that the block
        only nests a savepoint in, committed by nothing)."""
        conn = self._journal.connect()
        conn.autocommit = True
        return conn

    def broken(self, why: str) -> HistoryDamaged:
        """The error for a stored run that cannot be used, naming where it is."""
        return HistoryDamaged(f"the closed runs in {self._journal.name} cannot be read: {why}")

    def close(self) -> None:
        """Writes what is queued (or gives up on it, the server gone: the checkpoint
        keeps it), then stops the thread and closes the connections."""
        super().close()
        with self._reads_lock:
            if self._reads is not None:
                self._reads.close()
                self._reads = None

    def _write(self, conn: psycopg.Connection[Any], closed: list[Closed]) -> None:
        Jsonb = _jsonb()
        gone: set[str] = set()
        again = [c.row.run_id for c in closed if c.again]
        if again:
            got = conn.execute(
                "SELECT run_id FROM fusee_pruned WHERE run_id = ANY(%s)", (again,)
            ).fetchall()
            gone = {run_id for (run_id,) in got}
        rows = [
            (
                *c.row.columns()[:-2],
                Jsonb(c.row.attributes),
                _bytes(failure_of(c.row.status, c.records)),
                _bytes(c.creation),
                orjson.dumps(c.records),
            )
            for c in closed
            if not (c.again and c.row.run_id in gone)
        ]
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(_UPSERT, rows)
        self.rows_written += len(rows)
        self.batches += 1
        self._on_stored([c.row.run_id for c in closed])

    # -- reads (the loop) ----------------------------------------------------------

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[Any]]:  # type: ignore[override]
        """The reads' connection, in a transaction; a failure becomes `HistoryDamaged`
        (and the next read connects again)."""
        import psycopg

        with self._reads_lock:
            try:
                if self._reads is None or self._reads.closed:
                    self._reads = self._connect_writer()
                with self._reads.transaction():
                    yield self._reads
            except psycopg.DataError as e:
                # A value PostgreSQL cannot hold, asked for (a NUL character): bad input,
                # found in no stored run, not damage.
                raise Rejected(f"{self._journal.said(e)}: no run can hold that") from None
            except (psycopg.Error, orjson.JSONDecodeError) as e:
                if self._reads is not None and self._reads.broken:
                    self._reads.close()
                    self._reads = None
                raise self.broken(self._journal.said(e)) from None

    def latest(self, workflow_id: str) -> Row | None:
        """The newest stored run of `workflow_id`."""
        with self._reading() as db:
            got = db.execute(
                f"SELECT {COLUMNS} FROM fusee_runs WHERE workflow_id = %s "
                "ORDER BY start_lsn DESC LIMIT 1",
                (workflow_id,),
            ).fetchone()
        return _row(got) if got else None

    def exists(self, run_id: str) -> bool:
        with self._reading() as db:
            got = db.execute("SELECT 1 FROM fusee_runs WHERE run_id = %s", (run_id,))
            return got.fetchone() is not None

    def full(self, run_id: str) -> tuple[dict[str, Any] | None, list[list[Any]]] | None:
        """(creation, records) of a stored run."""
        with self._reading() as db:
            got = db.execute(
                "SELECT creation, records FROM fusee_runs WHERE run_id = %s", (run_id,)
            ).fetchone()
            if got is None:
                return None
            creation = orjson.loads(got[0]) if got[0] is not None else None
            return creation, orjson.loads(got[1])

    def records_of(self, workflow_id: str) -> list[tuple[str, list[list[Any]]]]:
        """(run_id, records) of every stored run of `workflow_id`, oldest first."""
        with self._reading() as db:
            got = db.execute(
                "SELECT run_id, records FROM fusee_runs WHERE workflow_id = %s ORDER BY start_lsn",
                (workflow_id,),
            ).fetchall()
            return [(run_id, orjson.loads(recs)) for run_id, recs in got]

    def list_sql(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> tuple[str, tuple[Any, ...]]:
        """The query `list` runs: newest first, begun before record `before`."""
        clauses, args = where_sql(where)
        for column, value in (("parent_id", parent), ("status", status), ("workflow", workflow)):
            if value is not None:
                clauses.append(f"{column} = %s")
                args.append(value)
        if before is not None:
            clauses.append("start_lsn < %s")
            args.append(before)
        sql = f"SELECT {COLUMNS} FROM fusee_runs"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY start_lsn DESC"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        return sql, tuple(args)

    def list(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        parent: str | None = None,
        where: Sequence[Condition] = (),
        before: int | None = None,
    ) -> list[Row]:
        sql, args = self.list_sql(status, workflow, limit, parent, where, before)
        with self._reading() as db:
            rows = [_row(r) for r in db.execute(sql, args)]
        return self.with_failures(rows)

    def query_plan(
        self,
        status: str | None,
        workflow: str | None,
        limit: int | None,
        where: Sequence[Condition] = (),
    ) -> str:
        """PostgreSQL's plan for `list` with these filters, one step per line."""
        sql, args = self.list_sql(status, workflow, limit, None, where)
        with self._reading() as db:
            return "\n".join(r[0] for r in db.execute("EXPLAIN " + sql, args))

    def prune(self, before: float, floor: int = 0, keep: Iterable[str] = ()) -> int:
        """Deletes runs closed before `before` (Unix seconds); returns how many. `floor`
        and `keep` as for `HistoryStore.prune`.

        Raises:
            HistoryDamaged: the database failed the deletes (its message).
        """
        import psycopg

        try:
            conn = self._connect_writer()  # its own: on a thread, beside reads
            try:
                n = _prune(conn, before, floor, set(keep))
            finally:
                conn.close()
        except psycopg.Error as e:
            raise self.broken(self._journal.said(e)) from None
        self.pruned_before = max(self.pruned_before, before)
        return n


def _prune(conn: psycopg.Connection[Any], before: float, floor: int, kept: set[str]) -> int:
    with conn.transaction():
        recent = conn.execute(
            "SELECT run_id, creation, records FROM fusee_runs "
            "WHERE start_lsn > %s AND creation IS NOT NULL",
            (floor,),
        )
        for run_id, creation, recs in recent.fetchall():
            if orjson.loads(creation)["kind"] == "reset":
                kept.add(run_id)
                kept.add(orjson.loads(recs)[0][1][7]["reset"])
        doomed = "closed_at < %s AND NOT (run_id = ANY(%s))"
        conn.execute(
            "INSERT INTO fusee_pruned SELECT run_id, close_lsn FROM fusee_runs "
            f"WHERE {doomed} AND close_lsn > %s ON CONFLICT (run_id) DO NOTHING",
            (before, list(kept), floor),
        )
        conn.execute("DELETE FROM fusee_pruned WHERE close_lsn <= %s", (floor,))
        return conn.execute(f"DELETE FROM fusee_runs WHERE {doomed}", (before, list(kept))).rowcount


def where_sql(where: Sequence[Condition]) -> tuple[list[str], list[Any]]:
    """Filters on `fusee_runs.attributes` for the conditions, and their arguments."""
    Jsonb = _jsonb()
    clauses: list[str] = []
    args: list[Any] = []
    for key, op, wanted in where:
        if op == "=":
            clauses.append("attributes @> %s")
            args.append(Jsonb({key: wanted}))
        elif op == "!=":
            clauses.append("attributes ? %s AND NOT attributes @> %s")
            args += [key, Jsonb({key: wanted})]
        else:
            assert op in RANGES
            # CASE: the cast is made only of a value of the kind (AND has no order).
            if isinstance(wanted, str):
                kind, test = "string", f'(attributes ->> %s) COLLATE "C" {op} %s'
            else:
                kind, test = "number", f"(attributes ->> %s)::numeric {op} %s::numeric"
            clauses.append(f"CASE WHEN jsonb_typeof(attributes -> %s) = '{kind}' THEN {test} END")
            args += [key, key, wanted]
    return clauses, args


def _row(values: Sequence[Any]) -> Row:
    """A row of `fusee_runs` (its `COLUMNS`), its failure decoded."""
    row = Row(*values[:-1])
    failure = values[-1]
    return replace(row, failure=orjson.loads(failure)) if failure is not None else row


def _bytes(value: Any) -> bytes | None:
    """`value` as orjson writes it (a bytea column), None as NULL."""
    return orjson.dumps(value) if value is not None else None


def _jsonb() -> Any:
    from psycopg.types.json import Jsonb

    return Jsonb
