"""Retries end to end: a real engine on a real home, time moved by hand on a FakeClock.

Each `RetryPolicy` field gets a test that shows its behaviour through the
journal (`engine.history`), never through the policy object alone. The
engine waits for each backoff on the injected clock: tests wait until it is
parked there (`clock.wait_for_sleepers()`), check that the step has not run
again, and only then move time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fusee_runtime import (
    Ctx,
    Exhausted,
    Failure,
    FakeClock,
    Fatal,
    RetryPolicy,
    RunFailed,
    StepFailed,
    step,
    workflow,
)

T0 = 1_700_000_000.0  # the FakeClock's default start


async def parked(clock: FakeClock) -> float:
    """Waits until the engine sleeps on the clock; returns how far ahead it sleeps."""
    await clock.wait_for_sleepers()
    deadline = clock.next_deadline()
    assert deadline is not None
    return deadline - clock.now()


def step_info(e: StepFailed) -> dict[str, Any]:
    return {
        "name": e.name,
        "kind": e.failure.kind,
        "message": e.failure.message,
        "retryable": e.failure.retryable,
        "causes": [f.kind for f in e.failure.chain()],
    }


# -- attempts ------------------------------------------------------------------------------


async def test_attempts_a_step_that_fails_then_succeeds(make_engine, clock, records) -> None:
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=4, initial=1, factor=1, jitter=False))
    async def flaky() -> str:
        calls.append(clock.now())
        if len(calls) < 4:
            raise ConnectionError(f"down #{len(calls)}")
        return "up"

    @workflow(name="retries.attempts_succeed")
    async def wf(ctx: Ctx, _: None) -> str:
        return await flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="att-ok")
        for n in (1, 2, 3):
            assert await parked(clock) == 1.0
            assert len(calls) == n  # not run again before the backoff is over
            clock.advance(1)
        assert await h.result() == "up"
        assert calls == [T0, T0 + 1, T0 + 2, T0 + 3]
        failed = await records(engine, "att-ok", "AttemptFailed")
        assert [r["attempt"] for r in failed] == [1, 2, 3]
        assert [r["failure"]["kind"] for r in failed] == ["ConnectionError"] * 3
        assert [r["failure"]["message"] for r in failed] == ["down #1", "down #2", "down #3"]
        done = await records(engine, "att-ok", "StepCompleted")
        assert [(r["name"], r["value"]) for r in done] == [("flaky", "up")]
        assert await records(engine, "att-ok", "StepFailed") == []


async def test_attempts_exhausted_raise_step_failed_in_workflow(
    make_engine, clock, run_clock, records
) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=3, initial=1, jitter=False))
    def always_fails() -> None:
        calls.append(1)
        raise ValueError(f"bad #{len(calls)}")

    @workflow(name="retries.attempts_exhausted_caught")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await always_fails()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="att-caught")
        info = await run_clock(h.result())
        assert info == {
            "name": "always_fails",
            "kind": "ValueError",
            "message": "bad #3",
            "retryable": True,
            "causes": ["ValueError"],
        }
        assert len(calls) == 3  # attempts include the first
        assert [r["attempt"] for r in await records(engine, "att-caught", "AttemptFailed")] == [
            1,
            2,
        ]
        final = await records(engine, "att-caught", "StepFailed")
        assert len(final) == 1
        assert final[0]["name"] == "always_fails"
        assert final[0]["failure"]["message"] == "bad #3"
        assert (await h.describe()).status == "completed"


async def test_attempts_exhausted_fail_the_run(make_engine, run_clock) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=2, initial=1, jitter=False))
    async def charge() -> None:
        calls.append(1)
        raise ValueError("card expired")

    @workflow(name="retries.attempts_exhausted_run")
    async def wf(ctx: Ctx, _: None) -> None:
        await charge()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="att-run")
        with pytest.raises(RunFailed) as ei:
            await run_clock(h.result())
        assert len(calls) == 2
        assert ei.value.id == "att-run"
        chain = ei.value.failure.chain()
        step_failure = [f for f in chain if f.kind == "ValueError"]
        assert step_failure, f"the step's failure is not in the run's failure: {chain}"
        assert step_failure[0].message == "card expired"
        assert "charge" in str(ei.value.failure) or "charge" in str(ei.value)
        info = await h.describe()
        assert info.status == "failed"
        assert info.error is not None and "card expired" in info.error


async def test_attempts_one_never_retries(make_engine, records) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy.none())
    async def once() -> None:
        calls.append(1)
        raise ConnectionError("down")

    @workflow(name="retries.attempts_none")
    async def wf(ctx: Ctx, _: None) -> str:
        try:
            await once()
        except StepFailed as e:
            return e.failure.kind
        return "ok"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="att-none")
        assert await h.result() == "ConnectionError"
        assert calls == [1]
        assert await records(engine, "att-none", "AttemptFailed") == []


async def test_engine_default_policy_applies_to_steps_without_one(make_engine, clock) -> None:
    calls: list[int] = []

    @step
    async def flaky() -> int:
        calls.append(1)
        if len(calls) < 2:
            raise ConnectionError("down")
        return len(calls)

    @workflow(name="retries.engine_default")
    async def wf(ctx: Ctx, _: None) -> int:
        return await flaky()

    async with make_engine(retry=RetryPolicy(attempts=2, initial=7, jitter=False)) as engine:
        h = await engine.start(wf, None, id="default-policy")
        assert await parked(clock) == 7.0
        clock.advance(7)
        assert await h.result() == 2


# -- initial, factor, max -----------------------------------------------------------------


async def test_initial_factor_max_give_the_recorded_delays(make_engine, clock, records) -> None:
    calls: list[float] = []
    policy = RetryPolicy(attempts=5, initial=0.5, factor=3, max=4, jitter=False)

    @step(retry=policy)
    async def flaky() -> None:
        calls.append(clock.now())
        raise ConnectionError("down")

    @workflow(name="retries.backoff")
    async def wf(ctx: Ctx, _: None) -> None:
        await flaky()

    expected = [0.5, 1.5, 4.0, 4.0]  # 0.5, 0.5*3, min(0.5*9, 4), min(0.5*27, 4)
    async with make_engine() as engine:
        h = await engine.start(wf, None, id="backoff")
        for n, delay in enumerate(expected, start=1):
            assert await parked(clock) == delay
            assert len(calls) == n
            # Just short of the backoff: still parked, not run again.
            clock.advance(delay - 0.25)
            await asyncio.sleep(0)
            assert clock.sleepers() == 1
            assert len(calls) == n
            clock.advance(0.25)
        with pytest.raises(RunFailed):
            await h.result()
        assert len(calls) == 5
        failed = await records(engine, "backoff", "AttemptFailed")
        assert [r["attempt"] for r in failed] == [1, 2, 3, 4]
        assert [r["delay"] for r in failed] == expected
        assert [r["failed_at"] for r in failed] == calls[:4]
        assert [r["retry_at"] for r in failed] == calls[1:]
        for r in failed:
            assert r["retry_at"] - r["failed_at"] == r["delay"]
            assert r["name"] == "flaky"


async def test_backoff_counts_from_each_failure_not_from_the_attempts_start(
    make_engine, clock, records
) -> None:
    """A slow attempt does not eat into the backoff that follows it."""
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=2, initial=2, jitter=False))
    async def slow_then_fails() -> str:
        calls.append(clock.now())
        if len(calls) == 1:
            clock.advance(30)  # the attempt takes 30 s of (fake) time
            raise ConnectionError("down")
        return "ok"

    @workflow(name="retries.backoff_from_failure")
    async def wf(ctx: Ctx, _: None) -> str:
        return await slow_then_fails()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="from-failure")
        assert await parked(clock) == 2.0
        clock.advance(2)
        assert await h.result() == "ok"
        (r,) = await records(engine, "from-failure", "AttemptFailed")
        assert r["failed_at"] == T0 + 30
        assert r["retry_at"] == T0 + 32
        assert calls == [T0, T0 + 32]


# -- jitter --------------------------------------------------------------------------------


async def test_jitter_draws_each_delay_between_half_and_all_of_the_backoff(
    make_engine, clock, run_clock, records
) -> None:
    policy = RetryPolicy(attempts=8, initial=1, factor=2, max=1000, jitter=True)
    calls: list[float] = []

    @step(retry=policy)
    async def flaky() -> None:
        calls.append(clock.now())
        raise ConnectionError("down")

    @workflow(name="retries.jitter")
    async def wf(ctx: Ctx, _: None) -> None:
        await flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="jitter")
        with pytest.raises(RunFailed):
            await run_clock(h.result())
        failed = await records(engine, "jitter", "AttemptFailed")
        assert [r["attempt"] for r in failed] == [1, 2, 3, 4, 5, 6, 7]
        backoffs = [policy.backoff(r["attempt"]) for r in failed]
        assert backoffs == [1, 2, 4, 8, 16, 32, 64]
        for r, b in zip(failed, backoffs, strict=True):
            assert b / 2 <= r["delay"] <= b, (r, b)
            assert r["retry_at"] - r["failed_at"] == pytest.approx(r["delay"])
        # Drawn, not fixed.
        assert [r["delay"] for r in failed] != backoffs
        # The engine waited exactly the delay it recorded.
        assert [r["retry_at"] for r in failed] == calls[1:]
        assert len(calls) == 8


async def test_jitter_false_waits_exactly_the_backoff(make_engine, clock, run_clock, records):
    @step(retry=RetryPolicy(attempts=4, initial=0.25, factor=2, jitter=False))
    async def flaky() -> None:
        raise ConnectionError("down")

    @workflow(name="retries.no_jitter")
    async def wf(ctx: Ctx, _: None) -> None:
        await flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="no-jitter")
        with pytest.raises(RunFailed):
            await run_clock(h.result())
        failed = await records(engine, "no-jitter", "AttemptFailed")
        assert [r["delay"] for r in failed] == [0.25, 0.5, 1.0]


# -- max_elapsed ---------------------------------------------------------------------------


async def test_max_elapsed_stops_retrying_once_the_next_retry_would_start_too_late(
    make_engine, clock, run_clock, records
) -> None:
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, factor=2, jitter=False, max_elapsed=5))
    async def flaky() -> None:
        calls.append(clock.now())
        raise ConnectionError(f"down #{len(calls)}")

    @workflow(name="retries.max_elapsed")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await flaky()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="max-elapsed")
        info = await run_clock(h.result())
        # Failures at +0, +1, +3; the next retry would start at +7 > +5.
        assert calls == [T0, T0 + 1, T0 + 3]
        assert info["message"] == "down #3"
        failed = await records(engine, "max-elapsed", "AttemptFailed")
        assert [r["retry_at"] - T0 for r in failed] == [1, 3]
        assert len(await records(engine, "max-elapsed", "StepFailed")) == 1


async def test_max_elapsed_allows_a_retry_exactly_at_the_limit(
    make_engine, clock, run_clock
) -> None:
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, factor=2, jitter=False, max_elapsed=7))
    async def flaky() -> None:
        calls.append(clock.now())
        raise ConnectionError("down")

    @workflow(name="retries.max_elapsed_boundary")
    async def wf(ctx: Ctx, _: None) -> None:
        await flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="max-elapsed-eq")
        with pytest.raises(RunFailed):
            await run_clock(h.result())
        assert calls == [T0, T0 + 1, T0 + 3, T0 + 7]


async def test_max_elapsed_counts_from_the_first_failure(make_engine, clock, run_clock) -> None:
    """Time spent in the first attempt does not count: the limit starts at its failure."""
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, factor=2, jitter=False, max_elapsed=5))
    async def slow_then_flaky() -> None:
        calls.append(clock.now())
        if len(calls) == 1:
            clock.advance(100)
        raise ConnectionError("down")

    @workflow(name="retries.max_elapsed_first_failure")
    async def wf(ctx: Ctx, _: None) -> None:
        await slow_then_flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="max-elapsed-first")
        with pytest.raises(RunFailed):
            await run_clock(h.result())
        # First failure at +100; retries at +101 and +103; +107 is past the limit.
        assert calls == [T0, T0 + 101, T0 + 103]


# -- non_retryable ---------------------------------------------------------------------------


async def test_non_retryable_by_name(make_engine, clock, records) -> None:
    errors = [ConnectionError("flaky"), ValueError("invalid card"), ConnectionError("never")]
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, jitter=False, non_retryable=("ValueError",)))
    async def charge() -> None:
        calls.append(1)
        raise errors[len(calls) - 1]

    @workflow(name="retries.non_retryable_name")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await charge()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="nr-name")
        assert await parked(clock) == 1.0  # ConnectionError is retried
        clock.advance(1)
        info = await h.result()
        assert info["kind"] == "ValueError"
        assert info["message"] == "invalid card"
        assert len(calls) == 2
        failed = await records(engine, "nr-name", "AttemptFailed")
        assert [r["failure"]["kind"] for r in failed] == ["ConnectionError"]


async def test_non_retryable_by_class_through_the_cause_chain(make_engine, records) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, jitter=False, non_retryable=(LookupError,)))
    def lookup() -> None:
        calls.append(1)
        try:
            {}["sku-1"]
        except KeyError as e:
            raise RuntimeError("inventory lookup failed") from e

    @workflow(name="retries.non_retryable_class")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await lookup()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="nr-class")
        info = await h.result()
        assert calls == [1]
        assert info["kind"] == "RuntimeError"
        assert info["causes"] == ["RuntimeError", "KeyError"]
        assert await records(engine, "nr-class", "AttemptFailed") == []


async def test_non_retryable_name_of_a_cause(make_engine) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=10, non_retryable=("PermissionError",)))
    async def write() -> None:
        calls.append(1)
        try:
            raise PermissionError("read-only bucket")
        except PermissionError as e:
            raise OSError("upload failed") from e

    @workflow(name="retries.non_retryable_cause_name")
    async def wf(ctx: Ctx, _: None) -> list[str]:
        try:
            await write()
        except StepFailed as e:
            return [f.kind for f in e.failure.chain()]
        return []

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="nr-cause")
        assert await h.result() == ["OSError", "PermissionError"]
        assert calls == [1]


# -- retry_if --------------------------------------------------------------------------------


async def test_retry_if_decides_per_failure_and_attempt(make_engine, clock, records) -> None:
    asked: list[tuple[str, str, int]] = []
    calls: list[int] = []

    def decide(failure: Failure, attempt: int) -> bool:
        asked.append((failure.kind, failure.message, attempt))
        return attempt < 2

    @step(retry=RetryPolicy(attempts=10, initial=1, jitter=False, retry_if=decide))
    async def flaky() -> None:
        calls.append(1)
        raise ConnectionError(f"down #{len(calls)}")

    @workflow(name="retries.retry_if")
    async def wf(ctx: Ctx, _: None) -> str:
        try:
            await flaky()
        except StepFailed as e:
            return e.failure.message
        return "ok"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="retry-if")
        assert await parked(clock) == 1.0
        assert asked == [("ConnectionError", "down #1", 1)]
        clock.advance(1)
        assert await h.result() == "down #2"
        assert asked == [("ConnectionError", "down #1", 1), ("ConnectionError", "down #2", 2)]
        assert len(calls) == 2
        assert len(await records(engine, "retry-if", "AttemptFailed")) == 1


async def test_retry_if_can_read_the_failure(make_engine, clock) -> None:
    errors = [Failure("try later", kind="Http", details={"status": 503})]
    errors.append(Failure("no such order", kind="Http", details={"status": 404}))
    calls: list[int] = []

    @step(
        retry=RetryPolicy(
            attempts=10,
            initial=1,
            jitter=False,
            retry_if=lambda f, _a: (f.details or {}).get("status", 0) >= 500,
        )
    )
    async def fetch() -> None:
        calls.append(1)
        raise errors[len(calls) - 1]

    @workflow(name="retries.retry_if_details")
    async def wf(ctx: Ctx, _: None) -> Any:
        try:
            await fetch()
        except StepFailed as e:
            return e.failure.details
        return None

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="retry-if-details")
        await parked(clock)
        clock.advance(1)
        assert await h.result() == {"status": 404}
        assert len(calls) == 2


# -- final failures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (Fatal("card stolen"), "Fatal"),
        (Failure("card stolen", kind="Declined", retryable=False), "Declined"),
    ],
)
async def test_final_failures_are_never_retried(
    make_engine, records, exc: Failure, kind: str
) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, retry_if=lambda _f, _a: True))
    async def charge() -> None:
        calls.append(1)
        raise exc

    @workflow(name=f"retries.final_{kind}")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await charge()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id=f"final-{kind}")
        info = await h.result()
        assert calls == [1]
        assert info["kind"] == kind
        assert info["message"] == "card stolen"
        assert info["retryable"] is False
        assert await records(engine, f"final-{kind}", "AttemptFailed") == []
        (final,) = await records(engine, f"final-{kind}", "StepFailed")
        assert final["failure"]["retryable"] is False


async def test_fatal_in_a_sync_step_fails_the_run(make_engine) -> None:
    @step(retry=RetryPolicy(attempts=5))
    def validate() -> None:
        raise Fatal("order has no lines")

    @workflow(name="retries.fatal_run")
    async def wf(ctx: Ctx, _: None) -> None:
        await validate()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="fatal-run")
        with pytest.raises(RunFailed) as ei:
            await h.result()
        kinds = [f.kind for f in ei.value.failure.chain()]
        assert "Fatal" in kinds


# -- per-attempt timeout ---------------------------------------------------------------------


async def test_timeout_fails_an_attempt_on_the_fake_clock_and_retries_it(
    make_engine, clock, records
) -> None:
    never = asyncio.Event()
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=3, initial=1, factor=1, jitter=False), timeout=5)
    async def hangs_twice() -> str:
        calls.append(clock.now())
        if len(calls) < 3:
            await never.wait()
        return "finally"

    @workflow(name="retries.timeout")
    async def wf(ctx: Ctx, _: None) -> str:
        return await hangs_twice()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="timeout")
        for n in (1, 2):
            assert await parked(clock) == 5.0  # the attempt's deadline
            assert len(calls) == n
            clock.advance(5)
            assert await parked(clock) == 1.0  # the backoff
            assert len(calls) == n
            clock.advance(1)
        assert await h.result() == "finally"
        assert calls == [T0, T0 + 6, T0 + 12]
        failed = await records(engine, "timeout", "AttemptFailed")
        assert [r["failure"]["kind"] for r in failed] == ["TimedOut", "TimedOut"]
        assert [r["failed_at"] - T0 for r in failed] == [5, 11]
        assert all("hangs_twice" in r["failure"]["message"] for r in failed)


async def test_timeout_on_every_attempt_fails_the_step_with_timed_out(
    make_engine, clock, run_clock
) -> None:
    never = asyncio.Event()
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=2, initial=1, jitter=False), timeout=3)
    async def hangs() -> None:
        calls.append(1)
        await never.wait()

    @workflow(name="retries.timeout_exhausted")
    async def wf(ctx: Ctx, _: None) -> dict[str, Any]:
        try:
            await hangs()
        except StepFailed as e:
            return step_info(e)
        raise AssertionError("the step did not fail")

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="timeout-all")
        info = await run_clock(h.result())
        assert info["kind"] == "TimedOut"
        assert info["name"] == "hangs"
        assert len(calls) == 2
        assert clock.now() == T0 + 3 + 1 + 3


async def test_a_step_that_finishes_within_its_timeout_is_not_failed(make_engine, records):
    @step(timeout=5)
    async def quick() -> int:
        return 1

    @workflow(name="retries.timeout_ok")
    async def wf(ctx: Ctx, _: None) -> int:
        return await quick()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="timeout-ok")
        assert await h.result() == 1
        assert await records(engine, "timeout-ok", "AttemptFailed") == []


# -- on_exhausted ----------------------------------------------------------------------------


async def test_on_exhausted_pause_pauses_until_resume_gives_a_fresh_budget(
    make_engine, clock, run_clock, records
) -> None:
    calls: list[int] = []

    @step(retry=RetryPolicy(attempts=2, initial=1, jitter=False, on_exhausted=Exhausted.PAUSE))
    async def flaky() -> str:
        calls.append(1)
        if len(calls) <= 3:
            raise ConnectionError("down")
        return "up"

    @workflow(name="retries.on_exhausted_pause")
    async def wf(ctx: Ctx, _: None) -> str:
        return await flaky()

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="pause")
        waiting = asyncio.ensure_future(h.result())
        await run_clock(engine.wait_until(lambda: engine.runs.latest("pause").live.parked))
        info = await h.describe()
        assert (info.status, len(calls)) == ("paused", 2)
        assert not waiting.done()  # callers keep waiting
        paused = await records(engine, "pause", "StepPaused")
        assert [(r["attempt"], r["failure"]["kind"]) for r in paused] == [(2, "ConnectionError")]
        await h.resume()
        # A fresh budget: attempt 1 fails again, is retried, attempt 2 succeeds.
        assert await run_clock(waiting) == "up"
        assert len(calls) == 4
        attempts = [r["attempt"] for r in await records(engine, "pause", "AttemptFailed")]
        assert attempts == [1, 1]


async def test_engine_default_on_exhausted_pauses_steps_without_their_own(
    make_engine, run_clock
) -> None:
    @step(retry=RetryPolicy(attempts=1))
    async def down() -> None:
        raise ConnectionError("down")

    @workflow(name="retries.on_exhausted_config")
    async def wf(ctx: Ctx, _: None) -> None:
        await down()

    async with make_engine(on_exhausted=Exhausted.PAUSE) as engine:
        h = await engine.start(wf, None, id="pause-config")
        await engine.wait_until(lambda: engine.runs.latest("pause-config").live.parked)
        assert (await h.describe()).status == "paused"


async def test_on_exhausted_pause_leaves_final_failures_alone(make_engine) -> None:
    @step(retry=RetryPolicy(attempts=2, on_exhausted=Exhausted.PAUSE))
    async def bad() -> None:
        raise Fatal("no")

    @workflow(name="retries.on_exhausted_pause_fatal")
    async def wf(ctx: Ctx, _: None) -> str:
        try:
            await bad()
        except StepFailed as e:
            return e.failure.message
        return "ok"

    async with make_engine() as engine:
        h = await engine.start(wf, None, id="pause-fatal")
        assert await h.result() == "no"


# -- backoff across close and reopen ---------------------------------------------------------


async def test_jittered_backoff_replays_identically_after_reopen(
    make_engine, clock, records
) -> None:
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=4, initial=10, factor=2, max=100, jitter=True))
    async def flaky() -> str:
        calls.append(clock.now())
        if len(calls) < 3:
            raise ConnectionError(f"down #{len(calls)}")
        return "up"

    @workflow(name="retries.reopen_backoff")
    async def wf(ctx: Ctx, _: None) -> str:
        return await flaky()

    async with make_engine() as engine:
        await engine.start(wf, None, id="reopen")
        await parked(clock)
        (first,) = await records(engine, "reopen", "AttemptFailed")
        assert first["attempt"] == 1
        assert clock.next_deadline() == first["retry_at"]
        assert 5 <= first["delay"] <= 10
        assert len(calls) == 1
    # Closed while the step waits in its backoff; some time passes, not enough.
    clock.advance(first["delay"] / 4)

    async with make_engine() as engine:
        await parked(clock)
        # Waits for the recorded instant, not for a freshly drawn delay.
        assert clock.next_deadline() == first["retry_at"]
        assert len(calls) == 1
        clock.set(first["retry_at"])
        await parked(clock)
        failed = await records(engine, "reopen", "AttemptFailed")
        assert [r["attempt"] for r in failed] == [1, 2]  # continues, does not restart at 1
        second = failed[1]
        assert second["failed_at"] == first["retry_at"]
        assert 10 <= second["delay"] <= 20  # the backoff of the second failure
        assert calls == [T0, first["retry_at"]]

    async with make_engine() as engine:
        await parked(clock)
        assert clock.next_deadline() == second["retry_at"]
        assert len(calls) == 2
        clock.set(second["retry_at"])
        assert await engine.handle("reopen").result() == "up"
        assert calls == [T0, first["retry_at"], second["retry_at"]]
        (done,) = await records(engine, "reopen", "StepCompleted")
        assert done["value"] == "up"


async def test_max_elapsed_counts_from_the_first_failure_across_reopen(
    make_engine, clock, run_clock
) -> None:
    calls: list[float] = []

    @step(retry=RetryPolicy(attempts=10, initial=1, factor=2, jitter=False, max_elapsed=5))
    async def flaky() -> None:
        calls.append(clock.now())
        raise ConnectionError("down")

    @workflow(name="retries.reopen_max_elapsed")
    async def wf(ctx: Ctx, _: None) -> None:
        await flaky()

    async with make_engine() as engine:
        await engine.start(wf, None, id="reopen-elapsed")
        assert await parked(clock) == 1.0
        clock.advance(1)
        assert await parked(clock) == 2.0
        assert calls == [T0, T0 + 1]

    async with make_engine() as engine:
        with pytest.raises(RunFailed):
            await run_clock(engine.handle("reopen-elapsed").result())
        # The limit still counts from the failure at +0 recorded before the reopen.
        assert calls == [T0, T0 + 1, T0 + 3]
