"""Limits (issue 20, item 2): `@step(limit=)` and `ctx.step(..., limit=, limit_key=,
priority=, fairness=, fairness_weight=)` take a permit of a named limit for each
attempt; `engine.limit(name, permits)` sets its size, durably.

Shares and order are read from the engine's counters (`engine.limits()`) and
from what the steps themselves count, never from timing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from fusee_runtime import Ctx, Engine, LimitInfo, Rejected, RetryPolicy, RunFailed, step, workflow
from fusee_runtime.engine.waits import Waiting

INSIDE = {"now": 0, "most": 0}
ORDER: list[str] = []
LOCK = threading.Lock()
HOLDING = {"go": asyncio.Event()}
ENGINE: dict[str, Engine] = {}
SNAPSHOT: dict[str, Any] = {}


def limit(engine: Engine, name: str) -> LimitInfo:
    (info,) = [i for i in engine.limits() if i.name == name]
    return info


@pytest.fixture(autouse=True)
def fresh() -> None:
    INSIDE.update(now=0, most=0)
    ORDER.clear()
    HOLDING.update(go=asyncio.Event(), entered=asyncio.Event())
    SNAPSHOT.clear()


# -- a limit holds --------------------------------------------------------------------


@step(name="lim.counted", limit="lim.five")
async def counted() -> int:
    INSIDE["now"] += 1
    INSIDE["most"] = max(INSIDE["most"], INSIDE["now"])
    await HOLDING["go"].wait()  # until every run has come to its step
    INSIDE["now"] -= 1
    return 1


@workflow(name="lim.one")
async def one(ctx: Ctx, _: None) -> int:
    return await counted()


async def test_a_limit_of_5_holds_under_1000_concurrent_runs(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.limit("lim.five", 5)
        handles = [await engine.start("lim.one", None) for _ in range(1000)]
        await engine.wait_until(lambda: limit(engine, "lim.five").waiting == 995)
        assert limit(engine, "lim.five").in_use == 5
        HOLDING["go"].set()
        assert sum([await h.result(timeout=60) for h in handles]) == 1000
        info = limit(engine, "lim.five")
    assert INSIDE["most"] == 5  # counted by the steps themselves
    assert (info.permits, info.set, info.in_use, info.waiting) == (5, True, 0, 0)
    assert (info.max_in_use, info.granted) == (5, {"": 1000})


BARRIER = threading.Barrier(3)


@step(name="lim.threaded", limit="lim.three")
def threaded() -> int:
    with LOCK:
        INSIDE["now"] += 1
        INSIDE["most"] = max(INSIDE["most"], INSIDE["now"])
    BARRIER.wait(timeout=60)  # three inside at once, as many as the limit lets in
    with LOCK:
        INSIDE["now"] -= 1
    return 1


@workflow(name="lim.in_thread")
async def in_thread(ctx: Ctx, _: None) -> int:
    return await threaded()


async def test_a_limit_holds_for_steps_in_threads(make_engine: Any) -> None:
    BARRIER.reset()
    async with make_engine(step_threads=8) as engine:  # more threads than permits
        await engine.limit("lim.three", 3)
        handles = [await engine.start("lim.in_thread", None) for _ in range(201)]
        assert sum([await h.result(timeout=60) for h in handles]) == 201
        assert limit(engine, "lim.three").max_in_use == 3
    assert INSIDE["most"] == 3


# -- who goes first -------------------------------------------------------------------


@step(name="lim.hold", limit="lim.one")
async def hold() -> str:
    await HOLDING["go"].wait()
    return "held"


@workflow(name="lim.holder")
async def holder(ctx: Ctx, _: None) -> str:
    return await hold()


async def ordered(tag: str) -> str:
    ORDER.append(tag)
    engine = ENGINE.get("engine")
    if engine is not None and len(ORDER) == SNAPSHOT.get("at"):
        SNAPSHOT["granted"] = dict(limit(engine, "lim.one").granted)
    return tag


@workflow(name="lim.waiter")
async def waiter(ctx: Ctx, how: dict[str, Any]) -> str:
    return await ctx.step(
        "lim.ordered",
        ordered,
        how["tag"],
        limit="lim.one",
        priority=how.get("priority"),
        fairness=how.get("fairness"),
        fairness_weight=how.get("weight"),
    )


async def queue_behind_holder(
    engine: Engine, waiters: list[dict[str, Any]], release: bool = True
) -> list[Any]:
    """Starts the holder, then `waiters`; once all of them wait for the one permit of
    "lim.one", lets the holder go (if `release`) and returns their handles."""
    await engine.limit("lim.one", 1)
    held = await engine.start("lim.holder", None)
    await engine.wait_until(lambda: limit(engine, "lim.one").in_use == 1)
    handles = [await engine.start("lim.waiter", how) for how in waiters]
    await engine.wait_until(lambda: limit(engine, "lim.one").waiting == len(waiters))
    if release:
        HOLDING["go"].set()
    return [held, *handles]


async def test_a_higher_priority_overtakes_a_queue_of_lower_ones(make_engine: Any) -> None:
    async with make_engine() as engine:
        low = [{"tag": f"low-{i}"} for i in range(50)]
        handles = await queue_behind_holder(engine, [*low, {"tag": "high", "priority": 5}])
        for h in handles:
            await h.result(timeout=30)
    assert ["high", *(f"low-{i}" for i in range(50))] == ORDER


async def test_fairness_weights_of_3_to_1_give_3_to_1_shares(make_engine: Any) -> None:
    # 600 steps of tenant a (weight 3) and 600 of b (weight 1), arriving in turn and all
    # waiting at once (in arrival order each would get half); the engine's counters are
    # read as the 801st permit goes (the holder's was the first): both tenants were
    # waiting all along, so a's share is 3 to 1, within 1 %.
    a = {"tag": "a", "fairness": "a", "weight": 3}
    b = {"tag": "b", "fairness": "b", "weight": 1}
    SNAPSHOT["at"] = 800
    async with make_engine() as engine:
        ENGINE["engine"] = engine
        try:
            handles = await queue_behind_holder(engine, [a, b] * 600)
            for h in handles:
                await h.result(timeout=60)
        finally:
            del ENGINE["engine"]
        granted = SNAPSHOT["granted"]
        assert granted[""] == 1  # the holder
        assert granted["a"] + granted["b"] == 800
        assert abs(granted["a"] / granted["b"] - 3) <= 0.03
        assert limit(engine, "lim.one").granted == {"": 1, "a": 600, "b": 600}


async def test_a_tenant_with_many_waiting_does_not_starve_one_with_few(make_engine: Any) -> None:
    many = [{"tag": "many", "fairness": "many"} for _ in range(1000)]
    few = [{"tag": "few", "fairness": "few"} for _ in range(10)]
    async with make_engine() as engine:
        for h in await queue_behind_holder(engine, [*many, *few]):  # few queued last
            await h.result(timeout=60)
    assert ORDER[:20] == ["many", "few"] * 10


@workflow(name="lim.key_per_step")
async def key_per_step(ctx: Ctx, n: int) -> list[str]:
    """A run that makes a fairness key per step, all waiting at once."""
    return await ctx.all(
        ctx.step("lim.ordered", ordered, "many", limit="lim.one", fairness=f"many-{i}")
        for i in range(n)
    )


async def test_a_key_per_step_in_one_run_takes_one_turn(make_engine: Any) -> None:
    # One run fans out 200 steps with a key each, then 10 runs of tenant "few" wait.
    # Were every key a turn, "few" would wait behind all 200 (positions 200-209 of 210);
    # a run counts once, so its keys take the turns of its first.
    few = [{"tag": "few", "fairness": "few"} for _ in range(10)]
    async with make_engine() as engine:
        await engine.limit("lim.one", 1)
        held = await engine.start("lim.holder", None)
        await engine.wait_until(lambda: limit(engine, "lim.one").in_use == 1)
        fan = await engine.start("lim.key_per_step", 200)
        await engine.wait_until(lambda: limit(engine, "lim.one").waiting == 200)
        handles = [await engine.start("lim.waiter", how) for how in few]
        await engine.wait_until(lambda: limit(engine, "lim.one").waiting == 210)
        HOLDING["go"].set()
        for h in [held, fan, *handles]:
            await h.result(timeout=60)
        granted = limit(engine, "lim.one").granted
    assert ORDER[:20] == ["many", "few"] * 10
    assert granted["few"] == 10 and sum(granted[f"many-{i}"] for i in range(200)) == 200


async def test_a_heavy_weight_cannot_starve_another_key(make_engine: Any) -> None:
    # The largest weight code may ask for is 10: "few" goes once a turn of 10 "heavy".
    heavy = [{"tag": "heavy", "fairness": "heavy", "weight": 10} for _ in range(200)]
    few = [{"tag": "few", "fairness": "few"} for _ in range(10)]
    async with make_engine() as engine:
        for h in await queue_behind_holder(engine, [*heavy, *few]):
            await h.result(timeout=60)
    assert ORDER[:110] == (["heavy"] * 10 + ["few"]) * 10


# -- keys, sizes, what shows ------------------------------------------------------------


@step(name="lim.keyed")
async def keyed(tenant: str) -> str:
    ORDER.append(tenant)
    HOLDING["entered"].set()
    await HOLDING["go"].wait()
    return tenant


async def entered(n: int) -> None:
    """Returns once `n` steps have come into `keyed` (which tells no one in the engine)."""
    while len(ORDER) < n:
        HOLDING["entered"].clear()
        await HOLDING["entered"].wait()


@workflow(name="lim.per_tenant")
async def per_tenant(ctx: Ctx, tenant: str) -> str:
    return await keyed.options(limit="lim.tenant", limit_key=tenant)(tenant)


async def test_each_key_has_permits_of_its_own(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.limit("lim.tenant", 1)
        handles = [await engine.start("lim.per_tenant", t) for t in ("a", "b", "a")]
        await entered(2)
        await engine.wait_until(lambda: limit(engine, "lim.tenant/a").waiting == 1)
        shown = {i.name: (i.permits, i.in_use, i.waiting) for i in engine.limits()}
        assert shown == {
            "lim.tenant": (1, 0, 0),
            "lim.tenant/a": (1, 1, 1),
            "lim.tenant/b": (1, 1, 0),
        }
        info = await handles[2].describe()
        assert info.waiting == (Waiting("permit", "lim.keyed", None, "lim.tenant/a"),)
        listed = {i.run_id: i.waiting for i in await engine.list(status="open")}
        assert listed[info.run_id] == info.waiting
        HOLDING["go"].set()
        assert [await h.result(timeout=10) for h in handles] == ["a", "b", "a"]
        # a key's permits go once no one holds or waits for them
        assert [i.name for i in engine.limits()] == ["lim.tenant"]


async def test_a_limit_never_set_lets_one_attempt_in(make_engine: Any) -> None:
    async with make_engine() as engine:
        handles = [await engine.start("lim.per_tenant", "t") for _ in range(3)]
        await engine.wait_until(lambda: limit(engine, "lim.tenant/t").waiting == 2)
        info = limit(engine, "lim.tenant/t")
        assert (info.permits, info.set, info.in_use) == (1, False, 1)
        HOLDING["go"].set()
        for h in handles:
            await h.result(timeout=10)


async def test_a_grown_limit_lets_waiters_in_at_once(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.limit("lim.tenant", 1)
        handles = [await engine.start("lim.per_tenant", "t") for _ in range(4)]
        await engine.wait_until(lambda: limit(engine, "lim.tenant/t").waiting == 3)
        await engine.limit("lim.tenant", 3)
        await entered(3)
        assert limit(engine, "lim.tenant/t").in_use == 3
        HOLDING["go"].set()
        for h in handles:
            await h.result(timeout=10)


async def test_a_limit_set_holds_after_a_restart_and_a_checkpoint(make_engine: Any) -> None:
    async with make_engine() as engine:
        await engine.limit("lim.five", 4)
        await engine.limit("lim.one", 2)
        await engine.limit("lim.one", 3)
    async with make_engine() as engine:
        assert [(i.name, i.permits, i.set) for i in engine.limits()] == [
            ("lim.five", 4, True),
            ("lim.one", 3, True),
        ]
        await engine.checkpoint()
    async with make_engine() as engine:  # from the checkpoint now
        assert [(i.name, i.permits) for i in engine.limits()] == [("lim.five", 4), ("lim.one", 3)]


async def test_a_run_cancelled_while_waiting_leaves_the_queue(make_engine: Any) -> None:
    async with make_engine() as engine:
        waiters = [{"tag": "gone"}, {"tag": "stays"}]
        handles = await queue_behind_holder(engine, waiters, release=False)
        await handles[1].cancel("not needed")
        await engine.wait_until(lambda: limit(engine, "lim.one").waiting == 1)
        HOLDING["go"].set()
        await handles[0].result(timeout=10)
        assert await handles[2].result(timeout=10) == "stays"
        assert ORDER == ["stays"]
        info = limit(engine, "lim.one")
        assert (info.in_use, info.waiting) == (0, 0)


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "permits", "message"),
    [
        ("a/b", 1, "a limit name may not contain '/'"),
        ("", 1, "a limit name is a string of 1 to 200 characters"),
        ("api", -1, "limit 'api': permits is a whole number from 0 to 1000000, not -1"),
        ("api", True, "permits is a whole number from 0 to 1000000, not True"),
    ],
)
async def test_a_bad_limit_is_refused(
    make_engine: Any, name: str, permits: Any, message: str
) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match=message):
            await engine.limit(name, permits)
        assert engine.limits() == []


def test_bad_limit_options_are_refused_at_import() -> None:
    with pytest.raises(ValueError, match="@step lim_bad: a limit name may not contain '/'"):

        @step(limit="a/b")
        async def lim_bad() -> None: ...

    with pytest.raises(ValueError, match=r"@step lim\.keyed: limit_key=, priority=, fairness="):
        keyed.options(limit_key="k")
    with pytest.raises(ValueError, match="fairness_weight= is a whole number from 1"):
        counted.options(fairness_weight=0)
    with pytest.raises(ValueError, match="fairness_weight= is a whole number from 1 to 10, not 10"):
        counted.options(limit="lim.five", fairness_weight=1000)


@workflow(name="lim.bad_call")
async def bad_call(ctx: Ctx, how: dict[str, Any]) -> str:
    try:
        await ctx.step("lim.x", ordered, "x", **how)
    except Rejected as e:
        return str(e)
    return "ran"


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ({"priority": 2}, "step 'lim.x': limit_key=, priority=, fairness= and fairness_weight="),
        ({"limit": "api", "priority": "high"}, "step 'lim.x': priority= is a whole number"),
        ({"limit": "api", "limit_key": ""}, "step 'lim.x': a limit key name is a string"),
    ],
)
async def test_bad_limit_options_of_ctx_step_are_refused(
    make_engine: Any, how: dict[str, Any], message: str
) -> None:
    async with make_engine() as engine:
        said = await (await engine.start("lim.bad_call", how)).result(timeout=10)
    assert said.startswith(message)
    assert ORDER == []


# -- a thread given up on keeps its permit ----------------------------------------------

STUCK = {"in": threading.Event(), "out": threading.Event()}


@step(name="lim.stuck", limit="lim.one", timeout=5, retry=RetryPolicy(attempts=1))
def stuck() -> str:
    STUCK["in"].set()
    STUCK["out"].wait()
    return "late"


@workflow(name="lim.stuck")
async def stuck_run(ctx: Ctx, _: None) -> str:
    return await stuck()


async def test_an_attempt_given_up_on_keeps_its_permit_until_its_thread_returns(
    make_engine: Any, clock: Any
) -> None:
    STUCK["in"].clear()
    STUCK["out"].clear()
    async with make_engine() as engine:
        try:
            cut = await engine.start("lim.stuck", None)
            await asyncio.to_thread(STUCK["in"].wait)
            nxt = await engine.start("lim.waiter", {"tag": "next"})
            await engine.wait_until(lambda: limit(engine, "lim.one").waiting == 1)
            await clock.wait_for_sleepers()
            clock.advance(5)  # the attempt times out; its thread runs on
            with pytest.raises(RunFailed, match="TimedOut"):
                await cut.result(timeout=10)
            info = limit(engine, "lim.one")
            assert (info.in_use, info.waiting) == (1, 1)
            assert ORDER == []
        finally:
            STUCK["out"].set()
        assert await nxt.result(timeout=10) == "next"
        assert limit(engine, "lim.one").max_in_use == 1


# -- losers of a race give their permits and places back -----------------------------------


@step(name="lim.go")
async def go() -> str:
    await HOLDING["race"].wait()
    return "won"


@workflow(name="lim.race")
async def racing(ctx: Ctx, _: None) -> str:
    loser = ctx.step("lim.loser", ordered, "loser", limit="lim.one")
    await ctx.race([go(), hold(), loser])  # the holder and the waiter lose in one tick
    return await ctx.step("lim.after", ordered, "after", limit="lim.one")


async def test_a_race_whose_losers_hold_and_wait_for_permits_leaves_the_limit_whole(
    make_engine: Any,
) -> None:
    HOLDING["race"] = asyncio.Event()
    async with make_engine() as engine:
        await engine.limit("lim.one", 1)
        h = await engine.start("lim.race", None)
        await engine.wait_until(
            lambda: [(i.in_use, i.waiting) for i in engine.limits()] == [(1, 1)]
        )
        HOLDING["race"].set()
        assert await h.result(timeout=10) == "after"
        info = limit(engine, "lim.one")
        assert (info.in_use, info.waiting) == (0, 0)
    assert ORDER == ["after"]


# -- the gate comes after the permit ---------------------------------------------------------


@step(name="lim.sees")
async def sees() -> bool:
    engine = ENGINE["engine"]
    return engine.runs.latest("g-2").update_lsn <= engine.durability.durable_lsn


@workflow(name="lim.gated")
async def gated(ctx: Ctx, _: None) -> bool:
    ctx.on_update("note", lambda v: v)
    return await ctx.step("lim.sees", sees, limit="lim.one")


async def test_a_step_let_in_by_its_permit_sees_only_what_is_durable(
    make_engine: Any, holding_storage: Any
) -> None:
    async with make_engine(storage=holding_storage) as engine:
        ENGINE["engine"] = engine
        try:
            await engine.limit("lim.one", 1)
            await engine.start("lim.holder", None)
            await engine.wait_until(lambda: limit(engine, "lim.one").in_use == 1)
            h = await engine.start("lim.gated", None, id="g-2")
            await engine.wait_until(lambda: limit(engine, "lim.one").waiting == 1)
            holding_storage.armed.set()  # from here on the disk holds every write
            note = asyncio.ensure_future(h.update("note", "x"))  # applied while it waits
            await asyncio.to_thread(holding_storage.holding.wait)
            HOLDING["go"].set()  # the permit comes free while the update is not durable
            await engine.wait_until(
                lambda: [(i.in_use, i.waiting) for i in engine.limits()] == [(1, 0)]
            )
            holding_storage.armed.clear()
            holding_storage.release.set()
            assert await note == "x"
            assert await h.result(timeout=10) is True
        finally:
            del ENGINE["engine"]
