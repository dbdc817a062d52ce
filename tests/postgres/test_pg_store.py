"""The journal in PostgreSQL: its tables, who owns it, checkpoints, damage, bad input.

Every test runs against a real server (`tests/postgres_server.py` starts one
from the machine's binaries) and a database of its own. The contract tests
that hold for both stores (`STORES` in tests/crash/test_durability_contract.py,
tests/engine/test_contract_points.py, tests/engine/test_bad_input.py) run here
too; these are what only a database has.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from fusee_runtime import (
    Config,
    Ctx,
    Engine,
    HomeLocked,
    JournalCorrupt,
    JournalFailed,
    Status,
    StoreUnavailable,
    step,
    workflow,
)
from fusee_runtime.errors import IdConflict
from fusee_runtime.store import postgres

RAN: list[int] = []


@step
async def pg_add(x: int) -> int:
    RAN.append(x)
    return x + 1


@workflow
async def pg_sum(ctx: Ctx, n: int) -> int:
    total = 0
    for i in range(n):
        total += await pg_add(i)
    ctx.log.info(f"summed {n}")
    return total


@workflow
async def pg_waits(ctx: Ctx, x: int) -> int:
    got = await ctx.wait_for("go")
    return x + int(got)


def engine(home: Path, url: str, **config: Any) -> Engine:
    return Engine(home, app=None, config=Config(store=url, **config))


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()  # type: ignore[arg-type]


async def test_an_empty_database_gets_fusees_tables_and_a_second_open_keeps_them(
    tmp_path: Path, pg_url: str
) -> None:
    async with engine(tmp_path / "h", pg_url) as e:
        assert await (await e.start("pg_sum", 3, id="s-1")).result() == 6
    assert rows(pg_url, "SELECT version FROM fusee_schema") == [(postgres.SCHEMA_VERSION,)]
    assert rows(pg_url, "SELECT epoch FROM fusee_owner") == [(1,)]
    async with engine(tmp_path / "h", pg_url) as e:
        assert await e.handle("s-1").result() == 6
    assert rows(pg_url, "SELECT version FROM fusee_schema") == [(postgres.SCHEMA_VERSION,)]
    assert rows(pg_url, "SELECT epoch FROM fusee_owner") == [(2,)]


async def test_a_database_from_a_newer_fusee_is_refused_and_left_alone(
    tmp_path: Path, pg_url: str
) -> None:
    async with engine(tmp_path / "h", pg_url):
        pass
    with psycopg.connect(pg_url) as conn:
        conn.execute("UPDATE fusee_schema SET version = 99")
    with pytest.raises(StoreUnavailable, match=r"version 99, newer than this fusee knows"):
        await engine(tmp_path / "h", pg_url).open()
    assert rows(pg_url, "SELECT version FROM fusee_schema") == [(99,)]


async def test_a_second_process_on_the_journal_is_refused_naming_the_owner(
    tmp_path: Path, pg_url: str
) -> None:
    async with engine(tmp_path / "a", pg_url):
        with pytest.raises(HomeLocked, match=r"locked by fusee pid \d+ on "):
            await engine(tmp_path / "b", pg_url).open()
    async with engine(tmp_path / "b", pg_url) as e:  # free once the owner closed
        assert e.journal.epoch == 2  # type: ignore[attr-defined]


async def test_the_lock_of_a_killed_process_of_this_host_is_taken_once_its_session_ends(
    tmp_path: Path, pg_url: str
) -> None:
    # A process killed on this host leaves its session (and the lock) on the server a
    # moment: an open then waits for it rather than call the dead process the owner.
    async with engine(tmp_path / "a", pg_url):
        pass
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = f"SELECT pg_advisory_lock({postgres.LOCK_CLASS}, hashtext(current_schema()))"
    left = psycopg.connect(pg_url, autocommit=True)
    left.execute(lock)  # type: ignore[arg-type]
    left.execute(
        "UPDATE fusee_owner SET holder = %s", (f"pid {dead.pid} on {socket.gethostname()}",)
    )
    b = engine(tmp_path / "b", pg_url)
    opening = asyncio.create_task(b.open())
    tried = (  # the opener's first try failed: it went on to read the holder, or waits
        "SELECT count(*) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
        "AND datname = current_database() AND (query LIKE '%FROM fusee_owner%' "
        "OR (query LIKE '%pg_try_advisory_lock%' AND state = 'idle in transaction'))"
    )
    with psycopg.connect(pg_url, autocommit=True) as watch:
        while not opening.done() and not watch.execute(tried).fetchone()[0]:  # type: ignore[index]
            await asyncio.sleep(0)
    left.close()
    await opening
    try:
        assert b.journal.epoch == 2  # type: ignore[attr-defined]
    finally:
        await b.close()


async def test_an_unreachable_server_is_one_clear_error_without_the_password(
    tmp_path: Path,
) -> None:
    url = f"postgresql://fusee:s3cret@/orders?host={tmp_path}&port=1"
    with pytest.raises(StoreUnavailable) as raised:
        await engine(tmp_path / "h", url).open()
    said = str(raised.value)
    assert said.startswith(f"cannot connect to PostgreSQL database orders on {tmp_path}:1: ")
    assert "s3cret" not in said and "\n" not in said


@pytest.mark.parametrize("url", ["mysql://db/x", "sqlite:///x.db", "orders"])
def test_a_store_of_another_kind_is_refused_when_configured(url: str) -> None:
    with pytest.raises(ValueError, match=r"Config.store is None .* or a PostgreSQL URL"):
        Config(store=url)


async def test_checkpoints_compact_the_journal_table_and_a_reopen_starts_from_them(
    tmp_path: Path, pg_url: str
) -> None:
    RAN.clear()
    async with engine(tmp_path / "h", pg_url, checkpoint_bytes=1) as e:
        for i in range(20):
            assert await (await e.start("pg_sum", 5, id=f"c-{i}")).result() == 15
        await e.start("pg_waits", 1, id="open-1")
        await e.checkpoint()
        lsn = e.checkpoints.lsn
    checkpoints = [r[0] for r in rows(pg_url, "SELECT lsn FROM fusee_checkpoints ORDER BY lsn")]
    assert len(checkpoints) == 2 and checkpoints[-1] >= lsn
    (first_kept,) = rows(pg_url, "SELECT min(lsn) FROM fusee_journal")[0]
    assert first_kept is None or first_kept > checkpoints[0]
    async with engine(tmp_path / "h", pg_url) as e:
        assert await e.handle("c-7").result() == 15
        await e.signal("open-1", "go", 41)
        assert await e.handle("open-1").result() == 42
    assert len(RAN) == 100  # every step ran once: none again after the reopen


async def test_a_missing_record_is_journal_corrupt_naming_the_table_and_record(
    tmp_path: Path, pg_url: str
) -> None:
    async with engine(tmp_path / "h", pg_url, checkpoint_bytes=None) as e:
        await e.start("pg_waits", 1, id="w-1")
        await e.start("pg_waits", 2, id="w-2")
    with psycopg.connect(pg_url) as conn:
        conn.execute("DELETE FROM fusee_checkpoints")
        conn.execute("DELETE FROM fusee_journal WHERE lsn = 2")
    with pytest.raises(JournalCorrupt, match=r"table fusee_journal, record 3: record 2 is missing"):
        await engine(tmp_path / "h", pg_url).open()


async def test_an_owner_whose_session_died_stops_and_cannot_compact_under_the_next(
    tmp_path: Path, pg_url: str
) -> None:
    """The server dropping the owner's session (as it does for a lost network) frees the
    journal for another process; the old owner's next commit fails (fail-stop), and its
    checkpoint, fenced by the epoch, writes and deletes nothing."""
    old = engine(tmp_path / "a", pg_url)
    await old.open()
    try:
        await old.start("pg_waits", 1, id="w-1")
        journal: postgres.PgJournal = old.journal  # type: ignore[assignment]
        assert journal._conn is not None
        backend = journal._conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        async with engine(tmp_path / "b", pg_url) as new:
            await new.wait_until(lambda: new.runs.newest["w-1"].status == Status.PARKED)
            with pytest.raises(JournalFailed):
                await old.signal("w-1", "go", 41)
            before = rows(pg_url, "SELECT lsn FROM fusee_checkpoints")
            with pytest.raises(JournalFailed, match="another process took the journal"):
                journal.write_checkpoint(10_000, {"lsn": 10_000, "runs": [], "schedules": {}})
            assert rows(pg_url, "SELECT lsn FROM fusee_checkpoints") == before
            await new.signal("w-1", "go", 41)
            assert await new.handle("w-1").result() == 42
        # A checkpoint that finds another process took the journal stops this one too
        # (fail-stop), even if it had nothing to commit meanwhile.
        idle = engine(tmp_path / "c", pg_url)
        await idle.open()
        try:
            await idle.start("pg_waits", 1, id="w-2")
            idle_journal: postgres.PgJournal = idle.journal  # type: ignore[assignment]
            idle_journal.epoch -= 1  # as if another process had opened it since
            await idle.checkpoint()
            assert idle.durability.failed is not None
            assert "another process took the journal" in str(idle.durability.failed)
            with pytest.raises(JournalFailed):
                await idle.start("pg_sum", 1, id="after")
        finally:
            await idle.close()
        async with engine(tmp_path / "b", pg_url) as new:
            assert await new.handle("w-1").result() == 42
    finally:
        await old.close()


def test_a_store_url_s_password_is_never_said(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as raised:
        Config(store="postgres+psycopg://alice:TOPSECRET@db/x")
    assert "TOPSECRET" not in str(raised.value)
    with pytest.raises(StoreUnavailable) as unread:
        PgOpen("postgresql://u:Top%zzSecret@db/x")
    assert "Secret" not in str(unread.value) and "cannot be read" in str(unread.value)


def PgOpen(url: str) -> None:
    journal = postgres.PgJournal(url)
    try:
        journal.open()
    finally:
        journal.close()


async def test_commits_wait_for_the_wal_whatever_the_database_says(
    tmp_path: Path, pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        name = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    async with engine(tmp_path / "h", pg_url) as e:
        journal: postgres.PgJournal = e.journal  # type: ignore[assignment]
        assert journal._conn is not None
        (setting,) = journal._conn.execute("SHOW synchronous_commit").fetchone()  # type: ignore[misc]
        journal._conn.commit()
        assert setting == "on"
        assert await (await e.start("pg_sum", 2, id="s-1")).result() == 3


async def test_a_role_with_only_row_rights_opens_a_made_journal(
    tmp_path: Path, pg_url: str
) -> None:
    async with engine(tmp_path / "h", pg_url) as e:
        assert await (await e.start("pg_sum", 2, id="s-1")).result() == 3
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE rows_only LOGIN")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        conn.execute(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON fusee_journal, fusee_checkpoints, "
            "fusee_owner, fusee_schema, fusee_runs, fusee_pruned, fusee_secret, fusee_layout, "
            "fusee_logs TO rows_only"
        )
    limited = pg_url.replace("postgresql://postgres@", "postgresql://rows_only@")
    async with engine(tmp_path / "h", limited) as e:
        assert await e.handle("s-1").result() == 3
        assert await (await e.start("pg_sum", 3, id="s-2")).result() == 6
    # Its ctx.log lines went in too (an identity column: no right on a sequence needed).
    lines = rows(pg_url, "SELECT line FROM fusee_logs WHERE id = 's-2'")
    assert [orjson.loads(line)["msg"] for (line,) in lines] == ["summed 3", "run closed: completed"]


TOKENS: list[str] = []


@workflow
async def pg_approval(ctx: Ctx, what: str) -> Any:
    return [what, await ctx.await_completion("review", lambda c: TOKENS.append(c.token))]


async def test_another_home_on_the_store_finds_closed_runs_and_takes_their_tokens(
    tmp_path: Path, pg_url: str
) -> None:
    """Closed runs and the tokens' secret live in the database, not in the home: the next
    process to drive the journal (a standby on another host) answers a start with the id
    of a completed run with that run, never a second charge, and takes a token issued
    before it."""
    RAN.clear()
    TOKENS.clear()
    async with engine(tmp_path / "a", pg_url) as e:
        assert await (await e.start("pg_sum", 2, id="paid-1")).result() == 3
        await e.start("pg_approval", "invoice-7", id="ask-1")
        await e.wait_until(lambda: len(TOKENS) == 1)
        await e.checkpoints.flush_history()
        assert e.runs.by_run_id.keys() == {e.runs.latest("ask-1").run_id}, (
            "paid-1 left memory (and so the checkpoint) for fusee_runs"
        )
    assert rows(pg_url, "SELECT workflow_id, status FROM fusee_runs") == [("paid-1", "completed")]
    assert RAN == [0, 1]
    async with engine(tmp_path / "b", pg_url) as e:
        with pytest.raises(IdConflict):
            await e.start("pg_sum", 2, id="paid-1", on_conflict="fail")
        assert await (await e.start("pg_sum", 2, id="paid-1")).result() == 3
        assert RAN == [0, 1], "the completed run was answered, not run again"
        assert [i.id for i in await e.list(status="completed")] == ["paid-1"]
        await e.complete(TOKENS[0], "approved")
        assert await e.handle("ask-1").result() == ["invoice-7", "approved"]
    assert not (tmp_path / "a" / "history.db").exists()
    assert not (tmp_path / "a" / "secret").exists()


async def test_runs_found_closed_on_open_reach_fusee_runs_with_those_after_them(
    tmp_path: Path, pg_url: str
) -> None:
    """Opening queues the runs it finds closed in the journal again (they may have been
    pruned meanwhile, which `fusee_pruned` says): that batch and the next commit."""
    e = engine(tmp_path / "h", pg_url)
    await e.open()
    assert await (await e.start("pg_sum", 1, id="x")).result() == 1
    await e.close(crash=True)  # no checkpoint: opening finds x closed in the journal
    async with engine(tmp_path / "h", pg_url) as e:
        await e.checkpoints.flush_history()
        assert await (await e.start("pg_sum", 1, id="y")).result() == 1
        await e.checkpoints.flush_history()
        assert e.runs.by_run_id == {}
    assert sorted(rows(pg_url, "SELECT workflow_id FROM fusee_runs")) == [("x",), ("y",)]


async def test_an_idle_owner_whose_session_ended_stops_without_waiting_for_a_commit(
    tmp_path: Path, pg_url: str
) -> None:
    """The writer checks its session when idle (every lease / 3): a driver with nothing
    to commit learns it lost the journal (a server restart, the session ended) and stops,
    rather than keep answering for runs another process now drives."""
    e = engine(tmp_path / "h", pg_url, lease=2.0)
    await e.open()
    try:
        await e.start("pg_waits", 1, id="w-1")
        journal: postgres.PgJournal = e.journal  # type: ignore[assignment]
        assert journal._conn is not None
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (journal._conn.info.backend_pid,))
        await e.wait_until(lambda: e.durability.failed is not None)
        with pytest.raises(JournalFailed):
            await e.signal("w-1", "go", 1)
    finally:
        await e.close()


async def test_a_history_read_whose_session_the_server_ended_is_made_again(
    tmp_path: Path, pg_url: str
) -> None:
    """Found by the torture (seed 7309, fault "drop"): a read of the closed runs on a
    connection the server had ended raised `HistoryDamaged` (it is not damage), and the
    process died of it; a read is made once more on a new connection."""
    async with engine(tmp_path / "h", pg_url) as e:
        await e.signal((await e.start("pg_waits", 1, id="r-1")).id, "go", 1)
        assert await e.handle("r-1").result() == 2
        store = e.runs.store
        assert store is not None
        store.flush()  # (closed runs in the store)
        assert store.latest("r-1") is not None  # (the reads' connection, made)
        backend = store._reads.info.backend_pid  # type: ignore[attr-defined]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
        row = store.latest("r-1")
        assert row is not None and row.run_id == e.runs.latest("r-1").run_id
        assert store._reads.info.backend_pid != backend  # type: ignore[attr-defined]
