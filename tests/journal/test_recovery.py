"""Recovery on real files: torn tails are cut, damage before the tail refuses to open.

Each test builds a journal through the `Engine`, damages its segment files
the way a crash or a bad disk would, then reopens it through the `Engine`
and through `recover` directly (on a copy, so both see the same damage).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Ctx, Engine, JournalCorrupt, workflow
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import Scan, recover
from fusee_runtime.journal.storage import Storage

MakeEngine = Callable[..., Engine]
SMALL_SEGMENTS: dict[str, Any] = {"segment_bytes": 8192, "payload_bytes_max": 1024}

STEP_CALLS: list[str] = []


async def _double(n: int) -> int:
    STEP_CALLS.append(f"double {n}")
    return 2 * n


async def _inc(n: int) -> int:
    STEP_CALLS.append(f"inc {n}")
    return n + 1


@workflow(name="jrec_two_steps")
async def two_steps(ctx: Ctx, arg: dict[str, Any]) -> int:
    doubled = await ctx.step("double", _double, arg["n"])
    return await ctx.step("inc", _inc, doubled)


@pytest.fixture(autouse=True)
def _fresh_step_calls() -> None:
    STEP_CALLS.clear()


# -- helpers ---------------------------------------------------------------------------


@pytest.fixture
def make_engine(make_engine: MakeEngine) -> MakeEngine:
    """Engines that write no checkpoint: these tests damage the journal as a crash
    mid-append leaves it, which a clean close's checkpoint would have covered."""

    def make(**config: Any) -> Engine:
        config.setdefault("checkpoint_bytes", None)
        return make_engine(**config)

    return make


def journal_of(home: Path) -> Path:
    return home / "journal"


def segments(home: Path) -> list[Path]:
    return sorted(journal_of(home).glob("*.seg"))


def frames(path: Path) -> list[tuple[int, bytes]]:
    """(offset, payload) of each whole frame of a segment, in order."""
    return [(pos, payload) for pos, payload, _ in fmt.frames(path.read_bytes(), fmt.HEADER_BYTES)]


def all_frames(home: Path) -> list[tuple[Path, int, bytes]]:
    return [(p, off, payload) for p in segments(home) for off, payload in frames(p)]


def records(home: Path) -> list[tuple[int, bytes]]:
    """What the journal holds, read without repairing anything."""
    return recover(journal_of(home), Storage(), repair=False).records


def snapshot(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in segments(home)}


def write_at(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def zero_from(path: Path, offset: int) -> None:
    """What a crash mid-append leaves in a preallocated segment: zeros from `offset` on."""
    size = path.stat().st_size
    write_at(path, offset, bytes(size - offset))


def flip(path: Path, offset: int, mask: int = 0x20) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ mask]))


def recover_copy(home: Path, tmp_path: Path) -> tuple[Scan, Path]:
    """Runs `recover` (repairing) on a copy of the journal; returns the scan and the copy."""
    copy = tmp_path / "copy"
    shutil.copytree(journal_of(home), copy)
    return recover(copy, Storage()), copy


def as_a_crash_leaves_it(engine: Engine) -> None:
    """Removes the history store a clean close filled: these tests damage the journal's
    tail as a crash mid-append leaves it, and the runs of that tail never reached the
    store then (only durably closed runs do)."""
    for p in engine.home.glob("history.db*"):
        p.unlink()


async def build(make_engine: MakeEngine, runs: int, pad: int = 0, **config: Any) -> None:
    """Runs `runs` two-step workflows one after another, so records are in run order."""
    async with make_engine(**config) as engine:
        for i in range(runs):
            handle = await engine.start("jrec_two_steps", {"n": i, "pad": "x" * pad}, id=f"r{i}")
            assert await handle.result() == 2 * i + 1
    as_a_crash_leaves_it(engine)


async def build_concurrently(make_engine: MakeEngine, runs: int, pad: int, **config: Any) -> None:
    """Runs `runs` two-step workflows at once, so group commit batches cross segments."""
    async with make_engine(**config) as engine:
        handles = await asyncio.gather(
            *(
                engine.start("jrec_two_steps", {"n": i, "pad": "x" * pad}, id=f"r{i}")
                for i in range(runs)
            )
        )
        results = await asyncio.gather(*(h.result() for h in handles))
        assert results == [2 * i + 1 for i in range(runs)]
    as_a_crash_leaves_it(engine)


