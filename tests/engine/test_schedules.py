"""Cron schedules on the injected clock: firing on time, overlap, catch-up, pause.

The clock starts at 2023-11-14 22:13:20 UTC (FakeClock's default), so a
"*/5 * * * *" schedule armed then fires at 22:15:00, 22:20:00, ... Tests
move the clock only while the scheduler sleeps on it, and wait on the
engine's own progress, never on real time.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fusee_runtime import Ctx, FakeClock, Rejected, workflow
from fusee_runtime.engine.schedules import CATCHUP_MAX, LATE_S, instant_id
from fusee_runtime.journal import records
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R
from fusee_runtime.journal.storage import Storage

T0 = 1_700_000_000.0  # 22:13:20
FIRST = 1_700_000_100.0  # 22:15:00, the first */5 instant after T0
PERIOD = 300.0


@workflow(name="sched.every5", cron="*/5 * * * *")
async def every5(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="sched.skip", cron="*/5 * * * *", overlap="skip")
async def skipping(ctx: Ctx, at: str) -> str:
    await ctx.wait_for("go")
    return at


@workflow(name="sched.buffer", cron="*/5 * * * *", overlap="buffer_one")
async def buffering(ctx: Ctx, at: str) -> str:
    await ctx.wait_for("go")
    return at


@workflow(name="sched.all", cron="*/5 * * * *", overlap="allow", catchup="all")
async def catch_all(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="sched.one", cron="*/5 * * * *", overlap="allow", catchup="one")
async def catch_one(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="sched.none", cron="*/5 * * * *", overlap="allow", catchup="none")
async def catch_none(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="sched.plain")
async def plain(ctx: Ctx, at: str) -> str:
    return at


@workflow(name="sched.paris", cron="0 9 * * *", timezone="Europe/Paris")
async def paris(ctx: Ctx, at: str) -> str:
    return at


def runs_of(engine: Any, name: str) -> list[str]:
    """Ids of the runs the schedule of `name` started, oldest first (in memory, or
    closed and moved to the history store)."""
    rows = engine.runs.store.list(None, name, None)
    runs = [engine.runs.by_run_id.get(row.run_id) or engine.runs.stored(row.run_id) for row in rows]
    known = {r.run_id for r in runs}
    runs += [r for r in engine.runs.by_run_id.values() if r.run_id not in known]
    return [
        r.workflow_id
        for r in sorted(runs, key=lambda r: r.start_lsn)
        if r.origin and r.origin.get("schedule") == name
    ]


def schedule_records(home: Path) -> list[list[Any]]:
    """The schedule records durable in the home's journal, in order."""
    scan = recover(home / "journal", Storage())
    recs = [records.decode(payload) for _, payload in scan.records]
    return [r for r in recs if r[0] in records.SCHEDULES]


def ids(name: str, *instants: float) -> list[str]:
    return [instant_id(name, t) for t in instants]


@pytest.fixture
def scheduling(make_engine: Any) -> Any:
    def make(**config: Any) -> Any:
        config.setdefault("schedules", True)
        return make_engine(**config)

    return make


async def settle(engine: Any, clock: FakeClock, at: float) -> None:
    """Moves the clock to `at` once the scheduler sleeps, and waits until it has fired
    what is due then and sleeps again."""
    await clock.wait_for_sleepers()
    clock.set(at)
    await asyncio.sleep(0)
    await clock.wait_for_sleepers()
    await engine.wait_until(
        lambda: engine.durability.durable_lsn >= engine.durability.writer.next_lsn - 1
    )


async def test_a_schedule_fires_at_each_instant_with_the_instant_as_input(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        await settle(engine, clock, FIRST - 1)
        assert runs_of(engine, "sched.every5") == []
        await settle(engine, clock, FIRST)
        assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST)
        h = engine.handle(instant_id("sched.every5", FIRST))
        assert await h.result() == "2023-11-14T22:15:00Z"
        await settle(engine, clock, FIRST + PERIOD)
        assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST, FIRST + PERIOD)


async def test_a_schedule_in_a_timezone_fires_at_its_local_time(
    scheduling: Any, clock: FakeClock
) -> None:
    nine_paris = datetime(2023, 11, 15, 8, 0, tzinfo=UTC).timestamp()  # UTC+1 in November
    async with scheduling() as engine:
        await settle(engine, clock, nine_paris - 1)
        assert runs_of(engine, "sched.paris") == []
        await settle(engine, clock, nine_paris)
        assert runs_of(engine, "sched.paris") == ids("sched.paris", nine_paris)


