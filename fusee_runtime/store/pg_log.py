"""The run log of a journal in PostgreSQL: `ctx.log` lines in `fusee_logs`.

With the journal in PostgreSQL, the process that drives a run may be on
another host than the one that asks for its lines, and after a takeover its
next driver on yet another. So the lines (`store/log_files.py`: the same
JSON objects) go to the table `fusee_logs` beside the journal, where any
host reads them, instead of `<home>/logs`. A row is the line's JSON as
written (`line`) and its `id`, the one field a reader selects on: the other
fields (`workflow` among them, added after the table) live in the JSON, so a
field added to the lines needs no change of the schema, and rows written
before it read as they were.

The same promise as the files: not durable, and off the journal's hot path.
`PgRunLog.write` only queues the line; a thread of its own inserts what is
queued, one `COMMIT` a batch, on a session of its own. While the server
cannot take them (reported once on the `fusee` logger), the lines wait and
are tried again every `RETRY_S`, the oldest dropped past `QUEUED_MAX`; a
batch whose `COMMIT` was lost with its session may so be inserted twice.
Closing tries what is queued once more and waits at most `CLOSE_WAIT_S` for
it: an engine never waits on an unreachable server for its log. The table
keeps about the newest `LINES_KEPT` lines (the files keep about as many).
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
from typing import TYPE_CHECKING

import orjson

from fusee_runtime.errors import StoreUnavailable
from fusee_runtime.model.json import JsonObject
from fusee_runtime.store.log_files import encode_line, id_of

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from fusee_runtime.store.postgres import PgJournal

log = logging.getLogger("fusee")

LINES_KEPT = 200_000
"""Lines the table keeps, about (trimmed every `TRIM_EVERY` lines inserted, and by the
first batch of each process)."""
TRIM_EVERY = 10_000
BATCH_LINES_MAX = 1000
"""Most lines one INSERT takes."""
QUEUED_MAX = 100_000
"""Most lines waiting while the server cannot take them; past it the oldest go."""
QUEUED_BYTES_MAX = 32 << 20
"""The same, in bytes."""
RETRY_S = 1.0
"""How long a failed insert waits before it is tried again."""
CLOSE_WAIT_S = 2.0
"""How long closing waits for the queued lines to go in."""

_INSERT = "INSERT INTO fusee_logs (id, line) VALUES (%s, %s)"
_TRIM = "DELETE FROM fusee_logs WHERE seq <= (SELECT max(seq) FROM fusee_logs) - %s"


class PgRunLog:
    """The run log of an engine whose journal is in PostgreSQL (see the module)."""

    def __init__(self, journal: PgJournal) -> None:
        self._journal = journal
        self._closed = False
        self._queued: collections.deque[tuple[str, bytes]] = collections.deque()
        self._queued_bytes = 0
        self._taken_gone = 0  # lines of the batch being inserted that `append` dropped
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._inserted = TRIM_EVERY  # the first batch trims
        self.dropped = 0
        """Lines dropped: queued past `QUEUED_MAX`, or at close while the server failed."""

    def write(self, line: JsonObject) -> None:
        """Queues one line (see the module)."""
        self.append(id_of(line), encode_line(line))

    def append(self, id: str, data: bytes) -> None:
        """Queues the line `data` (JSON and a newline) of a run of `id`."""
        with self._wake:
            if self._closed:
                return
            while self._queued and (
                len(self._queued) >= QUEUED_MAX or self._queued_bytes >= QUEUED_BYTES_MAX
            ):
                self._queued_bytes -= len(self._queued.popleft()[1])
                self._taken_gone += 1
                self.dropped += 1
            self._queued.append((id, data))
            self._queued_bytes += len(data)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fusee-log", daemon=True)
                self._thread.start()
            if len(self._queued) == 1:  # else the thread is on it, or pausing after a failure
                self._wake.notify()

    def close(self) -> None:
        """Inserts what is queued, if the server takes it within `CLOSE_WAIT_S`; drops
        the rest."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(CLOSE_WAIT_S)
            with self._wake:  # a thread still stuck on the server takes nothing more
                self._drop_all()

    def _drop_all(self) -> None:
        """Under `_wake`: drops what is queued (the batch being inserted too, if it
        is: counted back if it goes in)."""
        self.dropped += len(self._queued)
        self._taken_gone += len(self._queued)
        self._queued.clear()
        self._queued_bytes = 0

    def lines(self, id: str, last: int) -> list[JsonObject]:
        return [orjson.loads(line) for _, line in read_lines(self._journal, id, last=last)]

    def _run(self) -> None:
        conn: psycopg.Connection[TupleRow] | None = None
        failing = False
        while True:
            with self._wake:
                while not self._queued and not self._closed:
                    self._wake.wait()
                batch = list(itertools.islice(self._queued, BATCH_LINES_MAX))
                if not batch:
                    break
                self._taken_gone = 0
            try:
                conn = conn if conn is not None and not conn.closed else self._journal.connect()
                with conn.cursor() as cur:
                    cur.executemany(_INSERT, batch)
                    self._inserted += len(batch)
                    if self._inserted >= TRIM_EVERY:
                        self._inserted = 0
                        cur.execute(_TRIM, (LINES_KEPT,))
                conn.commit()
            except Exception as e:  # the server is gone, or refused: wait, and try again
                if not failing:
                    log.warning("fusee: cannot write the run log to %s: %s", self._journal.name, e)
                failing = True
                if conn is not None:
                    conn.close()
                    conn = None
                with self._wake:
                    if self._closed:  # closing: no more tries
                        self._drop_all()
                        break
                    self._wake.wait(RETRY_S)
                continue
            failing = False
            with self._wake:
                # In: the batch's lines still queued (`append` may have dropped its first
                # ones meanwhile, and `close` all of them), which are its first.
                gone = min(self._taken_gone, len(batch))
                self.dropped -= gone
                for _ in range(len(batch) - gone):
                    if self._queued:
                        self._queued_bytes -= len(self._queued.popleft()[1])
        if conn is not None:
            conn.close()


def read_lines(
    journal: PgJournal,
    id: str,
    after: int = 0,
    last: int | None = None,
    conn: psycopg.Connection[TupleRow] | None = None,
) -> list[tuple[int, bytes]]:
    """The lines of `id` after position `after` (0: all), oldest first, with their
    positions: the last `last` of them only, when given. On `conn` (else a
    connection of its own, closed after).

    Raises:
        StoreUnavailable: the server cannot be reached.
    """
    sql = "SELECT seq, line FROM fusee_logs WHERE id = %s AND seq > %s ORDER BY seq"
    if last is not None:
        sql = f"SELECT * FROM ({sql} DESC LIMIT %s) AS newest ORDER BY seq"
    params = (id, after) if last is None else (id, after, last)
    import psycopg

    own = conn is None
    conn = journal.connect() if conn is None else conn
    try:
        if conn.execute("SELECT to_regclass('fusee_logs') IS NULL").fetchone() == (True,):
            rows: list[tuple[int, bytes]] = []  # no fusee of this version opened it yet
        else:
            rows = [(seq, bytes(line)) for seq, line in conn.execute(sql, params).fetchall()]
        conn.commit()
        return rows
    except psycopg.Error as e:
        why = journal.said(e)
        raise StoreUnavailable(f"cannot read the run log in {journal.name}: {why}") from None
    finally:
        if own:
            conn.close()
