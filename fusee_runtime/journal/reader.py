"""Reading the journal on open: scan, CRC check, torn tail versus corruption.

`recover` reads every segment in order and returns the records with their
lsns and the position where appends continue. It applies the recovery rule
of `format`: damage followed by no whole frame anywhere is a torn tail and
is cut off (zeroed, durably); damage followed by a whole frame raises
`JournalCorrupt` naming the file and byte offset, and nothing is changed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fusee_runtime.errors import JournalCorrupt
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.storage import Storage


@dataclass
class Tail:
    """Where appends continue."""

    segment: Path | None
    offset: int
    next_lsn: int
    segment_bytes: int = 0


@dataclass
class Scan:
    """What `recover` found."""

    records: list[tuple[int, bytes]]
    tail: Tail
    cut: tuple[Path, int] | None = None
    removed: list[Path] = field(default_factory=list)


@dataclass
class _Segment:
    path: Path
    data: bytes
    first_lsn: int | None
    zero_from: int | None = None
    """An offset from which the segment is known to hold only zeros (found once, so
    that 16 MiB of them are not compared twice)."""


@dataclass
class JournalRead:
    """What step 1 of recovery found: the checkpoint to start from, the damaged ones
    passed over (what the store needs to set them aside), and the journal after it."""

    base: ckpt.Checkpoint | None
    damaged: list[Path] | list[int]
    """The damaged checkpoints: a local journal's files, a database's lsns."""
    scan: Scan

    @property
    def checkpoint_lsn(self) -> int:
        return self.base.lsn if self.base is not None else 0


def segment_path(directory: Path, index: int) -> Path:
    return directory / f"{index:010d}.seg"


def segment_index(path: Path) -> int:
    return int(path.stem)


def _damage_reason(data: bytes, offset: int) -> str:
    if offset + fmt.FRAME_BYTES > len(data):
        return "frame header runs past the end of the segment"
    (n,) = struct.unpack_from("<I", data, offset)
    n &= ~fmt.BATCH_START
    if n == 0:
        return "unwritten gap before later records"
    if n > fmt.RECORD_BYTES_MAX or offset + fmt.FRAME_BYTES + n > len(data):
        return f"frame length {n} runs past the end of the segment"
    return "CRC mismatch"


def _frames(seg: _Segment, start: int = fmt.HEADER_BYTES) -> Iterator[tuple[int, bytes | None]]:
    """(offset, payload) of each whole frame from `start`, then (offset, None) where they stop."""
    stop = start
    for offset, payload, after in fmt.frames(seg.data, stop):
        yield offset, payload
        stop = after
    yield stop, None


def first_lsns(directory: Path, storage: Storage) -> list[tuple[Path, int | None]]:
    """Each segment with the first lsn its header gives (None: not a whole header),
    reading only the headers."""
    return [
        (p, fmt.decode_header(storage.read_head(p, fmt.HEADER_BYTES)))
        for p in storage.list_segments(directory)
    ]


def recover(
    directory: Path,
    storage: Storage,
    repair: bool = True,
    after: int = 0,
    at: Sequence[object] | None = None,
) -> Scan:
    """Reads the journal, cutting a torn tail when `repair` is set.

    With `after` (the lsn a checkpoint covers), only the segments holding
    records after it are read, and only those records are returned; with
    `at` (the segment name and byte offset where the checkpoint says the
    record after it goes), the frames before that offset are not even decoded.

    Raises:
        JournalCorrupt: damage before the tail (a whole frame follows it), a
            bad header on a segment that holds data, a gap in lsns, or a
            journal that does not reach past `after`.
    """
    paths = storage.list_segments(directory)
    if after:
        heads = first_lsns(directory, storage)
        start = 0
        for i, (_, first) in enumerate(heads):
            if first is not None and first <= after + 1:
                start = i
        paths = paths[start:]
        if not paths:
            raise JournalCorrupt(str(directory), 0, f"no segment holds lsn {after + 1} on")
    segments = [_Segment(p, storage.read(p), None) for p in paths]
    skip = _resume_offset(segments[0], at) if after and at and segments else None
    scan = _scan(directory, storage, segments, repair, after, skip)
    return _short_of(paths[-1], scan, after) if after else scan


def _resume_offset(seg: _Segment, at: Sequence[object]) -> int | None:
    """Where the record after a checkpoint starts in `seg`, as the checkpoint says
    (`at`: segment name, byte offset), if `seg` is that segment and a batch starts
    there or nothing was written there; else None (the segment is read whole)."""
    name, offset = at
    data = seg.data
    if name != seg.path.name or not isinstance(offset, int):
        return None
    if not fmt.HEADER_BYTES <= offset <= len(data) or offset % fmt.ALIGN:
        return None
    if fmt.decode_frame(data, offset) is not None and fmt.starts_batch(data, offset):
        return offset
    if fmt.next_nonzero(data, offset) is not None:
        return None
    seg.zero_from = offset
    return offset


def _scan(
    directory: Path,
    storage: Storage,
    segments: list[_Segment],
    repair: bool,
    after: int,
    skip: int | None = None,
) -> Scan:
    for seg in segments:
        seg.first_lsn = fmt.decode_header(seg.data)
    if repair:
        # The process that wrote these may have died before its fdatasync:
        # what recovery acts on must be durable first.
        for seg in segments:
            fd = storage.open(seg.path)
            try:
                storage.sync(fd)
            finally:
                storage.close(fd)

    records: list[tuple[int, bytes]] = []
    next_lsn = 1
    for i, seg in enumerate(segments):
        later = segments[i + 1 :]
        if seg.first_lsn is None:
            # Segments are created under a temporary name and renamed once
            # whole, so a bad header is damage, unless nothing follows it.
            if fmt.find_whole_frame(seg.data, fmt.HEADER_BYTES) is not None or _any_frame(later):
                raise JournalCorrupt(str(seg.path), 0, "bad segment header")
            _before_checkpoint(seg.path, 0, next_lsn, after)
            return _cut(directory, storage, records, segments, i, None, next_lsn, repair, 0)
        if i == 0 and (gap := starts_past(seg.first_lsn, after)) is not None:
            raise JournalCorrupt(str(seg.path), 0, gap)
        if i > 0 and seg.first_lsn != next_lsn:
            raise JournalCorrupt(
                str(seg.path), 0, f"segment starts at lsn {seg.first_lsn}, expected {next_lsn}"
            )
        next_lsn = seg.first_lsn
        start = fmt.HEADER_BYTES
        if i == 0 and skip is not None:
            next_lsn, start = after + 1, skip
        for offset, payload in _frames(seg, start):
            if payload is not None:
                if next_lsn > after:
                    records.append((next_lsn, payload))
                next_lsn += 1
                continue
            zero = seg.zero_from is not None and offset >= seg.zero_from
            used = offset if zero else fmt.data_end(seg.data, offset)
            if used == offset and later:
                break  # the next frame did not fit: it starts the next segment
            if used == offset or not _frame_after(seg, offset, later):
                _before_checkpoint(seg.path, offset, next_lsn, after)
                return _cut(
                    directory, storage, records, segments, i, offset, next_lsn, repair, used
                )
            reason = _damage_reason(seg.data, offset) + _in_last_batch(seg, offset, later)
            raise JournalCorrupt(str(seg.path), offset, reason)
    return Scan(records, Tail(None, 0, next_lsn))


def _short_of(last: Path, scan: Scan, after: int) -> Scan:
    """`scan`, unless the journal ends before the checkpoint it continues."""
    _before_checkpoint(scan.tail.segment or last, scan.tail.offset, scan.tail.next_lsn, after)
    return scan


def _before_checkpoint(path: Path, offset: int, next_lsn: int, after: int) -> None:
    """Refuses (before anything is cut) a journal whose whole records end before the
    checkpoint it continues: records the checkpoint saw durable are gone from it."""
    if (short := ends_before(next_lsn, after)) is not None:
        raise JournalCorrupt(str(path), offset, short)


def starts_past(first_lsn: int, after: int) -> str | None:
    """Why a journal whose first segment starts at `first_lsn` does not continue the
    checkpoint at `after` (0: none), or None when it does."""
    if first_lsn <= after + 1:
        return None
    return (
        f"segment starts at lsn {first_lsn}, expected {after + 1} "
        "(the records before it are in no readable checkpoint)"
    )


def ends_before(next_lsn: int, after: int) -> str | None:
    """Why a journal whose whole records end before `next_lsn` does not reach the
    checkpoint at `after`, or None when it does."""
    if next_lsn > after:
        return None
    return (
        f"the journal's whole records end at lsn {next_lsn - 1}, before its checkpoint "
        f"({after}): acknowledged data is damaged"
    )


def locate(directory: Path, storage: Storage, lsn: int) -> tuple[str, int]:
    """The segment file and byte offset of record `lsn` (for messages about it)."""
    place = (str(directory), 0)
    for path in storage.list_segments(directory):
        seg = _Segment(path, storage.read(path), None)
        first = fmt.decode_header(seg.data)
        if first is None or first > lsn:
            break
        n = first
        for offset, payload in _frames(seg):
            if payload is None:
                break
            if n == lsn:
                return str(path), offset
            n += 1
        place = (str(path), 0)
    return place


def _any_frame(segments: list[_Segment], batch_start: bool = False) -> bool:
    """Whether any of `segments` holds a whole frame (one that starts a batch)."""
    find = fmt.find_batch_start if batch_start else fmt.find_whole_frame
    return any(find(s.data, fmt.HEADER_BYTES) is not None for s in segments)


def _frame_after(
    seg: _Segment, offset: int, later: list[_Segment], batch_start: bool = False
) -> bool:
    """Whether a whole frame (one that starts a batch) follows the damage at `offset`."""
    find = fmt.find_batch_start if batch_start else fmt.find_whole_frame
    return find(seg.data, offset + fmt.ALIGN) is not None or _any_frame(later, batch_start)


def _in_last_batch(seg: _Segment, offset: int, later: list[_Segment]) -> str:
    if _frame_after(seg, offset, later, batch_start=True):
        return " (a later batch follows: acknowledged data is damaged)"
    return (
        " (only frames of the last batch follow: if the machine lost power during its "
        "fdatasync, nothing in that batch was acknowledged)"
    )


def _cut(
    directory: Path,
    storage: Storage,
    records: list[tuple[int, bytes]],
    segments: list[_Segment],
    index: int,
    offset: int | None,
    next_lsn: int,
    repair: bool,
    used: int,
) -> Scan:
    """Cuts the journal at `offset` of segment `index` (None: drop the segment).

    `used` is where nonzero bytes end in that segment (`fmt.data_end`), found
    by the caller: the scan over a whole preallocated segment is done once.
    """
    seg = segments[index]
    doomed = [s.path for s in segments[index + 1 :]]
    if offset is None:
        doomed.insert(0, seg.path)
        tail = Tail(None, 0, next_lsn)
        cut = (seg.path, 0)
    else:
        tail = Tail(seg.path, offset, next_lsn, len(seg.data))
        cut = (seg.path, offset)
    if repair:
        if offset is not None and used > offset:
            fd = storage.open(seg.path)
            try:
                storage.write(fd, offset, bytes(used - offset))
                storage.sync(fd)
            finally:
                storage.close(fd)
        for p in doomed:
            storage.remove(p)
        if doomed:
            storage.sync_dir(directory)
    dirty = offset is not None and used > offset
    return Scan(records, tail, cut if dirty or doomed else None, doomed)