async def test_overlap_skip_skips_while_the_previous_run_is_open(
    scheduling: Any, clock: FakeClock, home: Path
) -> None:
    async with scheduling() as engine:
        await settle(engine, clock, FIRST)
        first = instant_id("sched.skip", FIRST)
        assert runs_of(engine, "sched.skip") == [first]
        await settle(engine, clock, FIRST + PERIOD)  # the first run still waits for "go"
        assert runs_of(engine, "sched.skip") == [first]
        await engine.signal(first, "go")
        await engine.handle(first).result()
        await settle(engine, clock, FIRST + 2 * PERIOD)
        assert runs_of(engine, "sched.skip") == ids("sched.skip", FIRST, FIRST + 2 * PERIOD)
        skipped = [r for r in schedule_records(home) if r[1] == "sched.skip" and r[3] == "skipped"]
        assert [r[2] for r in skipped] == [FIRST + PERIOD]


async def test_overlap_buffer_one_starts_one_when_the_open_run_closes(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        await settle(engine, clock, FIRST)
        first = instant_id("sched.buffer", FIRST)
        await settle(engine, clock, FIRST + PERIOD)  # buffered
        await settle(engine, clock, FIRST + 2 * PERIOD)  # one is buffered already: skipped
        assert runs_of(engine, "sched.buffer") == [first]
        await engine.signal(first, "go")
        second = instant_id("sched.buffer", FIRST + PERIOD)
        await engine.wait_until(lambda: second in engine.runs.newest)
        assert runs_of(engine, "sched.buffer") == [first, second]
        assert await engine.handle(first).result() == "2023-11-14T22:15:00Z"


@pytest.mark.parametrize(
    ("name", "fired"),
    [
        ("sched.all", [FIRST, FIRST + PERIOD, FIRST + 2 * PERIOD]),
        ("sched.one", [FIRST + 2 * PERIOD]),
        ("sched.none", []),
    ],
)
async def test_downtime_of_three_periods_fires_by_catchup(
    scheduling: Any, clock: FakeClock, name: str, fired: list[float]
) -> None:
    async with scheduling():
        await clock.wait_for_sleepers()  # armed at T0, then the home sits closed
    clock.set(FIRST + 2 * PERIOD + 2 * LATE_S)  # 22:27: three instants came and went
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        await engine.wait_until(
            lambda: engine.durability.durable_lsn >= engine.durability.writer.next_lsn - 1
        )
        assert runs_of(engine, name) == ids(name, *fired)
        # Then it fires on time again.
        await settle(engine, clock, FIRST + 3 * PERIOD)
        assert runs_of(engine, name) == ids(name, *fired, FIRST + 3 * PERIOD)


async def test_an_instant_less_than_late_s_late_fires_even_with_catchup_none(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling():
        await clock.wait_for_sleepers()
    clock.set(FIRST + LATE_S / 2)
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        await engine.wait_until(lambda: bool(runs_of(engine, "sched.none")))
        assert runs_of(engine, "sched.none") == ids("sched.none", FIRST)


async def test_a_long_downtime_catches_up_at_most_catchup_max(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling():
        await clock.wait_for_sleepers()
    clock.set(T0 + (CATCHUP_MAX + 50) * PERIOD)
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        await engine.wait_until(lambda: len(runs_of(engine, "sched.all")) >= CATCHUP_MAX)
        assert len(runs_of(engine, "sched.all")) == CATCHUP_MAX


async def test_pause_is_durable_and_unpause_does_not_catch_up(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        await engine.schedules.act("sched.every5", "pause")
        await settle(engine, clock, FIRST)
        assert runs_of(engine, "sched.every5") == []
    clock.set(FIRST + PERIOD)
    async with scheduling() as engine:
        (row,) = [s for s in engine.schedules.list() if s["workflow"] == "sched.every5"]
        assert row["paused"] is True
        await clock.wait_for_sleepers()
        assert runs_of(engine, "sched.every5") == []
        await engine.schedules.act("sched.every5", "unpause")
        await settle(engine, clock, FIRST + PERIOD + 1)
        assert runs_of(engine, "sched.every5") == []  # what came due while paused
        await settle(engine, clock, FIRST + 2 * PERIOD)
        assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST + 2 * PERIOD)


async def test_trigger_starts_a_run_now_whatever_the_overlap(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        await settle(engine, clock, FIRST)
        info = await engine.schedules.act("sched.skip", "trigger")
        assert info.id == instant_id("sched.skip", FIRST, exact=True)
        assert len(runs_of(engine, "sched.skip")) == 2
        with pytest.raises(Rejected, match="has no cron schedule"):
            await engine.schedules.act("sched.plain", "trigger")


async def test_a_run_started_before_its_firing_was_recorded_is_not_started_again(
    scheduling: Any, clock: FakeClock, home: Path
) -> None:
    """The crash window between a firing's run and its record: the run's id says it fired."""
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        spec = engine.schedules._spec("sched.every5")
        engine.schedules._start(spec, FIRST, instant_id(spec.name, FIRST))
    clock.set(FIRST + 1)
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        await engine.wait_until(
            lambda: engine.durability.durable_lsn >= engine.durability.writer.next_lsn - 1
        )
        assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST)
        fired = [r for r in schedule_records(home) if r[0] == R.ScheduleFired]
        assert [(r[2], r[3]) for r in fired if r[1] == "sched.every5"] == [(FIRST, "started")]


async def test_schedules_do_not_fire_without_schedules_on(
    make_engine: Any, clock: FakeClock
) -> None:
    async with make_engine() as engine:
        clock.set(FIRST + PERIOD)
        await asyncio.sleep(0)
        assert runs_of(engine, "sched.every5") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "*/5 * * *"}, "invalid cron expression '*/5 * * *': "),
        ({"cron": "61 * * * *"}, "invalid cron expression '61 * * * *': "),
        ({"cron": "* * * * *", "timezone": "Mars/Base"}, "unknown timezone 'Mars/Base'"),
        ({"cron": "* * * * *", "overlap": "queue"}, "overlap is 'skip', 'allow' or 'buffer_one'"),
        ({"cron": "* * * * *", "catchup": "some"}, "catchup is 'one', 'all' or 'none'"),
        ({"cron": "*/10 * * * * *"}, "a cron expression has five fields"),
        ({"cron": "* * * * *", "timezone": ""}, "unknown timezone ''"),
        ({"timezone": "UTC"}, "timezone=, overlap= and catchup= go with cron="),
        ({"catchup": "all"}, "timezone=, overlap= and catchup= go with cron="),
    ],
)
def test_a_bad_schedule_fails_at_import(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=r"@workflow sched\.bad: ") as e:

        @workflow(name="sched.bad", **kwargs)  # type: ignore[arg-type]
        async def bad(ctx: Ctx, at: str) -> None: ...

    assert message in str(e.value)


