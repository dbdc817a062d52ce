"""The journal writer in PostgreSQL (`store/pg_writer.py`): a batch is one statement in
autocommit (an INSERT for one record, a binary COPY framed by fusee for more), durable
when the server answers it; and `fusee bench --store`'s workers (`bench_pg.py`).

A real server (`tests/postgres_server.py`)."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest

from fusee_runtime import bench_pg
from fusee_runtime.journal.reader import Tail
from fusee_runtime.store import pg_writer
from fusee_runtime.store.postgres import PgJournal
from fusee_runtime.store.shared import open_scratch


class Published:
    """What the writer published: the durable lsn, and a failure."""

    def __init__(self) -> None:
        self.lsn = 0
        self.failed: BaseException | None = None
        self._cond = threading.Condition()

    def durable(self, lsn: int) -> None:
        with self._cond:
            self.lsn = lsn
            self._cond.notify_all()

    def fail(self, e: BaseException) -> None:
        with self._cond:
            self.failed = e
            self._cond.notify_all()

    def wait(self, lsn: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.lsn >= lsn or self.failed, timeout=30)
        assert self.failed is None, self.failed


def _writer(journal: PgJournal, published: Published) -> pg_writer.PgWriter:
    journal.open()
    return journal.writer(  # commits when asked only
        Tail(None, 0, 1), published.durable, published.fail, sync=True, record_bytes_max=1 << 24
    )


def _journal_rows(url: str) -> list[tuple[int, bytes]]:
    with psycopg.connect(url) as conn:
        got = conn.execute("SELECT lsn, record FROM fusee_journal ORDER BY lsn").fetchall()
    return [(lsn, bytes(record)) for lsn, record in got]


def test_a_batch_is_one_copy_of_every_record_committed_when_it_is_published(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_writer, "COPY_CHUNK_BYTES", 1000)  # several pieces
    journal, published = PgJournal(pg_url), Published()
    writer = _writer(journal, published)
    try:
        payloads = [bytes([i % 251]) * (1 + i * 37 % 900) for i in range(200)]
        payloads.append(b"\x00\xff" * 40_000)  # over a piece on its own
        for payload in payloads:  # pending, until asked: one batch
            writer.append(payload)
        writer.ask()
        published.wait(len(payloads))
        # Durable means committed: another session sees every record, and the writer's
        # session holds no transaction open.
        assert _journal_rows(pg_url) == list(enumerate(payloads, 1))
        assert writer.counters.batches == 1
        assert journal._conn is not None
        assert journal._conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        lsn = writer.append(b"one more")  # a batch of one: an INSERT
        writer.ask()
        published.wait(lsn)
        assert _journal_rows(pg_url)[-1] == (lsn, b"one more")
    finally:
        writer.close()
        journal.close()


def test_copy_data_frames_rows_as_postgresql_reads_them(pg_url: str) -> None:
    batch = [b"a", b"", b"xyz" * 1000]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (lsn bigint PRIMARY KEY, record bytea NOT NULL)")
        with conn.cursor() as cur, cur.copy("COPY t FROM STDIN (FORMAT BINARY)") as cp:
            for chunk in pg_writer.copy_data(batch, 41):
                cp.write(chunk)
        got = conn.execute("SELECT lsn, record FROM t ORDER BY lsn").fetchall()
    assert [(lsn, bytes(r)) for lsn, r in got] == [(41, b"a"), (42, b""), (43, b"xyz" * 1000)]


def test_a_failed_batch_stops_the_writer(pg_url: str) -> None:
    journal, published = PgJournal(pg_url), Published()
    writer = _writer(journal, published)
    try:
        with psycopg.connect(pg_url, autocommit=True) as conn:  # its lsns, taken already
            conn.execute("INSERT INTO fusee_journal VALUES (1, 'x'), (2, 'y')")
        writer.append(b"a")
        writer.append(b"b")
        writer.ask()
        with published._cond:
            assert published._cond.wait_for(lambda: published.failed is not None, timeout=30)
        assert published.lsn == 0
        assert writer.failed is not None
    finally:
        writer.close()
        journal.close()


def test_bench_workers_run_their_share_and_close_once_all_are_done(
    pg_url: str, tmp_path: Path
) -> None:
    with open_scratch(pg_url) as schemas:
        assert bench_pg.workers_steps_per_s(schemas, tmp_path, 2, 4, 2) > 0
