"""Cron schedules: `@workflow(cron=...)`, fired by the engine that serves the home.

Each firing starts a run whose id is the workflow's name and the scheduled
instant (`sweep@2026-12-02T17:05:00Z`), with that instant as its input. The
run's start is appended before the record of the firing, so a crash between
the two leaves a run whose id says it fired: the next open sees the run and
only records the firing, never starting it twice. What each schedule did is
in the journal (`ScheduleArmed` when the engine first saw it, `ScheduleFired`
for each instant started, skipped or buffered, `SchedulePaused`), so pause
state and the last instant survive restarts.

Instants that came due while no engine served the home are caught up by the
workflow's `catchup`: "all" fires each (up to `CATCHUP_MAX`), "one" only the
latest, "none" only those less than `LATE_S` late. `overlap` says what a
firing does while an earlier run of the schedule is open: "skip" skips it,
"allow" starts it anyway, "buffer_one" keeps one to start when that run closes.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import orjson

from fusee_runtime.dsl import WorkflowDef
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import Rejected
from fusee_runtime.model.records import Record, ScheduleArmed, ScheduleFired, SchedulePaused
from fusee_runtime.model.run import RunInfo
from fusee_runtime.store.shards import beside

if TYPE_CHECKING:
    from fusee_runtime.host import RunHost

log = logging.getLogger("fusee")

LATE_S = 60.0
"""An instant this late is missed rather than due: `catchup="none"` skips it."""
CATCHUP_MAX = 1000
"""Most instants one catch-up fires (`catchup="all"`); older ones are skipped."""


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


def cron_times(wf: WorkflowDef, after: float, *, reverse: bool = False) -> Any:
    """The schedule's instants (Unix seconds) strictly after `after`, or before it with
    `reverse`, in order."""
    from zoneinfo import ZoneInfo

    from cronsim import CronSim

    assert wf.cron is not None
    start = datetime.fromtimestamp(after, ZoneInfo(wf.timezone or "UTC"))
    times = (t.timestamp() for t in CronSim(wf.cron, start, reverse=reverse))
    # In the repeated hour of a DST change the library can step back across the
    # fold: only instants on the asked side of `after` count.
    return (t for t in times if (t < after if reverse else t > after))


class Schedules:
    """The cron schedules of one engine: their durable state and the task that fires them."""

    def __init__(self, host: RunHost) -> None:
        self._host = host
        self._state: dict[str, ScheduleState] = {}
        # What a checkpoint holds: the state as of the last checkpoint, and the
        # records since (with their lsns), of which a checkpoint takes the durable ones.
        self._base: dict[str, ScheduleState] = {}
        self._since: builtins.list[tuple[int, Record]] = []
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self.ticks = 0
        """Times the schedules were looked at (for tests and tools that follow the engine)."""

    # -- state ---------------------------------------------------------------------

    def replay(self, lsn: int, rec: Record) -> None:
        """Folds one schedule record into memory (on open, and as they are appended)."""
        _fold(self._state, rec)
        if self._host.config.checkpoint_bytes is not None:
            self._since.append((lsn, rec))

    def restore(self, states: dict[str, dict[str, Any]]) -> None:
        """The state a checkpoint holds (see `snapshot`)."""
        for name, st in states.items():
            st = dict(st, cron=tuple(st["cron"]) if st["cron"] is not None else None)
            self._state[name] = ScheduleState(**st)
            self._base[name] = ScheduleState(**st)

    def snapshot(self, lsn: int) -> dict[str, dict[str, Any]]:
        """The schedules' state as the records up to `lsn` say, for a checkpoint at `lsn`
        (not as memory says now: records after it may never become durable)."""
        for at, rec in self._since:
            if at > lsn:
                break
            _fold(self._base, rec)
        self._since = [(at, rec) for at, rec in self._since if at > lsn]
        return {name: dataclasses.asdict(st) for name, st in self._base.items()}

    def _record(self, rec: Record) -> int:
        lsn = self._host.append_record(rec)
        self.replay(lsn, rec)
        return lsn

    def _crons(self) -> builtins.list[WorkflowDef]:
        return sorted((wf for wf in self._host.workflows.values() if wf.cron), key=lambda w: w.name)

    def _open_runs(self, name: str) -> int:
        return sum(
            1
            for run in self._host.open_runs()
            if run.origin is not None and run.origin.get("schedule") == name
        )

    # -- for people and the control API -------------------------------------------------

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every cron schedule the app declares, with its state."""
        now = self._host.clock.now()
        out = []
        for wf in self._crons():
            st = self._state.get(wf.name, ScheduleState())
            nxt = None if st.paused else next(cron_times(wf, max(st.since or now, now)), None)
            out.append(
                {
                    "workflow": wf.name,
                    "cron": wf.cron,
                    "timezone": wf.timezone or "UTC",
                    "overlap": wf.overlap,
                    "catchup": wf.catchup,
                    "paused": st.paused,
                    "last": _iso(st.last),
                    "next": _iso(nxt),
                    "buffered": _iso(st.buffered),
                    "open_runs": self._open_runs(wf.name),
                }
            )
        return out

    async def act(
        self, name: str, action: Literal["pause", "unpause", "trigger"]
    ) -> dict[str, Any] | RunInfo:
        """Pauses or unpauses the schedule of `name` (durable when this returns), or starts
        a run of it now, whatever its overlap (returns the run).

        Raises:
            NotFound: no workflow of that name.
            Rejected: the workflow has no cron schedule, or an unknown action.
        """
        host = self._host
        host.check_accepting()
        wf = host.workflow(name)
        if not wf.cron:
            raise Rejected(f"workflow {wf.name!r} has no cron schedule")
        now = host.clock.now()
        if action in ("pause", "unpause"):
            lsn = self._record(SchedulePaused(wf.name, action == "pause", now))
            log.info("fusee: schedule %s: %sd", wf.name, action)
            self.poke()
            await host.wait_durable(lsn)
            return next(s for s in self.list() if s["workflow"] == wf.name)
        if action == "trigger":
            run = self._start(wf, now, self._id(wf.name, now, exact=True), manual=True)
            await host.wait_durable(run.last_lsn)
            return run.info()
        raise Rejected(f"a schedule action is pause, unpause or trigger, not {action!r}")

    # -- firing --------------------------------------------------------------------------

    def start(self) -> None:
        self._changed = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="fusee:schedules")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def poke(self) -> None:
        """Something changed (a pause, a scheduled run closed, new code): look again."""
        if self._changed is not None:
            self._changed.set()

    async def _run(self) -> None:
        clock = self._host.clock
        assert self._changed is not None
        while True:
            self._changed.clear()
            now = clock.now()
            try:
                self.fire_due(now)
                nxt = self._next_instant(now)
            except Exception:
                # A bug or a journal that failed: say so, and look again when something
                # changes or a minute has passed, rather than stop firing for good.
                log.exception("fusee: the cron schedules could not fire")
                nxt = now + 60
            waits: builtins.list[asyncio.Future[Any]] = [
                asyncio.ensure_future(self._changed.wait())
            ]
            if nxt is not None:
                waits.append(asyncio.ensure_future(clock.sleep_until(nxt)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()

    def _next_instant(self, now: float) -> float | None:
        """The earliest instant due next among the schedules not paused."""
        times = []
        for wf in self._crons():
            st = self._state.get(wf.name, ScheduleState())
            if not st.paused:
                times.append(next(cron_times(wf, max(st.since or now, now)), None))
        return min((t for t in times if t is not None), default=None)

    def fire_due(self, now: float) -> None:
        """Fires what is due at `now` for every schedule (not paused) by its catchup and
        overlap; starts a buffered instant whose blocking run closed."""
        if self._host.failed is not None or self._host.closing:
            return
        for wf in self._crons():
            st = self._state.get(wf.name)
            armed = (wf.cron or "", wf.timezone or "UTC")
            if st is None or st.since is None or st.cron != armed:
                # First sight, or another expression than it was armed with: it fires
                # from now on (the old expression's last firing says nothing of the
                # new one's instants), and that is recorded.
                self._record(ScheduleArmed(wf.name, *armed, now))
                continue
            if st.paused:
                continue
            if st.buffered is not None and not self._open_runs(wf.name):
                workflow_id = self._id(wf.name, st.buffered)
                self._start(wf, st.buffered, workflow_id)
                self._record(ScheduleFired(wf.name, st.buffered, "started", workflow_id, now))
                log.info("fusee: schedule %s: started %s (buffered)", wf.name, workflow_id)
            since = st.since
            assert since is not None
            due = self._due(wf, since, now)
            if not due:
                continue
            if wf.catchup == "all":
                firing = due
            elif wf.catchup == "one":
                firing = due[-1:]
            else:
                firing = [t for t in due if now - t < LATE_S]
            # Catching up "all" means all: the instants of one catch-up do not skip each
            # other by the overlap, which holds only against runs open before it.
            clear = wf.overlap == "allow" or not self._open_runs(wf.name)
            for i, t in enumerate(firing):
                self._fire(wf, st, t, now, catching_up=clear and i > 0)
            if due[-1] not in firing:
                self._record(ScheduleFired(wf.name, due[-1], "skipped", None, now))
        self.ticks += 1
        self._host.progressed()

    @staticmethod
    def _due(wf: WorkflowDef, last: float, now: float) -> builtins.list[float]:
        """The instants in (last, now], oldest first, at most `CATCHUP_MAX` of the latest."""
        due: builtins.list[float] = []
        # Walking back from just past `now` visits only what is due, however long the gap.
        for t in cron_times(wf, now + 1e-3, reverse=True):
            if t <= last or len(due) >= CATCHUP_MAX:
                break
            due.append(t)
        return due[::-1]

    def _fire(
        self, wf: WorkflowDef, st: ScheduleState, at: float, now: float, catching_up: bool = False
    ) -> None:
        workflow_id = self._id(wf.name, at)
        if self._host.find_latest(workflow_id) is not None:
            outcome = "started"  # started before a crash that came before this record
        elif wf.overlap == "allow" or catching_up or not self._open_runs(wf.name):
            self._start(wf, at, workflow_id)
            outcome = "started"
        elif wf.overlap == "buffer_one" and st.buffered is None:
            outcome = "buffered"
        else:
            outcome = "skipped"
        self._record(ScheduleFired(wf.name, at, outcome, workflow_id, now))
        log.info("fusee: schedule %s: %s %s", wf.name, outcome, workflow_id)

    def _id(self, workflow: str, at: float, exact: bool = False) -> str:
        """The id of a firing: its instant's, made to belong to this journal (with
        several in the database, cron fires in journal 0 alone: `store/shards.py`)."""
        return beside(instant_id(workflow, at, exact=exact), self._host.shard)

    def _start(self, wf: WorkflowDef, at: float, workflow_id: str, *, manual: bool = False) -> Any:
        host = self._host
        existing = host.find_latest(workflow_id)
        if existing is not None:
            return existing
        when = utc(at).isoformat().replace("+00:00", "Z")
        origin: dict[str, Any] = {"schedule": wf.name, "instant": at}
        if manual:
            origin["manual"] = True
        return host.new_run(workflow_id, wf.name, orjson.dumps(when), None, origin)


def _iso(at: float | None) -> str | None:
    return None if at is None else utc(at).isoformat().replace("+00:00", "Z")


def _fold(state: dict[str, ScheduleState], rec: Record) -> None:
    """Folds one schedule record into `state`."""
    if isinstance(rec, ScheduleArmed):
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
