"""A whole record (its checksum holds) that this version cannot read stops the open cleanly."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fusee_runtime import Ctx, JournalCorrupt, workflow
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter


@workflow
async def unreadable_echo(ctx: Ctx, value: int) -> int:
    return value


def _append(journal: Path, payload: bytes) -> tuple[str, int]:
    """Appends one raw record after what the journal holds; returns its file and offset."""
    scan = recover(journal, Storage())
    done = threading.Event()
    writer = JournalWriter(
        journal,
        Storage(),
        scan.tail,
        8 << 20,
        lambda lsn: done.set(),
        lambda e: None,
        record_bytes_max=4096,
    )
    writer.append(payload)
    done.wait()
    writer.close()
    path = sorted(journal.glob("*.seg"))[-1]
    data = path.read_bytes()
    last = max((pos for pos, _, _ in fmt.frames(data, fmt.HEADER_BYTES)), default=None)
    assert last is not None
    return str(path), last


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b'{"not": "a record"}', "not a fusee record"),
        (b"[999, 1]", "not a fusee record"),
        (b'[5, "no-such-run", "1", "a", 1]', "no-such-run"),  # a record of a run never started
        (b"[2]", "fields"),
    ],
)
async def test_open_names_the_file_and_offset(home: Path, make_engine, payload, says) -> None:
    async with make_engine() as engine:
        await (await engine.start("unreadable_echo", 1, id="u-1")).result()
    path, offset = _append(home / "journal", payload)
    before = {p.name: p.read_bytes() for p in (home / "journal").glob("*.seg")}

    with pytest.raises(JournalCorrupt) as raised:
        async with make_engine():
            pass

    assert (raised.value.path, raised.value.offset) == (path, offset)
    assert "cannot be read by this version" in raised.value.reason
    assert says in raised.value.reason
    # Refusing to open changed nothing and released the home.
    assert {p.name: p.read_bytes() for p in (home / "journal").glob("*.seg")} == before
    lock = HomeLock(home)
    lock.acquire()
    lock.release()
