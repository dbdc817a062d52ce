"""`fusee check` on checkpoints, a compacted journal and the history store.

What it counts once compaction has deleted the journal's start, what it
calls damage (and that opening the home agrees), and that it writes
nothing, not even SQLite's shared-memory index, with or without an owner.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_cli_check import checked, snapshot

from fusee_runtime import JournalCorrupt
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.storage import Storage

SMALL = {"segment_bytes": 64 << 10, "payload_bytes_max": 8 << 10, "checkpoint_bytes": 16 << 10}
"""Small segments and frequent checkpoints: a few dozen runs get compacted."""
CLOSED = 60
OPEN = 2
PAD = "x" * 2000


@pytest.fixture
def compacted(home: Path, make_engine) -> Path:
    """A home whose first segments compaction deleted: CLOSED completed runs (e-N),
    in the history store, and OPEN open ones (h-N), started first. Returns its journal."""

    async def fill() -> None:
        async with make_engine(**SMALL) as engine:
            for i in range(OPEN):
                await engine.start("cli_hang", None, id=f"h-{i}")
            for i in range(CLOSED):
                handle = await engine.start("cli_echo", PAD, id=f"e-{i}")
                assert await handle.result() == PAD

    asyncio.run(fill())
    journal = home / "journal"
    assert not (journal / "0000000000.seg").exists()
    return journal


def checkpoints(journal: Path) -> list[Path]:
    """The checkpoint files, newest first."""
    return [p for _, p in ckpt.listed(journal)]


def flip(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def refused(make_engine) -> JournalCorrupt:
    """What opening the home raises."""

    async def open_it() -> None:
        async with make_engine(**SMALL):
            pass

    with pytest.raises(JournalCorrupt) as e:
        asyncio.run(open_it())
    return e.value


def test_a_compacted_home_is_healthy_and_counts_closed_runs_from_the_store(cli, home, compacted):
    before = snapshot(home)
    r = cli("check", "--home", str(home))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    assert f"{OPEN} open, {CLOSED} closed" in r.stdout
    doc = checked(cli, home)
    assert snapshot(home) == before

    assert doc["healthy"] is True
    assert doc["damage"] is None and doc["damages"] == []
    assert (doc["runs_open"], doc["runs_closed"]) == (OPEN, CLOSED)
    # Most closed runs are in no segment any more: they were counted in the store.
    assert doc["record_types"]["RunCompleted"] < CLOSED
    store = doc["history"]
    assert store["file"] == str(home / "history.db")
    assert (store["runs"], store["statuses"]) == (CLOSED, {"completed": CLOSED})
    assert store["quick_check"] == ["ok"]
    assert store["damage"] is None and store["unread"] is None

    newest, older = doc["checkpoints"]
    assert [newest["file"], older["file"]] == [str(p) for p in checkpoints(compacted)]
    assert (newest["used"], older["used"]) == (True, False)
    assert newest["damage"] is None and older["damage"] is None
    assert older["lsn"] < newest["lsn"]
    # A clean close leaves the journal's end checkpointed. (By a checkpoint of its own,
    # taken once the store holds every closed run, unless one taken on the way covers
    # it already, and still carries the last few closed runs.)
    assert doc["checkpoint"] == {"file": newest["file"], "lsn": newest["lsn"]}
    assert newest["lsn"] == doc["last_lsn"]
    assert doc["records_after_checkpoint"] == 0
    assert newest["runs_open"] == OPEN <= newest["runs"]
    for c in doc["checkpoints"]:
        assert c["bytes"] == Path(c["file"]).stat().st_size

    files = doc["files"]
    assert files[0]["first_lsn"] > 1
    assert files[0]["first_lsn"] <= older["lsn"] + 1  # opening can fall back on the older
    assert sum(f["records"] for f in files) == doc["records"]
    assert files[-1]["first_lsn"] + files[-1]["records"] - 1 == doc["last_lsn"]
    on_disk = [p for p in home.rglob("*") if p.is_file() and p.parent.name != "logs"]
    assert doc["total_bytes"] == sum(p.stat().st_size for p in on_disk if p.name != "LOCK")


def test_a_damaged_newest_checkpoint_is_damage_though_opening_falls_back(
    cli, home, compacted, make_engine
):
    healthy = checked(cli, home)
    newest, older = checkpoints(compacted)
    flip(newest, ckpt.HEADER_BYTES + 1)
    before = snapshot(home)

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line == (
        f"error: checkpoint damaged: {newest} at byte 0: CRC mismatch; opening passes over it "
        f"and starts from {older.name} (lsn {int(older.stem)}) and the journal after that"
    )
    doc = checked(cli, home, code=1)
    assert snapshot(home) == before
    assert doc["healthy"] is False
    assert doc["damages"] == [doc["damage"]]
    assert (doc["damage"]["kind"], doc["damage"]["file"]) == ("checkpoint", str(newest))
    first, second = doc["checkpoints"]
    assert (first["damage"], first["used"], first["runs"]) == ("CRC mismatch", False, None)
    assert second["used"] is True
    # From the older checkpoint and the journal after it: every run, as before.
    assert doc["checkpoint"] == {"file": str(older), "lsn": int(older.stem)}
    assert doc["records_after_checkpoint"] == doc["last_lsn"] - int(older.stem) > 0
    assert (doc["runs_open"], doc["runs_closed"]) == (OPEN, CLOSED)
    assert doc["records"] == healthy["records"]

    async def reopen() -> list[str]:
        async with make_engine(**SMALL) as engine:
            return sorted(info.status.value for info in await engine.list())

    # Opening the home does fall back, as check said, and loses nothing.
    assert asyncio.run(reopen()) == ["completed"] * CLOSED + ["running"] * OPEN


def test_a_damaged_older_checkpoint_is_damage_though_opening_does_not_need_it(cli, home, compacted):
    newest, older = checkpoints(compacted)
    flip(older, 0)  # its header

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line == (
        f"error: checkpoint damaged: {older} at byte 0: not a checkpoint header; opening does "
        f"not need it (it starts from {newest.name}), but that one has no whole checkpoint "
        "left to fall back on"
    )
    doc = checked(cli, home, code=1)
    assert doc["checkpoint"]["file"] == str(newest)
    assert (doc["runs_open"], doc["runs_closed"]) == (OPEN, CLOSED)


def test_no_readable_checkpoint_over_a_compacted_journal_is_what_opening_refuses(
    cli, home, compacted, make_engine
):
    for p in checkpoints(compacted):
        flip(p, ckpt.HEADER_BYTES + 1)
    before = snapshot(home)

    doc = checked(cli, home, code=1)
    assert snapshot(home) == before
    journal, *rest = doc["damages"]
    assert [d["kind"] for d in rest] == ["checkpoint", "checkpoint"]
    assert all(
        "no checkpoint is left: it reads the journal from lsn 1" in d["reason"] for d in rest
    )
    assert doc["checkpoint"] is None
    assert doc["runs_open"] is None and doc["runs_closed"] is None
    # The segments themselves read whole.
    assert doc["records"] == sum(f["records"] for f in doc["files"])

    e = refused(make_engine)
    assert journal == {"kind": "journal", "file": e.path, "offset": e.offset, "reason": e.reason}
    assert e.reason.endswith("(the records before it are in no readable checkpoint)")


def zero_last_record(compacted: Path) -> None:
    """Zeroes the end of the journal's last record, which the clean close's checkpoint
    covers: losing it is damage, not a torn tail."""
    last = sorted(compacted.glob("*.seg"))[-1]
    end = fmt.data_end(last.read_bytes(), 0)
    with open(last, "r+b") as f:
        f.seek(end - 3)
        f.write(bytes(3))


def test_damage_before_where_the_checkpoint_says_the_journal_continues(
    cli, home, compacted, make_engine
):
    zero_last_record(compacted)
    doc = checked(cli, home, code=1)
    [damage] = doc["damages"]
    assert damage["kind"] == "journal"
    assert "opening does not read it" in damage["reason"]
    assert "falling back to an older checkpoint would" in damage["reason"]

    async def reopen() -> int:
        async with make_engine(**SMALL) as engine:
            return len(await engine.list())

    # The checkpoint holds what the damaged record said: nothing is lost.
    assert asyncio.run(reopen()) == CLOSED + OPEN


def test_a_journal_that_ends_before_its_checkpoint_is_what_opening_refuses(
    cli, home, compacted, make_engine
):
    # A checkpoint that does not say where the journal continues (as one written
    # before it could) makes opening read the last segment whole.
    newest = checkpoints(compacted)[0]
    got = ckpt.read(newest, Storage())
    body = {k: v for k, v in got.body.items() if k != "at"}
    newest.write_bytes(ckpt.encode(got.lsn, body))
    zero_last_record(compacted)

    doc = checked(cli, home, code=1)
    [damage] = doc["damages"]
    e = refused(make_engine)
    assert damage == {"kind": "journal", "file": e.path, "offset": e.offset, "reason": e.reason}
    assert e.reason.endswith("acknowledged data is damaged")
    assert doc["runs_open"] is None


def test_a_whole_checkpoint_this_version_cannot_make_sense_of_is_what_opening_refuses(
    cli, home, compacted, make_engine
):
    newest = checkpoints(compacted)[0]
    lsn = int(newest.stem)
    # Its header and checksum hold; a run in it has no record at all.
    newest.write_bytes(ckpt.encode(lsn, {"lsn": lsn, "runs": [[None, []]], "schedules": {}}))

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: checkpoint damaged: {newest} at byte 0: it reads whole but ")
    assert line.endswith(
        "opening the home refuses it (it falls back only over a file that is not whole)"
    )
    doc = checked(cli, home, code=1)
    assert doc["checkpoints"][0]["used"] is True
    assert doc["runs_open"] is None
    assert refused(make_engine).path == str(newest)


def test_damage_in_a_segment_kept_only_to_fall_back_on_is_damage(cli, home, make_engine):
    async def fill() -> None:
        # Checkpoints only where this test takes them.
        async with make_engine(**{**SMALL, "checkpoint_bytes": 1 << 30}) as engine:
            for i in range(45):
                handle = await engine.start("cli_echo", PAD, id=f"e-{i}")
                assert await handle.result() == PAD
                if i in (29, 44):
                    await engine.checkpoint()  # the second compacts up to the first

    asyncio.run(fill())
    journal = home / "journal"
    newest, older = checkpoints(journal)
    first, *_, last = sorted(journal.glob("*.seg"))
    # Opening reads only the last segment; the first holds the record after the older one.
    assert fmt.decode_header(first.read_bytes()) <= int(older.stem) + 1
    assert fmt.decode_header(last.read_bytes()) <= int(newest.stem) + 1
    flip(first, fmt.HEADER_BYTES + fmt.FRAME_BYTES + 1)  # inside its first record

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: journal corrupt in {first} at byte {fmt.HEADER_BYTES}: ")
    assert line.endswith(
        f"; opening does not read this segment (it starts after the checkpoint at lsn "
        f"{int(newest.stem)}), but falling back to an older checkpoint would"
    )

    async def reopen() -> int:
        async with make_engine(**SMALL) as engine:
            return len(await engine.list())

    assert asyncio.run(reopen()) == 45  # as check said: opening does not read it


def test_garbage_in_the_middle_of_the_history_store_exits_1_naming_it(cli, home, compacted):
    store = home / "history.db"
    data = bytearray(store.read_bytes())
    page = 4096
    middle = len(data) // page // 2
    assert middle > 4
    data[middle * page : (middle + 3) * page] = random.Random(8).randbytes(3 * page)
    store.write_bytes(data)
    before = snapshot(home)

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    # SQLite refuses to go on past those pages, and does not say where they are.
    assert line == f"error: history store damaged: {store}: database disk image is malformed"
    doc = checked(cli, home, code=1)
    assert snapshot(home) == before
    assert doc["damages"] == [doc["damage"]]
    assert doc["damage"] == {
        "kind": "history",
        "file": str(store),
        "offset": None,
        "reason": "database disk image is malformed",
    }
    assert doc["history"]["damage"] == doc["damage"]
    # The journal and its checkpoints are fine; only what the store holds is unknown.
    assert [c["damage"] for c in doc["checkpoints"]] == [None, None]
    assert doc["runs_open"] == OPEN
    assert doc["runs_closed"] is None and doc["history"]["runs"] is None


def test_a_damaged_index_of_the_history_store_is_named_with_its_page(cli, home, compacted):
    store = home / "history.db"
    with sqlite3.connect(f"{store.as_uri()}?immutable=1", uri=True) as db:
        sql = "SELECT rootpage FROM sqlite_master WHERE name = 'runs_by_closed_at'"
        [(root,)] = db.execute(sql).fetchall()
        [(page,)] = db.execute("PRAGMA page_size").fetchall()
    db.close()
    with open(store, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(random.Random(8).randbytes(page))

    doc = checked(cli, home, code=1)
    [damage] = doc["damages"]
    assert (damage["kind"], damage["file"]) == ("history", str(store))
    assert damage["offset"] == (root - 1) * page
    assert damage["reason"].startswith(f"quick_check: *** in database main *** Page {root}: ")
    assert doc["history"]["quick_check"] != ["ok"]
    # The table itself still reads: the closed runs are counted.
    assert (doc["runs_open"], doc["runs_closed"]) == (OPEN, CLOSED)


def test_check_reads_the_store_through_an_owners_wal_alive_or_killed(cli, fusee, spawn, home, on):
    owner = spawn("start", "cli_wait", "--id", "w-1", *on)
    assert owner.stderr is not None
    assert owner.stderr.readline().startswith("started w-1 (cli_wait")
    assert owner.stderr.readline() == "w-1: waiting for signal 'go'\n"  # served by now
    for i in range(3):
        assert fusee("start", "cli_echo", "--id", f"e-{i}", *on).returncode == 0
    # A prune through the owner returns once its history store holds every closed run.
    pruned = fusee("prune", "--older-than", "5200w", *on)
    assert f"(by its owner, pid {owner.pid})" in pruned.stderr, pruned.stderr
    assert (home / "history.db-wal").exists() and (home / "history.db-shm").exists()

    def looked() -> dict:
        before = snapshot(home)
        doc = checked(cli, home)
        assert snapshot(home) == before  # the -wal and -shm too
        assert (doc["runs_open"], doc["runs_closed"]) == (1, 3)
        assert doc["history"]["statuses"] == {"completed": 3}
        return doc

    looked()
    owner.kill()
    owner.communicate()
    looked()  # as the crash left it: the -shm of a process that is gone
    # The rows are in the -wal only: a check that read the database file alone found none.
    alone = home.parent / "alone.db"
    shutil.copy(home / "history.db", alone)
    with sqlite3.connect(alone) as db:
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)

    # A -wal without its -shm cannot be read without writing one: check says so, and doesn't.
    (home / "history.db-shm").unlink()
    before = snapshot(home)
    r = cli("check", "--json", "--home", str(home))
    assert r.exit_code == 0, r.output
    assert snapshot(home) == before
    [warning] = r.stderr.splitlines()
    assert warning.startswith("warning: the history store was not checked: ")
    assert "it has a -wal but no -shm" in warning
    doc = checked(cli, home)
    assert doc["history"]["runs"] is None and doc["runs_closed"] is None
    assert doc["runs_open"] == 1
