"""The journal's on-disk grammar: headers and frames, encoded and decoded."""

from __future__ import annotations

import struct
import zlib

import pytest

from fusee_runtime.journal import format as fmt


def _frame_with(length: int, crc: int, body: bytes) -> bytes:
    return struct.pack("<II", length, crc) + body


# -- headers -------------------------------------------------------------------------


@pytest.mark.parametrize("first_lsn", [0, 1, 2, 1 << 32, (1 << 64) - 1])
def test_header_round_trip(first_lsn: int) -> None:
    head = fmt.encode_header(first_lsn)
    assert len(head) == fmt.HEADER_BYTES == 24
    assert head[:8] == fmt.MAGIC
    assert fmt.decode_header(head) == first_lsn
    assert fmt.decode_header(memoryview(head)) == first_lsn
    assert fmt.decode_header(head + b"\x01" * 100) == first_lsn


def test_header_layout_matches_the_docstring_example() -> None:
    head = fmt.encode_header(1)
    assert head[:16] == bytes.fromhex("46555345455347310100000000000000")
    assert head[16:20] == struct.pack("<I", zlib.crc32(head[:16]))
    assert head[20:24] == bytes(4)


@pytest.mark.parametrize("index", range(fmt.HEADER_BYTES))
def test_header_with_any_byte_flipped_is_rejected(index: int) -> None:
    head = bytearray(fmt.encode_header(7))
    head[index] ^= 0x40
    assert fmt.decode_header(bytes(head)) is None


def test_short_or_zero_header_is_rejected() -> None:
    head = fmt.encode_header(3)
    for n in range(fmt.HEADER_BYTES):
        assert fmt.decode_header(head[:n]) is None
    assert fmt.decode_header(bytes(fmt.HEADER_BYTES)) is None


def test_header_with_nonzero_reserved_is_rejected_even_with_a_good_crc() -> None:
    head = fmt.encode_header(5)
    forged = head[:20] + struct.pack("<I", 1)
    assert fmt.decode_header(forged) is None


# -- frame sizes and alignment ---------------------------------------------------------


@pytest.mark.parametrize("n", [*range(1, 40), 255, 256, 257, 4096, fmt.RECORD_BYTES_MAX])
def test_frame_size_is_aligned_and_tight(n: int) -> None:
    size = fmt.frame_size(n)
    assert size % fmt.ALIGN == 0
    assert fmt.FRAME_BYTES + n <= size < fmt.FRAME_BYTES + n + fmt.ALIGN


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 15, 16, 17, 100, 255, 256, 65536])
def test_encoded_frame_is_padded_with_zeros_to_the_alignment(n: int) -> None:
    payload = bytes((i % 251) + 1 for i in range(n))
    frame = fmt.encode_frame(payload)
    assert len(frame) == fmt.frame_size(n)
    assert len(frame) % fmt.ALIGN == 0
    assert frame[fmt.FRAME_BYTES : fmt.FRAME_BYTES + n] == payload
    assert frame[fmt.FRAME_BYTES + n :] == bytes(len(frame) - fmt.FRAME_BYTES - n)


def test_frame_layout_matches_the_docstring_example() -> None:
    frame = fmt.encode_frame(b"[9]")
    crc = zlib.crc32(b"\x03\x00\x00\x00[9]")
    assert frame == b"\x03\x00\x00\x00" + struct.pack("<I", crc) + b"[9]" + bytes(5)


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 3, 8, 9, 255, 256, 1000, 65536])
def test_frame_round_trip(n: int) -> None:
    payload = bytes((7 * i + 3) % 256 for i in range(n))
    frame = fmt.encode_frame(payload)
    assert fmt.decode_frame(frame, 0) == (payload, len(frame))
    assert fmt.decode_frame(memoryview(frame), 0) == (payload, len(frame))


def test_frames_decode_in_sequence_at_their_offsets() -> None:
    payloads = [b"a", b"bb" * 10, b"[1,2,3]", bytes(range(1, 200)), b"z"]
    data = fmt.encode_header(1) + b"".join(fmt.encode_frame(p) for p in payloads) + bytes(64)
    pos = fmt.HEADER_BYTES
    got = []
    while (decoded := fmt.decode_frame(data, pos)) is not None:
        assert pos % fmt.ALIGN == 0
        got.append(decoded[0])
        pos = decoded[1]
    assert got == payloads
    assert data[pos:] == bytes(64)
    # `frames` walks the same frames, with where each starts and ends.
    walked = list(fmt.frames(data, fmt.HEADER_BYTES))
    assert [p for _, p, _ in walked] == payloads
    assert [start for start, _, _ in walked[1:]] == [end for _, _, end in walked[:-1]]
    assert walked[0][0] == fmt.HEADER_BYTES and walked[-1][2] == pos


def test_largest_record_round_trips_and_one_more_byte_is_refused() -> None:
    payload = b"\x01" * fmt.RECORD_BYTES_MAX
    frame = fmt.encode_frame(payload)
    assert fmt.decode_frame(frame, 0) == (payload, len(frame))
    with pytest.raises(ValueError, match="outside"):
        fmt.encode_frame(payload + b"\x01")


def test_empty_record_is_refused() -> None:
    with pytest.raises(ValueError, match="outside"):
        fmt.encode_frame(b"")


# -- the CRC covers the length -------------------------------------------------------------


