"""`ctx.log`: tagged lines in `<home>/logs/fusee.log`, silent during replay, rotated."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from fusee_runtime import Ctx, FakeClock, RetryPolicy, current_ctx, step, workflow
from fusee_runtime.store.log_files import FileRunLog, LogTail, read_all

QUICK = RetryPolicy(attempts=3, initial=1, jitter=False)


def lines(home: Path, workflow_id: str | None = None) -> list[dict[str, Any]]:
    """Every kept line of the home's run log, oldest first (of one id if given)."""
    docs = [orjson.loads(raw) for raw in read_all(home / "logs")]
    return [d for d in docs if workflow_id is None or d["id"] == workflow_id]


def messages(home: Path, workflow_id: str) -> list[str]:
    return [d["msg"] for d in lines(home, workflow_id) if "event" not in d]


# -- what a line says ---------------------------------------------------------------------


async def test_lines_are_tagged_with_the_run_and_in_steps_with_the_step(
    make_engine, home: Path, clock: FakeClock
) -> None:
    @step
    def runlog_plain() -> None:
        current_ctx().log.info("in a plain step")

    @step
    async def runlog_async() -> None:
        current_ctx().log.warn("in an async step")

    @step(inline=True)
    def runlog_inline() -> None:
        current_ctx().log.error("in an inline step")

    @workflow(name="runlog.tags")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.log.debug("debug in workflow code")
        await runlog_plain()
        await runlog_async()
        await runlog_inline()
        await ctx.step("runlog_ctx_step", lambda: ctx.log.warning("in ctx.step"))
        ctx.log.info("done")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="tags")
        await h.result()
        run_id = h.run_id

    got = lines(home, "tags")
    assert [(d["level"], d["step"], d["attempt"], d["msg"]) for d in got[:-1]] == [
        ("debug", None, None, "debug in workflow code"),
        ("info", "runlog_plain", 1, "in a plain step"),
        ("warn", "runlog_async", 1, "in an async step"),
        ("error", "runlog_inline", 1, "in an inline step"),
        ("warn", "runlog_ctx_step", 1, "in ctx.step"),
        ("info", None, None, "done"),
    ]
    assert got[-1]["event"] == "closed"
    for d in got:
        assert d["id"] == "tags"
        assert d["workflow"] == "runlog.tags"  # the registered workflow type
        assert d["run_id"] == run_id
        assert d["ts"] == clock.now()


async def test_each_attempt_is_tagged_with_its_number(make_engine, home: Path, run_clock) -> None:
    tries: list[int] = []

    @step(retry=QUICK)
    def runlog_flaky_plain() -> None:
        tries.append(1)
        current_ctx().log.info("plain try")
        if len(tries) < 3:
            raise ConnectionError("not yet")

    @step(retry=QUICK)
    async def runlog_flaky_async() -> None:
        tries.append(2)
        current_ctx().log.info("async try")
        if tries.count(2) < 2:
            raise ConnectionError("not yet")

    @workflow(name="runlog.attempts")
    async def wf(ctx: Ctx, _: None) -> None:
        await runlog_flaky_plain()
        await runlog_flaky_async()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="attempts")
        await run_clock(h.result())

    got = lines(home, "attempts")[:-1]
    assert [(d["step"], d["attempt"], d.get("event")) for d in got] == [
        ("runlog_flaky_plain", 1, None),
        ("runlog_flaky_plain", 1, "attempt_failed"),
        ("runlog_flaky_plain", 2, None),
        ("runlog_flaky_plain", 2, "attempt_failed"),
        ("runlog_flaky_plain", 3, None),
        ("runlog_flaky_async", 1, None),
        ("runlog_flaky_async", 1, "attempt_failed"),
        ("runlog_flaky_async", 2, None),
    ]
    # A failed attempt's line says why, and where: the step's own frame raised it.
    assert {d["workflow"] for d in lines(home, "attempts")} == {"runlog.attempts"}
    failed = [d for d in got if d.get("event") == "attempt_failed"]
    for d in failed:
        assert d["level"] == "error"
        assert d["msg"].startswith(
            f"attempt {d['attempt']} failed: ConnectionError: not yet; retry"
        )
        assert f"in {d['step']}\n" in d["traceback"]
        assert d["traceback"].endswith("ConnectionError: not yet\n")
        assert "fusee_runtime" not in d["traceback"]  # the engine's frames are left out


