"""`fusee check`: what a journal holds, its torn tail and its damage, without touching it."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import HomeLocked
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.journal import format as fmt

SEGMENT = "0000000000.seg"
KEYS = {
    "journal",
    "healthy",
    "segments",
    "bytes",
    "used_bytes",
    "records",
    "last_lsn",
    "record_types",
    "runs_open",
    "runs_closed",
    "torn_tail",
    "torn_tail_at",
    "damage",
    "files",
    "records_after_checkpoint",
    "damages",
    "checkpoint",
    "checkpoints",
    "history",
    "total_bytes",
}


@pytest.fixture
def used(cli, on, home) -> Path:
    """A home holding a completed run (e-1), a failed one (f-1) and an open one (h-1).

    The open run's start is the journal's last record. Returns its first segment.
    """
    for args, stdin, code in [
        (["cli_echo", "--input", "-", "--id", "e-1"], '{"a": 1}', 0),
        (["cli_fail", "--input", "-", "--id", "f-1"], '{"cents": 9}', 1),
        (["cli_hang", "--id", "h-1", "--detach"], None, 0),
    ]:
        r = cli("start", *args, *on, input=stdin)
        assert r.exit_code == code, r.output
    return home / "journal" / SEGMENT


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every regular file under `directory`: its bytes and its modification time."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def as_a_crash_leaves_it(home: Path) -> None:
    """Removes the checkpoints and the history store a clean close wrote.

    Tests that damage the journal's tail as a crash mid-append would need the
    home as such a crash leaves it: a clean close writes a checkpoint at the
    journal's end, and damage to records a checkpoint covers is (rightly)
    acknowledged data damaged; and the runs of that tail never reached the store.
    """
    for p in [*(home / "journal").glob("*.ckpt"), *home.glob("history.db*")]:
        p.unlink()


def checked(cli, home: Path, code: int = 0) -> dict[str, Any]:
    r = cli("check", "--json", "--home", str(home))
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    doc = json.loads(r.stdout)
    assert set(doc) == KEYS
    return doc


def test_a_healthy_home(cli, home, used):
    r = cli("check", "--home", str(home))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["journal", str(home / "journal")]
    assert "1 open, 2 closed" in r.stdout
    assert any(line.split() == ["torn", "tail", "none"] for line in lines)
    assert any(line.split() == ["damage", "none"] for line in lines)


def test_json_counts_records_and_runs(cli, home, used, make_engine):
    doc = checked(cli, home)
    assert doc["healthy"] is True
    assert doc["journal"] == str(home / "journal")
    assert doc["segments"] == 1
    assert doc["bytes"] == used.stat().st_size
    assert doc["runs_open"] == 1
    assert doc["runs_closed"] == 2
    types = doc["record_types"]
    assert types["RunStarted"] == 3
    assert types["RunCompleted"] == 1
    assert types["RunFailed"] == 1
    assert doc["records"] == doc["last_lsn"] == sum(types.values())
    assert doc["torn_tail"] == 0
    assert doc["torn_tail_at"] is None
    assert doc["damage"] is None
    [seg] = doc["files"]
    assert seg == {
        "file": str(used),
        "bytes": doc["bytes"],
        "first_lsn": 1,
        "records": doc["records"],
        "used_bytes": doc["used_bytes"],
    }
    # The bytes holding records end where the journal's written data ends.
    data = used.read_bytes()
    assert fmt.data_end(data, 0) <= doc["used_bytes"] < fmt.data_end(data, 0) + fmt.ALIGN

    async def history() -> int:
        async with make_engine() as engine:
            return sum([len(await engine.history(i)) for i in ("e-1", "f-1", "h-1")])

    assert asyncio.run(history()) == doc["records"]


def test_check_changes_no_file(cli, home, used):
    before = snapshot(home)
    assert cli("check", "--home", str(home)).exit_code == 0
    checked(cli, home)
    assert snapshot(home) == before


def test_a_journal_in_several_segments(cli, home, make_engine):
    async def fill() -> None:
        async with make_engine(segment_bytes=16 << 10, payload_bytes_max=2048) as engine:
            for i in range(40):
                h = await engine.start("cli_echo", "x" * 200, id=f"e-{i}")
                assert await h.result() == "x" * 200

    asyncio.run(fill())
    doc = checked(cli, home)
    assert doc["segments"] >= 2
    assert doc["runs_open"] == 0
    assert doc["runs_closed"] == 40
    assert doc["record_types"]["RunStarted"] == 40
    files = doc["files"]
    assert [Path(f["file"]).name for f in files] == [f"{i:010d}.seg" for i in range(len(files))]
    assert sum(f["records"] for f in files) == doc["records"] == doc["last_lsn"]
    for f, g in itertools.pairwise(files):
        assert g["first_lsn"] == f["first_lsn"] + f["records"]
    assert doc["used_bytes"] == sum(f["used_bytes"] for f in files)
    assert doc["bytes"] == sum(f["bytes"] for f in files) == len(files) * (16 << 10)


@pytest.mark.parametrize("how", ["zeroed", "truncated"])
def test_a_torn_tail_is_reported_and_left_alone(cli, home, used, make_engine, how):
    as_a_crash_leaves_it(home)
    whole = checked(cli, home)
    end = fmt.data_end(used.read_bytes(), 0)
    # The last frame (h-1's start) loses its last bytes, as a crash mid-append leaves it.
    if how == "zeroed":
        with open(used, "r+b") as f:
            f.seek(end - 3)
            f.write(bytes(3))
    else:
        os.truncate(used, end - 3)
    before = snapshot(home)

    r = cli("check", "--home", str(home))
    assert r.exit_code == 0, r.output
    assert r.stderr == ""
    assert "torn tail" in r.stdout and "the next open of the home cuts them" in r.stdout
    doc = checked(cli, home)
    assert snapshot(home) == before

    assert doc["healthy"] is True
    assert doc["damage"] is None
    assert doc["records"] == doc["last_lsn"] == whole["records"] - 1
    assert doc["runs_open"] == 0  # the torn record was h-1's start
    assert doc["runs_closed"] == 2  # from the journal: no run ever reached a store here
    assert doc["history"] is None and doc["checkpoints"] == []
    at = doc["torn_tail_at"]
    assert at == {"file": str(used), "offset": doc["files"][0]["used_bytes"], "removes": []}
    assert at["offset"] < whole["used_bytes"]
    assert 0 < doc["torn_tail"] <= end - 3 - at["offset"]

    async def reopen() -> None:
        async with make_engine():
            pass

    # Opening the home cuts exactly what check said it would, and nothing more.
    asyncio.run(reopen())
    after = checked(cli, home)
    assert after["torn_tail"] == 0 and after["torn_tail_at"] is None
    assert after["records"] == doc["records"]
    assert fmt.data_end(used.read_bytes(), 0) <= at["offset"]


def test_a_half_created_last_segment_is_a_torn_tail(cli, home, used):
    # A segment whose header never became whole holds nothing: the next open removes it.
    whole = checked(cli, home)
    late = used.with_name("0000000001.seg")
    late.write_bytes(b"\xab" * 100 + bytes(1000))
    before = snapshot(home)
    doc = checked(cli, home)
    assert snapshot(home) == before
    assert doc["healthy"] is True
    assert doc["segments"] == 2
    assert doc["records"] == whole["records"]
    assert doc["torn_tail"] == 100
    assert doc["torn_tail_at"] == {"file": str(late), "offset": 0, "removes": [str(late)]}
    assert doc["files"][1] == {
        "file": str(late),
        "bytes": 1100,
        "first_lsn": None,
        "records": 0,
        "used_bytes": 0,
    }
    r = cli("check", "--home", str(home))
    assert r.exit_code == 0, r.output
    assert "and removes 1 segment file" in r.stdout


def test_damage_before_the_tail_exits_1_naming_file_and_offset(cli, home, used):
    with open(used, "r+b") as f:
        f.seek(fmt.HEADER_BYTES + fmt.FRAME_BYTES + 1)  # inside the first record's payload
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    before = snapshot(home)

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: journal corrupt in {used} at byte {fmt.HEADER_BYTES}: ")
    assert "not counted: the journal is damaged" in r.stdout

    doc = checked(cli, home, code=1)
    assert doc["healthy"] is False
    assert doc["damage"]["file"] == str(used)
    assert doc["damage"]["offset"] == fmt.HEADER_BYTES
    assert "a later batch follows" in doc["damage"]["reason"]
    assert doc["records"] is None and doc["runs_open"] is None
    assert doc["segments"] == 1
    assert snapshot(home) == before


def test_a_whole_record_this_version_cannot_read_is_damage(cli, home, used):
    doc = checked(cli, home)
    offset = doc["used_bytes"]
    with open(used, "r+b") as f:
        f.seek(offset)
        f.write(fmt.encode_frame(b"[99]", batch_start=True))

    r = cli("check", "--home", str(home))
    assert r.exit_code == 1, r.output
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: journal corrupt in {used} at byte {offset}: ")
    assert f"record {doc['records'] + 1} is not one this version of fusee reads" in line


@pytest.mark.parametrize("exists", [False, True])
def test_a_home_without_a_journal_exits_2(cli, home, bad_input, exists):
    if exists:
        home.mkdir()
    bad_input(cli("check", "--home", str(home)), 2, f"no journal in {home}")
    assert home.exists() == exists
    if exists:
        assert list(home.iterdir()) == []


async def test_check_while_another_process_owns_the_home(home, make_engine, testapp, fusee):
    testapp.ENTERED = asyncio.Event()
    async with make_engine() as engine:
        await engine.start("cli_hang", None, id="h-2")
        await engine.start("cli_echo", "hi", id="e-2")
        assert await engine.handle("e-2").result(timeout=10) == "hi"
        await asyncio.wait_for(testapp.ENTERED.wait(), 10)
        # Every record is durable now, and the open run waits on nothing that writes.
        before = snapshot(home / "journal")

        done = await asyncio.to_thread(fusee, "check", "--json", "--home", str(home))
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["runs_open"] == 1
        assert doc["runs_closed"] == 1
        assert doc["torn_tail"] == 0
        assert doc["damage"] is None

        assert snapshot(home / "journal") == before
        assert HomeLock(home).owner() == os.getpid()
        with pytest.raises(HomeLocked):
            HomeLock(home).acquire()  # still ours: check took no lock
