"""Commands on runs from outside their code: start, signal, cancel, terminate, resume, reset.

Each command checks what it is asked first (the engine takes work, the run
exists and is open, the names and values are ones the journal takes), then
appends its records through the driver, and returns once they are durable.
`Engine` declares these commands (their docstrings are the public API) and
hands them here; what a command answers is a run id, which the engine makes
into a `RunHandle`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from fusee_runtime.clock import Clock
from fusee_runtime.dsl import Rate, WorkflowDef, seconds
from fusee_runtime.engine import resets
from fusee_runtime.engine.bursts import debounce_spec, throttle_window
from fusee_runtime.engine.durability import Durability
from fusee_runtime.engine.queues import queue_spec
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.engine.state import Run, Status
from fusee_runtime.engine.waits import INSTANT_MAX, wake_at
from fusee_runtime.errors import IdConflict, Rejected
from fusee_runtime.model.op_records import StepResumed
from fusee_runtime.model.records import RunTerminated, RunUnstuck
from fusee_runtime.objects import OBJECT_PREFIX
from fusee_runtime.scope import check_name
from fusee_runtime.store.shards import owned_id
from fusee_runtime.tracing import check_traceparent
from fusee_runtime.typed import ANY, parameter

if TYPE_CHECKING:
    from fusee_runtime.engine.driver import Driver


class Commands:
    """The commands on the runs an engine holds; `Engine` says what each raises."""

    def __init__(
        self, driver: Driver, runs: RunTable, durability: Durability, clock: Clock
    ) -> None:
        self.driver = driver
        self.runs = runs
        self.durability = durability
        self.clock = clock

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: Any,
        id: str | None,
        on_conflict: Literal["return", "fail", "new_run"],
        timeout: float | Any | None,
        signal: tuple[str, Any] | None,
        traceparent: str | None,
        *,
        start_delay: float | Any | None = None,
        start_at: datetime | None = None,
        use_open: bool = False,
        update_id: str | None = None,
        queue: tuple[str | None, str | None, int] = (None, None, 0),
        debounce: tuple[float | Any | None, str | None, float | Any | None] = (None, None, None),
        throttle: Rate | None = None,
    ) -> tuple[str, str]:
        """Starts a run (`Engine.start`); returns its workflow id and run id once durable.

        `use_open` (an update-with-start): an open run of the id is used as it is; with
        none open, a new run starts, whatever closed ones the id has, unless the newest
        applied `update_id` already (sent again: its result is that run's).
        """
        self.driver.check_accepting()
        name = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        wf = self.driver.workflow(name)
        if name in self.driver.builtins and not isinstance(workflow, WorkflowDef):
            _check_builtin(name, input)
        if on_conflict not in ("return", "fail", "new_run"):
            raise Rejected(f"on_conflict is 'return', 'fail' or 'new_run', not {on_conflict!r}")
        # Typed when the workflow's input parameter is annotated (`fusee_runtime.typed`).
        shape = parameter(wf.fn, 1)
        encoded = self.driver.encode(input, f"the input of workflow {wf.name!r}", shape)
        limit = seconds(timeout)
        if signal is not None:
            check_name("signal", signal[0])
            self.driver.encode(signal[1], f"signal {signal[0]!r}", ANY)
        begin_at = self._begin_at(start_delay, start_at)
        queued = queue_spec(wf.queue, *queue)
        burst = debounce_spec(*debounce, self.clock.now())
        _check_together(id, on_conflict, begin_at, queue[0], burst, throttle, use_open)
        throttled = None if throttle is None else throttle_window(self.driver, wf.name, throttle)
        if use_open and not self.driver.config.drive:
            # Its update needs the run's code: refused before anything is recorded.
            raise Rejected("an update with its start needs the process that runs the code")
        workflow_id = owned_id(id, self.driver.shard)
        traceparent = check_traceparent(traceparent) if traceparent is not None else None
        if burst is not None:
            joined = await self._joined(wf.name, burst, encoded, signal)
            if joined is not None:
                return joined
        existing = self.runs.find_latest(workflow_id) if id is not None else None
        if use_open and existing is not None and not existing.is_open:
            sent_before = update_id is not None and update_id in existing.updates_done
            existing = existing if sent_before else None  # else a new run gets the update
        if existing is not None and await self._existing(existing, wf, on_conflict, signal):
            return workflow_id, existing.run_id
        now = self.clock.now()
        if burst is not None:
            begin_at = now + burst[0]
        elif throttled is not None:
            slot = throttled()
            begin_at = slot if slot > now else None
        # A delayed run's deadline counts from when it begins.
        deadline = None if limit is None else wake_at((begin_at or now) + limit)
        debounced = None if burst is None else burst[1]
        origin = {"begin_at": begin_at, "queue": queued, "debounce": debounced}  # (those given)
        run = self.driver.new_run(
            workflow_id, wf.name, encoded, deadline, _given(origin), None, traceparent
        )
        if signal is not None:
            self.driver.signal(run, *signal)
        await self.durability.wait(run.last_lsn)
        return workflow_id, run.run_id

    async def _existing(
        self,
        existing: Run,
        wf: WorkflowDef,
        on_conflict: str,
        signal: tuple[str, Any] | None,
    ) -> bool:
        """What a start does to the run its id has: True, it returns that run (with
        `on_conflict` "return", once its start is durable); False, a new run is made
        (with "new_run": the open one is terminated first).

        Raises:
            IdConflict: "fail", or a run of another workflow unless "new_run".
        """
        workflow_id = existing.workflow_id
        if existing.workflow != wf.name and on_conflict != "new_run":
            raise IdConflict(
                f"id {workflow_id!r} belongs to a run of workflow {existing.workflow!r}, "
                f"not {wf.name!r}: choose another id"
            )
        if on_conflict == "return":
            if signal is not None:
                # Refused when the run is closed, rather than dropped silently.
                await self.signal(workflow_id, *signal)
            if existing.run_id in self.runs.by_run_id:  # a stored run is durable
                await self.durability.wait(existing.start_lsn)
            return True
        if on_conflict == "fail":
            raise IdConflict(
                f"a run of id {workflow_id!r} already exists (status {existing.status})"
            )
        if existing.is_open:
            why = "replaced by a new run (on_conflict='new_run')"
            closed = RunTerminated(existing.run_id, why, self.clock.now())
            self.driver.close_run(existing, closed)
        return False

    async def _joined(
        self,
        workflow: str,
        burst: tuple[float, dict[str, Any]],
        encoded: bytes,
        signal: tuple[str, Any] | None,
    ) -> tuple[str, str] | None:
        """A debounced start that joins its burst's run (`engine/bursts.py`): the run's id
        and run id once durable; None: the start makes a new burst."""
        period, spec = burst
        run = self.driver.bursts.pending(workflow, spec["key"], self.clock.now())
        if run is None or not self.driver.bursts.join(
            self.driver, run, encoded, period, self.clock.now()
        ):
            return None
        if signal is not None:
            self.driver.signal(run, *signal)
        await self.durability.wait(run.last_lsn)
        return run.workflow_id, run.run_id

    def _begin_at(self, start_delay: float | Any | None, start_at: datetime | None) -> float | None:
        """When a run started now with `start_delay` or `start_at` begins (None: at once).

        Raises:
            Rejected: both given, a negative delay, or a naive `start_at`.
        """
        if start_delay is None and start_at is None:
            return None
        if start_delay is not None and start_at is not None:
            raise Rejected("give start_delay or start_at, not both")
        now = self.clock.now()
        if start_at is not None:
            if not isinstance(start_at, datetime) or start_at.tzinfo is None:
                raise Rejected(f"start_at is an aware datetime, not {start_at!r}")
            at = start_at.timestamp()
        else:
            delay = seconds(start_delay)
            if delay is None or not 0 <= delay < INSTANT_MAX:
                raise Rejected(f"start_delay is a duration of 0 or more, not {start_delay!r}")
            at = now + delay
        if wake_at(at) is None:  # past year 9999 (or not a number): it would never begin
            raise Rejected(f"a run begins before the year 10000, not {start_at or start_delay!r}")
        return at if at > now else None

    async def signal(
        self, id: str, name: str, value: Any = None, run_id: str | None = None
    ) -> None:
        """Delivers a signal (`Engine.signal`); returns once it is durable."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: it takes no more signals")
        lsn = self.driver.signal(run, name, value)
        await self.durability.wait(lsn)

    async def cancel(self, id: str, reason: str, run_id: str | None) -> None:
        """Asks a run to cancel (`Engine.cancel`); returns once the request is durable."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is already closed ({run.closing})")
        self.driver.request_cancel(run, reason)
        await self.durability.wait(run.last_lsn)

    async def terminate(self, id: str, reason: str, run_id: str | None) -> None:
        """Closes a run at once (`Engine.terminate`); returns once durable."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is already closed ({run.closing})")
        self.driver.close_run(run, RunTerminated(run.run_id, reason, self.clock.now()))
        await self.durability.wait(run.close_lsn or 0)

    async def resume(self, id: str, run_id: str | None) -> None:
        """Resumes a paused or stuck run (`Engine.resume`); returns once durable."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is closed ({run.closing}): nothing to resume")
        paused = run.paused_ops()
        stuck = run.status == Status.STUCK
        for seq in paused:
            self.driver.append(run, StepResumed(run.run_id, seq, self.clock.now()))
        if stuck:
            self.driver.append(run, RunUnstuck(run.run_id, self.clock.now()))
            run.error = None
            self.driver.spawn(run)
        elif not paused:
            raise Rejected(f"run {id!r} is {run.status}: only a paused or stuck run resumes")
        await self.durability.wait(run.last_lsn)

    async def reset(
        self, id: str, to: int | str, run_id: str | None, batch: str | None = None
    ) -> str:
        """Resets a run (`Engine.reset`); returns the new run's id once its start is durable.
        `batch`: the batch that resets it, named in the new run's origin."""
        self.driver.check_accepting()
        run = self.runs.get(id, run_id)
        newest = self.runs.latest(id) if run_id is not None else run
        if run.status in (Status.SCHEDULED, Status.QUEUED) and not run.ops:
            raise Rejected(f"run {id!r} has not begun: nothing of it to reset (cancel it)")
        new = resets.reset(self.driver, run, to, newest, batch)
        await self.durability.wait(new.last_lsn)
        return new.run_id


