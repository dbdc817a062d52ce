"""Opening after a crash leaves the closed runs the history store took in the store
(issue 41, `engine/opening.py`).

Each test builds a home, waits until the store has taken what closed, and copies
the files as a SIGKILL at that moment leaves them (`crash_image`); opening the copy
must not fold those runs into memory again, and must answer for them at once from
the store, as it did before the crash. Runs the store does not hold are folded as
before. What is asserted is where each run's state comes from, never a time.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import CodecError, Config, Ctx, Engine, FakeClock, step, workflow
from fusee_runtime.codecs import Encrypt
from fusee_runtime.engine import checkpoints as checkpoints_module
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal.storage import Storage
from fusee_runtime.model.op_records import ChildClosed
from fusee_runtime.store.sqlite_history import SqliteHistory

CALLS: list[int] = []


@step
async def co_work(n: int) -> int:
    CALLS.append(n)
    return n * 2


@workflow
async def co_short(ctx: Ctx, n: int) -> int:
    return await co_work(n)


@workflow
async def co_waits(ctx: Ctx, n: int) -> Any:
    first = await co_work(n)
    got = await ctx.wait_for("go")
    return [first, got]


@workflow
async def co_parent(ctx: Ctx, n: int) -> Any:
    got = await ctx.child(co_short, f"{ctx.workflow_id}-child", n)
    return [got, await ctx.wait_for("go")]


def crash_image(home: Path, to: Path) -> Path:
    """The files of an open, idle home, as a SIGKILL at this moment leaves them."""
    shutil.copytree(home, to, ignore=shutil.ignore_patterns("*.sock", "*-shm"))
    return to


def reopen(image: Path, clock: FakeClock) -> Engine:
    return Engine(image, app=None, config=Config(clock=clock))


def forget_stored(image: Path, run_id: str) -> None:
    """The store of `image` never took `run_id` (the crash came first)."""
    db = sqlite3.connect(image / "history.db")
    with db:
        assert db.execute("DELETE FROM runs WHERE run_id = ?", (run_id,)).rowcount == 1
    db.close()


async def test_closed_runs_the_store_took_stay_in_it_and_answer_at_once(
    make_engine, home, tmp_path, clock
) -> None:
    async with make_engine() as engine:
        waiting = await engine.start("co_waits", 1, id="open")
        done = [await engine.start("co_short", i, id=f"c{i}") for i in range(20)]
        for h in done:
            await h.result()
        await engine.checkpoints.flush_history()
        assert engine.checkpoints.lsn == 0, "no checkpoint: every record is replayed"
        image = crash_image(home, tmp_path / "image")
    async with reopen(image, clock) as engine:
        # Memory holds the open run only, as it did before the crash.
        assert set(engine.runs.by_run_id) == {waiting.run_id}
        assert set(engine.runs.newest) == {"open"}
        # Answered from the store from the moment open returned.
        listed = await engine.list(status="completed")
        assert sorted(r.id for r in listed) == sorted(f"c{i}" for i in range(20))
        info = await engine.handle("c3").describe()
        assert (info.status, info.run_id) == ("completed", done[3].run_id)
        assert await engine.handle("c3").result() == 6
        kinds = [r["type"] for r in await engine.history("c3")]
        assert kinds == ["RunStarted", "StepCompleted", "RunCompleted"]
        # Nothing was queued for the store again.
        await engine.checkpoints.flush_history()
        assert engine.runs.store is not None and engine.runs.store.rows_written == 0
        # The open run goes on; no step ran twice.
        calls = list(CALLS)
        await engine.signal("open", "go", "x")
        assert await engine.handle("open").result() == [2, "x"]
        assert calls == CALLS


async def test_closed_runs_a_checkpoint_held_stay_in_the_store_that_took_them(
    make_engine, home, tmp_path, clock, monkeypatch
) -> None:
    """A checkpoint taken while the store lagged holds closed runs; the store took
    them before the crash: opening leaves them there too."""
    real = SqliteHistory._write
    lagging = True

    def lag(self: SqliteHistory, db: Any, closed: Any) -> None:
        if lagging:
            raise sqlite3.OperationalError("database is locked")
        real(self, db, closed)

    monkeypatch.setattr(SqliteHistory, "_write", lag)
    monkeypatch.setattr(checkpoints_module, "CHECKPOINT_FLUSH_WAIT_S", 0.01)
    async with make_engine() as engine:
        waiting = await engine.start("co_waits", 2, id="open")
        done = [await engine.start("co_short", i, id=f"k{i}") for i in range(10)]
        for h in done:
            await h.result()
        lsn = await engine.checkpoint()
        lagging = False
        await engine.checkpoints.flush_history()
        assert set(engine.runs.by_run_id) == {waiting.run_id}
        image = crash_image(home, tmp_path / "image")
    body = ckpt.read(ckpt.checkpoint_path(image / "journal", lsn), Storage()).body
    assert len(body["runs"]) == 11, "the checkpoint holds the closed runs"
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {waiting.run_id}
        assert [r.id for r in await engine.list(status="completed")] == [
            f"k{i}" for i in reversed(range(10))
        ]
        assert await engine.handle("k4").result() == 8
        await engine.checkpoints.flush_history()
        assert engine.runs.store is not None and engine.runs.store.rows_written == 0
        await engine.signal("open", "go", "y")
        assert await engine.handle("open").result() == [4, "y"]


async def test_runs_open_at_the_checkpoint_and_closed_after_it_stay_in_the_store(
    make_engine, home, tmp_path, clock
) -> None:
    """A run the checkpoint holds open, closed in the journal after it and taken by the
    store: its records in both are left out."""
    async with make_engine() as engine:
        across = [await engine.start("co_waits", i, id=f"x{i}") for i in range(5)]
        staying = await engine.start("co_waits", 9, id="stays")
        await engine.wait_until(lambda: all(r.live.parked for r in engine.runs.newest.values()))
        lsn = await engine.checkpoint()
        for i, h in enumerate(across):
            await h.signal("go", i)
            assert await h.result() == [2 * i, i]
        await engine.checkpoints.flush_history()
        assert set(engine.runs.by_run_id) == {staying.run_id}
        image = crash_image(home, tmp_path / "image")
    body = ckpt.read(ckpt.checkpoint_path(image / "journal", lsn), Storage()).body
    assert len(body["runs"]) == 6, "the checkpoint holds them open"
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {staying.run_id}
        assert await engine.handle("x3").result() == [6, 3]
        kinds = [r["type"] for r in await engine.history("x3")]
        assert kinds[0] == "RunStarted" and kinds[-1] == "RunCompleted"
        await engine.checkpoints.flush_history()
        assert engine.runs.store is not None and engine.runs.store.rows_written == 0
        await engine.signal("stays", "go", "s")
        assert await engine.handle("stays").result() == [18, "s"]


async def test_a_closed_run_the_store_did_not_take_is_folded_and_stored_again(
    make_engine, home, tmp_path, clock
) -> None:
    async with make_engine() as engine:
        done = [await engine.start("co_short", i, id=f"n{i}") for i in range(3)]
        for h in done:
            await h.result()
        await engine.checkpoints.flush_history()
        image = crash_image(home, tmp_path / "image")
    forget_stored(image, done[1].run_id)
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {done[1].run_id}
        assert await engine.handle("n1").result() == 2
        await engine.checkpoints.flush_history()
        assert engine.runs.store is not None and engine.runs.store.rows_written == 1
        assert engine.runs.by_run_id == {}
        assert len(await engine.list(status="completed")) == 3


async def test_the_newest_run_of_an_id_is_the_stored_one_that_began_last(
    make_engine, home, tmp_path, clock
) -> None:
    """The older run of an id is folded (the store lost it), the newer one is left in
    the store: the id's newest run is the newer one, as the store's evictions left it."""
    async with make_engine() as engine:
        old = await engine.start("co_waits", 3, id="s")
        await engine.wait_until(lambda: engine.runs.newest["s"].live.parked)
        new = await engine.start("co_short", 5, id="s", on_conflict="new_run")
        assert await new.result() == 10
        await engine.checkpoints.flush_history()
        image = crash_image(home, tmp_path / "image")
    forget_stored(image, old.run_id)
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {old.run_id}, "the older run is folded"
        info = await engine.handle("s").describe()
        assert (info.run_id, info.status) == (new.run_id, "completed")
        assert await engine.handle("s").result() == 10
        assert (await engine.handle("s", old.run_id).describe()).status == "terminated"


async def test_a_reset_replayed_after_a_crash_reads_the_run_it_reset_from_the_store(
    make_engine, home, tmp_path, clock
) -> None:
    async with make_engine() as engine:
        first = await engine.start("co_waits", 4, id="r")
        await engine.wait_until(lambda: engine.runs.newest["r"].live.parked)
        second = await engine.reset("r", to=2)
        await engine.wait_until(lambda: engine.runs.newest["r"].live.parked)
        await engine.checkpoints.flush_history()
        assert first.run_id not in engine.runs.by_run_id
        image = crash_image(home, tmp_path / "image")
    calls = list(CALLS)
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {second.run_id}
        assert (await engine.handle("r", first.run_id).describe()).status == "reset"
        await engine.signal("r", "go", "z")
        assert await engine.handle("r").result() == [8, "z"]
    assert calls == CALLS, "the step the reset kept ran again"


async def test_a_child_the_store_took_leaves_its_parent_going(
    make_engine, home, tmp_path, clock
) -> None:
    async with make_engine() as engine:
        parent = await engine.start("co_parent", 6, id="p")
        assert await engine.handle("p-child").result() == 12
        run = engine.runs.newest["p"]
        await engine.wait_until(
            lambda: run.live.parked and any(isinstance(r, ChildClosed) for _, r in run.records)
        )
        await engine.checkpoints.flush_history()
        image = crash_image(home, tmp_path / "image")
    calls = list(CALLS)
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {parent.run_id}
        assert await engine.handle("p-child").result() == 12
        await engine.signal("p", "go", "w")
        assert await engine.handle("p").result() == [12, "w"]
    assert calls == CALLS


@pytest.mark.parametrize("damage", ["unreadable", "not a database"])
async def test_a_store_that_cannot_be_read_leaves_every_run_to_the_fold(
    make_engine, home, tmp_path, clock, damage
) -> None:
    async with make_engine() as engine:
        done = [await engine.start("co_short", i, id=f"d{i}") for i in range(3)]
        for h in done:
            await h.result()
        await engine.checkpoints.flush_history()
        image = crash_image(home, tmp_path / "image")
    for p in image.glob("history.db*"):
        p.unlink()
    if damage == "unreadable":
        (image / "history.db").mkdir()
    else:
        (image / "history.db").write_bytes(b"not a database" * 100)
    async with reopen(image, clock) as engine:
        assert set(engine.runs.by_run_id) == {h.run_id for h in done}
        assert await engine.handle("d2").result() == 4


async def test_on_postgresql_the_closed_runs_fusee_runs_took_stay_there(
    tmp_path: Path, pg_url: str
) -> None:
    engine = Engine(tmp_path / "h", app=None, config=Config(store=pg_url))
    await engine.open()
    waiting = await engine.start("co_waits", 7, id="open")
    across = [await engine.start("co_waits", i, id=f"q{i}") for i in range(3)]
    await engine.wait_until(lambda: all(r.live.parked for r in engine.runs.newest.values()))
    await engine.checkpoint()  # holds the q runs open: they close after it
    for i, h in enumerate(across):
        await h.signal("go", i)
    done = [await engine.start("co_short", i, id=f"p{i}") for i in range(5)]
    for h in [*across, *done]:
        await h.result()
    await engine.checkpoints.flush_history()
    await engine.close(crash=True)  # no checkpoint at close: the journal after it replays
    async with Engine(tmp_path / "h", app=None, config=Config(store=pg_url)) as engine:
        assert set(engine.runs.by_run_id) == {waiting.run_id}
        assert len(await engine.list(status="completed")) == 8
        assert await engine.handle("p3").result() == 6
        assert await engine.handle("q2").result() == [4, 2]
        await engine.checkpoints.flush_history()
        assert engine.runs.store is not None and engine.runs.store.rows_written == 0
        await engine.signal("open", "go", "v")
        assert await engine.handle("open").result() == [14, "v"]


K1, K2 = bytes(range(32)), bytes(range(100, 132))


@pytest.mark.parametrize("codec", ["none", "missing", "wrong"])
@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpoint", "checkpoint"])
async def test_a_key_missing_or_wrong_is_found_though_the_stored_runs_stay_out(
    make_engine, home, tmp_path, clock, codec: str, checkpointed: bool
) -> None:
    """The runs left in the store are not replayed, but each key their payloads were
    encrypted with is still tried on open: a home whose only k1 payloads are in runs
    the store took (a crash before the first checkpoint, or after one made before any
    run) is refused with no key, another key or a wrong one, and nothing is written."""
    k1 = Encrypt(keys={"k1": K1}, current="k1")
    async with make_engine(codec=k1, checkpoint_bytes=1 << 30) as engine:
        if checkpointed:
            await engine.checkpoint()  # made before any run: it holds no k1 check
        done = [await engine.start("co_short", i, id=f"e{i}") for i in range(3)]
        for h in done:
            await h.result()
        await engine.checkpoints.flush_history()
        assert set(engine.runs.by_run_id) == set()
        image = crash_image(home, tmp_path / "image")
    journal = sorted((image / "journal").iterdir())
    before = {p.name: p.read_bytes() for p in journal}
    other = {"none": None, "missing": Encrypt(keys={"k2": K2}), "wrong": Encrypt(keys={"k1": K2})}
    engine = Engine(image, app=None, config=Config(clock=clock, codec=other[codec]))
    with pytest.raises(CodecError) as raised:
        await engine.open()
    assert "key k1" in str(raised.value)
    assert ("wrong" in str(raised.value)) == (codec == "wrong")
    assert {p.name: p.read_bytes() for p in sorted((image / "journal").iterdir())} == before
    async with Engine(image, app=None, config=Config(clock=clock, codec=k1)) as engine:
        assert set(engine.runs.by_run_id) == set()  # (with the key: left in the store)
        assert await engine.handle("e2").result() == 4
