"""Cron schedules: `@workflow(cron=...)`, or made at run time (`fusee schedules
create`), fired by the engine that serves the home.

A schedule declared on a workflow is named after it; one made at run time has a
name of its own, and says which workflow it starts, with which input (`Spec`);
it is recorded (`ScheduleSet`, `ScheduleDeleted`), so it holds across restarts
and fires wherever the journal is driven next.

Each firing starts a run whose id is the schedule's name and the scheduled
instant (`sweep@2026-12-02T17:05:00Z`), with that instant as its input (or the
input the schedule was made with). The
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
import itertools
import logging
from typing import TYPE_CHECKING, Any, Literal

import orjson

from fusee_runtime.engine.schedule_state import (
    ScheduleState,
    Spec,
    check,
    cron_times,
    fold,
    instant_id,
    iso,
    upto,
)
from fusee_runtime.engine.waits import utc
from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.model.payload import Payload
from fusee_runtime.model.records import (
    Record,
    ScheduleArmed,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleSet,
)
from fusee_runtime.model.run import RunInfo
from fusee_runtime.scope import check_id, check_name
from fusee_runtime.store.shards import beside

if TYPE_CHECKING:
    from fusee_runtime.host import RunHost

log = logging.getLogger("fusee")

LATE_S = 60.0
"""An instant this late is missed rather than due: `catchup="none"` skips it."""
CATCHUP_MAX = 1000
"""Most instants one catch-up fires (`catchup="all"`); older ones are skipped."""


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
        fold(self._state, rec)
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
            fold(self._base, rec)
        self._since = [(at, rec) for at, rec in self._since if at > lsn]
        return {name: dataclasses.asdict(st) for name, st in self._base.items()}

    def _record(self, rec: Record) -> int:
        lsn = self._host.append_record(rec)
        self.replay(lsn, rec)
        return lsn

    def _specs(self) -> builtins.list[Spec]:
        """Every schedule: those the app declares, and those made at run time."""
        declared = {
            wf.name: Spec(wf.name, wf.name, wf.cron, wf.timezone or "UTC", wf.overlap, wf.catchup)
            for wf in self._host.workflows.values()
            if wf.cron
        }
        made = {
            name: Spec(name, **st.made, made=True)
            for name, st in self._state.items()
            if st.made is not None and name not in declared
        }
        return sorted([*declared.values(), *made.values()], key=lambda spec: spec.name)

    def _spec(self, name: str) -> Spec:
        """The schedule named `name`.

        Raises:
            NotFound: there is none (the message names those there are).
        """
        specs = self._specs()
        for spec in specs:
            if spec.name == name:
                return spec
        if name in self._host.workflows:
            raise Rejected(f"workflow {name!r} has no cron schedule")
        known = ", ".join(spec.name for spec in specs) or "none"
        raise NotFound(f"no schedule {name!r}; schedules: {known}")

    def _open_runs(self, name: str) -> int:
        return sum(
            1
            for run in self._host.open_runs()
            if run.origin is not None and run.origin.get("schedule") == name
        )

    # -- for people and the control API -------------------------------------------------

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every cron schedule, declared or made, with its state."""
        now = self._host.clock.now()
        out = []
        for spec in self._specs():
            st = self._state.get(spec.name, ScheduleState())
            nxt = None if st.paused else next(cron_times(spec, max(st.since or now, now)), None)
            out.append(
                {
                    "name": spec.name,
                    "workflow": spec.workflow,
                    "cron": spec.cron,
                    "timezone": spec.timezone,
                    "overlap": spec.overlap,
                    "catchup": spec.catchup,
                    "made": spec.made,
                    "input": spec.input,
                    "paused": st.paused,
                    "last": iso(st.last),
                    "next": iso(nxt),
                    "buffered": iso(st.buffered),
                    "open_runs": self._open_runs(spec.name),
                }
            )
        return out

    def _listed(self, name: str) -> dict[str, Any]:
        return next(s for s in self.list() if s["name"] == name)

    async def act(
        self, name: str, action: Literal["pause", "unpause", "trigger"]
    ) -> dict[str, Any] | RunInfo:
        """Pauses or unpauses the schedule `name` (durable when this returns), or starts
        a run of it now, whatever its overlap (returns the run).

        Raises:
            NotFound: no schedule of that name.
            Rejected: an unknown action.
        """
        host = self._host
        host.check_accepting()
        spec = self._spec(name)
        now = host.clock.now()
        if action in ("pause", "unpause"):
            lsn = self._record(SchedulePaused(spec.name, action == "pause", now))
            log.info("fusee: schedule %s: %sd", spec.name, action)
            self.poke()
            await host.wait_durable(lsn)
            return self._listed(spec.name)
        if action == "trigger":
            run = self._start(spec, now, self._id(spec.name, now, exact=True), manual=True)
            await host.wait_durable(run.last_lsn)
            return run.info()
        raise Rejected(f"a schedule action is pause, unpause or trigger, not {action!r}")

    async def set(self, name: str, changes: dict[str, Any], *, create: bool) -> dict[str, Any]:
        """Makes schedule `name` (`create`) or changes one made at run time, with the
        `changes` to its `Spec`'s fields (a new one's `workflow` and `cron` at least);
        returns it as `list` shows it, once durable. It fires from when it is set: the
        instants that come due while no engine drives the home are caught up by its
        `catchup`, as a declared schedule's are.

        Raises:
            Rejected: a name taken (create), declared by the app or a workflow's, a
                name its runs' ids cannot carry, a bad field.
            NotFound: no schedule of that name (to change).
        """
        host = self._host
        host.check_accepting()
        specs = {spec.name: spec for spec in self._specs()}
        old = specs.get(name)
        if create and old is not None:
            raise Rejected(f"schedule {name!r} exists: update or delete it")
        if old is not None and not old.made:
            raise Rejected(f"schedule {name!r} is declared by @workflow(cron=...): change the code")
        if not create and old is None:
            raise NotFound(f"no schedule {name!r} made at run time")
        if create:
            check_name("schedule", name)
            check_id(instant_id(name, 0.0, exact=True))  # its runs' ids must be ones
            if name in host.workflows:
                raise Rejected(
                    f"{name!r} is a workflow's name: a made schedule takes a name of its own "
                    "(the workflow may declare a schedule of that name)"
                )
        allowed = {f.name for f in dataclasses.fields(Spec)} - {"name", "made"}
        if bad := sorted(set(changes) - allowed):
            raise Rejected(f"a schedule has no field {bad[0]!r}")
        base = old.fields() if old is not None else {}
        fields = {**base, **{k: v for k, v in changes.items() if v is not None}}
        if "workflow" not in fields or "cron" not in fields:
            raise Rejected("a new schedule needs its workflow and its cron expression")
        spec = Spec(name, **fields, made=True)
        check(spec)
        host.workflow(spec.workflow)  # NotFound: an unknown workflow, by name
        encoded = host.encode(spec.input, f"the input of schedule {name!r}")
        rec = ScheduleSet(
            name,
            spec.workflow,
            spec.cron,
            spec.timezone,
            spec.overlap,
            spec.catchup,
            Payload(encoded),
            host.clock.now(),
        )
        lsn = self._record(rec)
        log.info("fusee: schedule %s: %s", name, "created" if create else "updated")
        self.poke()
        await host.wait_durable(lsn)
        return self._listed(name)

    async def delete(self, name: str) -> None:
        """Deletes schedule `name`, made at run time (durable when this returns): it fires
        no more; the runs it started go on.

        Raises:
            NotFound: no schedule of that name.
            Rejected: it is declared by the app.
        """
        host = self._host
        host.check_accepting()
        if not self._spec(name).made:
            raise Rejected(f"schedule {name!r} is declared by @workflow(cron=...): change the code")
        lsn = self._record(ScheduleDeleted(name, host.clock.now()))
        log.info("fusee: schedule %s: deleted", name)
        self.poke()
        await host.wait_durable(lsn)

    async def backfill(
        self, name: str, start: float, end: float
    ) -> builtins.list[builtins.list[str]]:
        """Starts the runs schedule `name` should have started for its instants in
        [`start`, `end`), oldest first, by its overlap (against the runs open before and
        those the backfill starts); returns each instant's run id and "started",
        "existed" (started before: a backfill run again starts nothing twice) or
        "skipped". Once durable.

        Raises:
            NotFound: no schedule of that name.
            Rejected: `end` not after `start`, or in the future; more than
                `CATCHUP_MAX` instants.
        """
        host = self._host
        host.check_accepting()
        spec = self._spec(name)
        now = host.clock.now()
        if not start < end <= now:
            raise Rejected(
                "a backfill takes a range that ends after it begins, and not later than now"
            )
        try:  # at most one past the bound: a range of years is refused, not walked
            instants = list(
                itertools.islice(upto(cron_times(spec, start - 1e-3), end), CATCHUP_MAX + 1)
            )
        except (ValueError, OverflowError) as e:
            raise Rejected(f"a backfill's range is out of the calendar: {e}") from None
        if len(instants) > CATCHUP_MAX:
            raise Rejected(f"a backfill starts at most {CATCHUP_MAX} runs; this range has more")
        outcomes, lsn = [], 0
        for at in instants:
            workflow_id = self._id(spec.name, at)
            if host.find_latest(workflow_id) is not None:
                outcomes.append([workflow_id, "existed"])
            elif spec.overlap == "allow" or not self._open_runs(spec.name):
                lsn = self._start(spec, at, workflow_id, backfill=True).last_lsn
                outcomes.append([workflow_id, "started"])
            else:
                outcomes.append([workflow_id, "skipped"])
        log.info("fusee: schedule %s: backfilled %d instant(s)", name, len(instants))
        await host.wait_durable(lsn)
        return outcomes

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
        for spec in self._firing():
            st = self._state.get(spec.name, ScheduleState())
            if not st.paused:
                times.append(next(cron_times(spec, max(st.since or now, now)), None))
        return min((t for t in times if t is not None), default=None)

    def fire_due(self, now: float) -> None:
        """Fires what is due at `now` for every schedule (not paused) by its catchup and
        overlap; starts a buffered instant whose blocking run closed."""
        if self._host.failed is not None or self._host.closing:
            return
        for spec in self._firing():
            st = self._state.get(spec.name)
            armed = (spec.cron, spec.timezone)
            if st is None or st.since is None or st.cron != armed:
                # First sight, or another expression than it was armed with: it fires
                # from now on (the old expression's last firing says nothing of the
                # new one's instants), and that is recorded.
                self._record(ScheduleArmed(spec.name, *armed, now))
                continue
            if st.paused:
                continue
            if st.buffered is not None and not self._open_runs(spec.name):
                workflow_id = self._id(spec.name, st.buffered)
                self._start(spec, st.buffered, workflow_id)
                self._record(ScheduleFired(spec.name, st.buffered, "started", workflow_id, now))
                log.info("fusee: schedule %s: started %s (buffered)", spec.name, workflow_id)
            since = st.since
            assert since is not None
            due = self._due(spec, since, now)
            if not due:
                continue
            if spec.catchup == "all":
                firing = due
            elif spec.catchup == "one":
                firing = due[-1:]
            else:
                firing = [t for t in due if now - t < LATE_S]
            # Catching up "all" means all: the instants of one catch-up do not skip each
            # other by the overlap, which holds only against runs open before it.
            clear = spec.overlap == "allow" or not self._open_runs(spec.name)
            for i, t in enumerate(firing):
                self._fire(spec, st, t, now, catching_up=clear and i > 0)
            if due[-1] not in firing:
                self._record(ScheduleFired(spec.name, due[-1], "skipped", None, now))
        self.ticks += 1
        self._host.progressed()

    def _firing(self) -> builtins.list[Spec]:
        """The schedules this engine fires: those whose workflow it has (one made at run
        time for code another engine has fires there, or once this one has it)."""
        workflows = self._host.workflows
        return [spec for spec in self._specs() if spec.workflow in workflows]

    @staticmethod
    def _due(spec: Spec, last: float, now: float) -> builtins.list[float]:
        """The instants in (last, now], oldest first, at most `CATCHUP_MAX` of the latest."""
        due: builtins.list[float] = []
        # Walking back from just past `now` visits only what is due, however long the gap.
        for t in cron_times(spec, now + 1e-3, reverse=True):
            if t <= last or len(due) >= CATCHUP_MAX:
                break
            due.append(t)
        return due[::-1]

    def _fire(
        self, spec: Spec, st: ScheduleState, at: float, now: float, catching_up: bool = False
    ) -> None:
        workflow_id = self._id(spec.name, at)
        if self._host.find_latest(workflow_id) is not None:
            outcome = "started"  # started before a crash that came before this record
        elif spec.overlap == "allow" or catching_up or not self._open_runs(spec.name):
            self._start(spec, at, workflow_id)
            outcome = "started"
        elif spec.overlap == "buffer_one" and st.buffered is None:
            outcome = "buffered"
        else:
            outcome = "skipped"
        self._record(ScheduleFired(spec.name, at, outcome, workflow_id, now))
        log.info("fusee: schedule %s: %s %s", spec.name, outcome, workflow_id)

    def _id(self, workflow: str, at: float, exact: bool = False) -> str:
        """The id of a firing: its instant's, made to belong to this journal (with
        several in the database, cron fires in journal 0 alone: `store/shards.py`)."""
        return beside(instant_id(workflow, at, exact=exact), self._host.shard)

    def _start(
        self,
        spec: Spec,
        at: float,
        workflow_id: str,
        *,
        manual: bool = False,
        backfill: bool = False,
    ) -> Any:
        host = self._host
        existing = host.find_latest(workflow_id)
        if existing is not None:
            return existing
        when = utc(at).isoformat().replace("+00:00", "Z")
        origin: dict[str, Any] = {"schedule": spec.name, "instant": at}
        if manual:
            origin["manual"] = True
        if backfill:
            origin["backfill"] = True
        encoded = orjson.dumps(when if spec.input is None else spec.input)
        return host.new_run(workflow_id, spec.workflow, encoded, None, origin)
