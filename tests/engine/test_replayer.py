"""The replay checker on each way a run can stand or end (issue 19): a run is recorded
by a real engine, written as a history document, then replayed against the code as it
is (it replays cleanly) and as a deploy changes it (it does not, and says where). No
step function runs during a replay: `CALLS` would show it."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Exhausted, RetryPolicy, Status, StepFailed, step, workflow
from fusee_runtime.replayer import Replayed, history_document, replay_document

CODE = {"v": 1}
CALLS: list[str] = []


@pytest.fixture(autouse=True)
def first_deploy() -> Any:
    CODE["v"] = 1
    CALLS.clear()
    yield
    CODE["v"] = 1


@step(name="replayer.work")
async def work(n: int) -> int:
    CALLS.append(f"work {n}")
    return n


@step(name="replayer.boom", retry=RetryPolicy(attempts=1))
async def boom() -> None:
    CALLS.append("boom")
    raise ValueError("no stock")


@step(name="replayer.undo")
async def undo() -> None:
    CALLS.append("undo")


@workflow(name="replayer.fails")
async def fails(ctx: Ctx, _: None) -> None:
    await work(1)
    if CODE["v"] == 1:
        await boom()


@workflow(name="replayer.cancelled")
async def cancelled(ctx: Ctx, _: None) -> None:
    ctx.compensate("undo", undo)
    await work(1)
    await ctx.wait_for("never")


@workflow(name="replayer.loops")
async def loops(ctx: Ctx, n: int) -> int:
    await work(n)
    if n < 2 and CODE["v"] == 1:
        await ctx.continue_as_new(n + 1)
    return n


@workflow(name="replayer.fans")
async def fans(ctx: Ctx, _: None) -> list[Any]:
    return await ctx.all([work(1), ctx.sleep("nap", 3600), ctx.wait_for("go")])


@workflow(name="replayer.child")
async def child(ctx: Ctx, _: None) -> str:
    await ctx.wait_for("go")
    return "grown"


@workflow(name="replayer.parent")
async def parent(ctx: Ctx, _: None) -> str:
    kid = await ctx.start_child(child, "kid", None)
    return await kid.result()


@step(name="replayer.flaky", retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def flaky() -> None:
    CALLS.append("flaky")
    raise RuntimeError("down")


@workflow(name="replayer.pauses")
async def pauses(ctx: Ctx, _: None) -> None:
    ctx.log.info("about to call flaky")
    await flaky()


def waits_in_all(engine: Any, id: str) -> bool:
    """The run's step in `ctx.all` is done and its two other branches wait."""
    ops = engine.runs.latest(id).ops
    return "1.2.1" in ops and "1.0.1" in ops and ops["1.0.1"].done


async def recorded(engine: Any, id: str) -> dict[str, Any]:
    return history_document(engine.runs.find_latest(id))


async def replayed(doc: dict[str, Any], deploy: int = 1) -> Replayed:
    CODE["v"] = deploy
    calls = list(CALLS)
    try:
        return await replay_document(doc)
    finally:
        assert calls == CALLS, "a step function ran during a replay"
        CODE["v"] = 1


