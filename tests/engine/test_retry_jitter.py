"""A retry's jitter is drawn from the run, the step, the attempt and the time, not at
random (issue 39, the audit's row on reproducible jitter): on the same clock a run
waits the same delays; runs failing at once still spread."""

from __future__ import annotations

from typing import Any

import pytest

from fusee_runtime import Ctx, FakeClock, RetryPolicy, step, workflow
from fusee_runtime.steps import jitter_fraction

STORES = ("local",)

POLICY = RetryPolicy(attempts=4, initial=1.0, factor=2.0, max=60.0, jitter=True)
FAILS: dict[str, int] = {}
"""How many more attempts fail, by run id."""


@step(name="jt.flaky", retry=POLICY)
def jt_flaky(id: str) -> str:
    if FAILS.get(id, 0) > 0:
        FAILS[id] -= 1
        raise ConnectionError("not yet")
    return "done"


@workflow(name="jt.run")
async def jt_run(ctx: Ctx, _: Any) -> str:
    return await jt_flaky(ctx.workflow_id)


async def _delays(engine: Any, id: str, run_clock: Any) -> list[dict[str, Any]]:
    handle = await engine.start(jt_run, None, id=id)
    assert await run_clock(handle.result()) == "done"
    return [r for r in await engine.history(id) if r["type"] == "AttemptFailed"]


async def test_each_delay_is_the_hash_of_the_run_step_attempt_and_time(
    make_engine: Any, clock: FakeClock, run_clock: Any
) -> None:
    FAILS["j-1"] = 3
    async with make_engine() as engine:
        failed = await _delays(engine, "j-1", run_clock)
    assert [r["attempt"] for r in failed] == [1, 2, 3]
    for r in failed:
        backoff = POLICY.backoff(r["attempt"])
        at = r["failed_at"]
        drawn = jitter_fraction(r["run_id"], r["seq"], r["attempt"], _seconds(at))
        # (recorded as retry_at - failed_at: equal to float rounding)
        assert r["delay"] == pytest.approx(backoff / 2 + drawn * backoff / 2, abs=1e-6)
        assert backoff / 2 <= r["delay"] < backoff


async def test_runs_failing_at_the_same_instant_spread_apart(
    make_engine: Any, clock: FakeClock, run_clock: Any
) -> None:
    FAILS.update({"j-2": 1, "j-3": 1})
    async with make_engine() as engine:
        first = await engine.start(jt_run, None, id="j-2")
        second = await engine.start(jt_run, None, id="j-3")

        def failed_once(id: str) -> bool:
            return any(op.attempts_failed for op in engine.runs.latest(id).ops.values())

        # Both failed before the clock moves: at the same instant.
        await engine.wait_until(lambda: failed_once("j-2") and failed_once("j-3"))
        assert await run_clock(first.result()) == await run_clock(second.result()) == "done"
        failed = [
            next(r for r in await engine.history(id) if r["type"] == "AttemptFailed")
            for id in ("j-2", "j-3")
        ]
    assert failed[0]["failed_at"] == failed[1]["failed_at"]  # the same instant
    assert failed[0]["delay"] != failed[1]["delay"]


def test_the_draw_is_the_same_for_the_same_run_step_attempt_and_time() -> None:
    one = jitter_fraction("r-1", "3", 2, 1_700_000_000.25)
    assert one == jitter_fraction("r-1", "3", 2, 1_700_000_000.25)
    others = {
        jitter_fraction("r-2", "3", 2, 1_700_000_000.25),
        jitter_fraction("r-1", "4", 2, 1_700_000_000.25),
        jitter_fraction("r-1", "3", 3, 1_700_000_000.25),
        jitter_fraction("r-1", "3", 2, 1_700_000_000.5),
    }
    assert one not in others and len(others) == 4
    assert all(0 <= x < 1 for x in (one, *others))


def _seconds(at: Any) -> float:
    from datetime import datetime

    return at if isinstance(at, int | float) else datetime.fromisoformat(at).timestamp()
