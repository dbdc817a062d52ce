"""The journal's on-disk format. No file I/O here.

The journal is a sequence of segment files, ``<home>/journal/<n>.seg``
with ``n`` a zero-padded counter. Each segment is preallocated (filled with
zero bytes) to its full size when created, so an append never changes the
file's size and ``fdatasync`` has no size metadata to write.

Grammar (little-endian)::

    segment   := header frame* zeros
    header    := magic:8 = b"FUSEESG1"  first_lsn:u64  crc:u32  reserved:u32 = 0
    frame     := length:u32  crc:u32  payload:length  pad
    pad       := zero bytes up to the next multiple of 8
    zeros     := zero bytes to the end of the file

``crc`` of a frame is CRC-32 (zlib) of the 4 length bytes followed by the
payload; of the header, of its first 16 bytes. The length word's top bit
(`BATCH_START`) marks the first frame of each group commit (one write and
one ``fdatasync``); its other bits hold the payload's length, at least 1 and
at most `RECORD_BYTES_MAX`, so a frame whose length word is zero marks the
end of the written part. The n-th frame of the journal (counting from 1
across segments) has log sequence number ``lsn = n``; a segment's header
holds the lsn of its first frame.

Worked example: a segment whose first frame has lsn 1 and payload ``[9]``
(3 bytes)::

    46 55 53 45 45 53 47 31  01 00 00 00 00 00 00 00   magic, first_lsn = 1
    xx xx xx xx 00 00 00 00                            header crc, reserved
    03 00 00 00 yy yy yy yy  5b 39 5d 00 00 00 00 00   length 3, crc, "[9]", pad
    00 00 00 00 ...                                    zeros: end of data

Recovery rule: frames are read in order until the first one that is not
whole (a length running past the segment, or a CRC mismatch). If no whole
frame follows it anywhere in the journal, it is a torn tail, the result of a
crash mid-append: it and everything after it are cut off. If a whole frame
does follow, the journal refuses to open (`JournalCorrupt`, naming the file
and byte offset): cutting there could drop acknowledged records, and losing
an acknowledged record silently is worse than refusing to open. The
batch-start flag tells the two cases apart in the message: damage followed
by a later batch is in data that was synced and acknowledged; damage whose
following frames are all of the same, last batch may be a power loss that
wrote that batch's blocks out of order, in which case nothing in it was
acknowledged.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator

MAGIC = b"FUSEESG1"
HEADER = struct.Struct("<8sQII")
HEADER_BYTES = HEADER.size  # 24
FRAME = struct.Struct("<II")
FRAME_BYTES = FRAME.size  # 8
ALIGN = 8
RECORD_BYTES_MAX = 16 << 20
BATCH_START = 1 << 31
_NONZERO = re.compile(rb"[^\x00]")
_U32 = struct.Struct("<I").pack
_PADS = [bytes(i) for i in range(ALIGN)]


def encode_header(first_lsn: int) -> bytes:
    head = MAGIC + struct.pack("<Q", first_lsn)
    return HEADER.pack(MAGIC, first_lsn, zlib.crc32(head), 0)


def decode_header(data: bytes | memoryview) -> int | None:
    """The first lsn of a segment, or None when the header is not whole."""
    if len(data) < HEADER_BYTES:
        return None
    magic, first_lsn, crc, reserved = HEADER.unpack_from(data, 0)
    if magic != MAGIC or reserved != 0:
        return None
    if zlib.crc32(bytes(data[:16])) != crc:
        return None
    return int(first_lsn)


def frame_size(payload_len: int) -> int:
    """Bytes a frame with a payload of this length occupies, with padding."""
    n = FRAME_BYTES + payload_len
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def encode_frame(payload: bytes, batch_start: bool = False) -> bytes:
    """One frame holding `payload`, padded to the alignment."""
    n = len(payload)
    if not 0 < n <= RECORD_BYTES_MAX:
        raise ValueError(f"record of {n} bytes is outside 1..{RECORD_BYTES_MAX}")
    length = _U32(n | BATCH_START if batch_start else n)
    crc = _U32(zlib.crc32(payload, zlib.crc32(length)))
    return b"".join((length, crc, payload, _PADS[-(FRAME_BYTES + n) % ALIGN]))


def decode_frame(data: bytes | memoryview, offset: int) -> tuple[bytes, int] | None:
    """The payload of the frame at `offset` and the offset after it.

    Returns None when no whole frame starts there: the length word is zero
    (end of data), runs past `data`, or the CRC does not match.
    """
    end = len(data)
    if offset + FRAME_BYTES > end:
        return None
    n, crc = FRAME.unpack_from(data, offset)
    n &= ~BATCH_START
    if n == 0 or n > RECORD_BYTES_MAX:
        return None
    start = offset + FRAME_BYTES
    if start + n > end:
        return None
    payload = bytes(data[start : start + n])
    if zlib.crc32(payload, zlib.crc32(data[offset : offset + 4])) != crc:
        return None
    return payload, offset + frame_size(n)


def frames(data: bytes | memoryview, offset: int = 0) -> Iterator[tuple[int, bytes, int]]:
    """(offset, payload, offset after it) of each whole frame from `offset` on, in
    order, until no whole frame starts where the last one ended."""
    while (got := decode_frame(data, offset)) is not None:
        yield offset, got[0], got[1]
        offset = got[1]


def starts_batch(frame: bytes | memoryview, offset: int = 0) -> bool:
    """Whether the frame at `offset` is the first of a group commit."""
    return bool(FRAME.unpack_from(frame, offset)[0] & BATCH_START)


def find_batch_start(data: bytes | memoryview, offset: int) -> int | None:
    """The offset of the first whole batch-start frame at or after `offset`, if any."""
    pos = find_whole_frame(data, offset)
    while pos is not None and not starts_batch(data, pos):
        pos = find_whole_frame(data, pos + ALIGN)
    return pos


_ZEROS = bytes(1 << 20)


def data_end(data: bytes, start: int) -> int:
    """The offset just past the last nonzero byte at or after `start` (`start` if none).

    Compares 1 MiB chunks against zeros (memcmp speed) from the end backwards,
    so the zero-filled rest of a preallocated segment costs little to skip.
    """
    end = len(data)
    chunk = len(_ZEROS)
    while end > start:
        lo = max(start, end - chunk)
        if not _zeros(data, lo, end):
            return lo + len(bytes(data[lo:end]).rstrip(b"\0"))
        end = lo
    return start


def next_nonzero(data: bytes | memoryview, start: int) -> int | None:
    """The offset of the first nonzero byte at or after `start`, if any (chunked, like
    `data_end`: a regex alone crawls through megabytes of zeros)."""
    m = _NONZERO.search(bytes(data[start : start + 4096]))
    if m is not None:
        return start + m.start()
    chunk = len(_ZEROS)
    pos = start + 4096
    while pos < len(data):
        stop = min(pos + chunk, len(data))
        if not _zeros(data, pos, stop):
            m = _NONZERO.search(bytes(data[pos:stop]))
            assert m is not None
            return pos + m.start()
        pos = stop
    return None


def _zeros(data: bytes | memoryview, lo: int, hi: int) -> bool:
    """Whether `data[lo:hi]` (at most 1 MiB) is all zeros: a memcmp in place when
    `data` is bytes, where a slice would first copy it."""
    zeros = _ZEROS if hi - lo == len(_ZEROS) else _ZEROS[: hi - lo]
    if isinstance(data, bytes):
        return data.startswith(zeros, lo)
    return bytes(data[lo:hi]) == zeros


def find_whole_frame(data: bytes | memoryview, offset: int) -> int | None:
    """The offset of the first whole frame at or after `offset`, if any."""
    pos = offset + (-offset) % ALIGN
    while True:
        # Zero runs (the preallocated rest of a segment) are skipped a chunk at a time.
        found = next_nonzero(data, pos)
        if found is None:
            return None
        pos = max(pos, found & ~(ALIGN - 1))
        if decode_frame(data, pos) is not None:
            return pos
        pos += ALIGN
