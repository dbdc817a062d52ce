"""Closed runs in PostgreSQL: the history store of a journal kept there.

With `Config.store`, the runs that closed leave the journal's checkpoint
for `fusee_runs`, beside the journal, and not for a `history.db` of the
process that drove them: whichever process drives the journal next (a
standby that took it over, a command on another host) finds them, so a
`start` with the id of a run that completed answers it instead of running
it again. It is the store of `store/history.py` (its thread and reads,
the SQL it shares with SQLite: `store/history_sql.py`), with the same promises:

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
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import orjson

from fusee_runtime.errors import HistoryDamaged, Rejected
from fusee_runtime.search import RANGES, Condition
from fusee_runtime.store.history import Closed, HistoryBase, ReadLost, ResetSource
from fusee_runtime.store.history_sql import COLUMNS, Dialect

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow
    from psycopg.types.json import Jsonb

    from fusee_runtime.store.postgres import PgJournal

_UPSERT = (
    f"INSERT INTO fusee_runs ({COLUMNS}, creation, records) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (run_id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in (*COLUMNS.split(", ")[1:], "creation", "records"))
)


def where_sql(where: Sequence[Condition]) -> tuple[list[str], list[object]]:
    """Filters on `fusee_runs.attributes` for the conditions, and their arguments."""
    Jsonb = _jsonb()
    clauses: list[str] = []
    args: list[object] = []
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


POSTGRES = Dialect(
    runs="fusee_runs",
    pruned="fusee_pruned",
    p="%s",
    where=where_sql,
    plus="",
    explain="EXPLAIN ",
    not_kept="NOT (run_id = ANY(%s))",
    kept_bound=True,
    insert_new=("INSERT INTO", " ON CONFLICT (run_id) DO NOTHING"),
    attributes_text=False,
)


class PgHistory(HistoryBase["psycopg.Connection[TupleRow]"]):
    """`fusee_runs`: the writer thread of `HistoryBase` for closed runs, and reads for
    the loop, in PostgreSQL."""

    dialect = POSTGRES
    thread_name = "fusee-history-pg"

    def __init__(self, journal: PgJournal, on_stored: Callable[[list[str]], None]) -> None:
        """`on_stored(run_ids)` is called on the writer thread after each commit."""
        super().__init__(f"{journal.name}, table fusee_runs", on_stored)
        self._journal = journal
        self._reads: psycopg.Connection[TupleRow] | None = None
        self._reads_lock = threading.Lock()
        # `damage` stays None: a database has no damaged file to set aside (a failed
        # read raises, and the next one tries again).

    def open(self) -> None:
        """Starts the writer thread (the journal's `open` made the tables)."""
        self._start()

    def _connect_writer(self) -> psycopg.Connection[TupleRow]:
        """A connection of the store's own, in autocommit: each `transaction()` block is
        one transaction (without it, the first statement would open one that the block
        only nests a savepoint in, committed by nothing)."""
        conn = self._journal.connect()
        conn.autocommit = True
        return conn

    def broken(self, why: str) -> HistoryDamaged:
        """The error for a stored run that cannot be used, naming where it is."""
        return HistoryDamaged(f"the closed runs in {self._journal.name} cannot be read: {why}")

    def _close_reads(self) -> None:
        """(After the thread wrote what is queued, or gave up on it, the server gone: the
        checkpoint keeps it.)"""
        with self._reads_lock:
            if self._reads is not None:
                self._reads.close()
                self._reads = None

    def _write(self, conn: psycopg.Connection[TupleRow], closed: list[Closed]) -> None:
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
                _bytes(c.row.failure),
                _bytes(c.creation),
                orjson.dumps(c.arrays()),
            )
            for c in closed
            if not (c.again and c.row.run_id in gone)
        ]
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(_UPSERT, rows)
        self._stored(len(rows), closed)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[psycopg.Connection[TupleRow]]:
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
                    if isinstance(e, psycopg.OperationalError):  # the session, not the data
                        why = self._journal.said(e)
                        raise ReadLost(f"the closed runs in {self._journal.name}: {why}") from None
                raise self.broken(self._journal.said(e)) from None

    def prune(
        self, before: float, floor: int, keep: Iterable[str], reset_source: ResetSource
    ) -> int:
        """Deletes runs closed before `before` (Unix seconds); returns how many. `floor`,
        `keep` and `reset_source` as for `SqliteHistory.prune`.

        Raises:
            HistoryDamaged: the database failed the deletes (its message).
        """
        import psycopg

        try:
            conn = self._connect_writer()  # its own: on a thread, beside reads
            try:
                with conn.transaction():
                    n = self._prune_rows(conn, before, floor, keep, reset_source)
            finally:
                conn.close()
        except psycopg.Error as e:
            raise self.broken(self._journal.said(e)) from None
        self.pruned_before = max(self.pruned_before, before)
        return n


def _bytes(value: object) -> bytes | None:
    """`value` as orjson writes it (a bytea column), None as NULL."""
    return orjson.dumps(value) if value is not None else None


def _jsonb() -> type[Jsonb]:
    from psycopg.types.json import Jsonb

    return Jsonb
