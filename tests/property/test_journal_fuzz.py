"""Random damage to a real journal never makes `recover` invent or reorder records.

A journal of several small segments is written once by `JournalWriter`. Each
example copies it, damages the copy (truncations, zeroed tails, flipped bytes,
garbage after the data) and runs `recover`: it either refuses with
`JournalCorrupt` naming a segment file and an offset in it, or returns a
prefix of the records written, same payloads in the same order. A journal it
repaired opens again unchanged and takes new records after that prefix.
"""

from __future__ import annotations

import random
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fusee_runtime import JournalCorrupt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter

SEGMENT_BYTES = 2048
RECORD_BYTES_MAX = 600
RECORDS = 60
FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

Records = list[tuple[int, bytes]]
Files = dict[str, bytearray]


class Journal:
    """The undamaged journal: its segment files and the records they hold."""

    def __init__(
        self, files: dict[str, bytes], records: Records, frames: dict[str, list[tuple[int, int]]]
    ) -> None:
        self.files = files
        self.records = records
        self.frames = frames  # segment name -> (offset, bytes the CRC covers) of each frame

    def __repr__(self) -> str:
        return f"Journal({len(self.files)} segments, {len(self.records)} records)"


def write_journal(directory: Path, payloads: list[bytes], first_lsn: int = 1) -> None:
    """Appends `payloads` with a real `JournalWriter` and waits until they are durable."""
    scan = recover(directory, Storage())
    assert scan.tail.next_lsn == first_lsn
    last = first_lsn + len(payloads) - 1
    done = threading.Event()
    failures: list[BaseException] = []

    def on_durable(lsn: int) -> None:
        if lsn >= last:
            done.set()

    def on_failed(error: BaseException) -> None:
        failures.append(error)
        done.set()

    writer = JournalWriter(
        directory,
        Storage(),
        scan.tail,
        SEGMENT_BYTES,
        on_durable,
        on_failed,
        record_bytes_max=RECORD_BYTES_MAX,
    )
    try:
        for p in payloads:
            writer.append(p)
        done.wait()
    finally:
        writer.close()
    assert failures == []


def payload(i: int, length: int) -> bytes:
    """A JSON record of exactly `length` bytes (at least the prefix's)."""
    prefix = f'[{i},"'.encode()
    return prefix + b"x" * max(0, length - len(prefix) - 2) + b'"]'


def whole_frames(data: bytes) -> list[tuple[int, int]]:
    return [(pos, fmt.FRAME_BYTES + len(p)) for pos, p, _ in fmt.frames(data, fmt.HEADER_BYTES)]


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> Journal:
    directory = tmp_path_factory.mktemp("journal")
    rng = random.Random(20240601)
    # The first record is the largest, so that damage often takes the oldest
    # segment's every record while later segments still hold theirs.
    choices = [1, 12, 40, 100, 250, 256, 400, 512, RECORD_BYTES_MAX]
    sizes = [RECORD_BYTES_MAX] + [rng.choice(choices) for _ in range(RECORDS - 1)]
    payloads = [payload(i, n) for i, n in enumerate(sizes)]
    # Several bursts, so batches and segment boundaries fall in different places.
    write_journal(directory, payloads[:7])
    write_journal(directory, payloads[7:30], first_lsn=8)
    write_journal(directory, payloads[30:], first_lsn=31)
    files = {p.name: p.read_bytes() for p in sorted(directory.glob("*.seg"))}
    assert len(files) >= 4
    records = recover(directory, Storage(), repair=False).records
    assert records == list(enumerate(payloads, start=1))
    frames = {name: whole_frames(data) for name, data in files.items()}
    return Journal(files, records, frames)


@contextmanager
def copy_of(files: dict[str, bytes]) -> Iterator[tuple[Path, Files]]:
    with tempfile.TemporaryDirectory() as d:
        yield Path(d), {name: bytearray(data) for name, data in files.items()}


def write_out(directory: Path, files: Files) -> None:
    for name, data in files.items():
        (directory / name).write_bytes(bytes(data))


