"""Rates over time (issue 40, item 1), on both stores and a fake clock: at most n attempts
of a step start in any window of `per`, across every run of a journal, a key splitting
the rate; a waiting step shows what it waits for; the slots taken before a crash count
after it, whether the journal or a checkpoint holds them."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, Rate, Rejected, RetryPolicy, Status, step, workflow
from fusee_runtime.clock import FakeClock
from fusee_runtime.model.run import WaitKind

STORES = ("local", "postgresql")

CLOCK: list[FakeClock] = []
STARTED: list[tuple[str, float]] = []  # (label, when) of each attempt, as it starts


@step(rate=Rate(3, per=10))
async def call_api(i: int) -> int:
    STARTED.append(("call_api", CLOCK[0].now()))
    return i


@step(rate=Rate(2, per=5, name="shared", key=lambda tenant, i: tenant))
async def per_tenant(tenant: str, i: int) -> int:
    STARTED.append((f"shared/{tenant}", CLOCK[0].now()))
    return i


@step(rate=Rate(5, per=60, name="svc"))
async def svc_slow(i: int) -> int:
    STARTED.append(("slow", CLOCK[0].now()))
    return i


@step(rate=Rate(1, per=1, name="svc"))
async def svc_fast(i: int) -> int:
    STARTED.append(("fast", CLOCK[0].now()))
    return i


@step(limit="rt.db", rate=Rate(1, per=60, key=lambda tenant, i=0: tenant))
async def db_call(tenant: str, i: int = 0) -> str:
    STARTED.append((tenant, CLOCK[0].now()))
    return tenant


@workflow(name="rt.shared")
async def shared(ctx: Ctx, which: str) -> list[int]:
    fn = svc_slow if which == "slow" else svc_fast
    return [await fn(i) for i in range(5 if which == "slow" else 1)]


@workflow(name="rt.db")
async def db_twice(ctx: Ctx, tenant: str) -> list[str]:
    return [await db_call(tenant=tenant, i=0), await db_call(tenant=tenant, i=1)]


@workflow(name="rt.burst")
async def burst(ctx: Ctx, n: int) -> list[int]:
    return [await call_api(i) for i in range(n)]


@workflow(name="rt.tenant")
async def tenant(ctx: Ctx, who: str) -> list[int]:
    return list(await ctx.all([per_tenant(who, i) for i in range(4)]))


def _most_in_a_window(times: list[float], per: float) -> int:
    """The most of `times` in any window of `per` seconds."""
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + per) for start in times)


@pytest.fixture(autouse=True)
def _clock(clock: FakeClock) -> Any:
    CLOCK[:] = [clock]
    STARTED.clear()
    yield
    CLOCK.clear()


async def _until_waiting(engine: Any, ids: list[str], started: int) -> None:
    """Returns once `started` attempts began and the open ones of `ids` all wait for a
    slot (or are closed)."""

    def settled() -> bool:
        runs = [engine.runs.latest(id) for id in ids]
        waiting = all(
            not r.is_open or any(w.kind == WaitKind.RATE for w in r.info().waiting) for r in runs
        )
        return len(STARTED) >= started and waiting

    await engine.wait_until(settled)


async def test_a_rate_holds_across_runs_and_keys_split_it(make_engine: Any) -> None:
    """The clock moves by hand, a window at a time: each window lets exactly its slots
    in, whatever runs ask; a key's slots are its own."""
    async with make_engine() as engine:
        ids = [f"b-{i}" for i in range(4)]
        handles = [await engine.start(burst, 3, id=id) for id in ids]
        for window in range(4):  # 12 attempts, 3 a window of 10 s
            await _until_waiting(engine, ids, 3 * (window + 1))
            assert len(STARTED) == 3 * (window + 1)  # no 4th in this window
            CLOCK[0].advance(10)
        assert [await h.result() for h in handles] == [[0, 1, 2]] * 4
        times = [at for _, at in STARTED]
        assert [times.count(t) for t in sorted(set(times))] == [3, 3, 3, 3]
        STARTED.clear()
        keyed = [await engine.start(tenant, who, id=f"t-{who}") for who in ("x", "y")]
        await _until_waiting(engine, ["t-x", "t-y"], 4)  # 2 slots per 5 s, each key
        assert sorted(label for label, _ in STARTED) == ["shared/x"] * 2 + ["shared/y"] * 2
        CLOCK[0].advance(5)
        assert [await h.result() for h in keyed] == [[0, 1, 2, 3]] * 2
        assert len(STARTED) == 8