@workflow(name="sched.all_skip", cron="*/5 * * * *", catchup="all")  # overlap "skip"
async def catch_all_skipping(ctx: Ctx, at: str) -> str:
    await ctx.wait_for("go")
    return at


async def test_catchup_all_fires_every_missed_instant_whatever_the_overlap(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling():
        await clock.wait_for_sleepers()
    clock.set(FIRST + 2 * PERIOD + 2 * LATE_S)
    async with scheduling() as engine:
        await clock.wait_for_sleepers()
        await engine.wait_until(lambda: len(runs_of(engine, "sched.all_skip")) == 3)
        # The caught-up runs are open now: the next instant on time skips, as overlap says.
        await settle(engine, clock, FIRST + 3 * PERIOD)
        assert len(runs_of(engine, "sched.all_skip")) == 3


@workflow(name="sched.berlin", cron="45 2 * * *", timezone="Europe/Berlin")
async def berlin(ctx: Ctx, at: str) -> str:
    return at


async def test_the_repeated_hour_of_a_dst_change_fires_once_and_does_not_spin(
    make_engine: Any,
) -> None:
    """Found in review: stepping forward from inside the repeated hour gave an instant in
    the past, and the scheduler woke again at once, forever."""
    fold = FakeClock(datetime(2024, 10, 27, 0, 30, tzinfo=UTC).timestamp())  # 02:30 CEST
    async with make_engine(clock=fold, schedules=True) as engine:
        await fold.wait_for_sleepers()
        fold.set(datetime(2024, 10, 27, 0, 45, tzinfo=UTC).timestamp())  # 02:45 CEST: fires
        await engine.wait_until(lambda: len(runs_of(engine, "sched.berlin")) == 1)
        fold.set(datetime(2024, 10, 27, 1, 10, tzinfo=UTC).timestamp())  # 02:10 CET, again
        await fold.wait_for_sleepers()
        ticks = engine.schedules.ticks
        engine.schedules.poke()
        await fold.wait_for_sleepers()
        await engine.wait_until(lambda: engine.schedules.ticks > ticks)
        assert engine.schedules.ticks == ticks + 1  # one look, then asleep until tomorrow
        (row,) = [s for s in engine.schedules.list() if s["workflow"] == "sched.berlin"]
        assert row["next"] == "2024-10-28T01:45:00Z"
        assert len(runs_of(engine, "sched.berlin")) == 1


async def test_another_expression_fires_from_when_it_is_armed(
    scheduling: Any, clock: FakeClock
) -> None:
    """Found in review: a changed expression caught up its own instants since the old
    expression's last firing."""
    async with scheduling() as engine:
        await settle(engine, clock, FIRST)
        assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST)
    original = every5.cron
    every5.cron = "* * * * *"
    try:
        clock.set(FIRST + 30 * 60)  # half an hour later, with catchup "one"
        async with scheduling() as engine:
            await clock.wait_for_sleepers()
            await engine.wait_until(lambda: engine.schedules.ticks >= 1)
            assert runs_of(engine, "sched.every5") == ids("sched.every5", FIRST)
            await settle(engine, clock, FIRST + 31 * 60)
            assert runs_of(engine, "sched.every5")[-1] == instant_id(
                "sched.every5", FIRST + 31 * 60
            )
    finally:
        every5.cron = original


async def test_a_paused_schedule_shows_no_next_instant(scheduling: Any) -> None:
    async with scheduling() as engine:
        row = await engine.schedules.act("sched.every5", "pause")
        assert (row["paused"], row["next"]) == (True, None)
