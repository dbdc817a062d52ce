"""Queues of runs (issue 40, item 2), on both stores: a run started in a queue shows as
queued, with its place, until its queue lets it in; never more runs of a queue (and of
a key) in at once than its sizes say; within a key by priority then start order, keys
taking turns; the sizes and the runs let in hold across a crash and a checkpoint; a
queued run is cancelled at once, and a continued or reset run waits in its queue again."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fusee_runtime import Ctx, Rejected, Status, step, workflow
from fusee_runtime.model.run import WaitKind

STORES = ("local", "postgresql")

IN: dict[str, int] = {}  # key: runs of it whose code is between its begin and its end
MOST: dict[str, int] = {}  # key: the most of them at once
ORDER: list[str] = []  # the ids, in the order their code began (first life)
GATE: dict[str, asyncio.Event] = {}


def _gate(id: str) -> asyncio.Event:
    return GATE.setdefault(id, asyncio.Event())


@workflow(name="q.job")
async def job(ctx: Ctx, arg: dict[str, Any]) -> str:
    key, id = arg["key"], ctx.workflow_id
    if id not in ORDER:
        ORDER.append(id)
    IN[key] = IN.get(key, 0) + 1
    MOST[key] = max(MOST.get(key, 0), IN[key])
    try:
        if arg.get("wait"):
            await _gate(id).wait()
        return id
    finally:
        IN[key] -= 1


@workflow(name="q.declared", queue="declared")
async def declared(ctx: Ctx, arg: None) -> str:
    return ctx.workflow_id


@workflow(name="q.continues", queue="loop")
async def continues(ctx: Ctx, n: int) -> int:
    if n > 0:
        await ctx.continue_as_new(n - 1)
    return n


@pytest.fixture(autouse=True)
def _clean() -> Any:
    IN.clear()
    MOST.clear()
    ORDER.clear()
    GATE.clear()
    yield


def _status(engine: Any, id: str) -> Status:
    return engine.runs.latest(id).status


async def test_a_queue_lets_in_its_concurrency_and_the_rest_wait_in_order(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.queue("sync", concurrency=2)
        ids = [f"r{i}" for i in range(5)]
        handles = [
            await engine.start(job, {"key": "all", "wait": True}, id=id, queue="sync") for id in ids
        ]
        await engine.wait_until(lambda: len(ORDER) == 2)
        assert ORDER == ["r0", "r1"]
        assert [_status(engine, id) for id in ids[2:]] == [Status.QUEUED] * 3
        (wait,) = (await handles[3].describe()).waiting
        assert (wait.kind, wait.name, wait.detail) == (WaitKind.QUEUE, "sync", "2nd of 3")
        (info,) = engine.queues()
        assert (info.name, info.concurrency, info.per_key, info.running, info.queued) == (
            "sync",
            2,
            None,
            2,
            3,
        )
        for id in ids:
            _gate(id).set()
        assert [await h.result() for h in handles] == ids
        assert ids == ORDER and MOST["all"] == 2


async def test_per_key_one_at_a_time_keys_take_turns_and_priority_goes_first(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await engine.queue("tenants", concurrency=None, per_key=1)
        handles = []
        for i in range(3):
            for key in ("a", "b"):
                id = f"{key}{i}"
                arg = {"key": key, "wait": True}
                handles.append(await engine.start(job, arg, id=id, queue="tenants", queue_key=key))
        urgent = await engine.start(
            job,
            {"key": "a", "wait": True},
            id="a-urgent",
            queue="tenants",
            queue_key="a",
            priority=5,
        )
        await engine.wait_until(lambda: len(ORDER) == 2)
        assert sorted(ORDER) == ["a0", "b0"]
        (wait,) = (await urgent.describe()).waiting
        assert wait.detail == "1st of 3 in key 'a'"
        for id in ["a0", "a-urgent", "a1", "a2", "b0", "b1", "b2"]:
            _gate(id).set()
            await engine.wait_until(lambda id=id: not engine.runs.latest(id).is_open)
        await asyncio.gather(*(h.result() for h in [*handles, urgent]))
        assert [id for id in ORDER if id.startswith("a")] == ["a0", "a-urgent", "a1", "a2"]
        assert [id for id in ORDER if id.startswith("b")] == ["b0", "b1", "b2"]
        assert MOST == {"a": 1, "b": 1}


async def test_a_queue_never_set_runs_one_at_a_time_and_a_workflow_declares_its_queue(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        first = await engine.start(job, {"key": "k", "wait": True}, id="one", queue="unset")
        second = await engine.start(job, {"key": "k"}, id="two", queue="unset")
        await engine.wait_until(lambda: ORDER == ["one"])
        assert _status(engine, "two") == Status.QUEUED
        _gate("one").set()
        assert [await first.result(), await second.result()] == ["one", "two"]
        assert MOST["k"] == 1
        await engine.queue("declared", concurrency=0)  # 0: none goes in
        held = await engine.start(declared, None, id="d1")
        assert engine.runs.latest("d1").queue == {"name": "declared", "key": None, "priority": 0}
        assert _status(engine, "d1") == Status.QUEUED
        await engine.queue("declared", concurrency=1)
        assert await held.result() == "d1"


async def test_queued_runs_and_sizes_hold_across_a_crash_and_a_checkpoint(
    make_engine: Any,
) -> None:
    engine = make_engine()
    await engine.open()
    await engine.queue("crash", concurrency=1)
    for i in range(3):
        await engine.start(job, {"key": "c", "wait": True}, id=f"c{i}", queue="crash")
    await engine.wait_until(lambda: ORDER == ["c0"])
    await engine.checkpoint()
    await engine.start(job, {"key": "c", "wait": True}, id="c3", queue="crash")
    await engine.close(crash=True)
    ORDER.clear()
    IN.clear()
    async with make_engine() as engine:
        await engine.wait_until(lambda: ORDER == ["c0"])  # the run let in before, again
        assert [_status(engine, f"c{i}") for i in (1, 2, 3)] == [Status.QUEUED] * 3
        (info,) = engine.queues()
        assert (info.concurrency, info.running, info.queued, info.set) == (1, 1, 3, True)
        for i in range(4):
            _gate(f"c{i}").set()
        await engine.wait_until(lambda: all(not r.is_open for r in engine.runs.open_runs()))
        assert ORDER == ["c0", "c1", "c2", "c3"] and MOST["c"] == 1


async def test_a_queued_run_cancels_at_once_and_takes_no_handler_call(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.start(job, {"key": "x", "wait": True}, id="x0", queue="x")
        queued = await engine.start(job, {"key": "x"}, id="x1", queue="x")
        await engine.wait_until(lambda: ORDER == ["x0"])
        with pytest.raises(Rejected, match="waits in its queue"):
            await engine.query("x1", "anything")
        await queued.cancel()
        assert (await queued.describe()).status == Status.CANCELLED
        assert ORDER == ["x0"] and engine.queues()[0].queued == 0
        with pytest.raises(Rejected, match="go with a queue"):
            await engine.start(job, {"key": "x"}, queue_key="k")
        with pytest.raises(Rejected, match="priority is a whole number"):
            await engine.start(job, {"key": "x"}, queue="x", priority=2**40)
        with pytest.raises(Rejected, match="no start_delay, start_at, queue or throttle"):
            await engine.start(job, {"key": "x"}, id="x9", queue="x", update=("u", 1))
        with pytest.raises(Rejected, match="per_key is None or a whole number"):
            await engine.queue("x", per_key=-1)
        _gate("x0").set()


async def test_a_run_continued_as_new_waits_in_its_queue_again(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start(continues, 2, id="loop-1")
        assert await h.result() == 0
        run = engine.runs.latest("loop-1")
        assert run.queue == {"name": "loop", "key": None, "priority": 0} and run.admitted
        history = await engine.history("loop-1")
        assert [e["type"] for e in history].count("RunAdmitted") == 3  # one a run: 2, 1, 0


async def test_a_debounced_or_delayed_run_waits_in_its_queue_once_it_begins(
    make_engine: Any, clock: Any
) -> None:
    async with make_engine() as engine:
        await engine.queue("declared", concurrency=0)
        burst = [await engine.start(declared, None, debounce=2, debounce_key="k") for _ in "ab"]
        later = await engine.start(declared, None, id="later", start_delay=5)
        assert {h.run_id for h in burst} == {burst[0].run_id}
        assert (await burst[0].describe()).status == Status.SCHEDULED
        clock.advance(5)
        await engine.wait_until(lambda: _status(engine, "later") == Status.QUEUED)
        assert (await burst[0].describe()).status == Status.QUEUED
        await engine.queue("declared", concurrency=1)
        assert [await burst[0].result(), await later.result()] == [burst[0].id, "later"]


async def test_a_run_let_in_keeps_its_place_when_another_engine_takes_the_home_over(
    make_engine: Any,
) -> None:
    """A graceful close, then another engine's open (on PostgreSQL, a takeover of the
    journal): the run let in goes on first; the ones waiting stay queued, in order."""
    engine = make_engine()
    await engine.open()
    await engine.queue("handover", per_key=1, concurrency=None)
    for i in range(3):
        arg = {"key": "h", "wait": True}
        await engine.start(job, arg, id=f"h{i}", queue="handover", queue_key="h")
    await engine.wait_until(lambda: ORDER == ["h0"])
    await engine.close()
    ORDER.clear()
    IN.clear()
    async with make_engine() as engine:
        await engine.wait_until(lambda: ORDER == ["h0"])
        run = engine.runs.latest("h0")
        assert run.admitted and (await engine.handle("h1").describe()).status == Status.QUEUED
        for i in range(3):
            _gate(f"h{i}").set()
        assert [await engine.handle(f"h{i}").result() for i in range(3)] == ["h0", "h1", "h2"]
        assert ORDER == ["h0", "h1", "h2"] and MOST["h"] == 1


EFFECTS: list[tuple[str, int]] = []


@step(name="q.charge")
async def charge(x: int) -> str:
    EFFECTS.append(("charge", x))
    return "c"


@step(name="q.refund")
async def refund(x: int) -> None:
    EFFECTS.append(("refund", x))


@workflow(name="q.order")
async def order(ctx: Ctx, x: int) -> str:
    await charge(x)
    ctx.compensate("refund", refund, x)
    await ctx.wait_for("go")
    return "done"


async def test_a_reset_run_cancelled_in_its_queue_runs_its_compensations(
    make_engine: Any,
) -> None:
    """Review finding: a reset run keeps the journal before its point, then waits in its
    queue again; cancelled there, it is let in to take the cancel (its charge has a
    refund to run), rather than closed at once as a run whose code never ran is."""
    EFFECTS.clear()
    async with make_engine() as engine:
        await engine.queue("orders", concurrency=1)
        h = await engine.start(order, 1, id="R", queue="orders")
        await engine.wait_until(lambda: ("charge", 1) in EFFECTS)
        await engine.start(job, {"key": "o", "wait": True}, id="H", queue="orders")
        again = await h.reset(to=2)  # keeps the charge (#1); waits behind H
        assert (await again.describe()).status == Status.QUEUED
        await engine.reset("R", to=2)  # its journal holds work: it may be reset again
        await engine.handle("R").cancel("the customer gave up")
        await engine.wait_until(lambda: _status(engine, "R") == Status.CANCELLED)
        assert EFFECTS == [("charge", 1), ("refund", 1)]
        _gate("H").set()
        assert await engine.handle("H").result() == "H"


async def test_a_size_not_given_keeps_its_value(make_engine: Any) -> None:
    """Review (faces): `queue("q", per_key=1)` does not lift the queue's concurrency to
    any number; each size given changes that one alone."""
    async with make_engine() as engine:
        await engine.queue("kept", per_key=1)
        assert engine.driver.limits.queues.size("kept") == (1, 1)  # (never set: 1 at once)
        await engine.queue("kept", concurrency=5)
        await engine.queue("kept", concurrency=None)
        assert engine.driver.limits.queues.size("kept") == (None, 1)