def _given(origin: dict[str, Any]) -> dict[str, Any] | None:
    """`origin` without its None values (None: nothing left)."""
    return {k: v for k, v in origin.items() if v is not None} or None


def _check_together(
    id: str | None,
    on_conflict: str,
    begin_at: float | None,
    queued: object,
    burst: object,
    throttle: object,
    use_open: bool,
) -> None:
    """Raises `Rejected` for what a start may not ask together: an update-with-start goes
    to a run of the id that runs its code now (so it names no queue: the workflow's own,
    if a new run is made, refuses the update until the run is let in); a debounced or
    throttled start begins when its burst ends or its slot comes, whatever else would
    say when."""
    if use_open and (
        id is None
        or begin_at is not None
        or queued is not None
        or throttle is not None
        or on_conflict != "return"
    ):
        raise Rejected(
            "an update with its start takes an id, no start_delay, start_at, queue or "
            "throttle, and on_conflict 'return'"
        )
    if burst is not None and (use_open or begin_at is not None or throttle is not None):
        raise Rejected("debounce goes with no update, start_delay, start_at or throttle")
    if throttle is not None and not isinstance(throttle, Rate):
        raise Rejected(f"throttle is a Rate, not {throttle!r}")
    if throttle is not None and begin_at is not None:
        raise Rejected("a throttle says when a run begins: it goes with no start_delay or start_at")


def _check_builtin(name: str, input: object) -> None:
    """An engine's own workflow started by its name: an object's key's run (with no
    input: its first call starts it so), never a batch (its spec is checked where it is
    made: `Engine.batch`, `fusee batch`)."""
    if not name.startswith(OBJECT_PREFIX):
        raise Rejected(f"{name!r} is the engine's own workflow: start a batch with batch")
    if input is not None:
        raise Rejected(f"{name!r} is an object's: its runs start with no input")