def on_disk(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.seg"))}


def used(data: bytearray) -> int:
    return len(data.rstrip(b"\0"))


# -- damage ------------------------------------------------------------------------------

# 0 is the oldest segment, -1 the newest (where a crash leaves its damage);
# small positions land in headers and first frames.
segment_choice = st.one_of(st.sampled_from([0, -1]), st.integers(0, 63))
position = st.one_of(st.integers(0, 80), st.integers(0, 1 << 16))


@dataclass(frozen=True)
class Truncate:
    """A crash mid-append: zeros from `position` on (preallocated), or a real truncation."""

    segment: int
    position: int
    shorten: bool

    def apply(self, files: Files) -> None:
        data = files[pick(files, self.segment)]
        at = self.position % (used(data) + 16)
        if self.shorten:
            del data[at:]
        else:
            data[at:] = bytes(max(0, len(data) - at))


@dataclass(frozen=True)
class Flip:
    """A bad sector or a bit flip: one byte changed, mostly where data was written."""

    segment: int
    position: int
    mask: int

    def apply(self, files: Files) -> None:
        data = files[pick(files, self.segment)]
        if data:
            data[self.position % min(len(data), used(data) + 32)] ^= self.mask


@dataclass(frozen=True)
class Garbage:
    """Bytes that never were a record, after the last segment's data or past its end."""

    position: int
    junk: bytes
    past_end: bool

    def apply(self, files: Files) -> None:
        data = files[max(files)]
        start = (len(data) if self.past_end else used(data)) + self.position % 64
        if len(data) < start + len(self.junk):
            data.extend(bytes(start + len(self.junk) - len(data)))
        data[start : start + len(self.junk)] = self.junk


def pick(files: Files, index: int) -> str:
    names = sorted(files)
    return names[index] if index in (0, -1) else names[index % len(names)]


damage = st.one_of(
    st.builds(Truncate, segment_choice, position, st.booleans()),
    st.builds(Flip, segment_choice, position, st.integers(1, 255)),
    st.builds(Garbage, position, st.binary(min_size=1, max_size=64), st.booleans()),
)


# -- checks ------------------------------------------------------------------------------


def assert_names_damage(error: JournalCorrupt, directory: Path) -> None:
    path = Path(error.path)
    assert path.parent == directory
    assert path.suffix == ".seg" and path.exists()
    assert 0 <= error.offset <= path.stat().st_size
    assert error.path in str(error)
    assert f"byte {error.offset}" in str(error)


def assert_takes_more(directory: Path, kept: Records) -> None:
    """A repaired journal opens unchanged and continues right after what it kept."""
    again = recover(directory, Storage())
    assert again.records == kept
    assert again.cut is None and again.removed == []
    next_lsn = kept[-1][0] + 1 if kept else again.tail.next_lsn
    more = [payload(1000 + i, n) for i, n in enumerate([30, 256, RECORD_BYTES_MAX, 5])]
    write_journal(directory, more, first_lsn=next_lsn)
    after = recover(directory, Storage(), repair=False).records
    assert after == [*kept, *((next_lsn + i, p) for i, p in enumerate(more))]


@FUZZ
@given(damages=st.lists(damage, min_size=1, max_size=4), repair=st.booleans())
# Every record of the oldest segment lost while later segments hold theirs.
@example(damages=[Truncate(0, 30, shorten=False)], repair=False)
@example(damages=[Truncate(0, 24, shorten=True)], repair=True)
def test_damage_anywhere_gives_a_prefix_or_names_the_damage(
    journal: Journal, damages: list[Truncate | Flip | Garbage], repair: bool
) -> None:
    with copy_of(journal.files) as (directory, files):
        for d in damages:
            d.apply(files)
        write_out(directory, files)
        before = on_disk(directory)
        try:
            scan = recover(directory, Storage(), repair=repair)
        except JournalCorrupt as e:
            assert_names_damage(e, directory)
            assert on_disk(directory) == before, "recover changed a journal it refused"
            return
        assert scan.records == journal.records[: len(scan.records)]
        if repair:
            assert_takes_more(directory, scan.records)
        else:
            assert on_disk(directory) == before


@FUZZ
@given(
    at=st.integers(0, 1 << 16),
    shorten=st.booleans(),
    junk=st.none() | st.binary(min_size=1, max_size=48),
    junk_gap=st.integers(0, 40),
)
def test_torn_tail_keeps_every_whole_record(
    journal: Journal, at: int, shorten: bool, junk: bytes | None, junk_gap: int
) -> None:
    names = sorted(journal.files)
    last = names[-1]
    original = journal.files[last]
    with copy_of(journal.files) as (directory, files):
        data = files[last]
        cut = at % (used(data) + 16)
        if shorten:
            del data[cut:]
        else:
            data[cut:] = bytes(len(data) - cut)
        if junk is not None:
            # Garbage goes after the frame the cut fell in, so it cannot complete it.
            ends = [o + fmt.frame_size(n - fmt.FRAME_BYTES) for o, n in journal.frames[last]]
            start = min([e for e in [fmt.HEADER_BYTES, *ends] if e >= cut], default=cut)
            start += junk_gap
            if len(data) < start + len(junk):
                data.extend(bytes(start + len(junk) - len(data)))
            data[start : start + len(junk)] = junk
        header_whole = data[: fmt.HEADER_BYTES] == original[: fmt.HEADER_BYTES]
        whole = 0
        for offset, covered in journal.frames[last]:
            region = slice(offset, offset + covered)
            if not header_whole or data[region] != original[region]:
                break
            whole += 1
        write_out(directory, files)

        scan = recover(directory, Storage())

        earlier = sum(len(journal.frames[n]) for n in names[:-1])
        kept = journal.records[: earlier + whole]
        assert scan.records == kept
        if not header_whole:
            assert not (directory / last).exists()
        else:
            tail = (directory / last).read_bytes()[scan.tail.offset :]
            assert not tail.strip(b"\0"), "the cut-off tail was not zeroed"
        assert_takes_more(directory, kept)


def test_base_journal_spans_segments(journal: Journal) -> None:
    assert len(journal.files) >= 4
    assert all(len(data) == SEGMENT_BYTES for data in journal.files.values())
    assert [lsn for lsn, _ in journal.records] == list(range(1, RECORDS + 1))
    assert sum(len(f) for f in journal.frames.values()) == RECORDS