async def test_a_durable_close_writes_the_closed_line(make_engine, home: Path) -> None:
    @workflow(name="runlog.closes")
    async def wf(ctx: Ctx, fail: bool) -> None:
        ctx.log.info("working")
        if fail:
            raise ValueError("no")

    async with make_engine() as engine:
        await (await engine.start(wf, False, id="ok")).result()
        h = await engine.start(wf, True, id="bad")
        await asyncio.gather(h.result(), return_exceptions=True)
        closed_at = (await h.describe()).closed_at

    ok, bad = lines(home, "ok"), lines(home, "bad")
    assert [d.get("event") for d in ok] == [None, "closed"]
    assert ok[-1]["status"] == "completed"
    assert bad[-1]["event"] == "closed"
    assert bad[-1]["status"] == "failed"
    assert bad[-1]["ts"] == closed_at.timestamp()


async def test_continue_as_new_closes_one_run_and_the_next_logs_under_its_own(
    make_engine, home: Path
) -> None:
    @workflow(name="runlog.continues")
    async def wf(ctx: Ctx, n: int) -> int:
        ctx.log.info(f"round {n}")
        if n < 2:
            await ctx.continue_as_new(n + 1)
        return n

    async with make_engine() as engine:
        assert await (await engine.start(wf, 0, id="rounds")).result() == 2

    got = lines(home, "rounds")
    rounds = [d for d in got if "event" not in d]
    closes = [d for d in got if "event" in d]
    assert [d["msg"] for d in rounds] == ["round 0", "round 1", "round 2"]
    assert len({d["run_id"] for d in rounds}) == 3
    assert [d["status"] for d in closes] == ["continued_as_new", "continued_as_new", "completed"]


async def test_a_long_message_is_cut(make_engine, home: Path) -> None:
    from fusee_runtime.engine.runlog import MESSAGE_CHARS_MAX

    @workflow(name="runlog.long")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.log.info("x" * (MESSAGE_CHARS_MAX + 10))
        ctx.log.info("\ud800 lone surrogate")

    async with make_engine() as engine:
        await (await engine.start(wf, None, id="long")).result()

    long, odd = messages(home, "long")
    assert len(long) == MESSAGE_CHARS_MAX
    assert long.endswith("…")
    assert odd == "\\ud800 lone surrogate"


# -- silent during replay -------------------------------------------------------------------


async def test_replayed_code_does_not_log_again(make_engine, home: Path, clock: FakeClock) -> None:
    @workflow(name="runlog.replay")
    async def wf(ctx: Ctx, _: None) -> str:
        ctx.log.info("before")
        await ctx.step("a", lambda: 1)
        ctx.log.info("between")
        await ctx.sleep("nap", 60)  # parks: waking up replays the code from the top
        ctx.log.info("after")
        return "done"

    async with make_engine() as engine:
        await engine.start(wf, None, id="replay")
        await clock.wait_for_sleepers()
    # The engine closed with the run asleep; the next one replays its code on open.
    async with make_engine() as engine:
        h = engine.handle("replay")
        await clock.wait_for_sleepers()
        clock.advance(60)
        assert await h.result() == "done"

    assert messages(home, "replay") == ["before", "between", "after"]


async def test_replayed_branches_of_a_group_do_not_log_again(
    make_engine, home: Path, clock: FakeClock
) -> None:
    async def branch(ctx: Ctx, i: int) -> int:
        ctx.log.info(f"branch {i} starts")
        value = await ctx.step(f"b{i}", lambda: i)
        ctx.log.info(f"branch {i} ends")
        return value

    @workflow(name="runlog.groups")
    async def wf(ctx: Ctx, _: None) -> list[int]:
        got = await ctx.all([branch(ctx, 0), branch(ctx, 1)])
        ctx.log.info("joined")
        await ctx.sleep("nap", 60)
        return got

    async with make_engine() as engine:
        await engine.start(wf, None, id="groups")
        await clock.wait_for_sleepers()
    async with make_engine() as engine:
        await clock.wait_for_sleepers()
        clock.advance(60)
        assert await engine.handle("groups").result() == [0, 1]

    assert sorted(messages(home, "groups")) == [
        "branch 0 ends",
        "branch 0 starts",
        "branch 1 ends",
        "branch 1 starts",
        "joined",
    ]


