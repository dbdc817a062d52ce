"""Each group commit marks its first frame; damage reports say which batch it is in."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fusee_runtime import JournalCorrupt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import Tail, recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter


def write_batches(directory: Path, batches: list[int]) -> list[tuple[Path, int, bool]]:
    """Writes batches of the given sizes, one sync each; returns every frame's place and flag."""
    durable = threading.Event()
    last = 0

    def on_durable(lsn: int) -> None:
        if lsn == last:
            durable.set()

    writer = JournalWriter(
        directory,
        Storage(),
        Tail(None, 0, 1),
        1 << 20,
        on_durable,
        lambda e: None,
        record_bytes_max=4096,
    )
    lsn = 0
    for size in batches:
        durable.clear()
        for _ in range(size):
            lsn = writer.append(b'["record"]')
        last = lsn
        durable.wait()
    writer.close()
    assert writer.counters.batches == len(batches)
    frames = []
    for path in sorted(directory.glob("*.seg")):
        data = path.read_bytes()
        for pos, _, _ in fmt.frames(data, fmt.HEADER_BYTES):
            frames.append((path, pos, fmt.starts_batch(data, pos)))
    return frames


def test_the_first_frame_of_each_batch_is_marked(tmp_path: Path) -> None:
    frames = write_batches(tmp_path, [1, 3, 2])
    assert [flag for _, _, flag in frames] == [True, True, False, False, True, False]
    assert len(recover(tmp_path, Storage()).records) == 6


@pytest.mark.parametrize(
    ("index", "says"),
    [(1, "a later batch follows"), (4, "only frames of the last batch follow")],
)
def test_damage_before_a_whole_frame_names_its_batch(tmp_path: Path, index: int, says: str) -> None:
    frames = write_batches(tmp_path, [1, 3, 3])
    path, offset, _ = frames[index]
    with open(path, "r+b") as f:
        f.seek(offset + fmt.FRAME_BYTES)
        f.write(b"X")
    with pytest.raises(JournalCorrupt) as raised:
        recover(tmp_path, Storage())
    assert raised.value.offset == offset
    assert says in raised.value.reason
    # The mark is not part of the length: a damaged marked frame is a CRC mismatch.
    assert raised.value.reason.startswith("CRC mismatch")
