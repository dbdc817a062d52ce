"""Group commit and fail-stop, through the `Engine` on real files.

Syncs are counted by a `Storage` subclass, never timed. Fail-stop is driven
by a `Storage` whose `fdatasync` or write fails on a chosen call: after it,
nothing is acknowledged, nothing more is written or synced, and every later
start raises `JournalFailed`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from fusee_runtime import (
    Config,
    Ctx,
    Engine,
    FakeClock,
    JournalFailed,
    Status,
    step,
    workflow,
)
from fusee_runtime.engine import durability
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal.reader import Tail, recover
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import BATCH_RECORDS_MAX, JournalWriter

MakeEngine = Callable[..., Engine]

STEP_CALLS: list[str] = []


async def _noop(name: str) -> str:
    STEP_CALLS.append(name)
    return name


@workflow(name="jgc_three_steps")
async def three_steps(ctx: Ctx, n: int) -> int:
    await ctx.step("a", _noop, f"{n}:a")
    await ctx.step("b", _noop, f"{n}:b")
    await ctx.step("c", _noop, f"{n}:c")
    return n


@pytest.fixture(autouse=True)
def _fresh_step_calls() -> None:
    STEP_CALLS.clear()


class FaultyStorage(Storage):
    """Counts the journal's data syncs and writes, and fails a chosen one.

    Faults it injects, each on the N-th call (counting from 1; syncs and
    writes made while creating a segment are not counted, as they are not
    the writer's appends):

    - `fail_sync_at`: `sync` raises `OSError(EIO)`, as a failed `fdatasync`.
    - `fail_write_at`: `write` raises `OSError(ENOSPC)`, as a full disk.
    - `fail_create`: creating a segment runs out of space while
      preallocating it (leaving its temporary file behind).
    - `half_write_at`: `write` puts about half of its data in the file, torn
      inside a frame, then raises `OSError(ENOSPC)`: a disk that fills mid-batch.
    - `pwrite_max`: every `pwrite` writes at most this many bytes (short writes).
    - `stuck_pwrite_at`: the N-th `pwrite` of an append writes nothing.

    `failed_data` keeps the data of every write since the last good sync when
    a fault strikes: the batch (or batches) nothing of which may be acknowledged.

    After the fault, every further call is recorded in `after_failure`;
    `failed` is set just before the fault is raised, and `failed_on` names the
    thread that met it (the engine's loop, or the journal's thread).
    """

    def __init__(
        self,
        fail_sync_at: int | None = None,
        fail_write_at: int | None = None,
        fail_create: bool = False,
        half_write_at: int | None = None,
        pwrite_max: int | None = None,
        stuck_pwrite_at: int | None = None,
    ) -> None:
        self.fail_sync_at = fail_sync_at
        self.fail_write_at = fail_write_at
        self.fail_create = fail_create
        self.half_write_at = half_write_at
        self.pwrite_max = pwrite_max
        self.stuck_pwrite_at = stuck_pwrite_at
        self.syncs = 0
        self.writes = 0
        self.pwrites = 0
        self.unsynced: list[bytes] = []
        self.failed_data: list[bytes] = []
        self.after_failure: list[str] = []
        self.failed = threading.Event()
        self.failed_on: str | None = None
        self._creating = False

    def _fault(self, error: int, what: str) -> OSError:
        self.failed_data = list(self.unsynced)
        self.failed_on = threading.current_thread().name
        self.failed.set()
        return OSError(error, os.strerror(error), what)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        if self._creating:
            return super().pwrite(fd, data, offset)
        self.pwrites += 1
        if self.pwrites == self.stuck_pwrite_at:
            self.failed_data = list(self.unsynced)
            self.failed.set()
            return 0
        return super().pwrite(fd, data[: self.pwrite_max], offset)

    def create(self, path: Path, size_bytes: int, header: bytes) -> int:
        if self.failed.is_set():
            self.after_failure.append("create")
        self._creating = True
        try:
            return super().create(path, size_bytes, header)
        finally:
            self._creating = False

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        if self._creating:
            if self.fail_create:
                raise self._fault(errno.ENOSPC, "preallocating a segment")
            super().write(fd, offset, data)
            return
        if self.failed.is_set():
            self.after_failure.append("write")
        self.writes += 1
        self.unsynced.append(bytes(data))
        if self.writes == self.fail_write_at:
            raise self._fault(errno.ENOSPC, "appending")
        if self.writes == self.half_write_at:
            # About half the batch, torn inside a frame.
            half = len(data) // 2
            pos = max((end for _, _, end in fmt.frames(data) if end <= half), default=0)
            super().write(fd, offset, data[: pos + 4])
            raise self._fault(errno.ENOSPC, "appending")
        super().write(fd, offset, data)

    def sync(self, fd: int) -> None:
        if self._creating:
            super().sync(fd)
            return
        if self.failed.is_set():
            self.after_failure.append("sync")
        self.syncs += 1
        if self.syncs == self.fail_sync_at:
            raise self._fault(errno.EIO, "fdatasync")
        super().sync(fd)
        self.unsynced.clear()


def engine_on(home: Path, storage: Storage, clock: FakeClock) -> Engine:
    config = Config(clock=clock, storage=storage, segment_bytes=64 << 10, payload_bytes_max=1024)
    return Engine(home, app=None, config=config)


def on_disk(home: Path) -> list[tuple[int, bytes]]:
    return recover(home / "journal", Storage(), repair=False).records


# -- group commit ----------------------------------------------------------------------


async def test_concurrent_runs_share_syncs(make_engine: MakeEngine) -> None:
    runs = 200
    async with make_engine() as engine:
        handles = await asyncio.gather(
            *(engine.start("jgc_three_steps", i, id=f"g{i}") for i in range(runs))
        )
        results = await asyncio.gather(*(h.result() for h in handles))
        counters = engine.counters()
    assert results == list(range(runs))
    assert len(STEP_CALLS) == 3 * runs
    records = 5 * runs  # started, three steps, completed
    assert counters["records"] == records
    assert counters["durable_lsn"] == records
    # Every run waits for a sync before each step, so at least 4 syncs are
    # needed; one sync per record would be 1000. A bound of 200 leaves room
    # for a slow, busy machine splitting batches.
    assert counters["syncs"] >= 4
    assert counters["syncs"] * 5 <= records, counters


async def test_each_step_of_a_sequential_run_waits_for_exactly_one_sync(
    home: Path, clock: FakeClock
) -> None:
    storage = FaultyStorage()
    seen: list[tuple[str, int]] = []

    async def record(name: str) -> str:
        seen.append((name, storage.syncs))
        return name

    @workflow(name="jgc_counted_steps")
    async def counted(ctx: Ctx, _: None) -> str:
        await ctx.step("first", record, "first")
        return await ctx.step("second", record, "second")

    async with engine_on(home, storage, clock) as engine:
        assert storage.syncs == 0
        handle = await engine.start("jgc_counted_steps", None, id="seq")
        # The start returned once the sync covering it was done.
        assert storage.syncs == 1
        assert await handle.result() == "second"
        total = engine.counters()["syncs"]
    # Each step ran after exactly one more sync: the one covering the record
    # before it (the start, then the first step's result), never zero, never two.
    assert seen == [("first", 1), ("second", 2)]
    # The second result and the completion are appended together, so they
    # share one sync unless the writer happened to take the first alone.
    assert total == storage.syncs
    assert total in (3, 4)


async def test_one_step_run_waits_for_exactly_one_sync(home: Path, clock: FakeClock) -> None:
    storage = FaultyStorage()
    seen: list[int] = []

    async def record() -> int:
        seen.append(storage.syncs)
        return 1

    @workflow(name="jgc_one_step")
    async def one_step(ctx: Ctx, _: None) -> int:
        return await ctx.step("only", record)

    async with engine_on(home, storage, clock) as engine:
        before = storage.syncs
        handle = await engine.start("jgc_one_step", None, id="one")
        assert await handle.result() == 1
    assert seen == [before + 1]


class SlowSync(FaultyStorage):
    """A disk whose `fdatasync` takes 5 ms (over the engine's 2 ms bound for
    committing on its loop)."""

    def sync(self, fd: int) -> None:
        time.sleep(0.005)
        super().sync(fd)


class Unsafe(FaultyStorage):
    """A storage the engine must not call on its loop (as a test's held disk)."""

    loop_safe = False


async def sequential(engine: Engine, steps: int) -> dict[str, float]:
    """Counters of a run of `steps` sequential steps, from the engine's first record."""
    assert await (await engine.start("jgc_three_steps", steps, id="seq")).result() == steps
    return {k: engine.counters()[k] for k in ("batches", "batches_here", "syncs")}


async def test_an_idle_loop_commits_itself_without_the_writer_thread(
    home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lone sequential run: at each gate nothing else could add to the batch,
    # so the loop commits it itself (no hand-off to the thread and back), all
    # but the first commit, which makes the journal's first segment (the
    # thread writes whole segments).
    # The real disk counts as fast whatever it measures: on a busy machine one
    # fdatasync can pass the 2 ms bound, which is the slow-disk case below.
    monkeypatch.setattr(durability, "COMMIT_HERE_SYNC_S_MAX", float("inf"))
    async with engine_on(home, FaultyStorage(), clock) as engine:
        d = await sequential(engine, 3)
    assert d["batches"] == d["syncs"] == 4
    assert d["batches_here"] == d["batches"] - 1


async def test_a_lone_run_committing_on_the_loop_still_lets_it_poll_for_io(
    home: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lone run's commits happen on the loop, and its task goes on without a round
    # of the loop after each (a round a step was a tenth of a step's CPU); but one
    # comes at least every `YIELD_EVERY_S`, so I/O that becomes ready meanwhile (a
    # control socket's request) is served while the run goes on, not after it.
    monkeypatch.setattr(durability, "COMMIT_HERE_SYNC_S_MAX", float("inf"))
    loop = asyncio.get_running_loop()
    reader, writer = socket.socketpair()
    served_at: list[int] = []

    def served() -> None:
        served_at.append(steps)
        reader.recv(1)
        loop.remove_reader(reader)

    steps = 0

    async def counted(i: int) -> int:
        nonlocal steps
        steps += 1
        if i == 100:  # well into the run: from here on every commit is the loop's
            writer.send(b"x")
            loop.add_reader(reader, served)
        return i

    @workflow(name="jgc_long_lone")
    async def long_lone(ctx: Ctx, n: int) -> int:
        for i in range(n):
            await ctx.step("s", counted, i)
        return n

    # One segment for the whole run: a new one is made by the thread, a round anyway.
    config = Config(clock=clock, storage=FaultyStorage(), segment_bytes=16 << 20)
    try:
        async with Engine(home, app=None, config=config) as engine:
            assert await (await engine.start("jgc_long_lone", 3000)).result() == 3000
            here, batches = engine.counters()["batches_here"], engine.counters()["batches"]
    finally:
        reader.close()
        writer.close()
    assert served_at and served_at[0] < 3000, served_at
    assert here >= batches - 2  # the run's commits did happen on the loop


@pytest.mark.parametrize("storage", [Unsafe, SlowSync], ids=["not-loop-safe", "slow-disk"])
async def test_commits_stay_on_the_thread_for_a_slow_or_unsafe_disk(
    home: Path, clock: FakeClock, storage: type[FaultyStorage]
) -> None:
    # The slow disk's first sync (on the thread, making the first segment) is
    # already enough to keep every later one off the loop.
    async with engine_on(home, storage(), clock) as engine:
        d = await sequential(engine, 3)
    assert d["batches"] == d["syncs"] == 4
    assert d["batches_here"] == 0


def test_a_backlog_over_one_batch_is_left_to_the_thread_whole(tmp_path: Path) -> None:
    # commit_here takes no part of a backlog larger than one batch: the thread
    # commits all of it (once it stranded the rest, nobody asked to commit it).
    durable: list[int] = []
    done = threading.Event()

    def on_durable(lsn: int) -> None:
        durable.append(lsn)
        if lsn == total:
            done.set()

    writer = JournalWriter(
        tmp_path,
        Storage(),
        Tail(None, 0, 1),
        64 << 20,
        on_durable,
        lambda e: None,
        commit_on_append=False,
    )
    total = BATCH_RECORDS_MAX + 10
    try:
        for _ in range(total):
            writer.append(b"[1]")
        assert writer.commit_here() is None
        assert done.wait(60)
    finally:
        writer.close()
    assert durable[-1] == total
    assert writer.counters.batches_here == 0
    assert len(recover(tmp_path, Storage(), repair=False).records) == total


async def test_a_batch_synced_before_a_failed_commit_here_is_acknowledged_first(
    home: Path, clock: FakeClock
) -> None:
    # The thread synced batch A but had not yet published it when a commit on
    # the loop failed: A is durable and must be acknowledged as such, before
    # the failure, and nothing after the failure is ever acknowledged.
    #
    # The thread stays in `hold` until the end, as a thread preempted before it
    # publishes would: if it went on, it could take "b"'s batch itself (the loop
    # finding the commit lock taken for an instant), and this test would check
    # the thread's failure, not the loop's, with A's publication swallowed.
    storage = FaultyStorage(fail_sync_at=2)
    async with engine_on(home, storage, clock) as engine:
        writer = engine.durability.writer
        assert writer is not None
        held: list[int] = []
        synced = threading.Event()
        release = threading.Event()
        publish = writer._on_durable

        def hold(lsn: int) -> None:  # the thread, preempted before it publishes
            held.append(lsn)
            synced.set()
            release.wait(60)  # bounded only so that a regression fails instead of hanging

        writer._on_durable = hold
        try:
            engine.durability.commit_here = False
            first = asyncio.ensure_future(engine.start("jgc_three_steps", 1, id="a"))
            await asyncio.to_thread(synced.wait)
            engine.durability.commit_here = True
            # A fast disk, whatever the first sync took on a busy machine (over 2 ms,
            # the engine leaves commits to the thread).
            writer.sync_s_recent = 0.0
            # "b" commits on the loop (the thread is held); its sync fails.
            with pytest.raises(JournalFailed):
                await engine.start("jgc_three_steps", 2, id="b")
            assert storage.failed_on == threading.current_thread().name, "not on the loop"
            handle = await first  # acknowledged: its sync had returned
            assert handle.id == "a"
            publish(held[0])  # the thread's late publication changes nothing
            await asyncio.sleep(0)
            assert engine.counters()["durable_lsn"] == held[0]
        finally:
            release.set()
    assert storage.after_failure == []


CTRL_C_CHILD = """
import asyncio, os, signal, sys, threading
from fusee_runtime import Config, Engine, JournalFailed, workflow
from fusee_runtime.journal.storage import Storage

@workflow(name="jgc_ctrl_c")
async def steps(ctx, _):
    for i in range(50):
        await ctx.step(f"s{i}", asyncio.sleep, 0)

engines = []
durable_then = []

class Interrupted(Storage):
    def sync(self, fd):
        # The first commit on the loop (one on the writer thread, or the segment's
        # creation, is not what this tests; which commits run where depends on load).
        if engines and not durable_then and threading.current_thread() is threading.main_thread():
            durable_then.append(engines[0].counters()["durable_lsn"])
            os.kill(os.getpid(), signal.SIGINT)
        super().sync(fd)

async def main():
    config = Config(storage=Interrupted(), segment_bytes=64 << 10, payload_bytes_max=1024)
    async with Engine(sys.argv[1], app=None, config=config) as engine:
        engines.append(engine)
        await (await engine.start("jgc_ctrl_c", None, id="x")).result()

loop = asyncio.new_event_loop()  # no asyncio.run: Python's own SIGINT handler stays
try:
    loop.run_until_complete(main())
except KeyboardInterrupt:
    engine = engines[0]
    now = int(engine.counters()["durable_lsn"])
    print(type(engine.durability.failed).__name__, now == durable_then[0], now >= 1)
"""


def test_ctrl_c_during_a_commit_on_the_loop_fails_the_journal_and_still_interrupts(
    home: Path,
) -> None:
    # A real SIGINT while the loop is in a commit: the journal fails (what that
    # commit wrote is in an unknown state, so nothing after it is acknowledged)
    # and the interrupt still reaches the program.
    child = subprocess.run(
        [sys.executable, "-c", CTRL_C_CHILD, str(home)], capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    # Nothing became durable after the interrupted commit began.
    assert child.stdout.split() == ["JournalFailed", "True", "True"], child.stdout + child.stderr


# -- fail-stop -----------------------------------------------------------------------------


async def test_failed_sync_of_the_start_fails_it_and_every_later_start(
    home: Path, clock: FakeClock
) -> None:
    storage = FaultyStorage(fail_sync_at=1)
    async with engine_on(home, storage, clock) as engine:
        with pytest.raises(JournalFailed) as raised:
            await engine.start("jgc_three_steps", 1, id="f1")
        message = str(raised.value)
        assert "fdatasync" in message
        assert os.strerror(errno.EIO) in message
        for i in range(3):
            with pytest.raises(JournalFailed):
                await engine.start("jgc_three_steps", i, id=f"later{i}")
        assert STEP_CALLS == []
        assert (await engine.handle("f1").describe()).status == Status.RUNNING
    assert storage.syncs == 1
    assert storage.after_failure == []


async def test_failed_sync_mid_run_stops_the_run_and_is_never_retried(
    home: Path, clock: FakeClock
) -> None:
    # Sync 1 covers the start; sync 2, covering step a's result, fails.
    storage = FaultyStorage(fail_sync_at=2)
    async with engine_on(home, storage, clock) as engine:
        handle = await engine.start("jgc_three_steps", 7, id="mid")
        result = asyncio.ensure_future(handle.result())
        await asyncio.to_thread(storage.failed.wait)
        with pytest.raises(JournalFailed):
            await engine.start("jgc_three_steps", 8, id="after")
        with pytest.raises(JournalFailed):
            await engine.start("jgc_three_steps", 9, id="after2")
        assert (await handle.describe()).status == Status.RUNNING
    # The caller waiting for the result is told the journal failed: no result
    # was reported after the failure.
    with pytest.raises(JournalFailed):
        await result
    assert STEP_CALLS == ["7:a"], "a step ran before the record it follows was durable"
    assert storage.syncs == 2
    assert storage.after_failure == []
    # Nothing after the failed batch (the start and step a's result) was written.
    assert [lsn for lsn, _ in on_disk(home)] == [1, 2]

    # The acknowledged start is not lost: a healthy reopen finishes the run.
    async with engine_on(home, Storage(), clock) as engine:
        assert await engine.handle("mid").result() == 7
        assert [r.id for r in await engine.list()] == ["mid"]


async def test_concurrent_starts_are_acknowledged_only_before_a_failed_sync(
    home: Path, clock: FakeClock
) -> None:
    storage = FaultyStorage(fail_sync_at=3)
    async with engine_on(home, storage, clock) as engine:
        outcomes = await asyncio.gather(
            *(engine.start("jgc_three_steps", i, id=f"c{i}") for i in range(50)),
            return_exceptions=True,
        )
        acked = {h.id for h in outcomes if not isinstance(h, BaseException)}
        failed = [e for e in outcomes if isinstance(e, BaseException)]
        assert all(isinstance(e, JournalFailed) for e in failed)
        # Each start needs a sync of its own and only two succeed, so one of
        # three more starts meets the failure, however far the runs got.
        for i in range(3):
            try:
                acked.add((await engine.start("jgc_three_steps", 100 + i, id=f"d{i}")).id)
            except JournalFailed:
                break
        else:
            pytest.fail("three more starts were acknowledged after only two good syncs")
        assert storage.failed.is_set()
        with pytest.raises(JournalFailed):
            await engine.start("jgc_three_steps", 99, id="late")
        statuses = {r.id: r.status for r in await engine.list()}
    # No run got as far as a durable completion: that takes four syncs.
    assert set(statuses.values()) == {Status.RUNNING}
    assert storage.after_failure == []
    assert storage.syncs == 3
    # Every acknowledged start was written before the failure.
    started = [rec for rec in (orjson.loads(p) for _, p in on_disk(home)) if rec[0] == 1]
    written = {rec[2] for rec in started}
    assert acked <= written
    assert "late" not in written


async def test_wait_until_raises_once_the_journal_fails(home: Path, clock: FakeClock) -> None:
    # Nothing progresses after a failed sync: a tool or test following the engine
    # is told, rather than left waiting for good.
    storage = FaultyStorage(fail_sync_at=2)
    async with engine_on(home, storage, clock) as engine:
        await engine.start("jgc_three_steps", 1, id="w")
        with pytest.raises(JournalFailed):
            await engine.wait_until(lambda: False)
        await engine.wait_until(lambda: engine.durability.failed is not None)  # true: returns


async def test_full_disk_on_append_is_fail_stop(home: Path, clock: FakeClock) -> None:
    # Write 1 holds the start; write 2, step a's result, finds the disk full.
    storage = FaultyStorage(fail_write_at=2)
    async with engine_on(home, storage, clock) as engine:
        handle = await engine.start("jgc_three_steps", 3, id="full")
        await asyncio.to_thread(storage.failed.wait)
        with pytest.raises(JournalFailed) as raised:
            await engine.start("jgc_three_steps", 4, id="after")
        assert os.strerror(errno.ENOSPC) in str(raised.value)
        with pytest.raises(JournalFailed) as raised:
            await engine.start("jgc_three_steps", 5, id="after2")
        assert os.strerror(errno.ENOSPC) in str(raised.value)
        assert (await handle.describe()).status == Status.RUNNING
    assert STEP_CALLS == ["3:a"]
    assert storage.writes == 2
    assert storage.syncs == 1, "the failed write was followed by a sync"
    assert storage.after_failure == []
    assert [lsn for lsn, _ in on_disk(home)] == [1]

    async with engine_on(home, Storage(), clock) as engine:
        assert await engine.handle("full").result() == 3


async def test_full_disk_while_creating_a_segment_is_fail_stop(
    home: Path, clock: FakeClock
) -> None:
    storage = FaultyStorage(fail_create=True)
    async with engine_on(home, storage, clock) as engine:
        with pytest.raises(JournalFailed) as raised:
            await engine.start("jgc_three_steps", 1, id="nospace")
        assert os.strerror(errno.ENOSPC) in str(raised.value)
        with pytest.raises(JournalFailed):
            await engine.start("jgc_three_steps", 2, id="nospace2")
    assert storage.writes == 0
    assert storage.syncs == 0
    assert storage.after_failure == []
    assert on_disk(home) == []

    # Once there is room again the home opens and works.
    async with engine_on(home, Storage(), clock) as engine:
        assert await engine.list() == []
        handle = await engine.start("jgc_three_steps", 5, id="room")
        assert await handle.result() == 5


def records_in(data: list[bytes]) -> list[list[object]]:
    """The records in these writes' whole frames."""
    return [orjson.loads(p) for chunk in data for _, p, _ in fmt.frames(chunk)]


async def test_full_disk_mid_batch_acknowledges_none_of_it_and_reopens_clean(
    home: Path, clock: FakeClock
) -> None:
    async with engine_on(home, Storage(), clock) as engine:
        assert await (await engine.start("jgc_three_steps", 0, id="h0")).result() == 0
    # 49 starts at once: their batch fills the disk halfway through its write.
    storage = FaultyStorage(half_write_at=1)
    async with engine_on(home, storage, clock) as engine:
        outcomes = await asyncio.gather(
            *(engine.start("jgc_three_steps", i, id=f"h{i}") for i in range(1, 50)),
            return_exceptions=True,
        )
        assert storage.failed.is_set()
        for e in outcomes:
            assert isinstance(e, JournalFailed), "a start of the batch that hit the full disk"
            assert os.strerror(errno.ENOSPC) in str(e)
        with pytest.raises(JournalFailed):
            await engine.start("jgc_three_steps", 99, id="late")
    assert {r[2] for r in records_in(storage.failed_data) if r[0] == 1} == {
        f"h{i}" for i in range(1, 50)
    }
    assert STEP_CALLS == ["0:a", "0:b", "0:c"]
    assert storage.after_failure == []

    # Space is back: the half-written batch is cut; the acknowledged run is whole.
    assert recover(home / "journal", Storage(), repair=False).cut is not None
    async with engine_on(home, Storage(), clock) as engine:
        assert await engine.handle("h0").result() == 0
        assert await (await engine.start("jgc_three_steps", 7, id="after")).result() == 7


async def test_short_writes_are_continued_until_the_batch_is_whole(
    home: Path, clock: FakeClock
) -> None:
    storage = FaultyStorage(pwrite_max=5)
    async with engine_on(home, storage, clock) as engine:
        handles = [await engine.start("jgc_three_steps", i, id=f"s{i}") for i in range(5)]
        assert [await h.result() for h in handles] == list(range(5))
    assert storage.pwrites > 5 * storage.writes  # every batch took several pwrites
    async with engine_on(home, Storage(), clock) as engine:
        assert [r.status for r in await engine.list()] == [Status.COMPLETED] * 5
    assert len(on_disk(home)) == 5 * 5  # start, three steps, close


async def test_a_write_that_makes_no_progress_is_fail_stop(home: Path, clock: FakeClock) -> None:
    # pwrite 1 holds the start; pwrite 2, step a's result, writes nothing at all.
    storage = FaultyStorage(stuck_pwrite_at=2)
    async with engine_on(home, storage, clock) as engine:
        handle = await engine.start("jgc_three_steps", 3, id="stuck")
        result = asyncio.ensure_future(handle.result())
        await asyncio.to_thread(storage.failed.wait)
        with pytest.raises(JournalFailed, match="pwrite wrote 0 of"):
            await engine.start("jgc_three_steps", 4, id="after")
    with pytest.raises(JournalFailed):
        await result
    assert STEP_CALLS == ["3:a"]
    assert storage.syncs == 1, "the write that made no progress was followed by a sync"
    assert storage.after_failure == []
    assert [lsn for lsn, _ in on_disk(home)] == [1]
    async with engine_on(home, Storage(), clock) as engine:
        assert await engine.handle("stuck").result() == 3


# -- limits ------------------------------------------------------------------------------


class FewSegments(Storage):
    """Refuses to create more than three segments, so a writer that keeps
    rotating fails instead of filling the disk."""

    def __init__(self) -> None:
        self.created = 0

    def create(self, path: Path, size_bytes: int, header: bytes) -> int:
        self.created += 1
        if self.created > 3:
            raise OSError(errno.ENOSPC, "test storage allows three segments")
        return super().create(path, size_bytes, header)


def test_writer_refuses_a_record_over_its_limit(tmp_path: Path) -> None:
    limit = 100
    storage = FewSegments()
    durable = threading.Event()
    failures: list[BaseException] = []
    writer = JournalWriter(
        tmp_path,
        storage,
        Tail(None, 0, 1),
        fmt.HEADER_BYTES + fmt.frame_size(limit),
        on_durable=lambda lsn: durable.set(),
        on_failed=failures.append,
        record_bytes_max=limit,
    )
    try:
        with pytest.raises(ValueError):
            writer.append(b"x" * (limit + 1))
        assert writer.append(b"y" * limit) == 1
        durable.wait()
    finally:
        writer.close()
    assert failures == []
    assert storage.created == 1
    assert recover(tmp_path, Storage(), repair=False).records == [(1, b"y" * limit)]


# -- found by the storage crash tests ---------------------------------------------------


@step
async def gc_inc(n: int) -> int:
    return n + 1


@workflow
async def gc_count(ctx: Ctx, n: int) -> int:
    for _ in range(50):
        n = await gc_inc(n)
    return n


async def test_a_thread_that_wakes_the_loop_never_fails_a_run(
    make_engine: Callable[..., Engine],
) -> None:
    """Found by tests/crash/test_storage_crash.py: a run failed with "RuntimeError: deque mutated
    during iteration" when a thread (the journal's, the history store's, a step's)
    called `loop.call_soon_threadsafe` while the engine walked the loop's ready
    queue (`Engine._commit_if_alone`). Threads switch every microsecond here, and
    one keeps waking the loop, so the walk is interrupted at once if it can be."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()

    def wake() -> None:
        while not stop.is_set():
            loop.call_soon_threadsafe(lambda: None)
            stop.wait(0.00005)

    interval = sys.getswitchinterval()
    waker = threading.Thread(target=wake)
    async with make_engine() as engine:
        sys.setswitchinterval(1e-6)
        waker.start()
        try:
            for i in range(40):
                assert await (await engine.start(gc_count, 0, id=f"c{i}")).result() == 50
        finally:
            sys.setswitchinterval(interval)
            stop.set()
            waker.join()
