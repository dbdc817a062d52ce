"""Group commit into PostgreSQL: the journal writer of `store/postgres.py`.

Appends queue on the loop; a thread inserts each batch (one row, or `COPY` for
many) and commits it, so one commit plays the part of the local journal's
`fdatasync` for every run in the batch.

The session is in autocommit once the writer has it: a batch is one statement,
and so one transaction, committed (its WAL flushed) before the server answers
it. That saves the `BEGIN` and `COMMIT` round trips a transaction block costs
(psycopg sends each on its own): a batch of one record is one round trip, a
`COPY` two. Each round trip is a wake-up of the server's backend and then of
this thread (and a take of the GIL from a busy loop): with several workers
sharing few cores, each can wait for a core, and the loop's runs wait for the
commit meanwhile. The `COPY` data is framed here, in one buffer, rather than
row by row by psycopg (half the thread's CPU for a large batch, held under
the GIL).
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fusee_runtime.journal.reader import Tail
from fusee_runtime.journal.writer import BATCH_RECORDS_MAX, Appends

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow


class PgWriter(Appends):
    """Group commit into `fusee_journal`: appended on the loop, committed by a thread.

    The same promises as the local writer (`journal/writer.py`), and the same
    `append` (`Appends`): it gives the next lsn at once; a commit publishes a batch's
    last lsn only after PostgreSQL acknowledged its `COMMIT`; a failed commit is
    fail-stop (its outcome may be unknown, so nothing after the last published lsn is
    ever acknowledged, and the next owner reads what the database kept).
    """

    def __init__(
        self,
        conn: psycopg.Connection[TupleRow],
        tail: Tail,
        on_durable: Callable[[int], None],
        on_failed: Callable[[BaseException], None],
        sync: bool,
        record_bytes_max: int,
        probe_s: float = 10.0 / 3,
    ) -> None:
        super().__init__(tail, on_durable, on_failed, record_bytes_max)
        self._conn = conn
        self.synced_at: tuple[int, str | None, int] = (self.synced_lsn, None, 0)
        self.probe_s = probe_s
        """How long the writer stays idle before it checks its session (`_probe`)."""
        # A COMMIT is durable only if the server flushed its WAL first: forced on, whatever
        # the database or role sets (a common tuning turns it off). durability="none":
        # UNSAFE, as on the local journal (no wait for the WAL).
        conn.execute(f"SET synchronous_commit TO {'on' if sync else 'off'}")
        conn.commit()
        conn.autocommit = True  # a batch is one statement: its own transaction (module)
        self._thread = threading.Thread(target=self._run, name="fusee-journal-pg", daemon=True)
        self._thread.start()

    def commit_here(self) -> int | None:
        """Never on the caller's thread: a commit is a round trip. Asks the thread."""
        self.ask()
        return None

    def close(self) -> None:
        """Commits what is pending, then stops the thread (the store closes the session)."""
        with self._lock:
            self._closing = True
            self._wake.notify()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._lock:
                idle = False
                while not self._asked and not self._closing and not idle:
                    idle = not self._wake.wait(self.probe_s)
                self._asked = False
                closing = self._closing
            if idle and not self._probe():
                return
            while True:
                try:
                    lsn = self._commit_pending()
                except BaseException as e:
                    self._on_failed(e)
                    return
                if lsn is None:
                    break
                self._on_durable(lsn)
            if closing:
                return

    def _probe(self) -> bool:
        """An idle writer asks its session (the one holding the lock) whether it is still
        there: one that is gone (the server restarted, or ended it) stops the engine
        now (fail-stop), not at its next commit, so a driver that lost the journal
        stops answering for it too. False then."""
        try:
            self._conn.execute("SELECT 1")
        except BaseException as e:
            with self._lock:
                self._failed = e
            self._on_failed(e)
            return False
        return True

    def _commit_pending(self) -> int | None:
        with self._lock:
            pending = self._pending
            if not pending or self._failed is not None:
                return None
            batch = pending[:BATCH_RECORDS_MAX]
            del pending[:BATCH_RECORDS_MAX]
            first = self._next_lsn - len(pending) - len(batch)
        try:
            took = self._write(batch, first)
        except BaseException as e:
            with self._lock:
                self._failed = e
                self._pending.clear()
            raise
        last = first + len(batch) - 1
        self.synced_lsn = last
        self.synced_at = (last, None, 0)
        c = self.counters
        c.records += len(batch)
        c.bytes += sum(map(len, batch))
        c.batches += 1
        c.batch_sizes.observe(len(batch))
        self.sync_s_recent = c.synced(took, self.sync_s_recent)
        return last

    def _write(self, batch: list[bytes], first: int) -> float:
        """Inserts the batch, one statement in autocommit (so committed when the server
        answers it); returns the seconds of its last round trip, the commit's."""
        conn = self._conn
        with conn.cursor() as cur:
            if len(batch) == 1:
                t0 = time.perf_counter()
                cur.execute(_INSERT, (first, batch[0]), prepare=True, binary=True)
                return time.perf_counter() - t0
            with cur.copy(_COPY) as cp:
                for chunk in copy_data(batch, first):
                    cp.write(chunk)
                t0 = time.perf_counter()
            return time.perf_counter() - t0


_INSERT = "INSERT INTO fusee_journal (lsn, record) VALUES (%s, %s)"
_COPY = "COPY fusee_journal (lsn, record) FROM STDIN (FORMAT BINARY)"
_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags, no extension
_COPY_TRAILER = b"\xff\xff"
_ROW = struct.Struct("!hiqi").pack
"""A row's head in binary COPY: 2 fields; the lsn (8 bytes); the record's length."""
COPY_CHUNK_BYTES = 1 << 20
"""The COPY data goes to the server in pieces of about this size."""


def copy_data(batch: list[bytes], first: int) -> list[bytes]:
    """The binary `COPY` stream of rows (lsn, record) for `batch`, its lsns from
    `first`: header, rows, trailer, in pieces of about `COPY_CHUNK_BYTES`."""
    chunks: list[bytes] = []
    parts = [_COPY_HEADER]
    size = 0
    for lsn, payload in enumerate(batch, first):
        parts.append(_ROW(2, 8, lsn, len(payload)))
        parts.append(payload)
        size += len(payload) + 18
        if size >= COPY_CHUNK_BYTES:
            chunks.append(b"".join(parts))
            parts, size = [], 0
    parts.append(_COPY_TRAILER)
    chunks.append(b"".join(parts))
    return chunks
