"""Cron schedules made at run time (issue 38): created, changed, paused, deleted and
backfilled from outside the code, durable like the ones `@workflow(cron=...)` declares.

On the injected clock (2023-11-14 22:13:20 UTC): the clock moves only while the
scheduler sleeps on it (`settle`, as in test_schedules.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from test_schedules import FIRST, T0, settle

from fusee_runtime import Ctx, FakeClock, NotFound, Rejected, workflow
from fusee_runtime.engine.schedules import instant_id

STORES = ("local", "postgresql")
"""Each test that opens an engine runs on the local journal and on PostgreSQL."""


@workflow(name="made.echo")
async def made_echo(ctx: Ctx, given: Any) -> Any:
    return given


@pytest.fixture
def scheduling(make_engine: Any) -> Any:
    def make(**config: Any) -> Any:
        config.setdefault("schedules", True)
        return make_engine(**config)

    return make


def started(engine: Any, name: str) -> list[str]:
    """The ids of the runs schedule `name` started (open, closed or moved to the history
    store), in id order."""
    ids = {info.id for info in engine.runs.listed(None, None, None)}
    return sorted(id for id in ids if id.startswith(f"{name}@"))


async def test_a_made_schedule_fires_with_its_input_and_holds_across_a_reopen(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        made = await engine.schedules.set(
            "five", {"workflow": "made.echo", "cron": "*/5 * * * *", "input": {"n": 1}}, create=True
        )
        assert (made["name"], made["workflow"], made["made"]) == ("five", "made.echo", True)
        await settle(engine, clock, FIRST)
        assert started(engine, "five") == [instant_id("five", FIRST)]
        assert await engine.handle(instant_id("five", FIRST)).result() == {"n": 1}
    async with scheduling() as engine:  # recorded: the next instant fires after a reopen
        await settle(engine, clock, FIRST + 300)
        assert started(engine, "five") == [instant_id("five", t) for t in (FIRST, FIRST + 300)]


async def test_a_made_schedule_is_changed_paused_and_deleted(
    scheduling: Any, clock: FakeClock
) -> None:
    async with scheduling() as engine:
        await engine.schedules.set(
            "tick", {"workflow": "made.echo", "cron": "*/5 * * * *"}, create=True
        )
        changed = await engine.schedules.set("tick", {"cron": "*/10 * * * *"}, create=False)
        assert changed["cron"] == "*/10 * * * *" and changed["workflow"] == "made.echo"
        await settle(engine, clock, FIRST)  # 22:15: not an instant of */10
        assert started(engine, "tick") == []
        await engine.schedules.act("tick", "pause")
        await settle(engine, clock, FIRST + 300)  # 22:20, paused
        assert started(engine, "tick") == []
        await engine.schedules.act("tick", "unpause")
        await engine.schedules.delete("tick")
        await settle(engine, clock, FIRST + 900)  # 22:30: deleted, nothing fires
        assert started(engine, "tick") == []
        assert [s["name"] for s in engine.schedules.list() if s["made"]] == []
        # Made again under its name: a new schedule, from now on.
        await engine.schedules.set(
            "tick", {"workflow": "made.echo", "cron": "*/5 * * * *"}, create=True
        )
        await settle(engine, clock, FIRST + 1200)  # 22:35
        assert started(engine, "tick") == [instant_id("tick", FIRST + 1200)]


async def test_a_backfill_starts_each_slot_once_even_run_twice(
    scheduling: Any, clock: FakeClock
) -> None:
    clock.set(T0 + 2 * 86400)
    async with scheduling() as engine:
        await engine.schedules.set(
            "hourly",
            {"workflow": "made.echo", "cron": "0 * * * *", "overlap": "allow"},
            create=True,
        )
        start = datetime(2023, 11, 15, 0, 0, tzinfo=UTC).timestamp()
        first = await engine.schedules.backfill("hourly", start, start + 24 * 3600)
        assert [outcome for _, outcome in first] == ["started"] * 24
        again = await engine.schedules.backfill("hourly", start, start + 24 * 3600)
        assert again == [[id, "existed"] for id, _ in first]
        hours = [start + h * 3600 for h in range(24)]
        assert started(engine, "hourly") == sorted(instant_id("hourly", t) for t in hours)
        run = engine.runs.latest(instant_id("hourly", hours[0]))
        assert run.origin["backfill"] is True


async def test_with_skip_a_backfill_starts_nothing_while_a_run_of_it_is_open(
    scheduling: Any, clock: FakeClock
) -> None:
    @workflow(name="made.waits")
    async def made_waits(ctx: Ctx, given: Any) -> None:
        await ctx.wait_for("go")

    clock.set(T0 + 86400)
    async with scheduling() as engine:
        await engine.schedules.set(
            "skipping", {"workflow": "made.waits", "cron": "0 * * * *"}, create=True
        )
        start = datetime(2023, 11, 15, 0, 0, tzinfo=UTC).timestamp()
        done = await engine.schedules.backfill("skipping", start, start + 3 * 3600)
        assert [outcome for _, outcome in done] == ["started", "skipped", "skipped"]


@pytest.mark.parametrize(
    ("name", "fields", "create", "error", "said"),
    [
        ("x", {"workflow": "made.echo"}, True, Rejected, "its workflow and its cron"),
        ("x", {"workflow": "made.echo", "cron": "* * *"}, True, Rejected, "five fields"),
        (
            "x",
            {"workflow": "made.echo", "cron": "* * * * *", "overlap": "no"},
            True,
            Rejected,
            "overlap",
        ),
        (
            "x",
            {"workflow": "made.echo", "cron": "* * * * *", "colour": "red"},
            True,
            Rejected,
            "no field",
        ),
        ("x", {"workflow": "made.nowhere", "cron": "* * * * *"}, True, NotFound, "made.nowhere"),
        ("x", {"cron": "* * * * *"}, False, NotFound, "no schedule 'x'"),
    ],
)
async def test_a_bad_schedule_is_refused_and_records_nothing(
    scheduling: Any,
    name: str,
    fields: dict[str, Any],
    create: bool,
    error: type[Exception],
    said: str,
) -> None:
    async with scheduling() as engine:
        with pytest.raises(error, match=said):
            await engine.schedules.set(name, fields, create=create)
        assert [s["name"] for s in engine.schedules.list() if s["made"]] == []


async def test_a_name_taken_is_refused(scheduling: Any) -> None:
    async with scheduling() as engine:
        await engine.schedules.set("n", {"workflow": "made.echo", "cron": "0 * * * *"}, create=True)
        with pytest.raises(Rejected, match="exists"):
            await engine.schedules.set(
                "n", {"workflow": "made.echo", "cron": "0 * * * *"}, create=True
            )
        with pytest.raises(NotFound):
            await engine.schedules.delete("none-such")


# -- found in review ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("a/b", "may not contain"),
        ("made.echo", "a workflow.s name"),
        ("", "a schedule name is a string"),
    ],
)
async def test_a_name_its_runs_ids_cannot_carry_or_a_workflows_is_refused(
    scheduling: Any, name: str, said: str
) -> None:
    async with scheduling() as engine:
        with pytest.raises(Rejected, match=said):
            await engine.schedules.set(
                name, {"workflow": "made.echo", "cron": "0 * * * *"}, create=True
            )
        assert [s["name"] for s in engine.schedules.list() if s["made"]] == []


async def test_a_backfill_of_too_long_a_range_is_refused_without_walking_it(
    scheduling: Any, clock: FakeClock
) -> None:
    clock.set(T0 + 2 * 365 * 86400)
    async with scheduling() as engine:
        await engine.schedules.set(
            "often", {"workflow": "made.echo", "cron": "* * * * *"}, create=True
        )
        with pytest.raises(Rejected, match="at most 1000 runs"):
            await engine.schedules.backfill("often", T0, clock.now())
        with pytest.raises(Rejected, match="out of the calendar"):
            await engine.schedules.backfill("often", -62135596800.0, T0)  # year one


def test_the_ui_acts_on_a_made_schedule_by_its_name() -> None:
    from fusee_runtime.control.ui.views import _schedule_row

    row = _schedule_row(
        {"name": "five", "workflow": "made.echo", "cron": "*/5 * * * *", "paused": False}
    )
    assert 'data-schedule="five"' in row and 'data-schedule="made.echo"' not in row


async def test_a_schedule_made_with_no_driver_catches_up_from_when_it_was_made(
    scheduling: Any, clock: FakeClock
) -> None:
    """Found in review: made on a home nobody drove (`fusee schedules create` with no
    owner), it was armed only when a driver first saw it, and the instants in between
    were lost even with catchup "all"."""
    async with scheduling(drive=False) as passive:
        await passive.schedules.set(
            "caught",
            {"workflow": "made.echo", "cron": "*/5 * * * *", "catchup": "all"},
            create=True,
        )
    clock.set(FIRST + 600)  # 22:25: 22:15, 22:20 and 22:25 came due meanwhile
    async with scheduling() as engine:
        await settle(engine, clock, FIRST + 600)
        assert started(engine, "caught") == [
            instant_id("caught", t) for t in (FIRST, FIRST + 300, FIRST + 600)
        ]