async def test_a_waiting_step_says_what_it_waits_for(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start(burst, 4, id="w-1")
        await engine.wait_until(
            lambda: any(w.kind == WaitKind.RATE for w in engine.runs.latest("w-1").info().waiting)
        )
        (wait,) = (await h.describe()).waiting
        assert (wait.kind, wait.name, wait.detail) == (WaitKind.RATE, "call_api", "call_api")
        assert wait.until is not None and wait.until.timestamp() == CLOCK[0].now() + 10
        assert len(STARTED) == 3


async def test_rates_show_in_limits_and_metrics(make_engine: Any) -> None:
    from fusee_runtime.control.api import Control
    from fusee_runtime.control.metrics import registry, render

    async with make_engine() as engine:
        await engine.start(burst, 4, id="m-1")
        await _until_waiting(engine, ["m-1"], 3)
        (info,) = engine.rates()
        assert (info.name, info.permits, info.per_s, info.taken, info.waiting) == (
            "call_api",
            3,
            10.0,
            3,
            1,
        )
        assert info.next_at == CLOCK[0].now() + 10
        rows = await Control(engine).limits()
        assert [r["name"] for r in rows if "per_s" in r] == ["call_api"]
        scraped = render(registry(lambda: {0: engine})).decode()
        assert 'fusee_rate_taken{rate="call_api"} 3.0' in scraped
        assert 'fusee_rate_waiting{rate="call_api"} 1.0' in scraped


@pytest.mark.parametrize("checkpointed", [False, True])
async def test_slots_taken_before_a_crash_count_after_it(
    make_engine: Any, checkpointed: bool
) -> None:
    engine = make_engine()
    await engine.open()
    first = CLOCK[0].now()
    assert await (await engine.start(burst, 3, id="before")).result() == [0, 1, 2]
    if checkpointed:
        await engine.checkpoint()  # (the slots then come from the checkpoint)
    await engine.close(crash=True)
    CLOCK[0].advance(4)
    async with make_engine() as engine:
        after = await engine.start(burst, 1, id="after")
        await _until_waiting(engine, ["after"], 3)  # the 3 slots before the crash count
        (wait,) = (await after.describe()).waiting
        assert wait.until is not None and wait.until.timestamp() == first + 10
        CLOCK[0].advance(6)
        assert await after.result() == [0]
    assert STARTED[3][1] == first + 10


async def test_a_rate_set_at_run_time_lets_waiters_in_and_holds_after_a_restart(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        first = CLOCK[0].now()
        h = await engine.start(burst, 5, id="s-1")
        await _until_waiting(engine, ["s-1"], 3)
        await engine.rate("call_api", 5, per=10)  # grown: the one waiting goes in at once
        assert await h.result() == [0, 1, 2, 3, 4]
        assert [at for _, at in STARTED] == [first] * 5
        with pytest.raises(Rejected, match="may not contain '/'"):
            await engine.rate("a/b", 1, per=1)
        with pytest.raises(Rejected, match="permits is a whole number from 1"):
            await engine.rate("call_api", 0, per=1)
        with pytest.raises(Rejected, match="per is a positive duration"):
            await engine.rate("call_api", 1, per=-1)
    async with make_engine() as engine:  # the size holds, and so do the 5 slots taken
        (info,) = engine.rates()
        assert (info.name, info.permits, info.per_s, info.taken, info.set) == (
            "call_api",
            5,
            10.0,
            5,
            True,
        )
        h = await engine.start(burst, 1, id="s-2")
        await _until_waiting(engine, ["s-2"], 5)
        CLOCK[0].advance(10)
        assert await h.result() == [0]
        assert STARTED[5][1] == first + 10


async def test_rates_that_share_a_name_each_hold_over_all_its_slots(make_engine: Any) -> None:
    """Review finding: two steps share a rate's name with sizes of their own (5 a minute,
    1 a second). Each takes a slot by its own size over every slot of the name: the
    smaller no longer trims away the slots the bigger counts."""
    async with make_engine() as engine:
        first = CLOCK[0].now()
        assert await (await engine.start(shared, "slow", id="sl-1")).result() == [0, 1, 2, 3, 4]
        CLOCK[0].advance(1)
        assert await (await engine.start(shared, "fast", id="fa-1")).result() == [0]
        again = await engine.start(shared, "slow", id="sl-2")
        await _until_waiting(engine, ["sl-2"], 6)  # 6 slots in a minute: 5 a minute waits
        CLOCK[0].advance(59)
        await _until_waiting(engine, ["sl-2"], 10)  # the 5 of the first second freed: 4
        CLOCK[0].advance(1)  # and the fast one's
        assert await again.result() == [0, 1, 2, 3, 4]
    slow = [at for label, at in STARTED if label == "slow"]
    assert slow == [first] * 5 + [first + 60] * 4 + [first + 61]


async def test_a_step_waiting_for_its_rate_holds_no_permit_and_keys_reach_it(
    make_engine: Any,
) -> None:
    """Review findings: a step waiting for its rate's slot holds none of its limit's
    permits (another tenant whose rate is free gets in); the key function gets the
    step's keyword arguments; a key function that fails is `Rejected` at the call."""
    async with make_engine() as engine:
        await engine.limit("rt.db", 1)
        x = await engine.start(db_twice, "x", id="db-x")
        await _until_waiting(engine, ["db-x"], 1)  # x's second call waits 60 s for x's rate
        y = await engine.start(db_twice, "y", id="db-y")
        await _until_waiting(engine, ["db-y"], 2)  # y's first got the permit meanwhile
        assert [label for label, _ in STARTED] == ["x", "y"]
        CLOCK[0].advance(60)
        assert (await x.result(), await y.result()) == (["x", "x"], ["y", "y"])
        assert {r.name for r in engine.rates()} == {"db_call/x", "db_call/y"}
        CLOCK[0].advance(61)  # every slot older than its window: the keys are dropped
        assert engine.rates() == []


def test_a_rate_that_is_not_one_is_refused_where_it_is_declared() -> None:
    for bad, said in [
        (lambda: Rate(0, per=1), "n is a whole number from 1"),
        (lambda: Rate(1, per=0), "per is a positive duration"),
        (lambda: Rate(1, per="1s"), "per is a positive duration"),  # type: ignore[arg-type]
        (lambda: Rate(1, per=1, name="a/b"), "may not contain '/'"),
        (lambda: Rate(1, per=1, key=3), "key is a string or a function"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(ValueError, match=said):
            bad()
    with pytest.raises(ValueError, match="rate= takes a Rate"):
        step(rate=3)(lambda: None)  # type: ignore[arg-type]


FAILS: list[int] = []  # attempts of `flaky` left to fail


@step(rate=Rate(1, per=10), retry=RetryPolicy(attempts=3, initial=1, factor=1.0, jitter=False))
async def flaky(i: int) -> int:
    STARTED.append(("flaky", CLOCK[0].now()))
    if FAILS and FAILS[0] > 0:
        FAILS[0] -= 1
        raise RuntimeError("not yet")
    return i


@workflow(name="rt.retried")
async def retried(ctx: Ctx, n: int) -> int:
    return await flaky(n)


@workflow(name="rt.parks")
async def parks(ctx: Ctx, n: int) -> list[int]:
    first = await call_api(0)
    await ctx.sleep("nap", 1)  # parks: its code is dropped and replayed when woken
    return [first, *[await call_api(i) for i in range(1, n)]]


async def test_each_attempt_of_a_retried_step_takes_a_slot_of_its_own(make_engine: Any) -> None:
    """A retry is an attempt: it waits for a slot as the first did (1 in 10 s here), its
    retry delay (1 s) being the shorter wait."""
    FAILS[:] = [1]
    async with make_engine() as engine:
        first = CLOCK[0].now()
        h = await engine.start(retried, 7, id="re-1")
        await engine.wait_until(
            lambda: any(w.kind == WaitKind.RETRY for w in engine.runs.latest("re-1").info().waiting)
        )
        CLOCK[0].advance(1)  # the retry is due: its slot is not
        await _until_waiting(engine, ["re-1"], 1)
        assert len(STARTED) == 1
        CLOCK[0].advance(9)
        assert await h.result() == 7
    assert [at - first for _, at in STARTED] == [0, 10]
    FAILS.clear()


async def test_a_run_that_parks_finds_its_rate_as_it_left_it(make_engine: Any) -> None:
    """A run parks on a timer between two rated steps (its code dropped, then replayed
    when the timer fires): the slot its first step took still counts, and the replay
    takes none again."""
    async with make_engine() as engine:
        first = CLOCK[0].now()
        h = await engine.start(parks, 4, id="pk-1")
        await engine.wait_until(lambda: engine.runs.latest("pk-1").status == Status.PARKED)
        CLOCK[0].advance(1)  # the timer fires: 2 slots left in this window, 1 waits
        await _until_waiting(engine, ["pk-1"], 3)
        assert [at - first for _, at in STARTED] == [0, 1, 1]
        CLOCK[0].advance(9)
        assert await h.result() == [0, 1, 2, 3]
    assert [at - first for _, at in STARTED] == [0, 1, 1, 10]
