"""Starts in bursts (issue 40, item 3), on both stores and a fake clock: a debounce of 100
starts in 1 s for one key starts one run, with the last input, once the burst is quiet;
keys make bursts of their own; `debounce_max` caps how long a burst postpones its run;
a burst goes on across a crash. A throttle lets n runs begin in any window and delays,
never drops, the rest, its window held across a crash."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fusee_runtime import Ctx, Rate, Rejected, Status, workflow
from fusee_runtime.clock import FakeClock

STORES = ("local", "postgresql")

BEGAN: list[tuple[Any, float]] = []  # (input, when) of each run's code, first life
CLOCK: list[FakeClock] = []


@workflow(name="burst.sync")
async def sync(ctx: Ctx, arg: Any) -> Any:
    if (arg, ctx.run_id) not in [(a, r) for a, r, _ in _seen]:
        _seen.append((arg, ctx.run_id, CLOCK[0].now()))
        BEGAN.append((arg, CLOCK[0].now()))
    return arg


_seen: list[tuple[Any, str, float]] = []


@pytest.fixture(autouse=True)
def _clock(clock: FakeClock) -> Any:
    CLOCK[:] = [clock]
    BEGAN.clear()
    _seen.clear()
    yield
    CLOCK.clear()


async def test_a_debounce_of_100_starts_in_a_second_starts_one_run_with_the_last_input(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        first = clock.now()
        handles = []
        for i in range(100):
            handles.append(
                await engine.start(sync, i, id=f"event-{i}", debounce=2, debounce_key="acme")
            )
            clock.advance(0.01)
        assert {(h.id, h.run_id) for h in handles} == {("event-0", handles[0].run_id)}
        assert (await handles[0].describe()).status == Status.SCHEDULED
        assert BEGAN == []  # quiet for less than 2 s: nothing began
        other = await engine.start(sync, "other", debounce=2, debounce_key="globex")
        assert other.run_id != handles[0].run_id  # a key of its own
        clock.advance(2)
        assert await handles[-1].result() == 99
        assert await other.result() == "other"
        assert BEGAN[0] == (99, pytest.approx(first + 1.0 + 2))  # 2 s after the last start
        history = [e["type"] for e in await engine.history("event-0")]
        assert history.count("StartDebounced") == 99 and history.count("RunStarted") == 1
        later = await engine.start(sync, "later", id="event-x", debounce=2, debounce_key="acme")
        assert later.id == "event-x"  # the run began: a new burst
        clock.advance(2)
        assert await later.result() == "later"
        assert [arg for arg, _ in BEGAN] == [99, "other", "later"]


async def test_debounce_max_caps_how_long_a_burst_postpones_its_run(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        first = clock.now()
        handles = []
        for i in range(8):  # a start every 0.5 s for 4 s: never quiet for 1 s
            h = await engine.start(
                sync, i, debounce=timedelta(seconds=1), debounce_key="k", debounce_max=3
            )
            handles.append(h)
            clock.advance(0.5)
        runs = sorted({h.run_id for h in handles}, key=[h.run_id for h in handles].index)
        assert len(runs) == 2  # the cap (3 s after the first) began the first run
        assert [await h.result() for h in handles[:1]] == [5]  # the input it had then
        assert BEGAN[0] == (5, first + 3)
        clock.advance(1)
        assert await handles[-1].result() == 7


async def test_a_burst_goes_on_across_a_crash(make_engine: Any, clock: FakeClock) -> None:
    engine = make_engine()
    await engine.open()
    h = await engine.start(sync, "before", debounce=5, debounce_key="c")
    clock.advance(1)
    await engine.close(crash=True)
    async with make_engine() as engine:
        again = await engine.start(sync, "after", debounce=5, debounce_key="c")
        assert again.run_id == h.run_id
        clock.advance(4.5)
        assert (await again.describe()).status == Status.SCHEDULED  # 5 s after the last
        clock.advance(0.5)
        assert await again.result() == "after"
        assert [("after", clock.now())] == BEGAN


async def test_a_throttle_delays_starts_beyond_its_rate_and_holds_across_a_crash(
    make_engine: Any, clock: FakeClock
) -> None:
    rate = Rate(2, per=10, key="tenant-a")
    engine = make_engine()
    await engine.open()
    t0 = clock.now()
    handles = [await engine.start(sync, i, throttle=rate) for i in range(5)]
    statuses = [(await h.describe()).status for h in handles]
    assert statuses[2:] == [Status.SCHEDULED] * 3
    assert [await h.result() for h in handles[:2]] == [0, 1]
    begins = [(await h.describe()).waiting[0].until for h in handles[2:]]
    assert [b.timestamp() - t0 for b in begins if b is not None] == [10, 10, 20]
    other = await engine.start(sync, "b", throttle=Rate(2, per=10, key="tenant-b"))
    assert await other.result() == "b"  # a key's window is its own
    await engine.close(crash=True)
    async with make_engine() as engine:
        late = await engine.start(sync, "late", throttle=rate)  # the window holds: 20 s on
        (wait,) = (await late.describe()).waiting
        assert wait.until is not None and wait.until.timestamp() - t0 == 20
        clock.advance(10)
        assert [await engine.handle(h.id).result() for h in handles[2:4]] == [2, 3]
        clock.advance(10)
        assert [await engine.handle(handles[4].id).result(), await late.result()] == [4, "late"]
    assert [at - t0 for _, at in BEGAN] == [0, 0, 0, 10, 10, 20, 20]


async def test_what_a_start_may_not_ask_together(make_engine: Any) -> None:
    async with make_engine() as engine:
        with pytest.raises(Rejected, match="debounce is a positive duration"):
            await engine.start(sync, 1, debounce=0)
        with pytest.raises(Rejected, match="go with debounce"):
            await engine.start(sync, 1, debounce_key="k")
        with pytest.raises(Rejected, match="debounce goes with no update"):
            await engine.start(sync, 1, debounce=1, start_delay=1)
        with pytest.raises(Rejected, match="debounce goes with no update"):
            await engine.start(sync, 1, debounce=1, throttle=Rate(1, per=1))
        with pytest.raises(Rejected, match="throttle is a Rate"):
            await engine.start(sync, 1, throttle=5)  # type: ignore[arg-type]
        with pytest.raises(Rejected, match="takes a string key"):
            await engine.start(sync, 1, throttle=Rate(1, per=1, key=lambda x: x))


async def test_review_findings_what_is_refused_and_what_is_forgotten(
    make_engine: Any, clock: FakeClock
) -> None:
    """Review findings: a start refused records nothing (the id's open run is not
    terminated first); a throttle goes with no delay, no update, and no slot past the
    year 9999; `debounce_max` is at least `debounce`; a start after its burst's run
    was due opens a new burst; a burst whose run began is forgotten."""
    async with make_engine() as engine:
        await engine.start(sync, "x", id="X", start_delay=100)
        with pytest.raises(Rejected, match="takes a string key"):
            await engine.start(
                sync, 2, id="X", on_conflict="new_run", throttle=Rate(1, per=60, key=lambda: "k")
            )
        assert (await engine.handle("X").describe()).status == Status.SCHEDULED
        with pytest.raises(Rejected, match="goes with no start_delay"):
            await engine.start(sync, 1, start_delay=5, throttle=Rate(1, per=1))
        with pytest.raises(Rejected, match="no start_delay, start_at, queue or throttle"):
            await engine.start(sync, 1, id="U", update=("u", 1), throttle=Rate(1, per=1))
        assert engine.runs.find_latest("U") is None
        far = Rate(1, per=1e12, key="far")
        await engine.start(sync, 1, throttle=far)
        with pytest.raises(Rejected, match="past the year 9999"):
            await engine.start(sync, 2, throttle=far)
        assert len(await engine.list()) == 2
        with pytest.raises(Rejected, match="debounce_max is at least debounce"):
            await engine.start(sync, 1, debounce=10, debounce_max=2)
        first = await engine.start(sync, "a", debounce=2, debounce_key="late")
        clock.advance(100)  # (its timer fires; a start now finds it begun either way)
        later = await engine.start(sync, "b", debounce=2, debounce_key="late")
        assert later.run_id != first.run_id
        many = [await engine.start(sync, i, debounce=1, debounce_key=f"doc-{i}") for i in range(20)]
        clock.advance(2)
        assert [await h.result() for h in many] == list(range(20))
        assert await later.result() == "b"
        assert engine.driver.bursts._pending == {}