async def test_a_line_after_the_last_recorded_operation_is_written_again(
    make_engine, home: Path
) -> None:
    """The journal does not record log lines: code that ran past its last record
    before the engine stopped logs that stretch again when it recovers."""
    entered = asyncio.Event()
    release = asyncio.Event()

    @step
    async def runlog_blocks() -> None:
        entered.set()
        await release.wait()

    @workflow(name="runlog.tail")
    async def wf(ctx: Ctx, _: None) -> None:
        ctx.log.info("before")
        await ctx.step("a", lambda: 1)
        ctx.log.info("past the last record")
        await runlog_blocks()
        ctx.log.info("after")

    async with make_engine() as engine:
        await engine.start(wf, None, id="tail")
        await entered.wait()  # its function runs once every earlier record is durable
    release.set()
    async with make_engine() as engine:
        await engine.handle("tail").result()

    assert messages(home, "tail") == [
        "before",
        "past the last record",
        "past the last record",
        "after",
    ]


# -- threads ----------------------------------------------------------------------------------


async def test_plain_steps_log_from_many_threads_at_once(make_engine, home: Path) -> None:
    per_step = 200
    threads: set[str] = set()

    def noisy(i: int) -> int:
        threads.add(threading.current_thread().name)
        log = current_ctx().log
        for k in range(per_step):
            log.info(f"{i}:{k}")
        return i

    @workflow(name="runlog.threads")
    async def wf(ctx: Ctx, _: None) -> list[int]:
        return await ctx.all([ctx.step(f"t{i}", noisy, i) for i in range(8)])

    async with make_engine(step_threads=8) as engine:
        assert await (await engine.start(wf, None, id="threads")).result() == list(range(8))

    got = [d for d in lines(home, "threads") if "event" not in d]
    assert len(got) == 8 * per_step
    for d in got:
        i, _ = d["msg"].split(":")
        assert (d["step"], d["attempt"]) == (f"t{i}", 1)
    for i in range(8):  # each thread's lines in its order
        mine = [int(d["msg"].split(":")[1]) for d in got if d["step"] == f"t{i}"]
        assert mine == list(range(per_step))
    assert all(name.startswith("fusee-step") for name in threads)


# -- files: rotation, reading, following --------------------------------------------------------


def fill(log: FileRunLog, n: int, start: int = 0) -> None:
    for k in range(start, start + n):
        log.write({"id": "r", "msg": f"{k:04d}"})


def numbers(raws: list[bytes]) -> list[int]:
    return [int(orjson.loads(raw)["msg"]) for raw in raws]


def test_the_log_rotates_by_size_and_keeps_a_few_files(tmp_path: Path) -> None:
    log = FileRunLog(tmp_path, file_bytes_max=200, files_kept=2)
    fill(log, 60)  # 28 bytes a line: 7 lines a file
    log.close()

    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["fusee.log", "fusee.log.1", "fusee.log.2"]
    assert all(p.stat().st_size <= 200 for p in tmp_path.iterdir())
    kept = numbers(read_all(tmp_path))
    assert kept == list(range(60 - len(kept), 60))  # the newest lines, in order, no gap
    assert len(kept) > 14


def test_a_tail_reads_every_line_once_across_rotations(tmp_path: Path) -> None:
    log = FileRunLog(tmp_path, file_bytes_max=200, files_kept=3)
    tail = LogTail(tmp_path)
    assert tail.read() == []  # no file yet
    seen: list[int] = []
    written = 0
    for batch in (1, 3, 7, 8, 15, 2, 20):  # within a batch the file rotates up to twice
        fill(log, batch, written)
        written += batch
        seen += numbers(tail.read())
    log.close()
    tail.close()
    assert seen == list(range(written))


def test_a_reader_leaves_a_line_being_written_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "fusee.log"
    path.write_bytes(b'{"msg":"0000"}\n{"msg":"00')
    tail = LogTail(tmp_path)
    assert numbers(tail.read()) == [0]
    with path.open("ab") as f:
        f.write(b'01"}\n')
    assert numbers(tail.read()) == [1]
    tail.close()


def test_a_torn_last_line_is_ended_before_the_next_one(tmp_path: Path) -> None:
    (tmp_path / "fusee.log").write_bytes(b'{"msg":"0000"}\n{"msg":"00')
    log = FileRunLog(tmp_path)
    fill(log, 1, 7)
    log.close()
    assert (tmp_path / "fusee.log").read_bytes().splitlines()[-1] == b'{"id":"r","msg":"0007"}'


def test_lines_written_after_close_are_dropped(tmp_path: Path) -> None:
    log = FileRunLog(tmp_path)
    fill(log, 1)
    log.close()
    fill(log, 1, 1)
    assert numbers(read_all(tmp_path)) == [0]


def test_sizes_below_one_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        FileRunLog(tmp_path, files_kept=0)
