"""Checkpoints, compaction and the history store, on real files (issue 8).

What is asserted is structural (which files open reads, what is on disk,
where a run's state comes from), never a time.
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import (
    Config,
    Ctx,
    Engine,
    FakeClock,
    JournalCorrupt,
    Rejected,
    Terminated,
    step,
    workflow,
)
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import first_lsns
from fusee_runtime.journal.records import R
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.codec import from_array
from fusee_runtime.model.records import RunReset
from fusee_runtime.store import history
from fusee_runtime.store.sqlite_history import SqliteHistory

CALLS: list[int] = []


@step
async def sl_work(n: int) -> int:
    CALLS.append(n)
    return n * 2


@workflow
async def sl_short(ctx: Ctx, n: int) -> int:
    return await sl_work(n)


@workflow
async def sl_waits(ctx: Ctx, n: int) -> Any:
    first = await sl_work(n)
    got = await ctx.wait_for("go")
    return [first, got]


@workflow
async def sl_loops(ctx: Ctx, n: int) -> Any:
    """Continues as new until n reaches 3, each run taking one "next" signal; the
    third then waits for "final" and takes one more "next"."""
    got = await ctx.wait_for("next")
    if n < 3:
        await ctx.continue_as_new(n + 1)
    final = await ctx.wait_for("final")
    return [n, got, final, await ctx.wait_for("next")]


class CountingStorage(Storage):
    """A real disk that notes every file read whole."""

    def __init__(self) -> None:
        self.reads: list[Path] = []

    def read(self, path: Path) -> bytes:
        self.reads.append(path)
        return super().read(path)


SMALL = {"segment_bytes": 64 << 10, "payload_bytes_max": 8 << 10}


async def drain(engine: Any) -> None:
    """Returns once every run closed so far is in the history store and out of memory."""
    await engine.checkpoints.flush_history()


def journal_of(home: Path) -> Path:
    return home / "journal"


async def test_open_reads_only_the_segments_after_the_checkpoint(make_engine, home) -> None:
    async with make_engine(checkpoint_bytes=1 << 30, **SMALL) as engine:
        for i in range(300):
            await (await engine.start("sl_short", i, id=f"a{i}")).result()
        waiting = [await engine.start("sl_waits", i, id=f"w{i}") for i in range(5)]
        await engine.wait_until(lambda: all(engine.runs.newest[h.id].live.parked for h in waiting))
        await engine.checkpoint()
        for i in range(300, 900):
            await (await engine.start("sl_short", i, id=f"a{i}")).result()
    # The close wrote a checkpoint at the journal's end; the one before stays.
    kept = ckpt.listed(journal_of(home))
    assert len(kept) == 2
    newest = kept[0][0]
    heads = first_lsns(journal_of(home), Storage())
    assert len(heads) >= 3, "the runs since the first checkpoint span several segments"
    after = [p for p, first in heads if first is not None and first > newest]
    ends = [first - 1 for _, first in heads[1:]] + [None]
    holding = [p for (p, _), end in zip(heads, ends, strict=True) if end is None or end > newest]
    skipped = [p for p, _ in heads if p not in holding]
    assert skipped, "some segments on disk hold only records the checkpoint covers"

    storage = CountingStorage()
    async with make_engine(storage=storage, checkpoint_bytes=1 << 30, **SMALL) as engine:
        segs_read = [p for p in storage.reads if p.suffix == ".seg"]
        assert set(segs_read) == set(holding) | set(after)
        assert not set(segs_read) & set(skipped)
        assert len([p for p in storage.reads if p.suffix == ".ckpt"]) == 1
        # Everything is there: the closed runs from the store, the open ones resumed.
        done = await engine.list(status="completed")
        assert len(done) == 900
        assert [r.id for r in done[:2]] == ["a899", "a898"]
        for i in range(5):
            await engine.signal(f"w{i}", "go", i)
            assert await engine.handle(f"w{i}").result() == [2 * i, i]


async def test_a_checkpoint_holds_the_open_runs_not_the_closed_ones(make_engine, home) -> None:
    async with make_engine() as engine:
        for i in range(50):
            await (await engine.start("sl_short", i, id=f"c{i}")).result()
        await engine.start("sl_waits", 7, id="open")
        await drain(engine)
        await engine.checkpoint()
    newest = ckpt.read(ckpt.listed(journal_of(home))[0][1], Storage())
    ids = {recs[0][1][2] for _, recs in newest.body["runs"]}
    assert ids == {"open"}


async def test_compaction_keeps_the_journal_to_the_open_work(make_engine, home) -> None:
    cfg = dict(SMALL, checkpoint_bytes=32 << 10)
    async with make_engine(**cfg) as engine:
        await engine.start("sl_waits", 1, id="long-lived")
        for i in range(2000):
            await (await engine.start("sl_short", i, id=f"k{i}")).result()
        written = engine.counters()["bytes"]
    heads = first_lsns(journal_of(home), Storage())
    on_disk = sum(p.stat().st_size for p in journal_of(home).iterdir())
    assert written > 6 * (64 << 10), "the runs wrote many segments' worth"
    assert len(heads) <= 3
    assert heads[0][1] > 1, "the first segments were deleted"
    assert on_disk < 4 * (64 << 10)
    async with make_engine(**cfg) as engine:
        assert len(await engine.list(status="completed")) == 2000
        await engine.signal("long-lived", "go", "still here")
        assert await engine.handle("long-lived").result() == [2, "still here"]


async def test_a_damaged_checkpoint_falls_back_to_the_one_before(make_engine, home) -> None:
    async with make_engine(**SMALL) as engine:
        for i in range(100):
            await (await engine.start("sl_short", i, id=f"d{i}")).result()
        await engine.start("sl_waits", 1, id="open-1")
        await engine.checkpoint()
        await engine.start("sl_waits", 2, id="open-2")
        for i in range(100, 150):
            await (await engine.start("sl_short", i, id=f"d{i}")).result()
    (_, newest), _ = ckpt.listed(journal_of(home))
    data = bytearray(newest.read_bytes())
    data[-3] ^= 0xFF
    newest.write_bytes(bytes(data))
    async with make_engine(**SMALL) as engine:
        assert len(await engine.list(status="completed")) == 150
        for n, id in ((1, "open-1"), (2, "open-2")):
            await engine.signal(id, "go", n)
            assert await engine.handle(id).result() == [2 * n, n]
    # Set aside, so it no longer counts as the one to fall back on: the two kept
    # are whole.
    assert newest.with_name(newest.name + ".damaged").exists()
    kept = ckpt.listed(journal_of(home))
    assert len(kept) == 2
    for _, path in kept:
        ckpt.read(path, Storage())


async def test_no_readable_checkpoint_and_compacted_segments_refuse_to_open(
    make_engine, home
) -> None:
    cfg = dict(SMALL, checkpoint_bytes=16 << 10)
    async with make_engine(**cfg) as engine:
        for i in range(1000):
            await (await engine.start("sl_short", i, id=f"x{i}")).result()
    assert first_lsns(journal_of(home), Storage())[0][1] > 1
    for _, path in ckpt.listed(journal_of(home)):
        path.write_bytes(b"garbage")
    with pytest.raises(JournalCorrupt, match="no readable checkpoint"):
        async with make_engine(**cfg):
            pass


async def test_a_closed_run_leaves_memory_and_answers_from_the_store(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start("sl_short", 21, id="s")
        assert await h.result() == 42
        run_id = h.run_id
        await drain(engine)
        assert run_id not in engine.runs.by_run_id and "s" not in engine.runs.newest
        info = await engine.handle("s").describe()
        assert (info.status, info.run_id) == ("completed", run_id)
        assert await engine.handle("s").result() == 42
        kinds = [r["type"] for r in await engine.history("s")]
        assert kinds == ["RunStarted", "StepCompleted", "RunCompleted"]
        # Idempotent on the id, as when the run was in memory.
        again = await engine.start("sl_short", 99, id="s")
        assert again.run_id == run_id
        with pytest.raises(Rejected, match="already exists"):
            await engine.start("sl_short", 99, id="s", on_conflict="fail")
        with pytest.raises(Rejected, match="completed"):
            await engine.signal("s", "go")
        fresh = await engine.start("sl_short", 5, id="s", on_conflict="new_run")
        assert fresh.run_id != run_id and await fresh.result() == 10
        kinds = [r["type"] for r in await engine.history("s")]
        assert kinds.count("RunStarted") == 2


async def test_reset_of_a_stored_run_keeps_its_journal_before_the_point(make_engine) -> None:
    async with make_engine() as engine:
        h = await engine.start("sl_waits", 4, id="r")
        await h.signal("go", "first")
        assert await h.result() == [8, "first"]
        first = h.run_id
        await drain(engine)
        assert "r" not in engine.runs.newest
        calls = list(CALLS)
        # Keeps the step; its wait (op 2) takes the signal again, as a reset does.
        new = await engine.reset("r", to=2)
        assert new.run_id != first
        assert await engine.handle("r").result() == [8, "first"]
        assert calls == CALLS, "the step kept by the reset ran again"
        kinds = [r["type"] for r in await engine.history("r")]
        assert kinds.count("RunStarted") == 2 and "RunReset" not in kinds


async def test_continue_as_new_carries_its_signals_through_a_checkpoint(make_engine) -> None:
    async with make_engine() as engine:
        await engine.start("sl_loops", 1, id="loop")
        for value in "abcd":
            await engine.signal("loop", "next", value)
        # The third run waits for "final", holding "d" that it was handed at its start.
        await engine.wait_until(lambda: engine.runs.newest["loop"].input == 3)
        await engine.wait_until(lambda: engine.runs.newest["loop"].live.parked)
        await drain(engine)
        assert [r.input for r in engine.runs.by_run_id.values()] == [3], (
            "its predecessors are stored"
        )
        lsn = await engine.checkpoint()
    body = ckpt.read(ckpt.checkpoint_path(journal_of(engine.home), lsn), Storage()).body
    [(creation, _)] = body["runs"]
    assert creation["kind"] == "continued"
    async with make_engine() as engine:
        run = engine.runs.newest["loop"]
        assert [tuple(s[1:]) for s in run.signals] == [("next", "d")]
        await engine.signal("loop", "final", "f")
        assert await engine.handle("loop").result() == [3, "c", "f", "d"]


async def test_list_of_completed_runs_uses_an_index(make_engine) -> None:
    async with make_engine() as engine:
        store = engine.runs.store
        for status in ("completed", "failed"):
            plan = store.query_plan(status, None, 20)
            assert "USING INDEX runs_by_status" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        plan = store.query_plan(None, "sl_short", None)
        assert "USING INDEX runs_by_workflow" in plan and "TEMP B-TREE" not in plan, plan


async def test_prune_deletes_old_closed_runs_and_never_open_ones(make_engine, clock) -> None:
    async with make_engine() as engine:
        await (await engine.start("sl_short", 1, id="old")).result()
        await engine.start("sl_waits", 1, id="open-old")
        clock.advance(10 * 86400)
        await (await engine.start("sl_short", 2, id="new")).result()
        assert await engine.prune(7 * 86400) == 1
        ids = {r.id for r in await engine.list()}
        assert ids == {"new", "open-old"}
        clock.advance(1)
        assert await engine.prune(0) == 1
        assert {r.id for r in await engine.list()} == {"open-old"}
    async with make_engine() as engine:
        # A pruned run still in the journal after the checkpoint is not moved back.
        assert {r.id for r in await engine.list()} == {"open-old"}


async def test_retention_prunes_on_open(make_engine, clock) -> None:
    async with make_engine() as engine:
        await (await engine.start("sl_short", 1, id="ancient")).result()
    clock.advance(40 * 86400)
    async with make_engine(retention=30 * 86400) as engine:
        await engine.wait_until(lambda: engine.runs.store.pruned_before > 0)
        assert await engine.list() == []


def test_a_schedule_snapshot_holds_only_the_records_up_to_its_lsn() -> None:
    class Owner:
        config = Config()

    schedules = Schedules(Owner())  # type: ignore[arg-type]
    schedules.replay(5, from_array([R.ScheduleArmed, "w", "* * * * *", None, 100.0]))
    schedules.replay(6, from_array([R.ScheduleFired, "w", 160.0, "started", "w@1", 161.0]))
    # A record after the checkpoint's lsn may never become durable: not in it.
    at_5 = schedules.snapshot(5)["w"]
    assert (at_5["floor"], at_5["last"]) == (100.0, None)
    assert schedules._state["w"].last == 160.0, "memory goes on"
    assert schedules.snapshot(6)["w"]["last"] == 160.0


async def test_a_run_closing_after_a_prune_is_kept_even_if_the_clock_went_back(
    make_engine, clock
) -> None:
    async with make_engine() as engine:
        await engine.prune(0)  # the cutoff is now
    # An NTP step back, or the home moved to a machine whose clock is behind.
    async with make_engine(clock=FakeClock(clock.now() - 50)) as engine:
        assert await (await engine.start("sl_short", 1, id="late")).result() == 2
        await drain(engine)
        assert [r.id for r in await engine.list()] == ["late"]
        assert (await engine.handle("late").describe()).status == "completed"


async def test_open_after_a_clean_close_decodes_no_frame_the_checkpoint_covers(
    make_engine, monkeypatch
) -> None:
    cfg = dict(checkpoint_bytes=1 << 30)
    async with make_engine(**cfg) as engine:
        for i in range(300):
            await (await engine.start("sl_short", i, id=f"f{i}")).result()
        for i in range(5):
            await engine.start("sl_waits", i, id=f"p{i}")
    # The close's checkpoint says where the journal continues: a frame or two at most
    # is decoded there, not the 900 of the closed runs earlier in that same segment.
    decoded = []
    real = fmt.decode_frame

    def counting(data: Any, offset: int) -> Any:
        decoded.append(offset)
        return real(data, offset)

    monkeypatch.setattr(fmt, "decode_frame", counting)
    async with make_engine(**cfg) as engine:
        await engine.wait_until(
            lambda: all(engine.runs.newest[f"p{i}"].live.parked for i in range(5))
        )
        assert len(decoded) <= 2, len(decoded)
        assert len(await engine.list(status="completed")) == 300


@workflow
async def sl_counter(ctx: Ctx, _: None) -> int:
    state = {"n": 0}

    def inc(k: int) -> int:
        state["n"] += k
        return state["n"]

    ctx.on_update("inc", inc)
    await ctx.wait_for("go")
    return state["n"]


async def test_an_update_after_a_reset_is_applied_once_after_a_checkpoint(make_engine) -> None:
    """From a review: a reset run's creation shared its lists with the run, so an
    update applied after the reset went into the checkpoint twice."""
    async with make_engine() as engine:
        await engine.start("sl_counter", None, id="u")
        await engine.wait_until(lambda: engine.runs.newest["u"].live.parked)
        assert await engine.update("u", "inc", 1, update_id="u1") == 1
        await engine.reset("u", to=2)
        await engine.wait_until(lambda: engine.runs.newest["u"].live.parked)
        assert await engine.update("u", "inc", 1, update_id="u2") == 2
    async with make_engine() as engine:
        await engine.signal("u", "go")
        assert await engine.handle("u").result() == 2


async def test_result_of_a_stored_run_reset_with_no_successor_returns(make_engine) -> None:
    """From a review: a crash can keep a run's RunReset and lose the new run's start;
    result() compared rebuilt runs by identity and spun forever on the loop."""
    async with make_engine() as engine:
        await engine.start("sl_waits", 1, id="orphan")
        run = engine.runs.newest["orphan"]
        now = engine.driver.clock.now()
        engine.driver.close_run(run, RunReset(run.run_id, "reset to operation #1", now))
        await engine.wait_until(lambda: not run.status.is_open)
        await drain(engine)
        assert "orphan" not in engine.runs.newest
        with pytest.raises(Terminated, match="was reset"):
            await engine.handle("orphan").result(timeout=5)


class HalfCheckpoint(Storage):
    """A disk that fills up halfway through every checkpoint."""

    def write_file(self, path: Path, data: bytes) -> None:
        path.write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")


async def test_a_checkpoint_the_disk_had_no_room_for_leaves_nothing_behind(make_engine, home):
    async with make_engine(storage=HalfCheckpoint()) as engine:
        for i in range(3):
            await (await engine.start("sl_short", i, id=f"h{i}")).result()
            assert await engine.checkpoint() == 0
    assert list(journal_of(home).glob("*.tmp")) == []
    assert ckpt.listed(journal_of(home)) == []


def crash_image(home: Path, to: Path) -> Path:
    """The files of an open, idle home, as a SIGKILL at this moment leaves them."""
    shutil.copytree(home, to, ignore=shutil.ignore_patterns("*.sock", "*-shm"))
    return to


async def test_prune_keeps_the_run_a_reset_that_may_be_replayed_began_from(
    make_engine, home, tmp_path, clock
) -> None:
    """From a review: pruning the run a reset started from, before a checkpoint covered
    the reset, made the home refuse to open after a crash (the replay needs it)."""
    async with make_engine() as engine:
        h = await engine.start("sl_waits", 1, id="old")
        await h.signal("go", "x")
        await h.result()
        await drain(engine)
        await engine.checkpoint()
        await engine.reset("old", to=2)
        clock.advance(1)
        await engine.prune(0)
        await drain(engine)
        image = crash_image(home, tmp_path / "image")
    async with Engine(image, app=None, config=Config(clock=clock)) as engine:
        assert await engine.handle("old").result() == [2, "x"]


async def test_a_pruned_run_found_closed_again_after_a_crash_stays_pruned(
    make_engine, home, tmp_path, clock
) -> None:
    async with make_engine() as engine:
        await (await engine.start("sl_short", 1, id="gone")).result()
        await drain(engine)
        clock.advance(1)
        assert await engine.prune(0) == 1
        # The journal after the checkpoint still holds the run, closed.
        image = crash_image(home, tmp_path / "image")
    async with Engine(image, app=None, config=Config(clock=clock)) as engine:
        await drain(engine)
        assert await engine.list() == []


async def test_a_history_store_that_fails_writes_again_later_and_loses_nothing(
    make_engine, monkeypatch
) -> None:
    real = SqliteHistory._write
    failures = []

    def flaky(self: SqliteHistory, db: Any, closed: Any) -> None:
        if len(failures) < 2:
            failures.append(len(closed))
            raise sqlite3.OperationalError("database or disk is full")
        real(self, db, closed)

    monkeypatch.setattr(SqliteHistory, "_write", flaky)
    monkeypatch.setattr(history, "RETRY_S", 0.001)
    async with make_engine() as engine:
        for i in range(20):
            await (await engine.start("sl_short", i, id=f"r{i}")).result()
        await engine.wait_until(lambda: not engine.runs.by_run_id)
        assert failures, "the store failed"
        assert len(await engine.list(status="completed")) == 20
