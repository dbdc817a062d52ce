"""What the journal says of cron schedules: each one's `Spec` (declared by
`@workflow(cron=...)`, or made at run time) and its `ScheduleState`, folded from
the schedule records (`fold`); and the instants a cron expression gives
(`cron_times`). The room that fires them is `engine/schedules.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fusee_runtime.dsl import check_cron
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import Rejected
from fusee_runtime.model.json import Json
from fusee_runtime.model.records import (
    Record,
    ScheduleArmed,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleSet,
)


@dataclass
class ScheduleState:
    """What the journal says of one schedule."""

    paused: bool = False
    last: float | None = None
    """The latest instant fired, skipped or buffered."""
    floor: float | None = None
    """Instants up to here never fire: before the schedule was armed (or armed
    again with another expression), or while it was paused."""
    buffered: float | None = None
    """An instant waiting for the open run to close (`overlap="buffer_one"`)."""
    cron: tuple[str, str] | None = None
    """The expression and timezone it was armed with."""
    made: dict[str, Any] | None = None
    """A schedule made at run time: its `Spec`'s fields but its name (None: declared)."""

    @property
    def since(self) -> float | None:
        """After which instant the schedule fires next."""
        marks = [t for t in (self.last, self.floor) if t is not None]
        return max(marks) if marks else None


def instant_id(workflow: str, at: float, *, exact: bool = False) -> str:
    """The id of the run a schedule starts for instant `at`."""
    when = utc(at)
    if exact:
        return f"{workflow}@{when:%Y-%m-%dT%H:%M:%S.%f}Z"
    return f"{workflow}@{when:%Y-%m-%dT%H:%M:%SZ}"


@dataclass(frozen=True)
class Spec:
    """One schedule: what it starts, and when."""

    name: str
    workflow: str
    cron: str
    timezone: str = "UTC"
    overlap: str = "skip"
    catchup: str = "one"
    input: Json = None
    """The input of each run; None: the instant it fires for (as a declared schedule's)."""
    made: bool = False
    """Made at run time (`ScheduleSet`), rather than declared by `@workflow(cron=...)`."""

    def fields(self) -> dict[str, Any]:
        """What `ScheduleState.made` keeps of a schedule made at run time."""
        kept = dataclasses.asdict(self)
        del kept["name"], kept["made"]
        return kept


def cron_times(spec: Spec, after: float, *, reverse: bool = False) -> Any:
    """The schedule's instants (Unix seconds) strictly after `after`, or before it with
    `reverse`, in order."""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    start = datetime.fromtimestamp(after, ZoneInfo(spec.timezone))
    times = (t.timestamp() for t in CronSim(spec.cron, start, reverse=reverse))
    # In the repeated hour of a DST change the library can step back across the
    # fold: only instants on the asked side of `after` count.
    return (t for t in times if (t < after if reverse else t > after))


def iso(at: float | None) -> str | None:
    return None if at is None else utc(at).isoformat().replace("+00:00", "Z")


def check(spec: Spec) -> None:
    """Raises `Rejected` for a schedule that could never fire as written."""
    try:
        check_cron(spec.name, spec.cron, spec.timezone, spec.overlap, spec.catchup, "schedule")
    except ValueError as e:
        raise Rejected(str(e)) from None


def upto(times: Any, end: float) -> Any:
    """`times` (in order) before `end`."""
    for t in times:
        if t >= end:
            return
        yield t


def fold(state: dict[str, ScheduleState], rec: Record) -> None:
    """Folds one schedule record into `state`."""
    if isinstance(rec, ScheduleSet):
        st = state.setdefault(rec.schedule, ScheduleState())
        armed = (rec.cron, rec.timezone)
        if st.cron != armed:  # armed when set, wherever it was set: it fires from then on
            st.cron = armed
            st.floor = rec.set_at if st.floor is None else max(st.floor, rec.set_at)
        st.made = {
            "workflow": rec.workflow,
            "cron": rec.cron,
            "timezone": rec.timezone,
            "overlap": rec.overlap,
            "catchup": rec.catchup,
            "input": rec.input.value,
        }
    elif isinstance(rec, ScheduleDeleted):
        # Forgotten (checkpoints too): a schedule made again under its name starts afresh.
        state.pop(rec.schedule, None)
    elif isinstance(rec, ScheduleArmed):
        st = state.setdefault(rec.workflow, ScheduleState())
        st.cron = (rec.cron, rec.timezone)
        st.floor = rec.armed_at if st.floor is None else max(st.floor, rec.armed_at)
    elif isinstance(rec, ScheduleFired):
        st = state.setdefault(rec.workflow, ScheduleState())
        instant = rec.instant
        st.last = instant if st.last is None else max(st.last, instant)
        if rec.outcome == "buffered":
            st.buffered = instant
        elif st.buffered == instant:
            st.buffered = None  # started (or dropped) at last
    elif isinstance(rec, SchedulePaused):
        st = state.setdefault(rec.workflow, ScheduleState())
        st.paused = rec.paused
        if not st.paused:
            # What came due while paused is not caught up.
            st.floor = rec.at if st.floor is None else max(st.floor, rec.at)
