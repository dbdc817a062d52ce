"""Child workflows, and signals and cancels sent from a workflow (issue 18).

Temporal's child-workflow scenarios: a child's result, a child's failure
caught by the parent, signalling a child, cancelling a child, a child's id
used again once its run closed; then `parent_close`, timeouts, sends to
other workflows, replay after a reopen, a fan-out of 1,000 children and the
errors bad arguments get. Crashes are in tests/crash/test_family_crashes.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from fusee_runtime import (
    Cancelled,
    ChildFailed,
    ChildHandle,
    CodecError,
    Ctx,
    NotFound,
    Rejected,
    Status,
    step,
    workflow,
)
from fusee_runtime.errors import IdConflict

CALLS: list[str] = []


@dataclass
class Parcel:
    id: str
    grams: int


@step(name="children.weigh")
async def weigh(parcel: Parcel) -> int:
    CALLS.append(parcel.id)
    return parcel.grams


@workflow(name="children.ship")
async def ship(ctx: Ctx, parcel: Parcel) -> Parcel:
    return Parcel(parcel.id, await weigh(parcel))


@workflow(name="children.fail")
async def fail(ctx: Ctx, why: str) -> None:
    raise RuntimeError(why)


@workflow(name="children.listen")
async def listen(ctx: Ctx, _: None) -> Any:
    return await ctx.wait_for("note")


@workflow(name="children.cleanup")
async def cleanup(ctx: Ctx, _: None) -> None:
    ctx.compensate("children.undo", lambda: CALLS.append("undone"))
    await ctx.wait_for("never")


@workflow(name="children.parent")
async def parent(ctx: Ctx, plan: dict[str, Any]) -> Any:
    """Does what `plan["do"]` names, so that each test drives one scenario."""
    do = plan["do"]
    if do == "result":
        return await ctx.child(ship, "p-parcel", Parcel("a", 250))
    if do == "catch":
        try:
            await ctx.child("children.fail", "p-broken", "out of stock")
        except ChildFailed as e:
            return {"status": e.status, "id": e.id, "message": e.failure.message}
    if do == "signal":
        h = await ctx.start_child(listen, "p-listener")
        await h.signal("note", {"hello": 1})
        return await h.result()
    if do == "cancel":
        h = await ctx.start_child(cleanup, "p-cleanup")
        await h.cancel("not needed")
        try:
            await h.result()
        except ChildFailed as e:
            return e.status
    if do == "reuse":
        first = await ctx.child(ship, "p-again", Parcel("one", 1))
        second = await ctx.child(ship, "p-again", Parcel("two", 2))
        return [first.grams, second.grams]
    if do == "timeout":
        try:
            await ctx.child(listen, "p-slow", timeout=plan["timeout"])
        except ChildFailed as e:
            return e.status
    if do == "start":
        h = await ctx.start_child(
            listen, plan["child"], parent_close=plan.get("close", "terminate")
        )
        assert isinstance(h, ChildHandle)
        await ctx.wait_for("finish")
        return "parent done"
    if do == "await":
        return await ctx.child(listen, plan["child"])
    if do == "send":
        await ctx.signal_workflow(plan["to"], "note", plan.get("value"))
        return "sent"
    if do == "cancel-other":
        await ctx.cancel_workflow(plan["to"], "from a workflow")
        return "cancelled"
    if do == "fanout":
        kids = [Parcel(f"f{i}", i) for i in range(plan["n"])]
        handles = await ctx.all(
            [ctx.start_child(ship, f"{ctx.workflow_id}-{p.id}", p) for p in kids]
        )
        parcels = await ctx.all([h.result() for h in handles])
        return sum(p.grams for p in parcels)
    raise AssertionError(do)


async def started(engine: Any, do: str, id: str = "p-1", **plan: Any) -> Any:
    return await engine.start("children.parent", {"do": do, **plan}, id=id)


async def test_a_child_result_comes_back_typed(make_engine: Any) -> None:
    CALLS.clear()
    async with make_engine() as engine:
        h = await started(engine, "result")
        assert await h.result(timeout=10) == {"id": "a", "grams": 250}
        child = await engine.handle("p-parcel").describe()
        assert child.status == Status.COMPLETED
        assert child.parent == ("p-1", h.run_id)
        assert (await h.describe()).parent is None
    assert CALLS == ["a"]


async def test_a_childs_failure_is_caught_by_the_parent(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "catch")
        got = await h.result(timeout=10)
        assert got == {"status": "failed", "id": "p-broken", "message": "out of stock"}


async def test_a_parent_signals_its_child(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "signal")
        assert await h.result(timeout=10) == {"hello": 1}
        recs = [r for r in await h.history() if r["type"] == "SignalSent"]
        assert [(r["workflow_id"], r["name"], r["error"]) for r in recs] == [
            ("p-listener", "note", None)
        ]


async def test_a_parent_cancels_its_child_whose_compensations_run(make_engine: Any) -> None:
    CALLS.clear()
    async with make_engine() as engine:
        h = await started(engine, "cancel")
        assert await h.result(timeout=10) == "cancelled"
        assert (await engine.handle("p-cleanup").describe()).status == Status.CANCELLED
    assert CALLS == ["undone"]


async def test_a_childs_id_is_used_again_once_its_run_closed(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "reuse")
        assert await h.result(timeout=10) == [1, 2]
        runs = [i for i in await engine.list() if i.id == "p-again"]
        assert len(runs) == 2 and {i.parent for i in runs} == {("p-1", h.run_id)}


async def test_a_child_id_in_use_by_an_open_run_is_refused_and_replayed(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.start("children.listen", None, id="busy")
        h = await started(engine, "start", child="busy")
        with pytest.raises(Exception, match="in use by an open run") as got:
            await h.result(timeout=10)
        assert "IdConflict" in str(got.value)
        recs = [r for r in await h.history() if r["type"] == "ChildStarted"]
        assert recs[0]["child_run_id"] is None and recs[0]["error"]["kind"] == "IdConflict"
    assert issubclass(IdConflict, Rejected)


async def test_a_child_past_its_timeout_closes_timed_out(make_engine: Any, clock: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "timeout", timeout=30)
        await engine.wait_until(lambda: engine.runs.latest("p-slow").live.parked)
        clock.advance(31)
        assert await h.result(timeout=10) == "timed_out"
        assert (await engine.handle("p-slow").describe()).status == Status.TIMED_OUT


@pytest.mark.parametrize(
    ("close", "status"),
    [
        ("terminate", Status.TERMINATED),
        ("cancel", Status.CANCELLED),
        ("abandon", Status.PARKED),
    ],
)
async def test_parent_close_applies_when_the_parent_completes(
    make_engine: Any, close: str, status: Status
) -> None:
    async with make_engine() as engine:
        h = await started(engine, "start", child="kid", close=close)
        await engine.wait_until(lambda: engine.runs.latest("kid").live.parked)
        await h.signal("finish")
        assert await h.result(timeout=10) == "parent done"
        await engine.wait_until(lambda: engine.runs.latest("kid").status == status)
        kid = await engine.handle("kid").describe()
        assert kid.status == status
        if close != "abandon":
            assert "its parent 'p-1' closed (completed)" in (kid.error or "")


async def test_terminating_a_parent_terminates_its_children(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "start", child="kid-t")
        await engine.wait_until(lambda: engine.runs.latest("kid-t").live.parked)
        await engine.terminate("p-1", "operator said so")
        await engine.wait_until(lambda: not engine.runs.latest("kid-t").status.is_open)
        assert (await engine.handle("kid-t").describe()).status == Status.TERMINATED
        assert (await h.describe()).status == Status.TERMINATED


async def test_cancelling_a_parent_cancels_its_wait_and_then_its_child(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        h = await started(engine, "result", id="p-c")
        # The child's step runs at once; wait for the parent to be waiting on it.
        await engine.wait_until(lambda: engine.runs.latest("p-c").pending != {})
        await engine.cancel("p-c", "changed my mind")
        with pytest.raises(Cancelled):
            await h.result(timeout=10)
        await engine.wait_until(lambda: not engine.runs.latest("p-parcel").status.is_open)


async def test_signal_and_cancel_another_workflow_once_and_replay(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start("children.listen", None, id="other")
        sender = await started(engine, "send", id="s-1", to="other", value=[1, 2])
        assert await sender.result(timeout=10) == "sent"
        assert await engine.handle("other").result(timeout=10) == [1, 2]
        victim = await engine.start("children.cleanup", None, id="victim")
        canceller = await started(engine, "cancel-other", id="s-2", to="victim")
        assert await canceller.result(timeout=10) == "cancelled"
        # The cancel is recorded; the victim closes once its compensation has run.
        await engine.wait_until(lambda: not engine.runs.latest("victim").status.is_open)
        assert (await victim.describe()).status == Status.CANCELLED
    # Reopened, the senders' replays send nothing again.
    async with make_engine() as engine:
        recs = await engine.handle("other").history()
        assert len([r for r in recs if r["type"] == "SignalReceived"]) == 1


async def test_an_unknown_target_is_a_recorded_not_found(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await started(engine, "send", to="nobody")
        with pytest.raises(Exception, match="NotFound: no run with id 'nobody'"):
            await h.result(timeout=10)
        (sent,) = [r for r in await h.history() if r["type"] == "SignalSent"]
        assert sent["error"] == {"kind": "NotFound", "message": "no run with id 'nobody'"}


async def test_a_reopened_parent_finds_its_children_and_starts_none_again(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await started(engine, "start", child="kid-r")
        await engine.wait_until(lambda: engine.runs.latest("p-1").live.parked)
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("p-1").live.parked)
        await engine.signal("kid-r", "note", "ok")
        await engine.signal("p-1", "finish")
        assert await engine.handle("p-1").result(timeout=10) == "parent done"
        starts = [i for i in await engine.list() if i.id == "kid-r"]
        assert len(starts) == 1


async def test_a_thousand_children_share_their_fdatasyncs(make_engine: Any) -> None:
    n = 1000
    async with make_engine() as engine:
        before = engine.durability.counters()["syncs"]
        h = await started(engine, "fanout", id="fan", n=n)
        assert await h.result(timeout=120) == sum(range(n))
        syncs = engine.durability.counters()["syncs"] - before
        # Each child is a start, a step and a close, and the parent learns of each
        # close: 4,000 records, and each child waits for the disk at least twice
        # (its start, its step). Synced one by one that is over 2,000 fdatasyncs;
        # shared, the writer syncs back to back while the children run, so the
        # count is the run's CPU time over the disk's latency (4 with the bench's
        # 64 MiB segments, 100 to 250 here with 8 MiB ones, whose syncs are faster).
        assert syncs < n / 2, syncs
        assert len([i for i in await engine.list(limit=2000) if i.parent]) == n


@workflow(name="children.misuse")
async def misuse(ctx: Ctx, how: str) -> str:
    try:
        if how == "unknown":
            await ctx.child("children.nope", "x")
        elif how == "self":
            await ctx.child(ship, ctx.workflow_id, Parcel("a", 1))
        elif how == "policy":
            await ctx.child(ship, "x", Parcel("a", 1), parent_close="explode")
        elif how == "input":
            await ctx.child(ship, "x", object())
        elif how == "timeout":
            await ctx.child(ship, "x", Parcel("a", 1), timeout=-1)
    except (NotFound, Rejected, CodecError) as e:
        return f"{type(e).__name__}: {e}"
    return "accepted"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("unknown", "NotFound: unknown workflow 'children.nope'; known workflows: "),
        ("self", "Rejected: a child's id must differ from its parent's: both are 'm-self'"),
        ("policy", "Rejected: parent_close is one of 'terminate', 'cancel', 'abandon', not"),
        ("input", "CodecError: the input of child workflow 'children.ship'"),
        ("timeout", "Rejected: a child's timeout must be positive, not -1"),
    ],
)
async def test_bad_arguments_are_clear_errors_and_record_nothing(
    make_engine: Any, how: str, said: str
) -> None:
    async with make_engine() as engine:
        h = await engine.start("children.misuse", how, id=f"m-{how}")
        assert (await h.result(timeout=10)).startswith(said)
        kinds = {r["type"] for r in await h.history()}
        assert kinds == {"RunStarted", "RunCompleted"}


@workflow(name="children.renewing")
async def renewing(ctx: Ctx, turns: int) -> Any:
    if turns:
        await ctx.continue_as_new(turns - 1)
    return await ctx.wait_for("note")


@workflow(name="children.renewing_parent")
async def renewing_parent(ctx: Ctx, _: None) -> Any:
    h = await ctx.start_child(renewing, "renewer", 2)
    await ctx.wait_for("now")
    await h.signal("note", "to the newest run")
    return await h.result()


async def test_a_child_that_continues_as_new_is_still_the_handles(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("children.renewing_parent", None, id="rp")
        await engine.wait_until(lambda: engine.runs.latest("renewer").live.parked)
        first = [i for i in await engine.list() if i.id == "renewer"]
        assert len(first) == 3 and {i.parent for i in first} == {("rp", h.run_id)}
        await h.signal("now")
        assert await h.result(timeout=10) == "to the newest run"


# -- a parent's cancel, and races, while a child runs --------------------------------------

GATE: dict[str, asyncio.Event] = {}


@step(name="children.after")
def after() -> str:  # a thread's step: once started, a cancel cannot stop it
    CALLS.append("after")
    return "after"


@workflow(name="children.racer")
async def racer(ctx: Ctx, _: None) -> Any:
    async def branch() -> Any:
        got = await ctx.child(listen, "slow-kid", parent_close="abandon")
        CALLS.append("past the wait")  # never runs: this branch loses, live and on replay
        await after()
        return got

    won = await ctx.race([branch(), ctx.wait_for("quick")])
    return [*won, await ctx.wait_for("go")]


async def test_a_race_branch_that_lost_while_a_child_ran_stays_given_up_on(
    make_engine: Any,
) -> None:
    CALLS.clear()
    async with make_engine() as engine:
        h = await engine.start("children.racer", None, id="racer")
        await engine.wait_until(lambda: engine.runs.latest("slow-kid").live.parked)
        await h.signal("quick", "q")
        parent = engine.runs.latest("racer")
        await engine.wait_until(lambda: parent.live.parked and parent.pending.get("2") is not None)
        # The child closes: the parent is woken, replays, and its losing branch
        # (whose wait for the child was given up on) must not go on to `after`.
        await engine.signal("slow-kid", "note", "late")
        await engine.wait_until(lambda: parent.ops["1.0.1"].done and parent.live.parked)
        await h.signal("go", "g")
        assert await h.result(timeout=10) == [1, "q", "g"]
    assert CALLS == []


@step(name="children.held")
async def held() -> str:
    GATE["in"].set()
    await GATE["step"].wait()
    return "never"


@workflow(name="children.busy")
async def busy(ctx: Ctx, _: None) -> str:
    await ctx.start_child(listen, "busy-kid")  # not awaited
    return await held()


async def test_cancelling_a_parent_in_a_step_with_a_child_it_does_not_await(
    make_engine: Any,
) -> None:
    GATE["step"], GATE["in"] = asyncio.Event(), asyncio.Event()
    async with make_engine() as engine:
        h = await engine.start("children.busy", None, id="busy")
        await GATE["in"].wait()  # the step runs; the child waits, not awaited
        await engine.cancel("busy", "stop")
        with pytest.raises(Cancelled):
            await h.result(timeout=10)
        await engine.wait_until(lambda: not engine.runs.latest("busy-kid").status.is_open)
        assert (await engine.handle("busy-kid").describe()).status == Status.TERMINATED


@workflow(name="children.napper")
async def napper(ctx: Ctx, _: None) -> str:
    await ctx.wait_for("begin")
    await ctx.start_child(listen, "nap-kid", parent_close="abandon")
    await ctx.sleep("nap", 3600)
    return "finished normally"


async def test_a_cancel_while_a_childs_start_is_on_its_way_to_disk_lands_next(
    make_engine: Any, holding_storage: Any
) -> None:
    async with make_engine(storage=holding_storage) as engine:
        h = await engine.start("children.napper", None, id="napper")
        parent = engine.runs.latest("napper")
        await engine.wait_until(lambda: parent.live.parked)
        holding_storage.armed.set()  # from here on the disk holds every write
        signalling = asyncio.ensure_future(h.signal("begin"))
        # The child's start is appended; the parent's code waits for it on the disk.
        # (Nothing becomes durable meanwhile, so `wait_until` would not look again:
        # the loop runs what is ready until it is there.)
        await _ready_until(lambda: "2" in parent.ops)
        cancelling = asyncio.ensure_future(engine.cancel("napper", "stop"))
        await _ready_until(lambda: parent.cancel_reason is not None)
        holding_storage.armed.clear()
        holding_storage.release.set()
        await signalling
        await cancelling
        with pytest.raises(Cancelled):
            await h.result(timeout=10)
        kinds = [r["type"] for r in await h.history()]
        assert "TimerStarted" not in kinds  # the cancel landed at the sleep, before it began
        assert kinds[-1] == "RunCancelled"


async def _ready_until(predicate: Any) -> None:
    """Lets the loop run what is ready until `predicate()` holds (no clock involved)."""
    for _ in range(100_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the engine never got there")


@pytest.mark.parametrize("close", ["terminate", "cancel", "abandon"])
async def test_a_reset_run_keeps_the_children_started_before_its_reset_point(
    make_engine: Any, close: str
) -> None:
    async with make_engine() as engine:
        await started(engine, "start", id="rs", child="rs-kid", close=close)
        await engine.wait_until(lambda: engine.runs.latest("rs").live.parked)
        kid = engine.runs.latest("rs-kid")
        new = await engine.reset("rs", 2)  # keeps operation 1, the child's start
        assert kid.is_open and kid.cancel_reason is None  # the reset closed no child
        await engine.wait_until(lambda: engine.runs.latest("rs").live.parked)
        assert len([i for i in await engine.list() if i.id == "rs-kid"]) == 1
        await engine.signal("rs", "finish")
        assert await new.result(timeout=10) == "parent done"
        # The reset run's own close applies the child's parent_close.
        if close != "abandon":
            await engine.wait_until(lambda: not kid.is_open)
            assert "its parent 'rs' closed (completed)" in (kid.error or "")
        else:
            assert kid.is_open


async def test_a_reset_run_gets_the_result_of_a_child_it_kept(make_engine: Any) -> None:
    async with make_engine() as engine:
        await started(engine, "await", id="rr", child="rr-kid")
        await engine.wait_until(lambda: engine.runs.latest("rr").live.parked)
        # ctx.child: the child's start (1), then the wait for its result (2).
        new = await engine.reset("rr", 2)
        await engine.wait_until(lambda: engine.runs.latest("rr").live.parked)
        await engine.signal("rr-kid", "note", "kept")
        assert await new.result(timeout=10) == "kept"
        assert len([i for i in await engine.list() if i.id == "rr-kid"]) == 1
