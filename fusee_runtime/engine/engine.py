"""`Engine`: open and recover a home, start runs, hand out their handles.

Opening a home takes its lock, reads the journal (cutting a torn tail),
syncs what it read (the process that wrote it may have died before its
`fdatasync`), rebuilds every run in memory and resumes each open run by
running its code again from the top against its journal. One asyncio loop
owns all of this state; the journal writer thread only ever reports back to
it through `call_soon_threadsafe`. When the loop has nothing else to run,
it commits the pending batch itself (see `_kick`).
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import heapq
import inspect
import itertools
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import orjson

from fusee_runtime.clock import Clock, SystemClock
from fusee_runtime.completions import (
    SECRET_NAME,
    Completion,
    home_secret,
    make_token,
    read_token,
)
from fusee_runtime.context import NAME_CHARS_MAX, Ctx, Halt, _ctx_var, handling
from fusee_runtime.dsl import Exhausted, RetryPolicy, WorkflowDef, registry, seconds
from fusee_runtime.engine.control import ControlServer
from fusee_runtime.engine.handle import RunHandle
from fusee_runtime.engine.history import Closed, HistoryStore, Row
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.engine.registry import load_app
from fusee_runtime.engine.runlog import RunLog
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.engine.state import (
    Op,
    Run,
    RunInfo,
    Status,
    continued_creation,
    created,
    rebuilt,
    reset_creation,
    top,
    utc,
)
from fusee_runtime.engine.timers import TimerQueue
from fusee_runtime.errors import (
    Cancelled,
    CodecError,
    EngineClosed,
    Failure,
    FuseeError,
    JournalCorrupt,
    JournalFailed,
    NotFound,
    Rejected,
)
from fusee_runtime.journal import checkpoint as ckpt
from fusee_runtime.journal import format as fmt
from fusee_runtime.journal import records
from fusee_runtime.journal.reader import first_lsns, locate, recover
from fusee_runtime.journal.records import CLOSES, SCHEDULES, R
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter

log = logging.getLogger("fusee")

ID_BYTES_MAX = 256
CHECKPOINT_FLUSH_WAIT_S = 0.5
"""How long a checkpoint waits for the history store to take the runs closed so far."""
RETENTION_EVERY_S = 3600.0
"""How often `Config.retention` prunes the history store."""
RECORD_FIELDS_BYTES_MAX = 4096
"""Room in a record for its fields (ids, names, times) beside a payload at its limit."""
COMMIT_HERE_SYNC_S_MAX = 0.002
"""Above this `fdatasync` time (a moving average), commits stay on the writer thread
even when the loop is idle, so a slow disk never holds up the loop for long."""
KICK_WAITS_FOR_READY = 4
"""A commit waits for this many callbacks ready on the loop (a few rounds at most) to
run first and then commits on the loop; with more ready it goes to the writer thread."""
_RESOLVING = (R.TimerFired, R.WaitCompleted, R.OpCancelled, R.StepResumed, R.CompletionDone)
_ID_BAD = re.compile(r"[\x00-\x1f\x7f/]")


@dataclass
class Config:
    """Engine settings. The defaults are what production wants.

    `durability="none"` skips `fdatasync` altogether: it is UNSAFE, for
    measuring the engine's own cost only, and a crash loses acknowledged work.
    """

    clock: Clock = field(default_factory=SystemClock)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_exhausted: Exhausted = Exhausted.FAIL
    durability: Literal["fdatasync", "none"] = "fdatasync"
    storage: Storage = field(default_factory=Storage)
    segment_bytes: int = 16 << 20
    payload_bytes_max: int = 4 << 20
    checkpoint_bytes: int | None = 4 << 20
    """A checkpoint is written once the journal has grown this much since the last
    one (or by the last checkpoint's own size, if larger), and on a clean close.
    None writes none: the journal is kept whole and replayed whole on open (for
    looking at a home's full past, and for tests of the journal alone)."""
    retention: float | timedelta | None = None
    """Closed runs older than this (by when they closed) are deleted from the history
    store, checked on open and then hourly; None keeps them. Open runs are never pruned."""
    step_threads: int = 32
    drive: bool = True
    """False opens the home passively: records are read and appended (start,
    signal, cancel, resume, ...) but no run's code runs and no timer fires, so
    a command can act on a home without executing anyone's steps."""
    control: bool = True
    """Serve the control API on `<home>/control.sock` while open (an engine
    that drives runs only), so `fusee` commands from other processes reach
    the runs this engine drives."""
    schedules: bool = False
    """Fire the cron schedules of `@workflow(cron=...)` (an engine that drives
    runs only; `fusee serve` turns it on)."""
    http_url: str | None = None
    """Where the HTTP API is reached (`fusee serve --http`): `Completion.url` of
    `ctx.await_completion` points there; None gives no URL."""

    def __post_init__(self) -> None:
        if self.durability not in ("fdatasync", "none"):
            raise ValueError("Config.durability is 'fdatasync' or 'none'")
        if self.payload_bytes_max < 1 or self.record_bytes_max > fmt.RECORD_BYTES_MAX:
            raise ValueError(
                "Config.payload_bytes_max is between 1 and "
                f"{fmt.RECORD_BYTES_MAX - RECORD_FIELDS_BYTES_MAX} (a journal record is at "
                f"most {fmt.RECORD_BYTES_MAX} bytes)"
            )
        need = fmt.HEADER_BYTES + fmt.frame_size(self.record_bytes_max)
        if self.segment_bytes < need:
            raise ValueError(
                f"Config.segment_bytes ({self.segment_bytes}) must hold the largest record, "
                f"{need} bytes with Config.payload_bytes_max={self.payload_bytes_max}: "
                "raise segment_bytes or lower payload_bytes_max"
            )
        if self.checkpoint_bytes is not None and self.checkpoint_bytes < 1:
            raise ValueError("Config.checkpoint_bytes is at least 1, or None")
        if self.retention is not None and not (seconds(self.retention) or 0) > 0:
            raise ValueError("Config.retention is a positive duration, or None")
        if self.durability == "none":
            log.warning("fusee: durability='none' is UNSAFE: a crash loses acknowledged work")

    @property
    def record_bytes_max(self) -> int:
        """The largest journal record: a payload at its limit, with its record's fields."""
        return self.payload_bytes_max + RECORD_FIELDS_BYTES_MAX


class Engine:
    """An open home: recovers on open, runs workflows, closes cleanly.

    Use it as an async context manager::

        async with Engine(home=".fusee", app="workflows") as engine:
            h = await engine.start("order", {"id": "o-1"}, id="o-1")
            print(await h.result(timeout=30))
    """

    def __init__(
        self,
        home: str | os.PathLike[str] = ".fusee",
        app: str | ModuleType | Iterable[str] | None = "workflows",
        config: Config | None = None,
    ) -> None:
        self.home = Path(home)
        self.app = app
        self.config = config or Config()
        self.clock = self.config.clock
        self._runs: dict[str, Run] = {}  # run_id -> run
        self._latest: dict[str, Run] = {}  # workflow_id -> its newest run
        self._durable_lsn = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._ticket = itertools.count()
        self._failed: JournalFailed | None = None
        self._closing = False
        self._opened = False
        self._writer: JournalWriter | None = None
        self._kick_handle: asyncio.Handle | None = None  # `_kick` scheduled for the batch
        self._kick_rounds = 0  # times it waited for the loop's last few ready callbacks
        self._commit_here = self.config.storage.loop_safe
        self._lock: HomeLock | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workflows: dict[str, WorkflowDef] = registry()
        self._timers = TimerQueue(self.clock, self._fire)
        self._wakes: set[str] = set()
        self._progress: asyncio.Event | None = None
        # `ctx.log` lines; only an engine that runs code writes them.
        self.run_log: RunLog | None = None
        self._control: ControlServer | None = None
        self.schedules = Schedules(self)
        # Step attempts whose function is running now (a closing engine waits for them).
        self._attempts = 0
        # Plain-def step functions running in the pool now (cut-off ones included).
        self._threads_busy = 0
        self._threads_lock = threading.Lock()
        self._steps = 0  # steps finished (completed or failed for good) since open
        self._secret: bytes | None = None
        self._hurry = asyncio.Event()
        self.http_url = self.config.http_url.rstrip("/") if self.config.http_url else None
        # Closed runs move here and leave memory; `list`, `history` and a closed
        # run's handle read them back.
        self.history_store: HistoryStore | None = None
        # The newest checkpoint: the lsn it covers, the journal bytes written since
        # open when it was taken, and how many more bytes make the next one due.
        self._ckpt_lsn = 0
        self._ckpt_at_bytes = 0
        self._ckpt_due = self.config.checkpoint_bytes or 0
        self._ckpt_task: asyncio.Task[int] | None = None
        self._ckpt_lock = asyncio.Lock()
        self._ckpt_closed = 0  # closed runs (not yet stored then) the newest one holds
        self._retention_task: asyncio.Task[None] | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Takes the home, recovers the journal and resumes every open run.

        Raises:
            HomeLocked: another process owns the home.
            JournalCorrupt: damage before the journal's tail.
        """
        if self._opened:
            raise Rejected("the engine is already open")
        self._loop = asyncio.get_running_loop()
        load_app(self.app)
        self.home.mkdir(parents=True, exist_ok=True)
        self._lock = HomeLock(self.home)
        self._lock.acquire()
        try:
            journal = self.home / "journal"
            journal.mkdir(exist_ok=True)
            ckpt.remove_leftovers(journal, self.config.storage)
            # A damaged newest one is passed over for the one before (compaction keeps
            # the journal that one needs).
            base, passed = ckpt.newest(journal, self.config.storage)
            for e in passed:
                log.error("fusee: passing over a damaged checkpoint: %s", e)
            damaged = [e.path for e in passed]
            after = base.lsn if base is not None else 0
            at = base.body.get("at") if base is not None else None
            scan = recover(journal, self.config.storage, after=after, at=at)
            self._durable_lsn = scan.tail.next_lsn - 1
            self.history_store = HistoryStore(
                self.home, lambda ids: self._loop.call_soon_threadsafe(self._stored, ids)
            )
            self.history_store.open()
            if base is not None:
                self._restore(base)
                self._ckpt_lsn = base.lsn
            for lsn, payload in scan.records:
                try:
                    rec = records.decode(payload)
                    if rec[0] in SCHEDULES:
                        self.schedules.replay(lsn, rec)
                    else:
                        self._replay_record(lsn, rec)
                except (ValueError, KeyError, IndexError, TypeError) as e:
                    # A whole frame (its checksum holds) that this version cannot read.
                    path, offset = locate(journal, self.config.storage, lsn)
                    raise JournalCorrupt(
                        path, offset, f"record {lsn} cannot be read by this version ({e!r})"
                    ) from None
            self._set_aside(damaged)
            loop = self._loop
            self._writer = JournalWriter(
                journal,
                self.config.storage,
                scan.tail,
                self.config.segment_bytes,
                on_durable=lambda lsn: loop.call_soon_threadsafe(self._durable_to, lsn),
                on_failed=lambda e: loop.call_soon_threadsafe(self._journal_failed, e),
                sync=self.config.durability == "fdatasync",
                record_bytes_max=self.config.record_bytes_max,
                commit_on_append=False,
            )
        except BaseException:
            if self.history_store is not None:
                self.history_store.close()
            self._lock.release()
            raise
        # Runs closed in the journal after the checkpoint may not have reached the
        # store before a crash: move them (again, harmlessly).
        for run in list(self._runs.values()):
            if not run.status.is_open:
                self._to_history(run, again=True)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.config.step_threads, thread_name_prefix="fusee-step"
        )
        self._opened = True
        if self.config.drive:
            self.run_log = RunLog(self.home / "logs")
            self._timers.start()
            if self.config.control:
                await self._serve_control()
        for run in sorted(self._runs.values(), key=lambda r: r.start_lsn):
            if run.is_open:
                self._arm(run)
                self._spawn(run)
        if self.config.drive and self.config.schedules:
            self.schedules.start()
        if self.config.drive and self.config.retention is not None:
            self._retention_task = asyncio.get_running_loop().create_task(self._retain())

    async def _serve_control(self) -> None:
        server = ControlServer(self)
        try:
            await server.start()
        except OSError as e:
            # The runs go on; commands from other processes will say that the
            # owner does not answer.
            log.warning("fusee: cannot serve the control API in %s: %s", self.home, e)
            return
        self._control = server

    async def close(self, grace: float = 0.0) -> None:
        """Stops running code (open runs resume on the next open) and syncs the journal.

        It takes no more work at once: no timer, no schedule, no new step
        attempt, and calls that would start work raise `EngineClosed` (the
        control API keeps answering the others meanwhile). Step functions
        running now get `grace` seconds to finish (`end_grace` cuts it
        short), and their results are recorded; the rest are cut off and
        run again on the next open.
        """
        if not self._opened or self._closing:
            return
        self._closing = True
        await self.schedules.stop()
        await self._timers.stop()
        if grace > 0 and self._attempts:
            finished = asyncio.ensure_future(
                self.wait_until(lambda: self._attempts == 0 or self._failed is not None)
            )
            hurried = asyncio.ensure_future(self._hurry.wait())
            try:
                await asyncio.wait(
                    {finished, hurried}, timeout=grace, return_when="FIRST_COMPLETED"
                )
            finally:
                finished.cancel()
                hurried.cancel()
        if self._control is not None:
            self._control.stop_accepting()
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._retention_task is not None:
            self._retention_task.cancel()
        if self._writer is not None:
            await asyncio.to_thread(self._writer.close)
        await self._close_storage()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self.run_log is not None:
            self.run_log.close()
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(Rejected("the engine closed"))
        self._waiters.clear()
        for run in self._runs.values():
            self._fail_result_waiters(
                run,
                EngineClosed(
                    f"the engine closed before run {run.workflow_id!r} finished; "
                    "it resumes when the home is opened again"
                ),
            )
        if self._control is not None:
            await self._control.close()
        if self._lock is not None:
            self._lock.release()

    def end_grace(self) -> None:
        """Cuts short the grace period of a `close(grace)` in progress."""
        self._hurry.set()

    # -- public API ----------------------------------------------------------------

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: Any = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
        timeout: float | Any | None = None,
        signal: tuple[str, Any] | None = None,
    ) -> RunHandle:
        """Starts a run of `workflow`; returns once the start is durable.

        Idempotent on `id`: with `on_conflict="return"` an existing run of the
        id (open or closed) is returned; `"fail"` raises `Rejected` if one
        exists; `"new_run"` terminates an open run of the id and starts anew.
        `timeout` is the run's deadline: past it the run closes as
        `timed_out`. `signal=(name, value)` delivers a signal with the start
        (to the existing run when there is an open one); the call returns once
        both are durable.

        Raises:
            NotFound: no workflow of that name (the message lists the known ones).
            CodecError: the input cannot be encoded as JSON, or is too large.
            Rejected: a bad id or `on_conflict`, or a conflict with `"fail"`.
        """
        self._check_accepting()
        wf = self.workflow(workflow)
        if on_conflict not in ("return", "fail", "new_run"):
            raise Rejected(f"on_conflict is 'return', 'fail' or 'new_run', not {on_conflict!r}")
        encoded = self._encode(input, f"the input of workflow {wf.name!r}")
        limit = seconds(timeout)
        if signal is not None:
            check_signal_name(signal[0])
            self._encode(signal[1], f"signal {signal[0]!r}")
        workflow_id = check_id(id) if id is not None else uuid.uuid4().hex
        existing = self._find_latest(workflow_id) if id is not None else None
        if existing is not None:
            if on_conflict == "return":
                if signal is not None:
                    # Refused when the run is closed, rather than dropped silently.
                    await self.signal(workflow_id, *signal)
                if existing.run_id in self._runs:  # a stored run is durable
                    await self._wait_durable(existing.start_lsn)
                return RunHandle(self, workflow_id)
            if on_conflict == "fail":
                raise Rejected(
                    f"a run of id {workflow_id!r} already exists (status {existing.status})"
                )
            if existing.is_open:
                self._close_run(
                    existing, R.RunTerminated, "replaced by a new run (on_conflict='new_run')"
                )
        now = self.clock.now()
        deadline = None if limit is None else now + limit
        run = self._new_run(workflow_id, wf.name, encoded, deadline, None)
        if signal is not None:
            self._signal(run, *signal)
        await self._wait_durable(run.last_lsn)
        return RunHandle(self, workflow_id)

    def _new_run(
        self,
        workflow_id: str,
        workflow: str,
        encoded_input: bytes,
        deadline: float | None,
        origin: dict[str, Any] | None,
    ) -> Run:
        """Appends a RunStarted, arms and spawns the run (not yet durable)."""
        run_id = uuid.uuid4().hex
        now = self.clock.now()
        head = (run_id, workflow_id, workflow)
        tail = (now, deadline, origin)
        rec = [R.RunStarted, *head, orjson.loads(encoded_input), *tail]
        lsn = self._writer_append((int(R.RunStarted), *head, orjson.Fragment(encoded_input), *tail))
        run, _ = self._replay_record(lsn, rec)
        self._arm(run)
        self._spawn(run)
        return run

    # -- lifecycle of a run ----------------------------------------------------------

    async def signal(self, id: str, name: str, value: Any = None) -> None:
        """Delivers signal `name` to the newest run of `id`; returns once it is durable.

        Raises:
            NotFound: no run of that id.
            Rejected: the run is closed (the message says how).
            CodecError: the value cannot be encoded as JSON.
        """
        self._check_accepting()
        run = self._latest_run(id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: it takes no more signals")
        lsn = self._signal(run, name, value)
        await self._wait_durable(lsn)

    def _signal(self, run: Run, name: str, value: Any) -> int:
        check_signal_name(name)
        encoded = self._encode(value, f"signal {name!r}")
        rec = [
            R.SignalReceived,
            run.run_id,
            run.next_signal_id,
            name,
            orjson.loads(encoded),
            self.clock.now(),
        ]
        return self._append(run, rec)

    async def cancel(self, id: str, reason: str = "cancelled") -> None:
        """Cancels the newest run of `id`; returns once the request is durable.

        `Cancelled` is raised in the run's code at its current await (the code
        may catch it to clean up); registered compensations run, newest
        first; the run closes as `cancelled`.
        """
        self._check_accepting()
        run = self._latest_run(id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is already closed ({run.closing})")
        if run.cancel_reason is None:
            self._append(run, [R.CancelRequested, run.run_id, reason, self.clock.now()])
            if run.status == Status.STUCK:
                # No code can run to take the cancel: close it as it stands.
                self._close_run(run, R.RunCancelled, reason)
            else:
                self._interrupt(run)
        await self._wait_durable(run.last_lsn)

    def _interrupt(self, run: Run) -> None:
        """Delivers a requested cancel wherever the run's code is waiting."""
        ctx = run.ctx
        running = ctx._step_tasks if isinstance(ctx, Ctx) else {}
        resolved = set()
        for seq, op in list(run.pending.items()):
            if op.kind == "completion" and not op.sent and seq in running:
                continue  # its `send` runs: the task's cancel delivers it, as for a step
            self._append(run, [R.OpCancelled, run.run_id, seq, op.kind, op.name])
            resolved.add(seq)
        if isinstance(ctx, Ctx):
            # A paused step just resolved above raises Cancelled by itself; a
            # task cancel on top would arrive as a bare CancelledError.
            for seq, task in list(ctx._step_tasks.items()):
                if seq not in resolved:
                    task.cancel()

    async def terminate(self, id: str, reason: str = "terminated") -> None:
        """Closes the newest run of `id` at once, running nothing more; returns once durable."""
        self._check_accepting()
        run = self._latest_run(id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is already closed ({run.closing})")
        self._close_run(run, R.RunTerminated, reason)
        await self._wait_durable(run.close_lsn or 0)

    async def resume(self, id: str) -> None:
        """Resumes a paused run (its paused step runs again with a fresh budget, on
        the code loaded now) or retries a stuck run's replay with the code loaded now."""
        self._check_accepting()
        run = self._latest_run(id)
        if not run.is_open:
            raise Rejected(f"run {id!r} is closed ({run.closing}): nothing to resume")
        paused = run.paused_ops()
        stuck = run.status == Status.STUCK
        for seq in paused:
            self._append(run, [R.StepResumed, run.run_id, seq, self.clock.now()])
        if stuck:
            run.status = Status.RUNNING
            run.error = None
            self._spawn(run)
        elif not paused:
            raise Rejected(f"run {id!r} is {run.status}: only a paused or stuck run resumes")
        await self._wait_durable(run.last_lsn)

    async def reset(self, id: str, to: int | str) -> RunHandle:
        """Closes the newest run of `id` as `reset` and starts a new run of the same id
        whose journal keeps the operations before `to` (an operation number, or the
        name of a step: its first occurrence); the steps from there on run again."""
        self._check_accepting()
        run = self._latest_run(id)
        before = self._reset_point(run, to)
        if run.is_open:
            self._close_run(run, R.RunReset, f"reset to operation #{before}")
        origin = {"reset": run.run_id, "before": before}
        encoded = self._encode(run.input, f"the input of workflow {run.workflow!r}")
        new = self._new_run(run.workflow_id, run.workflow, encoded, run.deadline, origin)
        await self._wait_durable(new.last_lsn)
        return RunHandle(self, id)

    def _reset_point(self, run: Run, to: int | str) -> int:
        if isinstance(to, bool) or not isinstance(to, int | str):
            raise Rejected("reset(to=) takes an operation number or a step name")
        if isinstance(to, int) or (to.isascii() and to.isdigit()):
            n = int(to)
            if n < 1:
                raise Rejected("operation numbers start at 1")
            # Up to one past the last operation: keep them all, run what follows anew.
            last = max((top(s) for s in run.ops), default=0)
            if n > last + 1:
                raise Rejected(
                    f"operation #{n} is past the end of run {run.workflow_id!r}: "
                    f"it has {last} operation(s), so --to takes 1 to {last + 1}"
                )
            return n
        steps = sorted(
            (top(s), s) for s, op in run.ops.items() if op.kind == "step" and op.name == to
        )
        if not steps:
            raise NotFound(f"run {run.workflow_id!r} has no step named {to!r}")
        return steps[0][0]

    def _continue_as_new(self, run: Run, input: Any) -> None:
        """Closes `run` and starts its successor with `input`, in one record."""
        encoded = self._encode(input, f"the input of workflow {run.workflow!r}")
        new_run_id = uuid.uuid4().hex
        now = self.clock.now()
        rec = [R.RunContinuedAsNew, run.run_id, new_run_id, orjson.loads(encoded), now]
        wire = (int(R.RunContinuedAsNew), run.run_id, new_run_id, orjson.Fragment(encoded), now)
        lsn = self._writer_append(wire)
        self._replay_record(lsn, rec)
        self._after_close(run)
        new = self._runs[new_run_id]
        self._arm(new)
        self._spawn(new)

    def handle(self, id: str) -> RunHandle:
        """A handle on the newest run of `id`; its methods raise `NotFound` if there is none."""
        return RunHandle(self, id)

    async def list(
        self,
        status: Status | str | None = None,
        workflow: str | None = None,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs, open and closed, newest first."""
        if where:
            raise Rejected("search attributes (where=) are not available in this version")
        try:
            want = Status(status) if status is not None else None
        except ValueError:
            known = ", ".join(s.value for s in Status)
            raise Rejected(f"unknown status {status!r}; statuses: {known}") from None
        # Memory holds the open runs and the closed ones not yet stored; the store the
        # rest. Both are ordered by where each run began in the journal.
        mine = [
            run
            for run in self._runs.values()
            if (want is None or run.status == want)
            and (workflow is None or run.workflow == workflow)
        ]
        found: list[tuple[int, RunInfo]] = [(run.start_lsn, run.info()) for run in mine]
        if self.history_store is not None and (want is None or not want.is_open):
            more = None if limit is None else limit + len(mine)
            for row in self.history_store.list(want and want.value, workflow, more):
                if row.run_id not in self._runs:
                    found.append((row.start_lsn, _row_info(row)))
        found.sort(key=lambda f: f[0], reverse=True)
        return [info for _, info in found[:limit]]

    async def history(self, id: str) -> list[dict[str, Any]]:
        """Every record of every run of `id`, oldest first, as mappings."""
        recs = [rec for r in self._runs.values() if r.workflow_id == id for rec in r.records]
        known = {r.run_id for r in self._runs.values() if r.workflow_id == id}
        if self.history_store is not None:
            for run_id, stored in self.history_store.records_of(id):
                if run_id not in known:
                    known.add(run_id)
                    recs.extend((lsn, rec) for lsn, rec in stored)
        if not known:
            raise NotFound(f"no run with id {id!r}")
        recs.sort(key=lambda r: r[0])
        return [records.as_dict(lsn, rec) for lsn, rec in recs]

    def workflow(self, workflow: str | WorkflowDef) -> WorkflowDef:
        """The registered workflow of that name.

        Raises:
            NotFound: unknown, with the known names in the message.
        """
        name = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        wf = self._workflows.get(name) if isinstance(name, str) else None
        if wf is None:
            known = ", ".join(sorted(self._workflows)) or "none"
            raise NotFound(f"unknown workflow {name!r}; known workflows: {known}")
        return wf

    def counters(self) -> dict[str, float]:
        """Journal counters (records, syncs, bytes, ...), counted, not timed."""
        c = self._writer.counters.snapshot() if self._writer else {}
        c["durable_lsn"] = self._durable_lsn
        c["steps"] = self._steps
        c["runs_open"] = sum(1 for r in self._latest.values() if r.is_open)
        c["runs_in_memory"] = len(self._runs)
        c["checkpoint_lsn"] = self._ckpt_lsn
        if self.history_store is not None:
            c["history_rows_written"] = self.history_store.rows_written
        return c

    # -- runs ----------------------------------------------------------------------

    def _latest_run(self, id: str) -> Run:
        run = self._find_latest(id)
        if run is None:
            raise NotFound(f"no run with id {id!r}")
        return run

    # -- handlers ----------------------------------------------------------------------

    async def query(self, id: str, name: str, arg: Any = None) -> Any:
        """The answer of the newest run of `id` to query `name` (its `ctx.on_query`).

        Raises:
            NotFound: no run of that id.
            Rejected: no handler of that name (the message lists the run's
                handlers), no code running here to answer, or the handler
                raised (its message).
            CodecError: the answer cannot be encoded as JSON.
        """
        if not self._opened:
            self._check_accepting()
        run = self._latest_run(id)  # a read: it answers while the engine stops, too
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: only open runs answer queries")
        fn = self._handler(run, run.queries, "query", name, "answer queries")
        try:
            with handling():
                value = fn(arg)
            if inspect.isawaitable(value):
                if inspect.iscoroutine(value):
                    value.close()
                raise Rejected(f"query handler {name!r} must be a plain function, not async")
        except FuseeError:
            raise
        except Halt as e:  # a handler that asked the run's ctx for an operation
            raise Rejected(f"query {name!r} of run {id!r} failed: {e}") from None
        except Exception as e:
            raise Rejected(f"query {name!r} of run {id!r} failed: {type(e).__name__}: {e}") from e
        return orjson.loads(self._encode(value, f"the answer to query {name!r}"))

    async def update(
        self, id: str, name: str, arg: Any = None, update_id: str | None = None
    ) -> Any:
        """Applies update `name` to the newest run of `id` (its `ctx.on_update` handler);
        returns the handler's result once the update is durable.

        An update sent again with the same `update_id` is not applied again:
        the caller gets the first one's result.

        Raises:
            NotFound: no run of that id.
            Rejected: the run is closed, has no such handler, no code runs here
                to apply it, its code is inside `ctx.all`/`ctx.race` or still
                replaying, the validator refused it, or the handler raised
                (with its message).
            CodecError: the argument or the result cannot be encoded as JSON.
        """
        self._check_accepting()
        run = self._latest_run(id)
        if update_id is not None:
            if not isinstance(update_id, str) or not 0 < len(update_id) <= NAME_CHARS_MAX:
                raise Rejected(f"an update id is a string of 1 to {NAME_CHARS_MAX} characters")
            done = run.updates_done.get(update_id)
            if done is not None:
                lsn, result, failure = done
                await self._wait_durable(lsn)
                if failure is not None:
                    raise Rejected(
                        f"update {name!r} of run {id!r} failed: {Failure.from_json(failure)}"
                    )
                return result
        if not run.is_open:
            raise Rejected(f"run {id!r} is {run.closing}: it takes no more updates")
        if self.config.drive:
            # First: while the code replays, its handlers are not registered yet.
            self._check_update_point(run, id)
        entry = self._handler(run, run.updates, "update", name, "apply updates")
        encoded_arg = self._encode(arg, f"the argument of update {name!r}")
        handle, validate = entry
        if validate is not None:
            try:
                validate(arg)
            except Exception as e:
                raise Rejected(f"update {name!r} of run {id!r} was refused: {e}") from e
        failure: Failure | None = None
        result: Any = None
        try:
            with handling():
                result = handle(arg)
        except (Exception, Halt) as e:
            # Recorded all the same, whatever it raised: the handler may have changed
            # the state before it raised, and a replay must do the same.
            failure = Failure.of(e if isinstance(e, Exception) else Rejected(str(e)))
        if failure is None and inspect.isawaitable(result):
            # Its body never ran: nothing changed, nothing to record.
            if inspect.iscoroutine(result):
                result.close()
            raise Rejected(f"update handler {name!r} must be a plain function, not async")
        if failure is None:
            try:
                encoded = self._encode(result, f"the result of update {name!r}")
                if len(encoded) + len(encoded_arg) > self.config.payload_bytes_max:
                    raise CodecError(
                        f"update {name!r}: its argument and result are {len(encoded_arg)} + "
                        f"{len(encoded)} bytes, over the limit of "
                        f"{self.config.payload_bytes_max} (Config.payload_bytes_max)"
                    )
                result = orjson.loads(encoded)
            except CodecError as e:
                failure = Failure.of(e)
        if failure is not None:
            result = None
        at = self.clock.now()
        uid = update_id or uuid.uuid4().hex
        arg_value = orjson.loads(encoded_arg)
        wire_failure = self._update_failure(failure, len(encoded_arg))
        rec = [R.UpdateApplied, run.run_id, uid, name, arg_value, run.position]
        await self._wait_durable(self._append(run, [*rec, result, wire_failure, at]))
        if failure is not None:
            raise Rejected(f"update {name!r} of run {id!r} failed: {failure}")
        return result

    def _update_failure(self, failure: Failure | None, arg_bytes: int) -> Any:
        """A failure as the update's record carries it: cut to what fits beside the argument."""
        if failure is None:
            return None
        wire = failure.to_json()
        if arg_bytes + len(orjson.dumps(wire)) > self.config.payload_bytes_max:
            short = Failure(f"{failure.kind}: {failure.message[:200]}", kind=failure.kind)
            wire = short.to_json()
        return wire

    def _handler(self, run: Run, handlers: dict[str, Any], kind: str, name: str, to: str) -> Any:
        """The run's `kind` handler `name`, or `Rejected` saying why there is none."""
        found = handlers.get(name)
        if found is not None:
            return found
        if not self.config.drive:
            raise Rejected(
                f"no process runs the code of {run.workflow_id!r} to {to}: "
                "start `fusee serve` (or the command that drives it) first"
            )
        known = ", ".join(sorted(handlers)) or "none"
        raise Rejected(
            f"run {run.workflow_id!r} has no {kind} handler {name!r}; its handlers: {known}"
        )

    @staticmethod
    def _check_update_point(run: Run, id: str) -> None:
        """Refuses an update where a replay could not apply it at the same point."""
        if run.status == Status.STUCK:
            raise Rejected(f"run {id!r} is stuck: it takes no updates until it is resumed")
        ctx = run.ctx
        if not run.parked and not isinstance(ctx, Ctx):
            raise Rejected(f"run {id!r} is not running its code yet; send the update again")
        inside = run.position_kind == "group" or (isinstance(ctx, Ctx) and ctx._groups)
        if inside:
            raise Rejected(
                f"run {id!r} is inside ctx.all or ctx.race; send the update again once it is past"
            )
        frontier = max((top(s) for s in run.ops), default=0)
        if run.position < frontier or run.position == 0:
            raise Rejected(f"run {id!r} is replaying its journal; send the update again")

    # -- completions -------------------------------------------------------------------

    def _token_secret(self, create: bool) -> bytes | None:
        """The home's token secret; made (once per home) when the first token is issued."""
        if self._secret is None:
            path = self.home / SECRET_NAME
            if create or path.exists():
                self._secret = home_secret(self.home, self.config.storage)
        return self._secret

    def _completion(self, run: Run, seq: str, issued: int) -> Completion:
        """What `send` gets for the `issued`-th token of an `await_completion`."""
        secret = self._token_secret(create=True)
        assert secret is not None
        token = make_token(secret, run.run_id, seq, issued)
        url = f"{self.http_url}/v1/complete/{token}" if self.http_url else None
        return Completion(token, url)

    async def complete(self, token: str, value: Any = None) -> None:
        """Finishes the `await_completion` that issued `token` with `value`; returns once
        that is durable.

        Raises:
            NotFound: not a token of this home, or its run is gone.
            Rejected: the run is closed, the step already finished, or a later
                attempt superseded the token.
            CodecError: the value cannot be encoded as JSON.
        """
        await self._finish(token, value, None)

    async def fail(self, token: str, error: str | Failure) -> None:
        """Fails the `await_completion` that issued `token`: it raises `StepFailed` in the
        workflow, with `error` (a message, or a `Failure`). Raises as `complete` does."""
        await self._finish(token, None, error)

    async def _finish(self, token: str, value: Any, error: str | Failure | None) -> tuple[Run, str]:
        """Records how the `await_completion` of `token` ended (`error` None: with `value`);
        returns its run and seq once that is durable."""
        self._check_accepting()
        run, seq = self._completing(token)
        now = self.clock.now()
        if error is None:
            encoded = self._encode(value, f"the completion of {run.ops[seq].name!r}")
            rec = [R.CompletionDone, run.run_id, seq, orjson.loads(encoded), None, now]
            wire = (int(R.CompletionDone), run.run_id, seq, orjson.Fragment(encoded), None, now)
            lsn = self._append(run, rec, wire)
        else:
            failure = error if isinstance(error, Failure) else Failure(str(error), kind="Failed")
            lsn = self._append(
                run, [R.CompletionDone, run.run_id, seq, None, failure.to_json(), now]
            )
        await self._wait_durable(lsn)
        return run, seq

    def _completing(self, token: str) -> tuple[Run, str]:
        secret = self._token_secret(create=False)
        if secret is None:  # this home never issued a token
            raise NotFound(f"{str(token)[:80]!r} is not a completion token of this home")
        run_id, seq, issued = read_token(secret, token)
        run = self._run_by_id(run_id)
        op = run.ops.get(seq) if run is not None else None
        if run is None or op is None or op.kind != "completion":
            raise NotFound("the run that issued this completion token is not in this home")
        what = f"completion {op.name!r} of run {run.workflow_id!r}"
        if not run.is_open:
            raise Rejected(f"the {what} cannot finish: the run is {run.closing}")
        if op.done:
            raise Rejected(f"the {what} has already finished")
        if op.issued != issued:
            raise Rejected(
                f"this token of the {what} was replaced by a later one "
                f"(token {issued} of {op.issued}: `send` ran again)"
            )
        return run, seq

    # -- runs ----------------------------------------------------------------------

    def _spawn(self, run: Run) -> None:
        if not self.config.drive:
            # Its code runs when a driving engine opens the home; meanwhile a run
            # with a pending timer or wait shows as parked, as it would there.
            run.parked = True
            if run.status in (Status.RUNNING, Status.PARKED, Status.PAUSED):
                waits = Status.PARKED if run.pending else Status.RUNNING
                run.status = Status.PAUSED if run.paused_ops() else waits
            return
        run.parked = False
        if run.status in (Status.RUNNING, Status.PARKED, Status.PAUSED):
            run.status = Status.PAUSED if run.paused_ops() else Status.RUNNING
        run.task = asyncio.get_running_loop().create_task(
            self._drive(run), name=f"fusee:{run.workflow_id}"
        )

    def _arm(self, run: Run) -> None:
        """Schedules a run's deadline and pending timers; matches buffered signals."""
        if run.deadline is not None:
            self._timers.add(run.deadline, run.run_id, None)
        for seq, op in run.pending.items():
            if op.fire_at is not None:
                self._timers.add(op.fire_at, run.run_id, seq)
        self._match_signals(run)

    def _fire(self, run_id: str, seq: str | None, at: float) -> None:
        """A timer entry came due: record what it means, if it still means anything."""
        run = self._runs.get(run_id)
        if run is None or not run.is_open or self._failed is not None:
            return
        if seq is None:
            if run.deadline == at:
                self._close_run(run, R.RunTimedOut, "the run passed its deadline")
            return
        op = run.pending.get(seq)
        if op is None or op.fire_at != at:
            return
        if op.kind == "timer":
            self._append(run, [R.TimerFired, run.run_id, seq, self.clock.now()])
        elif op.kind == "wait":
            self._append(run, [R.WaitCompleted, run.run_id, seq, None, None, self.clock.now()])

    def _match_signals(self, run: Run) -> None:
        """Hands buffered signals to pending waits, oldest signal to earliest wait."""
        if not run.signals:
            return
        now = self.clock.now()
        for seq, op in list(run.pending.items()):
            if op.kind != "wait" or op.done:
                continue
            if op.fire_at is not None and op.fire_at <= now:
                continue  # timed out before this signal came: its timer records None
            for signal_id, name, value in run.signals:
                if name == op.name:
                    self._append(run, [R.WaitCompleted, run.run_id, seq, signal_id, value, now])
                    break

    def _park(self, run: Run, ctx: Ctx) -> None:
        """Drops a run's coroutine while it only waits; replay rebuilds it on wake."""
        task = run.task
        if task is None or run.ctx is not ctx or not run.is_open:
            return
        ctx._parking = True
        ctx._halted = "parked"
        run.parked = True
        run.task = None
        run.ctx = None
        run.waiters.clear()
        if run.status in (Status.RUNNING, Status.PAUSED):
            run.status = Status.PAUSED if run.paused_ops() else Status.PARKED
        task.cancel()
        self._progressed()

    def _resolved(self, run: Run, seq: str) -> None:
        """An op the run's code may wait on was resolved: wake the code."""
        fut = run.waiters.pop(seq, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        if run.parked and run.run_id not in self._wakes:
            self._wakes.add(run.run_id)
            asyncio.get_running_loop().call_soon(self._wake, run)

    def _wake(self, run: Run) -> None:
        self._wakes.discard(run.run_id)
        if run.parked and run.is_open and not self._closing:
            self._spawn(run)

    async def _drive(self, run: Run) -> None:
        """Runs a run's code (again) from the top until it returns, fails, parks or halts."""
        wf = self._workflows.get(run.workflow)
        if wf is None:
            self._mark_stuck(
                run, f"workflow {run.workflow!r} is not registered by the app {self.app!r}"
            )
            return
        ctx = Ctx(self, run)
        run.ctx = ctx
        _ctx_var.set(ctx)
        try:
            result = await wf.fn(ctx, run.input)
            if ctx._halted is not None or not run.is_open:
                return  # the code swallowed the cancellation of a park, close or terminate
            ctx._finished()
        except (Halt, JournalFailed):
            return
        except asyncio.CancelledError:
            if ctx._parking or self._closing or not run.is_open:
                return
            raise
        except Exception as e:
            if ctx._halted is None and run.is_open:
                await self._settle_failure(run, ctx, e)
            return
        try:
            encoded = self._encode(result, f"the result of workflow {run.workflow!r}")
        except CodecError as e:
            failure = Failure(str(e), kind="CodecError", retryable=False)
            self._close_run(run, R.RunFailed, failure.to_json())
            return
        self._close_run(run, R.RunCompleted, orjson.loads(encoded), orjson.Fragment(encoded))

    async def _settle_failure(self, run: Run, ctx: Ctx, error: Exception) -> None:
        """The code raised: run the compensations, then close as failed or cancelled."""
        cancelled = isinstance(error, Cancelled) and run.cancel_reason is not None
        try:
            await ctx._run_compensations()
        except (Halt, JournalFailed):
            return
        except asyncio.CancelledError:
            if ctx._parking or self._closing or not run.is_open:
                return
            raise
        if not run.is_open:
            return
        if cancelled:
            self._close_run(run, R.RunCancelled, run.cancel_reason)
        else:
            self._close_run(run, R.RunFailed, Failure.of(error).to_json())

    def _close_run(self, run: Run, kind: R, value: Any, wire_value: Any = None) -> None:
        now = self.clock.now()
        rec = [kind, run.run_id, value, now]
        wire = (int(kind), run.run_id, value if wire_value is None else wire_value, now)
        self._append(run, rec, wire)
        self._after_close(run)

    def _after_close(self, run: Run) -> None:
        run.current = None
        run.parked = False
        # Its code is done: no handler answers for it any more (the same after a restart).
        run.queries.clear()
        run.updates.clear()
        if run.task is not None and run.task is not asyncio.current_task():
            run.task.cancel()
        closed = self._durable_future(run.close_lsn or 0)
        closed.add_done_callback(lambda f: self._closed_durable(run, f))

    def _closed_durable(self, run: Run, fut: asyncio.Future[None]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        if run.closing is not None:
            run.status = run.closing
        if run.closed is not None and not run.closed.done():
            run.closed.set_result(None)
        if self.run_log is not None:
            self.run_log.closed(run)
        self._to_history(run)
        if run.origin is not None and "schedule" in run.origin:
            self.schedules.poke()
        self._progressed()

    def _mark_stuck(self, run: Run, message: str) -> None:
        run.status = Status.STUCK
        run.error = message
        run.current = None
        self._progressed()
        log.error("fusee: run %s (%s) is stuck: %s", run.workflow_id, run.run_id, message)

    def _log_compensation(self, run: Run, name: str, error: Exception) -> None:
        log.error("fusee: %s compensation %r failed: %s", run.workflow_id, name, error)

    def _log_attempt(
        self, run: Run, name: str, attempt: int, failure: Failure, retry_at: float
    ) -> None:
        log.info(
            "fusee: %s step %r attempt %d failed (%s); retry in %.3fs",
            run.workflow_id,
            name,
            attempt,
            failure,
            retry_at - self.clock.now(),
        )

    # -- checkpoints, compaction and the history store ------------------------------------

    def _set_aside(self, damaged: list[Path]) -> None:
        """Renames damaged checkpoints to `.damaged` once the home opened without them:
        kept to look at, and no longer counted as the one to fall back on."""
        for path in damaged:
            self.config.storage.rename(path, path.with_name(path.name + ".damaged"))
        if damaged:
            self.config.storage.sync_dir(damaged[0].parent)

    def _restore(self, base: ckpt.Checkpoint) -> None:
        """Rebuilds memory from a checkpoint, as replaying its records would."""
        body = base.body
        try:
            self.schedules.restore(body["schedules"])
            for creation, recs in body["runs"]:
                first = 0
                if creation is None or creation["kind"] == "reset":
                    run = created(creation, recs[0])
                else:
                    run = self._runs.get(creation["run_id"]) or created(creation, None)
                if run.run_id not in self._runs:
                    self._runs[run.run_id] = run
                    self._latest[run.workflow_id] = run
                    if recs and recs[0][1][0] == R.RunStarted:
                        run.apply(*recs[0])
                        first = 1
                for lsn, rec in recs[first:]:
                    self._replay_record(lsn, rec)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as e:
            raise JournalCorrupt(
                str(base.path), 0, f"checkpoint cannot be read by this version ({e!r})"
            ) from None

    def _snapshot(self, lsn: int) -> dict[str, Any]:
        """What a checkpoint at `lsn` holds: every run in memory as it stood then (the
        open ones, and the closed ones not yet in the history store), and the schedules."""
        # Runs come in the order they began (memory adds them so); records only grow, so
        # each is cut at `lsn` by the thread that encodes it: the loop only counts.
        runs = []
        self._ckpt_closed = 0
        for run in self._runs.values():
            if run.start_lsn > lsn:
                continue
            recs = run.records
            n = (
                len(recs)
                if not recs or recs[-1][0] <= lsn
                else bisect.bisect_right(recs, lsn, key=_lsn)
            )
            runs.append((run.creation, recs, n))
            self._ckpt_closed += run.close_lsn is not None and run.close_lsn <= lsn
        return {"lsn": lsn, "runs": runs, "schedules": self.schedules.snapshot(lsn)}

    def _checkpoint_due(self) -> None:
        """Starts a checkpoint if the journal grew enough since the last one."""
        writer = self._writer
        if (
            writer is not None
            and self._ckpt_due
            and self._ckpt_task is None
            and not self._closing
            and writer.counters.bytes - self._ckpt_at_bytes >= self._ckpt_due
        ):
            self._ckpt_task = asyncio.get_running_loop().create_task(self.checkpoint())

    async def checkpoint(self) -> int:
        """Writes a checkpoint of what is durable now, then compacts; returns its lsn.

        Runs by itself as the journal grows (`Config.checkpoint_bytes`) and
        on a clean close. The work (encoding, writing, fsync, deleting
        segments) is done on a thread; only the snapshot of memory is taken
        on the loop. A failure is logged and changes nothing: the journal
        still holds every record.
        """
        lsn = self._durable_lsn
        try:
            async with self._ckpt_lock:
                # What closed so far goes to the store first, so the checkpoint holds
                # open runs only, as far as it can (a crash then replays less). A store
                # that fails or lags does not hold checkpoints (and compaction) back:
                # the checkpoint then keeps the closed runs it has not taken.
                flushed = asyncio.ensure_future(self._flush_history())
                await asyncio.wait({flushed}, timeout=CHECKPOINT_FLUSH_WAIT_S)
                flushed.add_done_callback(_retrieve)
                lsn = self._durable_lsn
                # The same lsn again only to drop closed runs the store has taken since.
                again = lsn == self._ckpt_lsn and self._ckpt_closed
                if (lsn <= self._ckpt_lsn and not again) or self._failed or not self._ckpt_due:
                    return self._ckpt_lsn
                if self._writer is not None:
                    self._ckpt_at_bytes = self._writer.counters.bytes
                body = self._snapshot(lsn)
                if self._writer is not None:
                    synced, segment, offset = self._writer.synced_at
                    if synced == lsn and segment is not None:
                        body["at"] = [segment, offset]
                size = await asyncio.to_thread(self._write_checkpoint, lsn, body)
                self._ckpt_lsn = lsn
                self._ckpt_due = max(self.config.checkpoint_bytes or 0, size)
        except Exception as e:
            log.error(
                "fusee: checkpoint at lsn %d failed (the journal keeps everything): %s", lsn, e
            )
        finally:
            if self._ckpt_task is asyncio.current_task():
                self._ckpt_task = None
        return self._ckpt_lsn

    def _write_checkpoint(self, lsn: int, body: dict[str, Any]) -> int:
        """On a thread: writes the checkpoint and compacts; returns its size in bytes."""
        journal = self.home / "journal"
        storage = self.config.storage
        body["runs"] = [(creation, recs[:n]) for creation, recs, n in body["runs"]]
        path = ckpt.write(journal, storage, lsn, body)
        size = path.stat().st_size
        try:
            segments = [(p, first or 0) for p, first in first_lsns(journal, storage)]
            doomed, old = ckpt.compactable(segments, ckpt.listed(journal))
            for p in [*old, *doomed]:
                storage.remove(p)
            if doomed or old:
                storage.sync_dir(journal)
        except OSError as e:
            # The checkpoint holds; what was not deleted is deleted after the next one.
            log.error("fusee: compaction after the checkpoint at lsn %d stopped: %s", lsn, e)
        return size

    async def _close_storage(self) -> None:
        """On close: the history store takes what closed, then the last checkpoint."""
        store = self.history_store
        if self._ckpt_task is not None:
            await asyncio.gather(self._ckpt_task, return_exceptions=True)
        if store is None:
            return
        try:
            await self._flush_history()
        except Exception as e:
            log.error("fusee: the history store could not take the closed runs: %s", e)
        try:
            if self._writer is not None:
                await self.checkpoint()  # it holds what the store did not take
        finally:
            await asyncio.to_thread(store.close)
            self.history_store = None  # a late control call reads memory only

    async def _flush_history(self) -> None:
        """Returns once every run closed so far is in the history store and out of memory."""
        if self.history_store is not None:
            await asyncio.to_thread(self.history_store.flush)
            await asyncio.sleep(0)  # the evictions the store scheduled run

    def _to_history(self, run: Run, again: bool = False) -> None:
        """Queues a closed run (durably closed) for the history store; `again` when
        opening the home finds it closed (it may be there, or have been pruned)."""
        if self.history_store is None:
            return
        row = Row(
            run.run_id,
            run.workflow_id,
            run.workflow,
            run.status.value,
            run.started_at,
            run.closed_at or run.started_at,
            run.start_lsn,
            run.close_lsn or run.last_lsn,
            run.error,
            {},
        )
        self.history_store.put(Closed(row, run.creation, run.records, again))

    def _stored(self, run_ids: list[str]) -> None:
        """On the loop: these closed runs are in the history store; memory lets them go."""
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is None or run.status.is_open:
                continue
            del self._runs[run_id]
            if self._latest.get(run.workflow_id) is run:
                del self._latest[run.workflow_id]
        self._progressed()

    def _find_latest(self, id: str) -> Run | None:
        """The newest run of `id`, from memory or (closed) from the history store."""
        run = self._latest.get(id)
        if run is not None or self.history_store is None:
            return run
        row = self.history_store.latest(id)
        return self._stored_run(row.run_id) if row is not None else None

    def _run_by_id(self, run_id: str) -> Run | None:
        """The run of `run_id`, from memory or (closed) from the history store."""
        run = self._runs.get(run_id)
        if run is not None or self.history_store is None:
            return run
        return self._stored_run(run_id)

    def _stored_run(self, run_id: str) -> Run | None:
        """A closed run rebuilt from the history store."""
        assert self.history_store is not None
        got = self.history_store.full(run_id)
        return rebuilt(*got) if got is not None else None

    async def prune(self, older_than: float | timedelta) -> int:
        """Deletes closed runs that closed more than `older_than` ago from the history
        store; returns how many. Open runs are never pruned."""
        self._check_accepting()
        age = seconds(older_than)
        if age is None or age < 0:
            raise Rejected("prune takes a duration of zero or more")
        store = self.history_store
        assert store is not None
        await self._flush_history()
        # Runs a reset that opening may replay started from stay (see HistoryStore.prune).
        floor = ckpt.replay_floor(ckpt.listed(self.home / "journal"))
        keep = {
            run.origin["reset"]
            for run in self._runs.values()
            if run.origin and "reset" in run.origin and run.start_lsn > floor
        }
        return await asyncio.to_thread(store.prune, self.clock.now() - age, floor, keep)

    async def _retain(self) -> None:
        """`Config.retention`: prunes on open, then every hour."""
        age = seconds(self.config.retention)
        assert age is not None
        while True:
            try:
                n = await self.prune(age)
                self._progressed()
                if n:
                    log.info("fusee: retention deleted %d closed run(s) from the history", n)
            except Exception as e:
                log.error("fusee: retention could not prune the history store: %s", e)
            await asyncio.sleep(min(age, RETENTION_EVERY_S))

    # -- journal ---------------------------------------------------------------------

    def _replay_record(self, lsn: int, rec: list[Any]) -> tuple[Run, Op | None]:
        """Folds one record into memory; returns its run and the op it resolved."""
        kind = rec[0]
        if kind == R.RunStarted:
            run = created(None, (lsn, rec))
            origin = run.origin
            if origin and "reset" in origin:
                old = self._run_by_id(origin["reset"])
                if old is None:
                    raise KeyError(f"run {origin['reset']!r} (reset) is neither open nor stored")
                self._inherit(run, old, origin["before"])
                run.creation = reset_creation(run)
            self._runs[run.run_id] = run
            self._latest[run.workflow_id] = run
            run.apply(lsn, rec)
            return run, None
        run = self._runs[rec[1]]
        op = run.apply(lsn, rec)
        if kind in CLOSES:
            if lsn <= self._durable_lsn:
                run.status = run.closing or run.status
            if kind == R.RunContinuedAsNew:
                new = Run(rec[2], run.workflow_id, run.workflow, rec[3], rec[4], lsn, run.deadline)
                new.carried_signals = list(run.signals)
                new.signals = list(run.signals)
                new.next_signal_id = run.next_signal_id
                # An update sent again with its id after the run continued is not applied again.
                new.updates_done = dict(run.updates_done)
                new.last_lsn = lsn
                new.creation = continued_creation(new)
                self._runs[new.run_id] = new
                self._latest[run.workflow_id] = new
        return run, op

    @staticmethod
    def _inherit(run: Run, old: Run, before: int) -> None:
        """A reset run keeps the operations of `old` numbered below `before`."""
        # An `await_completion` still open gets new tokens: the old ones name the old run.
        kept = {
            seq: replace(op)
            for seq, op in old.ops.items()
            if top(seq) < before and (op.kind != "completion" or op.done)
        }
        run.ops = kept
        run.prefixes = {p for p in old.prefixes if top(p) < before}
        run.races = {s: i for s, i in old.races.items() if top(s) < before}
        run.pending = {s: op for s, op in kept.items() if not op.done and op.kind != "value"}
        run.pending = {s: op for s, op in run.pending.items() if op.kind != "step" or op.paused}
        taken = {op.signal_id for op in kept.values() if op.signal_id is not None}
        received = [(r[2], r[3], r[4]) for _, r in old.records if r[0] == R.SignalReceived]
        run.carried_signals = [s for s in old.carried_signals + received if s[0] not in taken]
        run.signals = list(run.carried_signals)
        run.next_signal_id = old.next_signal_id
        # Updates applied before the reset point are part of the journal it keeps.
        run.update_log = {p: list(u) for p, u in old.update_log.items() if p < before}
        kept_ids = {u[0] for u in itertools.chain.from_iterable(run.update_log.values())}
        run.updates_done = {i: d for i, d in old.updates_done.items() if i in kept_ids}

    def _append(self, run: Run, rec: list[Any], wire: tuple[Any, ...] | None = None) -> int:
        """Appends a record of `run` (not yet durable), folds it into memory and reacts."""
        lsn = self._writer_append(wire if wire is not None else rec)
        op = run.apply(lsn, rec)
        kind = rec[0]
        if kind == R.TimerStarted or (kind == R.WaitStarted and rec[4] is not None):
            self._timers.add(rec[4], run.run_id, rec[2])
        if kind in (R.WaitStarted, R.SignalReceived):
            self._match_signals(run)
        elif kind == R.StepPaused and run.is_open:
            run.status = Status.PAUSED
        elif op is not None and kind in _RESOLVING:
            if kind == R.StepResumed and run.status == Status.PAUSED and not run.paused_ops():
                run.status = Status.RUNNING
            self._resolved(run, rec[2])
        return lsn

    def _writer_append(self, wire: Any) -> int:
        if self._failed is not None:
            raise self._failed
        if self._writer is None:
            raise Rejected("the engine is not open")
        lsn = self._writer.append(orjson.dumps(wire))
        if self._kick_handle is None:
            self._kick_handle = self._loop.call_soon(self._kick)  # type: ignore[union-attr]
        return lsn

    def _kick(self) -> None:
        """Commits the pending batch, once every run that was ready has added to it.

        If the loop has nothing else to run and the disk is fast, the commit
        happens right here: no run could add to the batch meanwhile, and the
        hand-off to the writer thread and back would cost two cross-thread
        wake-ups, which on a virtual machine take about as long as the
        `fdatasync`. With a little left to run (a run just started, say), the
        commit waits for it, a few rounds at most; with more, the writer
        thread commits while the loop runs on.
        """
        ready = getattr(self._loop, "_ready", None)  # asyncio's run queue; uvloop has none
        here = ready is not None and self._may_commit_here()
        if here and ready and len(ready) <= KICK_WAITS_FOR_READY and self._kick_rounds < 3:
            self._kick_rounds += 1
            self._kick_handle = self._loop.call_soon(self._kick)  # type: ignore[union-attr]
            return
        self._kick_handle = None
        self._kick_rounds = 0
        if self._writer is None or self._failed is not None:
            return
        if here and not ready:
            self._commit_on_loop()
        else:
            self._writer.ask()

    def _commit_if_alone(self) -> bool:
        """Commits now if nothing but the pending `_kick` is ready to run: for a task
        about to wait for durability, this saves a round of the loop."""
        handle = self._kick_handle
        if handle is None:
            return False
        ready = getattr(self._loop, "_ready", None)
        if ready is None or not self._may_commit_here():
            return False
        alone = len(ready) == 1 and ready[0] is handle
        if not alone and (
            len(ready) > KICK_WAITS_FOR_READY
            or not all(h is handle or h.cancelled() for h in tuple(ready))
        ):
            return False
        handle.cancel()
        self._kick_handle = None
        self._kick_rounds = 0
        if self._writer is not None and self._failed is None:
            self._commit_on_loop()
        return True

    def _may_commit_here(self) -> bool:
        writer = self._writer
        return (
            self._commit_here
            and writer is not None
            and writer.sync_s_recent < COMMIT_HERE_SYNC_S_MAX
        )

    def _commit_on_loop(self) -> None:
        writer = self._writer
        try:
            lsn = writer.commit_here()  # type: ignore[union-attr]
        except BaseException as e:
            # A batch the thread synced just before may not be published yet:
            # it is durable, so it is acknowledged before the failure is.
            self._durable_to(writer.synced_lsn)  # type: ignore[union-attr]
            self._journal_failed(e)
            if not isinstance(e, Exception):
                raise  # Ctrl-C in the middle of a commit: fail-stop, and still interrupt
            return
        if lsn is not None:
            self._durable_to(lsn)

    def _durable_to(self, lsn: int) -> None:
        """Called on the loop when a commit made everything up to `lsn` durable."""
        if lsn <= self._durable_lsn or self._failed is not None:
            # A thread's commit published after a later one here, or after a
            # failure here (which published it first).
            return
        self._durable_lsn = lsn
        self._progressed()
        waiters = self._waiters
        while waiters and waiters[0][0] <= lsn:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)
        self._checkpoint_due()

    def _progressed(self) -> None:
        if self._progress is not None:
            self._progress.set()
            self._progress = None

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Returns once `predicate()` holds, checking it after each durable batch and each
        change of a run's state. For tests and tools that follow the engine without polling.

        Raises:
            JournalFailed: the journal failed first; nothing progresses after that.
        """
        while not predicate():
            if self._failed is not None:
                raise self._failed
            if self._progress is None:
                self._progress = asyncio.Event()
            await self._progress.wait()

    def _journal_failed(self, error: BaseException) -> None:
        self._failed = JournalFailed(
            f"the journal in {self.home} stopped accepting work after a failed write or "
            f"fdatasync ({error}); nothing after the last durable record was acknowledged. "
            "Fix the disk and reopen the home."
        )
        log.error("fusee: %s", self._failed)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(self._failed)
        self._waiters.clear()
        for run in self._runs.values():
            self._fail_result_waiters(run, self._failed)
        self._progressed()

    @staticmethod
    def _fail_result_waiters(run: Run, error: Exception) -> None:
        """Tells callers of `result()` on an open run that no result will come here."""
        if run.closed is not None and not run.closed.done():
            run.closed.set_exception(error)
            # A caller whose own wait timed out is gone: nobody else reads it.
            run.closed.exception()

    def _durable_future(self, lsn: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if lsn <= self._durable_lsn:
            fut.set_result(None)
        elif self._failed is not None:
            fut.set_exception(self._failed)
        else:
            heapq.heappush(self._waiters, (lsn, next(self._ticket), fut))
        return fut

    async def _wait_durable(self, lsn: int) -> None:
        """Returns once every record up to `lsn` is durable."""
        if lsn <= self._durable_lsn:
            return
        if self._commit_if_alone() and lsn <= self._durable_lsn:
            # Still one round of the loop, so it polls for I/O and a run that
            # never waits otherwise cannot keep every other run from going on.
            await asyncio.sleep(0)
            return
        await self._durable_future(lsn)

    def _check_accepting(self) -> None:
        if not self._opened:
            raise Rejected("the engine is not open: use `async with Engine(...)`")
        if self._failed is not None:
            raise self._failed
        if self._closing:
            raise EngineClosed(
                f"the engine of {self.home} is stopping (pid {os.getpid()}): it takes no more "
                "work; run the command again once it has stopped"
            )

    def _encode(self, value: Any, what: str) -> bytes:
        try:
            encoded = orjson.dumps(value)
        except TypeError as e:
            raise CodecError(f"{what} cannot be encoded as JSON: {e}") from None
        if len(encoded) > self.config.payload_bytes_max:
            raise CodecError(
                f"{what} is {len(encoded)} bytes, over the limit of "
                f"{self.config.payload_bytes_max} (Config.payload_bytes_max)"
            )
        return encoded


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # a failed flush is logged by the store; nobody else reads it


def _lsn(record: tuple[int, Any]) -> int:
    return record[0]


def _row_info(row: Row) -> RunInfo:
    return RunInfo(
        id=row.workflow_id,
        run_id=row.run_id,
        workflow=row.workflow,
        status=Status(row.status),
        started_at=utc(row.started_at),
        closed_at=utc(row.closed_at),
        error=row.error,
        attributes=row.attributes,
    )


def check_signal_name(name: str) -> str:
    """A signal name as given, or `Rejected` saying what is wrong with it."""
    if not isinstance(name, str) or not 0 < len(name) <= NAME_CHARS_MAX:
        raise Rejected(f"a signal name is a string of 1 to {NAME_CHARS_MAX} characters")
    return name


def check_id(id: str) -> str:
    """A workflow id as given, or `Rejected` saying what is wrong with it."""
    if not isinstance(id, str) or not id:
        raise Rejected("a workflow id is a non-empty string")
    if len(id.encode()) > ID_BYTES_MAX:
        raise Rejected(f"a workflow id is at most {ID_BYTES_MAX} bytes")
    if _ID_BAD.search(id):
        raise Rejected(f"a workflow id may not contain '/' or control characters: {id!r}")
    return id
