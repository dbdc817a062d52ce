"""Group commit into PostgreSQL: the journal writer of `store/postgres.py`.

Appends queue on the loop; a thread inserts each batch (one row, or `COPY` for
many) and commits it, so one `COMMIT` plays the part of the local journal's
`fdatasync` for every run in the batch.
"""

from __future__ import annotations

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
            self._conn.commit()
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
        """Inserts the batch and commits; returns the commit's seconds."""
        conn = self._conn
        with conn.cursor() as cur:
            if len(batch) == 1:
                cur.execute(
                    "INSERT INTO fusee_journal (lsn, record) VALUES (%s, %s)",
                    (first, batch[0]),
                    prepare=True,
                    binary=True,
                )
            else:
                with cur.copy("COPY fusee_journal (lsn, record) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.set_types(["int8", "bytea"])
                    for i, payload in enumerate(batch):
                        cp.write_row((first + i, payload))
        t0 = time.perf_counter()
        conn.commit()
        return time.perf_counter() - t0
