"""The run log of a journal in PostgreSQL (`store/pg_log.py`): lines wait while the
server refuses them and go in once it takes them; closing never waits long on a
server that does not answer. A real server, and a real socket that never answers."""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import orjson
import psycopg
import pytest

from fusee_runtime.store import pg_log, postgres
from fusee_runtime.store.pg_log import PgRunLog, read_lines
from fusee_runtime.store.postgres import PgJournal


def _line(i: int) -> dict[str, Any]:
    return {"ts": 0.0, "level": "info", "id": "l-1", "run_id": "r", "msg": f"line {i}"}


@pytest.fixture
def failures() -> Iterator[threading.Event]:
    """Set when the run log says it cannot write to the server."""
    said = threading.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "cannot write the run log" in record.getMessage():
                said.set()

    handler = Handler()
    logging.getLogger("fusee").addHandler(handler)
    try:
        yield said
    finally:
        logging.getLogger("fusee").removeHandler(handler)


def test_lines_wait_while_the_server_refuses_them_and_go_in_once_it_takes_them(
    pg_url: str, failures: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_log, "CLOSE_WAIT_S", 60.0)  # a bound, not what the test waits on
    monkeypatch.setattr(pg_log, "RETRY_S", 3600.0)  # it tries again when close wakes it
    journal = PgJournal(pg_url)
    journal.open()  # the tables
    journal.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE fusee_logs RENAME TO fusee_logs_away")
        run_log = PgRunLog(journal)
        for i in range(3):
            run_log.write(_line(i))
        failures.wait()
        run_log.write(_line(3))  # queued behind the refused ones
        conn.execute("ALTER TABLE fusee_logs_away RENAME TO fusee_logs")
    run_log.close()  # wakes the thread from its pause: it tries again, and they go in
    lines = [orjson.loads(line)["msg"] for _, line in read_lines(journal, "l-1")]
    assert lines == [f"line {i}" for i in range(4)]
    assert run_log.dropped == 0
    run_log.write(_line(4))  # closed: dropped without a word
    assert [line["msg"] for line in run_log.lines("l-1", 2)] == ["line 2", "line 3"]


def test_closing_does_not_wait_for_a_server_that_never_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pg_log, "CLOSE_WAIT_S", 0.05)
    monkeypatch.setattr(postgres, "CONNECT_TIMEOUT_S", 2)
    with socket.socket() as silent:  # listens (the kernel accepts), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        run_log = PgRunLog(PgJournal(f"postgresql://nobody@127.0.0.1:{port}/db"))
        for i in range(5):
            run_log.write(_line(i))
        thread = run_log._thread
        assert thread is not None
        run_log.close()
        assert thread.is_alive(), "close returned while the thread still waits on the server"
        assert run_log.dropped == 5
        thread.join()  # the connect times out; the thread takes nothing more and ends
    assert run_log.dropped == 5


def test_lines_dropped_past_the_bound_while_a_batch_goes_in_are_its_own_and_counted(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queue overflows while the table is locked under a batch's INSERT: the oldest
    lines go, which are that batch's; once it goes in, the lines after it stay queued
    and go in next, none lost without being counted."""
    monkeypatch.setattr(pg_log, "QUEUED_MAX", 5)
    monkeypatch.setattr(pg_log, "BATCH_LINES_MAX", 3)
    monkeypatch.setattr(pg_log, "CLOSE_WAIT_S", 60.0)
    journal = PgJournal(pg_url)
    journal.open()
    journal.close()
    with psycopg.connect(pg_url) as locker:
        locker.execute("LOCK TABLE fusee_logs IN ACCESS EXCLUSIVE MODE")
        run_log = PgRunLog(journal)
        run_log.write(_line(0))  # the batch: line 0 alone (taken as the thread wakes)
        with psycopg.connect(pg_url, autocommit=True) as watcher:
            while not watcher.execute(  # the INSERT waits on the lock: the batch is taken
                "SELECT count(*) FROM pg_locks WHERE relation = 'fusee_logs'::regclass "
                "AND NOT granted"
            ).fetchone()[0]:  # type: ignore[index]
                pass
        for i in range(1, 8):  # the queue holds 5: lines 0 to 2 are dropped from it
            run_log.write(_line(i))
        locker.rollback()  # the lock goes: the batch goes in
    run_log.close()
    inserted = [orjson.loads(line)["msg"] for _, line in read_lines(journal, "l-1")]
    # Line 0 was the batch; 1 and 2 were dropped (counted); 3 to 7 went in after it.
    assert inserted == [f"line {i}" for i in (0, 3, 4, 5, 6, 7)]
    assert run_log.dropped == 2