def test_crc_covers_the_length_word_then_the_payload() -> None:
    payload = b"hello, journal"
    frame = fmt.encode_frame(payload)
    (crc,) = struct.unpack_from("<I", frame, 4)
    assert crc == zlib.crc32(struct.pack("<I", len(payload)) + payload)
    assert crc != zlib.crc32(payload)


def test_shortened_length_with_a_payload_only_crc_is_rejected() -> None:
    # A length word damaged to a smaller value would still frame a valid
    # payload prefix if the CRC covered only the payload.
    body = b"abcdefgh" + bytes(8)
    short = 4
    payload_only = _frame_with(short, zlib.crc32(body[:short]), body)
    assert fmt.decode_frame(payload_only, 0) is None
    with_length = _frame_with(short, zlib.crc32(struct.pack("<I", short) + body[:short]), body)
    assert fmt.decode_frame(with_length, 0) == (body[:short], fmt.frame_size(short))


# -- decode_frame refuses what is not a whole frame ------------------------------------------


def test_zero_length_marks_the_end_of_data() -> None:
    assert fmt.decode_frame(bytes(64), 0) is None
    forged = _frame_with(0, zlib.crc32(bytes(4)), bytes(16))
    assert fmt.decode_frame(forged, 0) is None


def test_overlong_length_is_rejected_even_when_the_bytes_are_there() -> None:
    n = fmt.RECORD_BYTES_MAX + 1
    body = b"\x01" * n
    frame = _frame_with(n, zlib.crc32(body, zlib.crc32(struct.pack("<I", n))), body)
    assert fmt.decode_frame(frame, 0) is None


def test_length_running_past_the_data_is_rejected() -> None:
    frame = fmt.encode_frame(b"x" * 20)
    for cut in range(len(frame)):
        if cut < fmt.FRAME_BYTES + 20:
            assert fmt.decode_frame(frame[:cut], 0) is None
    assert fmt.decode_frame(frame[: fmt.FRAME_BYTES + 20], 0) == (b"x" * 20, len(frame))


_FLIP_PAYLOAD = b'[1,"abc"]x'


@pytest.mark.parametrize("index", range(fmt.FRAME_BYTES + len(_FLIP_PAYLOAD)))
def test_any_flipped_byte_of_length_crc_or_payload_is_rejected(index: int) -> None:
    frame = bytearray(fmt.encode_frame(_FLIP_PAYLOAD))
    frame[index] ^= 0x01
    assert fmt.decode_frame(bytes(frame), 0) is None


def test_padding_is_not_covered_by_the_crc() -> None:
    frame = bytearray(fmt.encode_frame(b"abc"))
    frame[-1] = 0xFF
    assert fmt.decode_frame(bytes(frame), 0) == (b"abc", len(frame))


# -- find_whole_frame --------------------------------------------------------------------------


def test_find_whole_frame_skips_zeros() -> None:
    frame = fmt.encode_frame(b"payload")
    data = bytes(4096) + frame + bytes(100)
    assert fmt.find_whole_frame(data, 0) == 4096
    assert fmt.find_whole_frame(data, 4096) == 4096
    assert fmt.find_whole_frame(data, 4097) is None


def test_find_whole_frame_rounds_the_start_up_to_the_alignment() -> None:
    frame = fmt.encode_frame(b"p")
    data = bytes(16) + frame
    for start in range(1, 17):
        assert fmt.find_whole_frame(data, start) == 16
    assert fmt.find_whole_frame(data, 17) is None


def test_find_whole_frame_skips_garbage_and_torn_frames() -> None:
    torn = fmt.encode_frame(b"torn record" * 5)[:30]
    garbage = bytes(range(1, 41))
    whole = fmt.encode_frame(b"whole")
    data = torn + bytes(2) + garbage + whole + b"\xff" * 7
    assert fmt.find_whole_frame(data, 0) == 72
    assert fmt.find_whole_frame(torn + garbage + bytes(40), 0) is None


def test_find_whole_frame_returns_the_first_of_several() -> None:
    a, b = fmt.encode_frame(b"first"), fmt.encode_frame(b"second")
    data = bytes(8) + a + b
    assert fmt.find_whole_frame(data, 0) == 8
    assert fmt.find_whole_frame(data, 9) == 8 + len(a)


def test_find_whole_frame_ignores_frames_at_unaligned_offsets() -> None:
    data = bytes(3) + fmt.encode_frame(b"unaligned") + bytes(8)
    assert fmt.find_whole_frame(data, 0) is None


@pytest.mark.parametrize("n", [256, 512, 65536])
def test_find_whole_frame_when_the_length_word_starts_with_zero_bytes(n: int) -> None:
    # The first nonzero byte of such a frame lies inside its length word.
    frame = fmt.encode_frame(b"\x01" * n)
    assert frame[0] == 0
    data = bytes(64) + frame
    assert fmt.find_whole_frame(data, 0) == 64


def test_find_whole_frame_on_empty_or_zero_data() -> None:
    assert fmt.find_whole_frame(b"", 0) is None
    assert fmt.find_whole_frame(bytes(1 << 16), 0) is None
    assert fmt.find_whole_frame(fmt.encode_frame(b"x"), 100) is None


def test_find_whole_frame_accepts_a_memoryview() -> None:
    data = memoryview(bytes(24) + fmt.encode_frame(b"mv"))
    assert fmt.find_whole_frame(data, 0) == 24