async def assert_all_complete(engine: Engine, runs: int) -> None:
    for i in range(runs):
        assert await engine.handle(f"r{i}").result() == 2 * i + 1


def surviving(kept: list[tuple[int, bytes]]) -> int:
    """How many of the runs `build` made one after another (4 records each) kept their start."""
    return -(-len(kept) // 4)


def assert_continuous(home: Path) -> list[tuple[int, bytes]]:
    recs = records(home)
    assert [lsn for lsn, _ in recs] == list(range(1, len(recs) + 1))
    return recs


async def assert_usable(make_engine: MakeEngine, home: Path, runs: int, **config: Any) -> None:
    """Appends more after a repair, reopens again, and finds everything."""
    async with make_engine(**config) as engine:
        await assert_all_complete(engine, runs)
        handle = await engine.start("jrec_two_steps", {"n": runs}, id=f"r{runs}")
        assert await handle.result() == 2 * runs + 1
    calls = list(STEP_CALLS)
    async with make_engine(**config) as engine:
        await assert_all_complete(engine, runs + 1)
    assert calls == STEP_CALLS, "a step whose result was durable ran again"
    assert_continuous(home)


# -- empty homes -------------------------------------------------------------------------


async def test_empty_home_opens(make_engine: MakeEngine, home: Path) -> None:
    assert not home.exists()
    async with make_engine() as engine:
        assert await engine.list() == []
        counters = engine.counters()
        assert counters["records"] == 0
        assert counters["durable_lsn"] == 0
    assert segments(home) == []
    async with make_engine() as engine:
        assert await engine.list() == []
        handle = await engine.start("jrec_two_steps", {"n": 3}, id="r0")
        assert await handle.result() == 7


def test_recover_on_an_empty_directory(tmp_path: Path) -> None:
    scan = recover(tmp_path, Storage())
    assert scan.records == []
    assert scan.tail.next_lsn == 1
    assert scan.tail.segment is None
    assert scan.cut is None


async def test_leftover_temporary_segment_is_ignored(make_engine: MakeEngine, home: Path) -> None:
    await build(make_engine, runs=2)
    last = segments(home)[-1]
    (journal_of(home) / f"{int(last.stem) + 1:010d}.tmp").write_bytes(b"\x07" * 5000)
    before = records(home)
    await assert_usable(make_engine, home, runs=2)
    assert records(home)[: len(before)] == before


# -- torn tails ----------------------------------------------------------------------------


@pytest.mark.parametrize("into", [1, 4, 8, 11, "half", "last byte"])
async def test_tail_zeroed_mid_record_is_cut(
    make_engine: MakeEngine, home: Path, tmp_path: Path, into: int | str
) -> None:
    await build(make_engine, runs=5)
    original = records(home)
    path, offset, payload = all_frames(home)[-1]
    length = fmt.FRAME_BYTES + len(payload)
    at = {"half": length // 2, "last byte": length - 1}.get(into, into)
    assert isinstance(at, int) and 0 < at < length
    zero_from(path, offset + at)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original[:-1]
    assert scan.cut == (copy / path.name, offset)
    assert scan.tail.offset == offset
    assert scan.tail.next_lsn == original[-1][0]
    assert not (copy / path.name).read_bytes()[offset:].strip(b"\0")

    calls = list(STEP_CALLS)
    async with make_engine() as engine:
        # The last run lost only its completion record: it replays to the end.
        await assert_all_complete(engine, runs=5)
    assert calls == STEP_CALLS
    assert records(home)[:-1] == original[:-1]
    await assert_usable(make_engine, home, runs=5)


@pytest.mark.parametrize("keep", [1, 7, 8, 9, "all but one"])
async def test_tail_truncated_mid_record_is_cut(
    make_engine: MakeEngine, home: Path, tmp_path: Path, keep: int | str
) -> None:
    await build(make_engine, runs=4)
    original = records(home)
    path, offset, payload = all_frames(home)[-1]
    length = fmt.FRAME_BYTES + len(payload)
    size = length - 1 if keep == "all but one" else keep
    assert isinstance(size, int)
    os.truncate(path, offset + size)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original[:-1]
    assert scan.cut == (copy / path.name, offset)

    calls = list(STEP_CALLS)
    async with make_engine() as engine:
        await assert_all_complete(engine, runs=4)
    assert calls == STEP_CALLS
    await assert_usable(make_engine, home, runs=4)


async def test_tail_truncated_at_a_frame_boundary_loses_nothing_else(
    make_engine: MakeEngine, home: Path, tmp_path: Path
) -> None:
    await build(make_engine, runs=3)
    original = records(home)
    path, offset, _ = all_frames(home)[-1]
    os.truncate(path, offset)

    scan, _ = recover_copy(home, tmp_path)
    assert scan.records == original[:-1]
    assert scan.cut is None
    await assert_usable(make_engine, home, runs=3)


async def test_tail_truncated_inside_the_segment_header_drops_the_segment(
    make_engine: MakeEngine, home: Path, tmp_path: Path
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    segs = segments(home)
    assert len(segs) >= 3
    kept = records(home)[: -len(frames(segs[-1]))]
    os.truncate(segs[-1], 10)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == kept
    assert scan.removed == [copy / segs[-1].name]
    assert not (copy / segs[-1].name).exists()
    await assert_usable(make_engine, home, runs=surviving(kept), **SMALL_SEGMENTS)


@pytest.mark.parametrize("at", [0, 2, 3, 5, 8, "last payload byte"])
async def test_flipped_byte_in_the_last_record_is_cut(
    make_engine: MakeEngine, home: Path, tmp_path: Path, at: int | str
) -> None:
    await build(make_engine, runs=4)
    original = records(home)
    path, offset, payload = all_frames(home)[-1]
    index = fmt.FRAME_BYTES + len(payload) - 1 if at == "last payload byte" else at
    assert isinstance(index, int)
    flip(path, offset + index)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original[:-1]
    assert scan.cut == (copy / path.name, offset)
    assert not (copy / path.name).read_bytes()[offset:].strip(b"\0")

    calls = list(STEP_CALLS)
    async with make_engine() as engine:
        await assert_all_complete(engine, runs=4)
    assert calls == STEP_CALLS
    await assert_usable(make_engine, home, runs=4)


async def test_garbage_after_the_last_record_is_cut(
    make_engine: MakeEngine, home: Path, tmp_path: Path
) -> None:
    await build(make_engine, runs=3)
    original = records(home)
    path, offset, payload = all_frames(home)[-1]
    end = offset + fmt.frame_size(len(payload))
    write_at(path, end + 40, bytes(range(1, 200)))

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original
    assert scan.cut == (copy / path.name, end)
    assert not (copy / path.name).read_bytes()[end:].strip(b"\0")
    await assert_usable(make_engine, home, runs=3)


# -- damage before the tail ------------------------------------------------------------------


@pytest.mark.parametrize("which", [0, 1, "middle", -2])
@pytest.mark.parametrize("at", [0, 4, 9])
async def test_flipped_byte_in_an_earlier_record_refuses_to_open(
    make_engine: MakeEngine, home: Path, which: int | str, at: int
) -> None:
    await build(make_engine, runs=4)
    found = all_frames(home)
    index = len(found) // 2 if which == "middle" else which
    assert isinstance(index, int)
    path, offset, _ = found[index]
    assert offset > 0
    flip(path, offset + at)
    damaged = snapshot(home)

    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, path, offset)
    assert snapshot(home) == damaged, "recover changed a journal it refused"

    with pytest.raises(JournalCorrupt) as raised:
        async with make_engine():
            pass
    assert_names(raised.value, path, offset)
    assert snapshot(home) == damaged
    # The failed open let go of the home: opening again reports the same damage.
    with pytest.raises(JournalCorrupt):
        async with make_engine():
            pass


def assert_names(error: JournalCorrupt, path: Path, offset: int) -> None:
    assert error.path == str(path)
    assert error.offset == offset
    assert str(path) in str(error)
    assert f"byte {offset}" in str(error)


async def test_zeroed_earlier_record_refuses_to_open(make_engine: MakeEngine, home: Path) -> None:
    # An unwritten gap (a lost write) before later records is not a torn tail.
    await build(make_engine, runs=3)
    path, offset, payload = all_frames(home)[3]
    write_at(path, offset, bytes(fmt.frame_size(len(payload))))
    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, path, offset)
    assert "gap" in raised.value.reason


# -- segments ---------------------------------------------------------------------------------


async def test_records_spanning_several_segments_survive_reopen(
    make_engine: MakeEngine, home: Path
) -> None:
    await build_concurrently(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    segs = segments(home)
    assert len(segs) >= 3
    recs = assert_continuous(home)
    assert len(recs) == 40 * 4
    assert [payload for _, _, payload in all_frames(home)] == [p for _, p in recs]
    lsn = 1
    for seg in segs:
        assert fmt.decode_header(seg.read_bytes()) == lsn
        assert seg.stat().st_size == SMALL_SEGMENTS["segment_bytes"]
        lsn += len(frames(seg))

    calls = list(STEP_CALLS)
    async with make_engine(**SMALL_SEGMENTS) as engine:
        await assert_all_complete(engine, runs=40)
    assert calls == STEP_CALLS
    await assert_usable(make_engine, home, runs=40, **SMALL_SEGMENTS)


async def test_torn_first_record_of_the_newest_segment_is_cut(
    make_engine: MakeEngine, home: Path, tmp_path: Path
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    last = segments(home)[-1]
    original = records(home)
    in_last = len(frames(last))
    zero_from(last, fmt.HEADER_BYTES + 5)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original[:-in_last]
    assert scan.cut == (copy / last.name, fmt.HEADER_BYTES)
    await assert_usable(make_engine, home, runs=surviving(scan.records), **SMALL_SEGMENTS)


async def test_newest_segment_zeroed_entirely_is_dropped(
    make_engine: MakeEngine, home: Path, tmp_path: Path
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    last = segments(home)[-1]
    original = records(home)
    in_last = len(frames(last))
    zero_from(last, 0)

    scan, copy = recover_copy(home, tmp_path)
    assert scan.records == original[:-in_last]
    assert scan.removed == [copy / last.name]
    assert not (copy / last.name).exists()
    await assert_usable(make_engine, home, runs=surviving(scan.records), **SMALL_SEGMENTS)


@pytest.mark.parametrize("at", [0, 7, 8, 15, 16, 20])
async def test_bad_header_of_a_middle_segment_refuses_to_open(
    make_engine: MakeEngine, home: Path, at: int
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    segs = segments(home)
    assert len(segs) >= 3
    flip(segs[1], at)
    damaged = snapshot(home)

    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, segs[1], 0)
    assert snapshot(home) == damaged

    with pytest.raises(JournalCorrupt) as raised:
        async with make_engine(**SMALL_SEGMENTS):
            pass
    assert_names(raised.value, segs[1], 0)
    assert snapshot(home) == damaged


async def test_bad_header_of_the_newest_segment_holding_records_refuses_to_open(
    make_engine: MakeEngine, home: Path
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    last = segments(home)[-1]
    assert frames(last)
    flip(last, 3)
    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, last, 0)


async def test_flipped_last_record_of_an_older_segment_refuses_to_open(
    make_engine: MakeEngine, home: Path
) -> None:
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    first = segments(home)[0]
    offset, _ = frames(first)[-1]
    flip(first, offset + fmt.FRAME_BYTES)
    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, first, offset)


@pytest.mark.parametrize("which", [0, 1])
async def test_segment_whose_records_all_vanished_refuses_to_open(
    make_engine: MakeEngine, home: Path, which: int
) -> None:
    # Every frame of an older segment zeroed (lost writes) while later
    # segments hold records: the lsns no longer join up.
    await build(make_engine, runs=40, pad=300, **SMALL_SEGMENTS)
    segs = segments(home)
    assert len(segs) >= 3
    zero_from(segs[which], fmt.HEADER_BYTES)
    damaged = snapshot(home)
    with pytest.raises(JournalCorrupt) as raised:
        recover(journal_of(home), Storage())
    assert_names(raised.value, segs[which + 1], 0)
    assert "expected" in raised.value.reason
    assert snapshot(home) == damaged