async def test_a_failed_run_must_fail_again(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("replayer.fails", None, id="f")
        await engine.wait_until(lambda: engine.runs.latest("f").status == Status.FAILED)
        doc = await recorded(engine, "f")
    same = await replayed(doc)
    assert (same.ok, same.status, same.message) == (
        True,
        "failed",
        "replays cleanly: 2 operations, then the code raises",
    )
    fixed = await replayed(doc, deploy=2)
    assert not fixed.ok and fixed.operation == "2"
    assert fixed.message == (
        "replay mismatch at operation #2: the journal holds step 'replayer.boom', "
        "the code finished without asking for it"
    )
    assert h.id == "f"


async def test_a_cancelled_run_raises_where_the_cancel_landed_and_compensates(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.cancelled", None, id="c")
        await engine.wait_until(lambda: engine.runs.latest("c").live.parked)
        await engine.cancel("c")
        await engine.wait_until(lambda: engine.runs.latest("c").status == Status.CANCELLED)
        doc = await recorded(engine, "c")
    assert CALLS == ["work 1", "undo"]
    got = await replayed(doc)
    assert got.ok, got.message
    assert got.message == "replays cleanly: 3 operations, then the code raises"


async def test_a_run_that_continued_as_new_must_do_so_again(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.loops", 0, id="l")
        assert await engine.handle("l").result() == 2
        first = next(r for r in engine.runs.by_run_id.values() if r.input == 0)
        doc = history_document(first)
    assert doc["status"] == "continued_as_new"
    assert (await replayed(doc)).message == (
        "replays cleanly: 1 operation, then the code continues as new"
    )
    changed = await replayed(doc, deploy=2)
    assert changed.message == "replay mismatch: the run continued as new, the code returns"


async def test_a_terminated_run_is_checked_up_to_where_it_was_stopped(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.fans", None, id="t")
        await engine.wait_until(lambda: waits_in_all(engine, "t"))
        await engine.terminate("t", "enough")
        doc = await recorded(engine, "t")
    got = await replayed(doc)
    assert got.ok and got.status == "terminated"
    assert got.message.startswith("replays cleanly up to operation #1.1.1 (timer 'nap')")


async def test_concurrent_branches_replay_what_they_recorded(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.fans", None, id="a")
        # (A run waiting inside ctx.all keeps its coroutine: it never parks.)
        await engine.wait_until(lambda: waits_in_all(engine, "a"))
        doc = await recorded(engine, "a")
    got = await replayed(doc)
    assert got.ok and got.status == "running"
    assert (
        got.message
        == "replays cleanly up to operation #1.1.1 (timer 'nap'), where the journal ends"
    )


async def test_a_parent_waiting_for_its_child(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.parent", None, id="p")
        await engine.wait_until(lambda: engine.runs.latest("kid").live.parked)
        await engine.wait_until(lambda: engine.runs.latest("p").live.parked)
        waiting = await recorded(engine, "p")
        await engine.signal("kid", "go")
        assert await engine.handle("p").result() == "grown"
        done = await recorded(engine, "p")
    got = await replayed(waiting)
    assert got.ok and got.message == (
        "replays cleanly up to operation #2 (result 'kid'), where the journal ends"
    )
    assert (await replayed(done)).message == "replays cleanly: 2 operations, then the code returns"


async def test_a_paused_step_ends_the_replay_and_no_log_line_is_written(
    make_engine: Any, home: Any
) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.pauses", None, id="z")
        await engine.wait_until(lambda: engine.runs.latest("z").status == Status.PAUSED)
        doc = await recorded(engine, "z")
    log = (home / "logs" / "fusee.log").read_bytes()
    got = await replayed(doc)
    assert got.ok and got.status == "paused"
    assert got.message == (
        "replays cleanly up to operation #1 (step 'replayer.flaky'), where the journal ends"
    )
    assert (home / "logs" / "fusee.log").read_bytes() == log


async def test_a_workflow_the_app_lacks_is_reported(make_engine: Any) -> None:
    async with make_engine() as engine:
        await (await engine.start("replayer.loops", 2, id="x")).result()
        doc = await recorded(engine, "x")
    doc["workflow"] = "replayer.gone"
    for _, rec in doc["records"]:
        if rec[0] == 1:  # RunStarted names the workflow
            rec[3] = "replayer.gone"
    got = await replayed(doc)
    assert not got.ok
    assert got.message.startswith("workflow 'replayer.gone' is not in the app; known workflows:")


# -- groups that failed, cancels that never landed, ends that come too soon ---------


@step(name="replayer.fails_fast", retry=RetryPolicy(attempts=1))
async def fails_fast() -> None:
    CALLS.append("fails_fast")
    raise ValueError("out of stock")


async def checked() -> None:
    try:
        await fails_fast()
    except StepFailed:
        if CODE["v"] == 1:
            raise  # deploy 2 lets the branch go on without the stock


@workflow(name="replayer.group_fails")
async def group_fails(ctx: Ctx, order: str) -> str:
    branches = [checked(), ctx.wait_for("never")]
    if order == "wait first":
        branches.reverse()
    try:
        await ctx.all(branches)
    except StepFailed:
        if order == "caught":
            await work(2)
            return "recovered"
        raise
    return "all done"


@pytest.mark.parametrize("order", ["fail first", "wait first", "caught"])
async def test_a_group_that_failed_replays_with_its_failure(make_engine: Any, order: str) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.group_fails", order, id="g")
        closed = Status.COMPLETED if order == "caught" else Status.FAILED
        await engine.wait_until(lambda: engine.runs.latest("g").status == closed)
        doc = await recorded(engine, "g")
    got = await replayed(doc)
    assert got.ok, got.message
    # Deployed so that the branch no longer fails: the group now waits for the other
    # branch, which the run cut off when the failure ended the group.
    changed = await replayed(doc, deploy=2)
    assert not changed.ok
    if order == "caught":  # the run went on: it recorded giving the wait up
        assert changed.message == (
            f"replay mismatch at operation #1.{1 if order != 'wait first' else 0}.1: the "
            "journal gave it up (its group moved on without it), the code waits for it"
        )
    else:  # the run failed there: the wait was left as it stood
        assert "the journal holds nothing more (the run failed), the code asks for wait" in (
            changed.message
        )


@workflow(name="replayer.unencodable")
async def unencodable(ctx: Ctx, _: None) -> Any:
    await work(1)
    return {1, 2}  # a set: not JSON


async def test_a_run_whose_result_could_not_be_encoded_replays(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.unencodable", None, id="u")
        await engine.wait_until(lambda: engine.runs.latest("u").status == Status.FAILED)
        doc = await recorded(engine, "u")
    got = await replayed(doc)
    assert got.ok and got.message == "replays cleanly: 1 operation, then the code returns"


@workflow(name="replayer.shifty")
async def shifty(ctx: Ctx, _: None) -> None:
    await (work(1) if CODE["v"] == 1 else boom())
    await ctx.wait_for("go")


async def test_a_stuck_run_that_was_cancelled_replays_against_its_own_code(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.shifty", None, id="s")
        await engine.wait_until(lambda: engine.runs.latest("s").live.parked)
    CODE["v"] = 2  # a deploy that breaks it
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("s").status == Status.STUCK)
        await engine.cancel("s")  # closed as cancelled; the cancel never reached its code
        await engine.wait_until(lambda: engine.runs.latest("s").status == Status.CANCELLED)
        doc = await recorded(engine, "s")
    CODE["v"] = 1
    got = await replayed(doc)
    assert got.ok, got.message
    assert got.message.startswith("replays cleanly up to operation #2 (wait 'go')")
    broken = await replayed(doc, deploy=2)
    assert not broken.ok and broken.operation == "1"


@workflow(name="replayer.two_then_fail")
async def two_then_fail(ctx: Ctx, _: None) -> None:
    if CODE["v"] == 1:
        await work(1)
    await boom()


async def test_a_failed_run_whose_code_now_fails_sooner_does_not_replay(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("replayer.two_then_fail", None, id="t2")
        await engine.wait_until(lambda: engine.runs.latest("t2").status == Status.FAILED)
        doc = await recorded(engine, "t2")
    assert (await replayed(doc)).ok
    sooner = await replayed(doc, deploy=2)
    assert not sooner.ok
    assert sooner.message == (
        "replay mismatch at operation #1: the journal holds step 'replayer.work', "
        "the code asks for step 'replayer.boom'"
    )
