"""The test kit (`fusee_runtime.testing`, issue 19 item 4), used as a user would: the
`fusee_env` fixture of fusee's pytest plugin, `Env`, `replay`, and the public API of
`fusee_runtime`, nothing else. Time is skipped, never waited for."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import (
    Completion,
    Ctx,
    Exhausted,
    NotFound,
    Rejected,
    RetryPolicy,
    RunFailed,
    Status,
    StepFailed,
    current_ctx,
    step,
    workflow,
)
from fusee_runtime.testing import Call, Env, replay

CALLED: list[str] = []
"""What the real step functions were called with (a mock runs instead of them)."""


@pytest.fixture(autouse=True)
def fresh() -> None:
    CALLED.clear()


@step(retry=RetryPolicy(attempts=5, initial=60, factor=2, max=3600, jitter=False))
async def charge(order: str, cents: int) -> dict[str, Any]:
    CALLED.append(f"charge {order}")
    return {"charge": f"ch-{order}", "cents": cents, "key": current_ctx().key()}


@step
async def remind(order: str) -> str:
    CALLED.append(f"remind {order}")
    return f"reminded {order}"


@workflow(name="kit.subscription")
async def subscription(ctx: Ctx, order: str) -> dict[str, Any]:
    """Charges now, sleeps a week, reminds, sleeps another, charges again."""
    first = await charge(order, 900)
    await ctx.sleep("trial", timedelta(weeks=1))
    reminded_at = ctx.now()
    await remind(order)
    await ctx.sleep("renewal", timedelta(weeks=1))
    second = await charge(order, 900)
    return {"first": first, "second": second, "reminded_at": reminded_at.isoformat()}


async def test_a_workflow_that_sleeps_two_weeks_runs_in_no_time(fusee_env: Env) -> None:
    run = await fusee_env.start(subscription, "o-1", id="sub-1")
    assert (await run.describe()).status == Status.PARKED
    assert CALLED == ["charge o-1"]

    await fusee_env.skip(days=6)
    assert CALLED == ["charge o-1"], "the trial has a day to go"
    await fusee_env.skip(days=1)
    assert CALLED == ["charge o-1", "remind o-1"]
    await fusee_env.skip(weeks=1)

    got = await run.result()
    assert CALLED == ["charge o-1", "remind o-1", "charge o-1"]
    assert got["reminded_at"] == (fusee_env.now - timedelta(weeks=1)).isoformat()


async def test_one_skip_fires_every_timer_due_in_its_span_in_order(fusee_env: Env) -> None:
    run = await fusee_env.start(subscription, "o-2", id="sub-2")
    await fusee_env.skip(days=30)  # both sleeps, and the reminder between them
    got = await run.result()
    assert CALLED == ["charge o-2", "remind o-2", "charge o-2"]
    assert got["reminded_at"] == (fusee_env.now - timedelta(days=23)).isoformat()


async def test_a_mock_fails_the_first_two_attempts_then_returns(fusee_env: Env) -> None:
    down = fusee_env.mock(charge, raises=ConnectionError("card network down"), attempts=[1, 2])
    fine = fusee_env.mock(charge, {"charge": "ch-mock"})
    run = await fusee_env.start(subscription, "o-3", id="sub-3")
    assert [c.attempt for c in down.calls] == [1], "attempt 2 waits for its backoff: 60 s"
    await fusee_env.skip(seconds=59)
    assert [c.attempt for c in down.calls] == [1]
    await fusee_env.skip(seconds=1)
    assert [c.attempt for c in down.calls] == [1, 2] and fine.calls == []
    await fusee_env.skip(seconds=120)  # then 120 s
    assert fine.calls == [Call("kit.subscription", "sub-3", 3, ("o-3", 900), {})]
    await fusee_env.skip(weeks=2)  # the renewal's charge: attempt 1 fails, 2 waits
    assert [c.attempt for c in down.calls] == [1, 2, 1]
    await fusee_env.skip(minutes=3)
    assert [c.attempt for c in down.calls] == [1, 2, 1, 2]
    assert [c.attempt for c in fine.calls] == [3, 3]
    got = await run.result()
    assert got["first"] == got["second"] == {"charge": "ch-mock"}
    assert CALLED == ["remind o-3"], "the real charge never ran"


async def test_a_run_that_only_waits_out_a_backoff_shows_parked_then_running(
    fusee_env: Env,
) -> None:
    # (Issue 42, item 8: it showed `running` while nothing of it ran, only the clock.)
    fusee_env.mock(charge, raises=ConnectionError("card network down"), attempts=[1])
    run = await fusee_env.start(subscription, "o-4", id="sub-4")
    shown = await run.describe()
    assert shown.status == Status.PARKED
    (waits,) = shown.waiting
    assert (waits.kind, waits.name) == ("retry", "charge")  # (a WaitKind, a str enum)
    assert waits.until == fusee_env.now + timedelta(seconds=60)
    assert "card network down" in (waits.detail or "")

    await fusee_env.skip(seconds=60)  # attempt 2 runs the real charge, then the trial sleeps
    assert CALLED == ["charge o-4"]
    shown = await run.describe()
    assert shown.status == Status.PARKED
    assert [w.kind for w in shown.waiting] == ["timer"]


@workflow(name="kit.other")
async def other(ctx: Ctx, order: str) -> dict[str, Any]:
    return await charge(order, 5)


async def test_a_mock_for_one_workflow_leaves_the_others_alone(fusee_env: Env) -> None:
    fusee_env.mock(charge, {"charge": "mocked"}, workflow=other)
    assert await (await fusee_env.start(other, "o-4")).result() == {"charge": "mocked"}
    await fusee_env.start(subscription, "o-5", id="sub-5")
    assert CALLED == ["charge o-5"]


@workflow(name="kit.approval")
async def approval(ctx: Ctx, order: str) -> str:
    decision = await ctx.wait_for("decision", timeout=timedelta(days=3))
    return "lapsed" if decision is None else decision


async def test_signals_and_their_timeouts(fusee_env: Env) -> None:
    yes = await fusee_env.start(approval, "o-6", id="a-1")
    never = await fusee_env.start(approval, "o-7", id="a-2")
    await fusee_env.signal("a-1", "decision", "approved")
    assert await yes.result() == "approved"
    await fusee_env.skip(days=3)
    assert await never.result() == "lapsed"


SENT: list[Completion] = []


def ask(completion: Completion) -> None:
    SENT.append(completion)


@workflow(name="kit.review")
async def review(ctx: Ctx, doc: str) -> Any:
    return await ctx.await_completion("verdict", ask)


async def test_complete_finishes_a_pending_completion_by_its_name(fusee_env: Env) -> None:
    run = await fusee_env.start(review, "q3.pdf", id="r-1")
    assert len(SENT) == 1 and (await run.describe()).status == Status.PARKED
    await fusee_env.complete("r-1", "verdict", {"ok": True})
    assert await run.result() == {"ok": True}
    with pytest.raises(NotFound, match="waits for no completion named 'verdict'"):
        await fusee_env.complete("r-1", "verdict", 1)


@workflow(name="kit.paid_then_shipped")
async def paid_then_shipped(ctx: Ctx, order: str) -> dict[str, Any]:
    payment = await charge(order, 1200)
    shipped = await ctx.wait_for("shipped")
    return {"payment": payment, "shipped": shipped}


async def test_a_workflow_survives_a_crash_while_it_waits(fusee_env: Env) -> None:
    await fusee_env.start(paid_then_shipped, "o-8", id="p-1")
    await fusee_env.crash()
    await fusee_env.signal("p-1", "shipped", "trk-1")
    got = await fusee_env.handle("p-1").result()
    assert got["shipped"] == "trk-1"
    assert CALLED == ["charge o-8"], "the durable charge did not run again"


async def test_a_step_cut_off_by_a_crash_runs_again_with_the_same_key(fusee_env: Env) -> None:
    entered, keys = asyncio.Event(), []

    async def slow_charge(order: str, cents: int) -> dict[str, Any]:
        keys.append(current_ctx().key())
        entered.set()
        if len(keys) == 1:
            await asyncio.Event().wait()  # cut off by the crash
        return {"charge": "ch-2"}

    fusee_env.mock(charge, call=slow_charge)
    await fusee_env.engine.start(paid_then_shipped, "o-9", id="p-2")
    await entered.wait()
    await fusee_env.crash()  # the step's result was never recorded
    await fusee_env.signal("p-2", "shipped", "trk-2")
    assert (await fusee_env.handle("p-2").result())["payment"] == {"charge": "ch-2"}
    assert len(keys) == 2 and keys[0] == keys[1]


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.FAIL))
async def refuse() -> None:
    raise ValueError("refused")


@workflow(name="kit.fails")
async def fails(ctx: Ctx, _: None) -> None:
    await refuse()


async def test_a_failing_run_fails_in_the_kit_as_anywhere(fusee_env: Env) -> None:
    run = await fusee_env.start(fails, None)
    with pytest.raises(RunFailed, match="refused"):
        await run.result()
    assert (await run.describe()).status == Status.FAILED


async def test_a_golden_history_replays_against_the_code(fusee_env: Env, tmp_path: Path) -> None:
    await fusee_env.start(subscription, "o-10", id="sub-10")
    await fusee_env.skip(weeks=2)
    golden = tmp_path / "sub-10.json"
    await fusee_env.export("sub-10", golden)
    got = await replay(golden)
    assert got.ok, got.message
    # charge, sleep, ctx.now(), remind, sleep, charge
    assert got.message == "replays cleanly: 6 operations, then the code returns"


async def test_what_the_kit_refuses(fusee_env: Env, tmp_path: Path) -> None:
    with pytest.raises(Rejected, match="skip moves the clock forward"):
        await fusee_env.skip(hours=-1)
    with pytest.raises(Rejected, match="a mock takes one of"):
        fusee_env.mock(charge, 1, raises=ValueError())
    with pytest.raises(Rejected, match="not open"):
        _ = Env(tmp_path / "unopened").engine


@step(name="kit.hangs", timeout=30, retry=RetryPolicy(attempts=1))
async def hangs() -> None:
    await asyncio.Event().wait()  # a service that never answers


@workflow(name="kit.times_out")
async def times_out(ctx: Ctx, _: None) -> str:
    try:
        await hangs()
    except StepFailed as e:
        return str(e)
    return "answered"


async def test_a_step_timeout_fires_when_the_clock_passes_it(fusee_env: Env) -> None:
    run = await fusee_env.start(times_out, None)  # returns: the step awaits
    await fusee_env.skip(seconds=29)
    assert (await run.describe()).status == Status.RUNNING
    await fusee_env.skip(seconds=1)
    assert "timed out" in await run.result()
