"""Driving runs: run their code, park and wake them, fire their timers, close them.

The driver is the engine as a run sees it (it implements
`fusee_runtime.host.RunHost`). It appends a run's records and reacts to
each (`append`): a timer to arm, a signal to hand to a wait, an operation
resolved that wakes the code. It runs a run's code as a task
(`spawn`, through `execution.run_code`), parks it when the code only waits
(its coroutine is dropped; a wake-up replays it to the same point), and
records how it closed once the code returns or fails. A requested cancel,
and the journal lost, stop the code from outside (`engine.cancels`).

A run's close turns final (`status`, result waiters, the history store)
only once its record is durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from fusee_runtime.clock import Clock
from fusee_runtime.completions import Completion, Tokens
from fusee_runtime.dsl import WorkflowDef, registry
from fusee_runtime.engine import cancels, objects
from fusee_runtime.engine.beats import Beats
from fusee_runtime.engine.bursts import Bursts
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.durability import Durability
from fusee_runtime.engine.family import Family
from fusee_runtime.engine.limits import Limits
from fusee_runtime.engine.origins import origin_of
from fusee_runtime.engine.routing import Routing
from fusee_runtime.engine.runlog import RunLog
from fusee_runtime.engine.runs import RunTable
from fusee_runtime.engine.state import Run
from fusee_runtime.engine.timers import TimerQueue
from fusee_runtime.errors import (
    CodecError,
    EngineClosed,
    Failure,
    JournalFailed,
    NotFound,
    Rejected,
)
from fusee_runtime.execution import Ended, run_code
from fusee_runtime.journal.records import PAYLOAD_DEPTH_MAX, too_deep
from fusee_runtime.model.op_records import (
    ChildClosed,
    CompletionDone,
    OpCancelled,
    StepResumed,
    TimerFired,
    TimerStarted,
    WaitCompleted,
    WaitStarted,
)
from fusee_runtime.model.ops import StepOp, TimerOp, WaitOp
from fusee_runtime.model.payload import NULL, RESERVED, Payload, reserved
from fusee_runtime.model.records import (
    OfRun,
    Record,
    RunAdmitted,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunStarted,
    RunStuck,
    RunTimedOut,
    RunUnstuck,
    SignalReceived,
)
from fusee_runtime.scope import check_name, fresh_id
from fusee_runtime.steps import StepWorkers
from fusee_runtime.tracing import Tracing
from fusee_runtime.typed import ANY, Shape, check, dumps, parameter, returns

log = logging.getLogger("fusee")

BEGIN = "begin"
"""The timer entry of a run started with a delay (never an operation's seq, all digits)."""
_RESOLVING = (TimerFired, WaitCompleted, OpCancelled, StepResumed, CompletionDone, ChildClosed)
"""The records that end an operation some code may wait for."""
_REACTING = frozenset({TimerStarted, WaitStarted, SignalReceived, *_RESOLVING})
"""The records `Driver.append` reacts to (timers, signals, wake-ups)."""


class Driver:
    """Runs the code of the runs in memory, and appends their records.

    Args:
        home: the engine's home.
        config: the engine's settings.
        durability: the commit path.
        runs: the table of runs.
        tokens: issues completion tokens.
        app: what the engine loaded its workflows from (named when one is missing).
        on_closed: called once a run's close is durable (the history store,
            the schedules).
    """

    def __init__(
        self,
        home: Path,
        config: Config,
        durability: Durability,
        runs: RunTable,
        tokens: Tokens,
        app: Any,
        on_closed: Callable[[Run], None],
    ) -> None:
        self.home = home
        self.app = app
        self.replay_only = False
        self.journal_closed = False
        self.config = config
        self.clock: Clock = config.clock
        self.durability = durability
        self.runs = runs
        self.tokens = tokens
        self.workflows: dict[str, WorkflowDef] = registry()
        self.builtins: dict[str, WorkflowDef] = {}
        self.objects: Any = None
        """The engine's `Objects` (what `ctx.object` calls through)."""
        """The engine's own workflows (`fusee.batch`), found after the app's."""
        self.workers = StepWorkers(config.step_threads)
        self.tracing: Tracing | None = None
        """Set at open (`fusee_runtime.tracing.open_tracing`)."""
        self.run_log: RunLog | None = None
        """`ctx.log` lines; only an engine that runs code writes them."""
        self.timers = TimerQueue(self.clock, self._fire)
        self.family = Family(self, runs)
        """Children and sends: what a run's code does to other runs."""
        self.beats = Beats(
            self.clock,
            lambda: durability.loop,
            self.append,
            lambda: not self._closing and durability.failed is None,
        )
        """Running steps' heartbeats."""
        self.limits = Limits(
            self.clock.now,
            self.append_record,
            durability.wait,
            durability.progressed,
            self.clock.sleep_until,
        )
        """The named limits of steps (`limit=`) and their permits, the rates, the queues."""
        if config.drive:  # (a passive engine lets no run in: it shows them queued)
            self.limits.queues.admit = self._admit
            self.limits.queues.admitting = lambda: not self._closing and durability.failed is None
        self.routing = Routing(config.labels, None, durability.progressed)
        """Where labelled steps run: here, or on a worker (`engine/routing.py`)."""
        self.bursts = Bursts()
        """The debounced starts whose run has not begun (`engine/bursts.py`)."""
        self.opened = False
        self._closing = False
        self._on_closed = on_closed
        self._wakes: set[str] = set()

    # -- the engine's state, as runs see it ------------------------------------------------

    @property
    def closing(self) -> bool:
        return self._closing

    def stop(self) -> None:
        """The engine is closing: it takes no more work, and running code halts."""
        self._closing = True

    @property
    def durable_lsn(self) -> int:
        return self.durability.durable_lsn

    @property
    def shard(self) -> tuple[int, int]:
        return self.durability.shard

    @property
    def failed(self) -> JournalFailed | None:
        return self.durability.failed

    @property
    def fence(self) -> int:
        return self.durability.fence

    def check_accepting(self) -> None:
        if not self.opened:
            raise Rejected("the engine is not open: use `async with Engine(...)`")
        if self.durability.failed is not None:
            raise self.durability.failed
        if self._closing:
            raise EngineClosed(
                f"the engine of {self.home} is stopping (pid {os.getpid()}): it takes no more "
                "work; run the command again once it has stopped"
            )

    def encode(self, value: Any, what: str, shape: Shape | None = None) -> bytes:
        """`value` as JSON; with a `shape` (`fusee_runtime.typed`), in its typed form and
        checked to read back into that type. `CodecError` names `what` when it cannot be."""
        try:
            encoded = dumps(value, shape)
        except TypeError as e:
            raise CodecError(f"{what} cannot be encoded as JSON: {e}") from None
        if len(encoded) > self.config.payload_bytes_max:
            raise CodecError(
                f"{what} is {len(encoded)} bytes, over the limit of "
                f"{self.config.payload_bytes_max} (Config.payload_bytes_max)"
            )
        if encoded.startswith(RESERVED):
            raise CodecError(reserved(what))
        if shape is not None:
            value = check(shape, encoded, what)
        if too_deep(value, encoded):
            raise CodecError(
                f"{what} nests arrays and objects over {PAYLOAD_DEPTH_MAX} levels deep"
            )
        return encoded

    async def wait_durable(self, lsn: int) -> None:
        await self.durability.wait(lsn)

    def durable_future(self, lsn: int) -> asyncio.Future[None]:
        return self.durability.future(lsn)

    def progressed(self) -> None:
        self.durability.progressed()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self.durability.loop

    def workflow(self, name: str) -> WorkflowDef:
        wf = self.defined(name) if isinstance(name, str) else None
        if wf is None:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise NotFound(f"unknown workflow {name!r}; known workflows: {known}")
        return wf

    def defined(self, name: str) -> WorkflowDef | None:
        """The workflow of that name: the app's, or one of the engine's own."""
        found = self.workflows.get(name) or self.builtins.get(name)
        if found is None and (found := objects.defined(name)) is not None:
            self.builtins[name] = found  # (an object's runs: `engine/objects.py`)
        return found

    def find_latest(self, id: str) -> Run | None:
        return self.runs.find_latest(id)

    def open_runs(self) -> list[Run]:
        return self.runs.open_runs()

    def completion(self, run: Run, seq: str, issued: int) -> Completion:
        return self.tokens.issue(run, seq, issued)

    def log_compensation(self, run: Run, name: str, error: Exception) -> None:
        log.error("fusee: %s compensation %r failed: %s", run.workflow_id, name, error)

    def log_attempt(self, run: Run, name: str, attempt: int, failure: Failure, then: str) -> None:
        log.info(
            "fusee: %s step %r attempt %d failed (%s); %s",
            run.workflow_id,
            name,
            attempt,
            failure,
            then,
        )
        if self.run_log is not None:
            self.run_log.attempt_failed(run, name, attempt, failure, then, self.clock.now())

    # -- appending -------------------------------------------------------------------------

    def append(self, run: Run, rec: OfRun) -> int:
        """Appends a record of `run` (not yet durable), folds it into memory and reacts."""
        lsn = self.durability.append(rec)
        op = run.apply(lsn, rec)
        if type(rec) not in _REACTING:  # (a step's end: the most frequent record by far)
            return lsn
        if isinstance(rec, TimerStarted) and rec.fire_at is not None:
            self.timers.add(rec.fire_at, run.run_id, rec.seq)
        elif isinstance(rec, WaitStarted) and rec.deadline is not None:
            self.timers.add(rec.deadline, run.run_id, rec.seq)
        if isinstance(rec, WaitStarted | SignalReceived):
            self.match_signals(run)
        elif op is not None and isinstance(rec, _RESOLVING):
            if isinstance(rec, StepResumed) and not run.paused_ops():
                run.live.shown_parked = False  # it runs on (once woken), not parked
            self.resolved(run, rec.seq)
        return lsn

    def append_record(self, rec: Record) -> int:
        """Appends a record of no run (a schedule's, a limit's); returns its lsn."""
        return self.durability.append(rec)

    def new_run(
        self,
        workflow_id: str,
        workflow: str,
        encoded_input: bytes,
        deadline: float | None,
        origin: dict[str, Any] | None,
        run_id: str | None = None,
        traceparent: str | None = None,
    ) -> Run:
        run_id = run_id or fresh_id()
        now = self.clock.now()
        origin = origin_of(self, origin, workflow, workflow_id, traceparent)
        input = Payload(encoded_input)
        rec = RunStarted(run_id, workflow_id, workflow, input, now, deadline, origin)
        lsn = self.durability.append(rec)
        run, _ = self.runs.fold(lsn, rec, durable=False)
        self.arm(run)
        self.spawn(run)
        return run

    def signal(self, run: Run, name: str, value: Any) -> int:
        """Appends a signal for `run`; returns its lsn."""
        check_name("signal", name)
        # Its type is known only where the code waits for it: written in its typed form.
        encoded = self.encode(value, f"signal {name!r}", ANY)
        return self.receive(run, name, Payload(encoded))

    def receive(self, run: Run, name: str, value: Payload, signal_id: int | None = None) -> int:
        """Appends signal `name` with `value` for `run`, as signal `signal_id` (default:
        the run's next); returns its lsn."""
        signal_id = run.next_signal_id if signal_id is None else signal_id
        now = self.clock.now()
        return self.append(run, SignalReceived(run.run_id, signal_id, name, value, now))

    def continue_as_new(self, run: Run, input: Any) -> None:
        wf = self.defined(run.workflow)
        shape = None if wf is None else parameter(wf.fn, 1)
        encoded = self.encode(input, f"the input of workflow {run.workflow!r}", shape)
        new_run_id = fresh_id()
        now = self.clock.now()
        rec = RunContinuedAsNew(run.run_id, new_run_id, Payload(encoded), now)
        lsn = self.durability.append(rec)
        self.runs.fold(lsn, rec, durable=False)
        self._after_close(run)
        new = self.runs.by_run_id[new_run_id]
        self.arm(new)
        self.spawn(new)

    # -- driving -------------------------------------------------------------------------

    def spawn(self, run: Run) -> None:
        """Runs the run's code (again) from the top as a task; in an engine that runs no
        code, shows it as it would be there. A run started with a delay waits for it, one
        started in a queue until the queue lets it in (`engine/queues.py`)."""
        if self._waits_to_begin(run) or self.limits.queues.holds(run):
            return
        if not self.config.drive:
            # Its code runs when a driving engine opens the home; meanwhile a run
            # with a pending timer or wait shows as parked, as it would there.
            run.live.parked = True
            run.live.shown_parked = bool(run.pending) or self._backs_off(run)
            return
        live = run.live
        live.parked = False
        # A run that waits (a timer, a signal, a child...) shows as parked until its code,
        # replayed, goes past its waits (`Execution.next`): one spawned again on an
        # open, or woken, is not shown running while it only replays to park again.
        # A cancel recorded is acted on now: that one runs.
        live.shown_parked = bool(run.pending) and run.cancel_reason is None
        live.stuck = None  # if it stops again, its code says so again
        # In a context of its own: a run started from another run's code (a child)
        # must not inherit that code's operation numbering or execution.
        live.task = (self.durability.loop or asyncio.get_running_loop()).create_task(
            self._drive(run), name=f"fusee:{run.workflow_id}", context=contextvars.Context()
        )

    def _waits_to_begin(self, run: Run) -> bool:
        """Whether `run` was started with a delay that has not passed (then its begin is
        due on the timer queue, and it shows as scheduled)."""
        begin_at = run.begin_at
        live = run.live
        # A run whose journal holds an operation has begun, whatever this clock says (a
        # driver whose clock is behind the one that began it).
        if begin_at is None or run.ops or begin_at <= self.clock.now():
            live.scheduled = False
            return False
        if not live.scheduled:
            live.scheduled = live.parked = True
            self.timers.add(begin_at, run.run_id, BEGIN)
            self.bursts.note(run)
        return True

    def _admit(self, run: Run) -> None:
        """Its queue lets `run` in: recorded, then its code runs (`engine/queues.py`)."""
        self.append(run, RunAdmitted(run.run_id, self.clock.now()))
        self.spawn(run)

    def arm(self, run: Run) -> None:
        """Schedules a run's deadline and pending timers; matches buffered signals."""
        if run.deadline is not None:
            self.timers.add(run.deadline, run.run_id, None)
        for seq, op in run.pending.items():
            if isinstance(op, TimerOp | WaitOp) and op.fire_at is not None:
                self.timers.add(op.fire_at, run.run_id, seq)
        self.match_signals(run)

    def _fire(self, run_id: str, seq: str | None, at: float) -> None:
        """A timer entry came due: record what it means, if it still means anything."""
        run = self.runs.by_run_id.get(run_id)
        if run is None or not run.is_open or self.durability.failed is not None:
            return
        if seq == BEGIN:
            if run.live.scheduled and run.begin_at == at:
                self.bursts.forget(run)
                self.spawn(run)
            elif run.live.scheduled and (run.begin_at or 0) > at:  # (moved by a debounce)
                self.timers.add(cast(float, run.begin_at), run.run_id, BEGIN)
            return
        if seq is None:
            if run.deadline == at:
                now = self.clock.now()
                self.close_run(run, RunTimedOut(run.run_id, "the run passed its deadline", now))
            elif run.deadline is not None and run.deadline > at:  # (moved with its begin)
                self.timers.add(run.deadline, run.run_id, None)
            return
        op = run.pending.get(seq)
        if isinstance(op, TimerOp) and op.fire_at == at:
            self.append(run, TimerFired(run.run_id, seq, self.clock.now()))
        elif isinstance(op, WaitOp) and op.fire_at == at:
            self.append(run, WaitCompleted(run.run_id, seq, None, NULL, self.clock.now()))

    def match_signals(self, run: Run) -> None:
        """Hands buffered signals to pending waits, oldest signal to earliest wait."""
        if not run.signals:
            return
        now = self.clock.now()
        for seq, op in list(run.pending.items()):
            if not isinstance(op, WaitOp) or op.done:
                continue
            if op.fire_at is not None and op.fire_at <= now:
                continue  # timed out before this signal came: its timer records None
            for signal_id, name, value in run.signals:
                if name == op.name:
                    self.append(
                        run, WaitCompleted(run.run_id, seq, signal_id, Payload.of(value), now)
                    )
                    break

    def _backs_off(self, run: Run) -> bool:
        """Whether a step of `run` waits out a retry's backoff now (its next attempt is
        later): a run that would wait on the clock alone where its code runs."""
        now = self.clock.now()
        return any(
            type(op) is StepOp and not op.done and op.retry_at is not None and op.retry_at > now
            for op in run.ops.values()
        )

    def carried_on(self, run: Run) -> None:
        if run.stuck is not None and run.is_open:
            self.append(run, RunUnstuck(run.run_id, self.clock.now()))

    def park(self, run: Run) -> None:
        task = run.live.task
        assert task is not None
        self.carried_on(run)  # it replayed up to its waits: its code matches its journal
        live = run.live
        live.parked = live.shown_parked = True
        live.task = live.execution = None
        live.waiters.clear()
        task.cancel()
        self.progressed()

    def resolved(self, run: Run, seq: str) -> None:
        """An op the run's code may wait on was resolved: wake the code."""
        fut = run.live.waiters.pop(seq, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        self.wake(run)

    def wake(self, run: Run) -> None:
        """Runs a parked run's code again soon (it replays to where it waits)."""
        if run.live.parked and run.run_id not in self._wakes:
            self._wakes.add(run.run_id)
            asyncio.get_running_loop().call_soon(self._wake, run)

    def _wake(self, run: Run) -> None:
        self._wakes.discard(run.run_id)
        if run.live.parked and run.is_open and not self._closing:
            self.spawn(run)

    async def _drive(self, run: Run) -> None:
        """Runs a run's code (again) from the top, and records how it ended."""
        wf = self.defined(run.workflow)
        if wf is None:
            self.mark_stuck(
                run, f"workflow {run.workflow!r} is not registered by the app {self.app!r}"
            )
            return
        if self.tracing is None:
            await self._ran(run, wf)
            return
        span = self.tracing.run_started(run)
        try:
            await self._ran(run, wf)
        finally:
            # Parking takes the run's task from this execution (`park`); nothing else does.
            self.tracing.run_stopped(run, span, parked=run.live.task is not asyncio.current_task())

    async def _ran(self, run: Run, wf: WorkflowDef) -> None:
        """Runs the run's code and records how it ended (unless the journal failed
        meanwhile: then nothing more is recorded, and the failure is told on its own)."""
        ended = await run_code(self, run, wf.fn)
        if ended is None:
            return
        with contextlib.suppress(JournalFailed):
            self._record_end(run, wf, ended)

    def _record_end(self, run: Run, wf: WorkflowDef, ended: Ended) -> None:
        now = self.clock.now()
        if ended.error is not None:
            if ended.cancelled:  # (its reason is there: the cancel was delivered)
                reason = cast(str, run.cancel_reason)
                self.close_run(run, RunCancelled(run.run_id, reason, now))
            else:
                failed = Failure.of(ended.error).to_json()
                self.close_run(run, RunFailed(run.run_id, failed, now))
            return
        try:
            what = f"the result of workflow {run.workflow!r}"
            encoded = self.encode(ended.value, what, returns(wf.fn))
        except CodecError as e:
            failure = Failure(str(e), kind="CodecError", retryable=False)
            self.close_run(run, RunFailed(run.run_id, failure.to_json(), now))
            return
        self.close_run(run, RunCompleted(run.run_id, Payload(encoded), now))

    def request_cancel(self, run: Run, reason: str) -> None:
        """Records a cancel of open `run` and delivers it where its code waits
        (`fusee_runtime.engine.cancels.request_cancel`)."""
        cancels.request_cancel(self, run, reason)

    def journal_lost(self, failed: JournalFailed) -> None:
        """The journal failed: every run's code stops, result waiters get `failed`
        (`fusee_runtime.engine.cancels.journal_lost`)."""
        cancels.journal_lost(self, failed)

    def mark_stuck(self, run: Run, message: str) -> None:
        if run.stuck != message and run.is_open and self.durability.failed is None:
            # Recorded, so every process sees why it stopped (once per reason: a
            # replay that stops at the same point again records nothing).
            self.append(run, RunStuck(run.run_id, message, self.clock.now()))
        if run.stuck != message:  # not recorded: it shows as stuck until resumed
            run.live.stuck = message
        run.error = message
        run.live.current = None
        self.progressed()
        log.error("fusee: run %s (%s) is stuck: %s", run.workflow_id, run.run_id, message)

    # -- closing a run ---------------------------------------------------------------------

    def close_run(self, run: Run, closed: OfRun) -> None:
        """Appends how the run closed (a record of `CLOSES`); it turns final once that
        is durable."""
        self.append(run, closed)
        self._after_close(run)

    def _after_close(self, run: Run) -> None:
        run.live.current = None
        run.live.parked = False
        # Its code is done: no handler answers for it any more (the same after a restart).
        run.live.queries.clear()
        run.live.updates.clear()
        self.limits.queues.closed(run)
        self.bursts.forget(run)
        task = run.live.task
        if task is not None and task is not asyncio.current_task(self.durability.loop):
            task.cancel()
        closed = self.durability.future(run.close_lsn or 0)
        closed.add_done_callback(lambda f: self._closed_durable(run, f))
        self.family.closed(run)

    def _closed_durable(self, run: Run, fut: asyncio.Future[None]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        run.live.close_durable = True
        if run.live.closed is not None and not run.live.closed.done():
            run.live.closed.set_result(None)
        if self.run_log is not None:
            self.run_log.closed(run)
        self._on_closed(run)
        self.progressed()
