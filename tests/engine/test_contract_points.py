"""Contract points the hardening issue found wrong (issue 16, items 6 to 9 and 11):
why a run is stuck is recorded, an id belongs to one workflow, handles are pinned,
"forever" waits park, and options out of range are refused at import (options not built
yet were, until limits came with issue 20)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fusee_runtime import (
    Cancelled,
    Ctx,
    FakeClock,
    Rejected,
    Status,
    Terminated,
    step,
    workflow,
)
from fusee_runtime.errors import IdConflict

STORES = ("local", "postgresql")
"""Each test that opens an engine runs on the local journal and on PostgreSQL."""

# -- options out of range are refused where they are declared ---------------------------


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"limit": "pay/ments"}, "a limit name may not contain '/'"),
        ({"heartbeat_timeout": 0}, "heartbeat_timeout= must be positive"),
    ],
)
def test_step_options_out_of_range_are_refused_at_import(option: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError, match=rf"@step contract_charge: {said}"):

        @step(**option)
        async def contract_charge() -> None: ...


def test_a_copy_with_an_option_out_of_range_is_refused_too() -> None:
    @step
    async def contract_ship() -> None: ...

    with pytest.raises(ValueError, match=r"@step contract_ship: fairness_weight= is a whole"):
        contract_ship.options(limit="carriers", fairness_weight=-1)
    assert contract_ship.options(limit="carriers").opts.limit == "carriers"
    assert contract_ship.options(timeout=5).opts.timeout == 5.0


# -- "forever" ------------------------------------------------------------------------


@workflow(name="contract.nap")
async def nap(ctx: Ctx, how: str) -> str:
    if how == "sleep":
        await ctx.sleep("nap", timedelta.max)
    elif how == "until":
        await ctx.sleep_until("nap", datetime.max.replace(tzinfo=UTC))
    else:
        got = await ctx.wait_for("go", timeout=timedelta.max)
        return f"got {got}"
    return "woke"


@pytest.mark.parametrize("how", ["sleep", "until"])
async def test_a_sleep_forever_parks_with_no_wake_up_and_a_cancel_ends_it(
    make_engine: Any, clock: FakeClock, how: str
) -> None:
    async with make_engine() as engine:
        h = await engine.start("contract.nap", how, id=f"nap-{how}")
        await engine.wait_until(lambda: engine.runs.latest(f"nap-{how}").status == Status.PARKED)
        run = engine.runs.latest(f"nap-{how}")
        assert run.live.current is None or "forever" in run.live.current
        assert clock.sleepers() == 0, "no timer waits for the year 9999"
        [timer] = [r for r in await h.history() if r["type"] == "TimerStarted"]
        assert timer["fire_at"] is None
        await h.cancel("enough")
        with pytest.raises(Cancelled, match="enough"):
            await h.result()


async def test_a_wait_forever_ends_with_its_signal(make_engine: Any, clock: FakeClock) -> None:
    async with make_engine() as engine:
        h = await engine.start("contract.nap", "wait", id="nap-wait", timeout=timedelta.max)
        await engine.wait_until(lambda: engine.runs.latest("nap-wait").status == Status.PARKED)
        assert engine.runs.latest("nap-wait").deadline is None
        assert clock.sleepers() == 0
        await h.signal("go", 7)
        assert await h.result() == "got 7"
    async with make_engine() as engine:  # and it replays
        assert await engine.handle("nap-wait").result() == "got 7"


# -- an id belongs to one workflow -------------------------------------------------------


@workflow(name="contract.order")
async def order(ctx: Ctx, x: int) -> int:
    return x


@workflow(name="contract.approval")
async def approval(ctx: Ctx, x: int) -> str:
    return "approved"


async def test_starting_an_id_of_another_workflow_is_refused_naming_both(
    make_engine: Any,
) -> None:
    async with make_engine() as engine:
        await (await engine.start("contract.approval", 1, id="expense-8")).result()
        for on_conflict in ("return", "fail"):
            with pytest.raises(IdConflict) as e:
                await engine.start("contract.order", 1, id="expense-8", on_conflict=on_conflict)
            assert "'contract.approval'" in str(e.value) and "'contract.order'" in str(e.value)
        # The same workflow still returns the run, and new_run replaces it on purpose.
        same = await engine.start("contract.approval", 1, id="expense-8")
        assert await same.result() == "approved"
        new = await engine.start("contract.order", 5, id="expense-8", on_conflict="new_run")
        assert await new.result() == 5


# -- handles are pinned ----------------------------------------------------------------


@workflow(name="contract.gate")
async def gate(ctx: Ctx, x: int) -> Any:
    if x < 0:
        await ctx.continue_as_new(-x)
    return [x, await ctx.wait_for("go")]


async def test_a_handle_from_start_stays_on_its_run_after_a_new_run(make_engine: Any) -> None:
    async with make_engine() as engine:
        first = await engine.start("contract.gate", 1, id="p-1")
        run_id = first.run_id
        second = await engine.start("contract.gate", 2, id="p-1", on_conflict="new_run")
        assert first.run_id == run_id != second.run_id
        assert (await first.describe()).status == Status.TERMINATED
        with pytest.raises(Terminated):
            await first.result()
        with pytest.raises(Rejected, match="is terminated: it takes no more signals"):
            await first.signal("go", "late")  # not delivered to the new run
        await second.signal("go", "ok")
        assert await second.result() == [2, "ok"]
        assert await engine.handle("p-1").result() == [2, "ok"]
        assert (await engine.handle("p-1", run_id=run_id).describe()).run_id == run_id


async def test_a_handle_stays_on_its_run_after_a_reset(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("contract.gate", 3, id="p-2")
        run_id = h.run_id
        after = await h.reset(to=1)
        assert h.run_id == run_id != after.run_id
        with pytest.raises(Terminated, match="reset"):
            await h.result()
        with pytest.raises(Rejected, match="not the newest run"):
            await h.reset(to=1)
        await after.signal("go", "again")
        assert await after.result() == [3, "again"]


async def test_a_pinned_handle_follows_its_runs_continue_as_new(make_engine: Any) -> None:
    async with make_engine() as engine:
        h = await engine.start("contract.gate", -4, id="p-3")
        run_id = h.run_id
        await engine.wait_until(lambda: engine.runs.latest("p-3").input == 4)
        await h.signal("go", "chained")  # to the run its chain reached
        assert await h.result() == [4, "chained"]
        assert h.run_id == run_id
        assert (await h.describe()).status == Status.CONTINUED_AS_NEW


# -- why a run is stuck is recorded -------------------------------------------------------

SHAPE = {"v": 1}


@step
async def contract_a() -> str:
    return "a"


@step
async def contract_b() -> str:
    return "b"


@workflow(name="contract.shapeshift")
async def shapeshift(ctx: Ctx, _: None) -> Any:
    first = await (contract_a() if SHAPE["v"] == 1 else contract_b())
    return [first, await ctx.wait_for("go")]


async def _status(make_engine: Any, id: str) -> tuple[Status, str | None]:
    async with make_engine(drive=False) as passive:
        info = await passive.handle(id).describe()
        return info.status, info.error


async def test_a_stuck_run_is_stuck_for_every_process_until_it_goes_on(
    make_engine: Any,
) -> None:
    SHAPE["v"] = 1
    async with make_engine() as engine:
        await engine.start("contract.shapeshift", None, id="nd-1")
        await engine.wait_until(lambda: engine.runs.latest("nd-1").status == Status.PARKED)
    SHAPE["v"] = 2  # a deploy that changed the code under the open run
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("nd-1").status == Status.STUCK)
    status, error = await _status(make_engine, "nd-1")
    assert status == Status.STUCK and error is not None and "replay mismatch" in error
    async with make_engine(drive=False) as passive:
        assert [i.id for i in await passive.list(status="stuck")] == ["nd-1"]
    async with make_engine() as engine:  # stuck again on the same code: recorded once
        await engine.wait_until(lambda: engine.runs.latest("nd-1").status == Status.STUCK)
        kinds = [r["type"] for r in await engine.history("nd-1")]
        assert kinds.count("RunStuck") == 1
    async with make_engine(drive=False) as passive:  # `fusee resume` with no owner
        await passive.resume("nd-1")
    assert (await _status(make_engine, "nd-1"))[0] != Status.STUCK
    SHAPE["v"] = 1  # the code that matches is back
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("nd-1").status == Status.PARKED)
    assert await _status(make_engine, "nd-1") == (Status.PARKED, None)
    async with make_engine() as engine:
        await engine.signal("nd-1", "go", 1)
        assert await engine.handle("nd-1").result() == ["a", 1]


async def test_code_that_matches_again_carries_a_stuck_run_on_without_a_resume(
    make_engine: Any,
) -> None:
    SHAPE["v"] = 1
    async with make_engine() as engine:
        await engine.start("contract.shapeshift", None, id="nd-2")
        await engine.wait_until(lambda: engine.runs.latest("nd-2").status == Status.PARKED)
    SHAPE["v"] = 2
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("nd-2").status == Status.STUCK)
    SHAPE["v"] = 1
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("nd-2").status == Status.PARKED)
        kinds = [r["type"] for r in await engine.history("nd-2")]
        assert kinds[-2:] == ["RunStuck", "RunUnstuck"]
    assert await _status(make_engine, "nd-2") == (Status.PARKED, None)


async def test_a_stuck_run_is_cancelled_where_it_stands(make_engine: Any) -> None:
    SHAPE["v"] = 1
    async with make_engine() as engine:
        await engine.start("contract.shapeshift", None, id="nd-3")
        await engine.wait_until(lambda: engine.runs.latest("nd-3").status == Status.PARKED)
    SHAPE["v"] = 2
    async with make_engine() as engine:
        await engine.wait_until(lambda: engine.runs.latest("nd-3").status == Status.STUCK)
    async with make_engine(drive=False) as passive:
        await passive.cancel("nd-3", "abandoned")
        assert (await passive.handle("nd-3").describe()).status == Status.CANCELLED
    SHAPE["v"] = 1


def test_the_forever_instant_is_what_a_datetime_holds() -> None:
    from fusee_runtime.engine.waits import INSTANT_MAX, wake_at

    assert datetime.fromtimestamp(INSTANT_MAX, UTC).year == 9999
    assert wake_at(INSTANT_MAX - 1) == INSTANT_MAX - 1
    assert wake_at(timedelta.max.total_seconds()) is None


# -- deep values are refused where they enter, not after they are recorded ----------------


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@step
async def contract_deep(depth: int) -> Any:
    return nested(depth)


@workflow(name="contract.deep")
async def deep(ctx: Ctx, depth: int) -> Any:
    return await contract_deep(depth)


async def test_a_value_nested_past_the_limit_is_refused_and_one_at_it_is_stored(
    make_engine: Any,
) -> None:
    from fusee_runtime import CodecError, RunFailed
    from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX

    async with make_engine(checkpoint_bytes=1) as engine:
        with pytest.raises(CodecError, match=f"over {PAYLOAD_DEPTH_MAX} levels deep"):
            await engine.start("contract.echo_deep", nested(PAYLOAD_DEPTH_MAX + 1), id="d-0")
        h = await engine.start("contract.deep", PAYLOAD_DEPTH_MAX - 1, id="d-1")
        assert await h.result() == nested(PAYLOAD_DEPTH_MAX - 1)
        failed = await engine.start("contract.deep", PAYLOAD_DEPTH_MAX + 1, id="d-2")
        with pytest.raises(RunFailed, match="levels deep") as e:
            await failed.result()
        assert e.value.failure.kind == "StepFailed"
        assert e.value.failure.cause is not None and e.value.failure.cause.kind == "CodecError"
        # What was recorded can be checkpointed and stored: nothing fails later.
        await engine.checkpoints.flush_history()
        assert await engine.checkpoint() == engine.durability.durable_lsn
    async with make_engine() as engine:
        assert [i.id for i in await engine.list()] == ["d-2", "d-1"]
        assert (await engine.history("d-1"))[-1]["result"] == nested(PAYLOAD_DEPTH_MAX - 1)


@workflow(name="contract.echo_deep")
async def echo_deep(ctx: Ctx, value: Any) -> Any:
    return value
