"""`Engine`: open and recover a home, start runs, hand out their handles.

Opening a home takes its lock, reads the journal (cutting a torn tail),
syncs what it read (the process that wrote it may have died before its
`fdatasync`), rebuilds every run in memory and resumes each open run by
running its code again from the top against its journal. One asyncio loop
owns all of this state; the journal writer thread only ever reports back to
it through `call_soon_threadsafe`.

This module holds the lifecycle (`open`, `close`) and the public API; the
work is done in the engine's rooms (docs/architecture.md):

- `durability`: the commit path, the one way to the journal (the storage seam);
- `runs`: the table of runs, recovery, lookups;
- `commands`: start, signal, cancel, terminate, resume and reset a run;
- `driver`: running the runs' code, parking, timers, closing runs
  (the `RunHost` that a run's code talks to);
- `checkpoints`: checkpoints, compaction, the history store, retention;
- `handlers`: queries, updates and completion tokens;
- `schedules`: the cron schedules.
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import logging
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from fusee_runtime import search
from fusee_runtime.codecs import chain_of
from fusee_runtime.completions import Tokens
from fusee_runtime.dsl import Rate, WorkflowDef
from fusee_runtime.engine import collector
from fusee_runtime.engine.batches import BATCH, Action, Batches
from fusee_runtime.engine.batches import check as batch_spec
from fusee_runtime.engine.calls import Calls
from fusee_runtime.engine.checkpoints import Checkpoints
from fusee_runtime.engine.commands import Commands
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.driver import Driver
from fusee_runtime.engine.durability import Durability, soon
from fusee_runtime.engine.flow import FlowControl
from fusee_runtime.engine.handle import RunHandle
from fusee_runtime.engine.handlers import Handlers
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.engine.objects import Objects
from fusee_runtime.engine.opening import rebuild
from fusee_runtime.engine.registry import load_app
from fusee_runtime.engine.runlog import RunLog
from fusee_runtime.engine.runs import RunTable, wanted
from fusee_runtime.engine.schedules import Schedules
from fusee_runtime.engine.state import Run, RunInfo, Status
from fusee_runtime.engine.stopping import cancel_run_tasks, let_steps_finish
from fusee_runtime.errors import EngineClosed, Rejected
from fusee_runtime.journal import records
from fusee_runtime.journal.safefiles import private_dir
from fusee_runtime.model.sealing import Chain
from fusee_runtime.scope import check_id
from fusee_runtime.store.seam import off_loop, open_store
from fusee_runtime.tracing import open_tracing

if TYPE_CHECKING:
    from fusee_runtime.control.server import ControlServer

__all__ = ["Config", "Engine", "RunHandle", "check_id"]

log = logging.getLogger("fusee")

LIST_LIMIT_MAX = 2**31 - 1
"""The largest `limit` of `Engine.list`; SQLite's 64-bit integers take it with room to spare."""


class Engine(FlowControl, Calls):
    """An open home: recovers on open, runs workflows, closes cleanly.

    Use it as an async context manager::

        async with Engine(home=".fusee", app="workflows") as engine:
            h = await engine.start("order", {"id": "o-1"}, id="o-1")
            print(await h.result(timeout=30))

    `store="postgresql://..."` (as `Config.store`) keeps the journal in PostgreSQL
    (docs/postgresql.md); the rest of the home stays in `home`.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] = ".fusee",
        app: str | ModuleType | Iterable[str] | None = "workflows",
        config: Config | None = None,
        store: str | None = None,
    ) -> None:
        self.home = Path(home)
        self.app = app
        self.config = config or Config()
        if store is not None:
            self.config = dataclasses.replace(self.config, store=store)
        self.clock = self.config.clock
        self.runs = RunTable()
        """Every run in memory, and the way to the closed ones in the history store."""
        self.runs.chain = Chain(chain_of(self.config.codec), strict=self.config.drive)
        self.durability = Durability(
            self.home,
            self.config,
            on_durable=lambda: self.checkpoints.due(),
            on_failed=lambda e: self.driver.journal_lost(e),
        )
        """The commit path: append, the durable position, fail-stop."""
        self.durability.chain = self.runs.chain
        http_url = self.config.http_url.rstrip("/") if self.config.http_url else None
        tokens = Tokens(self.home, self.config.storage, http_url)
        self.driver = Driver(
            self.home, self.config, self.durability, self.runs, tokens, app, on_closed=self._closed
        )
        """Runs the runs' code; what a run's code talks to (`RunHost`)."""
        self.schedules = Schedules(self.driver)
        limits = self.driver.limits
        self.journal = open_store(self.home, self.config)
        """Where the journal lives: `<home>/journal`, or PostgreSQL (`Config.store`)."""
        self.checkpoints = Checkpoints(
            self.journal, self.config, self.durability, self.runs, self.schedules, limits
        )
        """Checkpoints, compaction, the history store and retention."""
        self.handlers = Handlers(self.driver, self.runs, tokens)
        """Queries, updates and completion tokens."""
        self.commands = Commands(self.driver, self.runs, self.durability, self.clock)
        """Start, signal, cancel, terminate, resume and reset: the commands on runs."""
        self.batches = Batches(self.driver, self.runs, self.commands)
        """Batches: one command on every run a filter matches (`fusee.batch` runs)."""
        self.driver.builtins[BATCH] = self.batches.definition
        self.objects = Objects(self)
        """Virtual objects: calls to their keys (`engine/objects.py`)."""
        self.driver.objects = self.objects
        self.gives_way = False
        """Opened by a command only to follow a run: a server that starts may ask it to
        close and let it have the home (the control API's `give_way`)."""
        self.giving_way: asyncio.Task[None] | None = None
        """The close `give_way` began (None: not asked)."""
        self._lock: HomeLock | None = None
        self._control: ControlServer | None = None
        self._hurry = asyncio.Event()
        self._collecting = False  # counted open by `collector`

    @property
    def closing(self) -> bool:
        """The engine is closing (or closed): it takes no more work."""
        return self.driver.closing

    @property
    def http_url(self) -> str | None:
        """Where the HTTP API is reached: `Completion.url` of `ctx.await_completion` points
        there (`Config.http_url`; None gives no URL)."""
        return self.handlers.tokens.http_url

    @http_url.setter
    def http_url(self, url: str | None) -> None:
        self.handlers.tokens.http_url = url

    @property
    def run_log(self) -> RunLog | None:
        """The `ctx.log` file of an engine that runs code."""
        return self.driver.run_log

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
            HomeUnsafe: another account owns the home or may write to it, or planted a
                file or a link in it.
            JournalCorrupt: damage before the journal's tail.
        """
        if self.driver.opened:
            raise Rejected("the engine is already open")
        loop = asyncio.get_running_loop()
        load_app(self.app)
        private_dir(self.home, parents=True)
        self._lock = HomeLock(self.home)
        self._lock.acquire()
        journal = self.journal
        try:
            private_dir(self.home / "journal")
            await off_loop(journal, journal.open)
            with collector.held_off():  # (all it reads and rebuilds stays)
                read = await off_loop(journal, journal.read)
                self.handlers.tokens.shared = journal.token_secret()
                self.runs.store = journal.history(
                    self.home, lambda ids: soon(loop, self._stored, ids)
                )
                self.runs.store.open()
                rebuild(self.runs, read, journal.locate, self.schedules, self.driver.limits)
            self.checkpoints.opened(read)
            self.durability.start(journal, read.scan.tail)
        except BaseException:
            if self.runs.store is not None:
                self.runs.store.close()
            await off_loop(journal, journal.close)
            self._lock.release()
            raise
        self.checkpoints.requeue_closed()
        self.driver.tracing = open_tracing(self.config.tracing, self.config.tracer_provider)
        self.driver.opened = True
        if self.config.drive:
            self.driver.run_log = RunLog(journal.run_log(self.home))
            self.driver.routing.tasks = journal.tasks()
            self.driver.timers.start()
            if self.config.control:
                # Only an engine that drives its runs serves: a passive one (a command
                # reading the home) does not load the socket server.
                from fusee_runtime.control.server import serve_control

                self._control = await serve_control(self)
        for run in sorted(self.runs.by_run_id.values(), key=lambda r: r.start_lsn):
            if run.is_open:
                self.driver.arm(run)
                self.driver.spawn(run)
        if self.config.drive:
            # What a crash cut between a run's record and its effect on another run.
            self.driver.family.settle()
        if self.config.drive and self.config.schedules:
            self.schedules.start()
        if self.config.drive and self.config.retention is not None:
            self.checkpoints.start_retention(self.prune, self.durability.progressed)
        collector.engine_opened(self.config.gc_threshold)  # (last: an open that fails counts not)
        self._collecting = True

    async def close(self, grace: float = 0.0, *, crash: bool = False) -> None:
        """Stops running code (open runs resume on the next open) and syncs the journal.

        It takes no more work at once: no timer, no schedule, no new step
        attempt, and calls that would start work raise `EngineClosed` (the
        control API keeps answering the others meanwhile). Step functions
        running now get `grace` seconds to finish (`end_grace` cuts it
        short), and their results are recorded; the rest are cut off and
        run again on the next open. With `crash` (`fusee_runtime.testing`) it
        writes no checkpoint and flushes nothing more to the history store.
        """
        if not self.driver.opened or self.driver.closing:
            return
        self.driver.stop()
        if self._collecting:
            collector.engine_closed()
            self._collecting = False
        self.checkpoints.stop()
        await self.schedules.stop()
        await self.driver.timers.stop()
        await let_steps_finish(self.driver.workers, self.durability, grace, self._hurry)
        if self._control is not None:
            self._control.stop_accepting()
        await cancel_run_tasks(self.runs)
        self.checkpoints.stop_retention()
        self.driver.beats.close(flush=not crash)
        await self.durability.close()
        await self.checkpoints.close(crash)
        self.driver.workers.shutdown()
        if self.driver.routing.tasks is not None:
            await self.driver.routing.tasks.close()
        if self.driver.run_log is not None:  # (in PostgreSQL: its queued lines inserted)
            await off_loop(self.journal, self.driver.run_log.close)
        self.durability.reject_waiters()
        self.runs.fail_result_waiters(
            lambda run: EngineClosed(
                f"the engine closed before run {run.workflow_id!r} finished; "
                "it resumes when the home is opened again"
            )
        )
        if self._control is not None:
            await self._control.close()
        await off_loop(self.journal, self.journal.close)
        if self._lock is not None:
            self._lock.release()

    def end_grace(self) -> None:
        """Cuts short the grace period of a `close(grace)` in progress."""
        self._hurry.set()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Returns once `predicate()` holds, checking it after each durable batch and each
        change of a run's state. For tests and tools that follow the engine without polling.

        Raises:
            JournalFailed: the journal failed first; nothing progresses after that.
        """
        await self.durability.wait_until(predicate)

    # -- public API ----------------------------------------------------------------

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: object = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
        timeout: float | timedelta | None = None,
        signal: tuple[str, Any] | None = None,
        traceparent: str | None = None,
        start_delay: float | timedelta | None = None,
        start_at: datetime | None = None,
        update: tuple[str, Any] | tuple[str, Any, str | None] | None = None,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        debounce: float | timedelta | None = None,
        debounce_key: str | None = None,
        debounce_max: float | timedelta | None = None,
        throttle: Rate | None = None,
    ) -> RunHandle:
        """Starts a run of `workflow`; returns once the start is durable.

        Idempotent on `id`: with `on_conflict="return"` an existing run of the id (open
        or closed) is returned; `"fail"` raises `IdConflict` if one exists; `"new_run"`
        terminates an open run of the id and starts anew. The handle is pinned to the
        run it returns (see `RunHandle`).
        `timeout` is the run's deadline: past it the run closes as `timed_out`.
        `signal=(name, value)` delivers a signal with the start (to the existing run
        when there is an open one); the call returns once both are durable.
        `traceparent` (W3C) names the run's trace (`fusee_runtime.tracing`).

        `start_delay` (a duration) or `start_at` (an aware datetime) records the run now
        and begins it then: until then it shows as `scheduled`, runs no code, and a
        cancel closes it at once; its `timeout` counts from when it begins.

        `queue` (default: the workflow's, `@workflow(queue=...)`) records the run now and
        begins it when queue `queue` lets it in (`Engine.queue`): until then it shows as
        `queued`, with its place. Within `queue_key`, runs go in by `priority` (higher
        first), then in the order they started.

        `debounce` (a duration): a burst of starts of the workflow (and `debounce_key`),
        each less than `debounce` after the last, makes one run, which begins `debounce`
        after the last with the last input (or `debounce_max` after the first); each
        start returns its handle. `throttle=Rate(n, per, key=...)`: at most n runs of
        the workflow (of the key) begin in any window of `per`; one beyond waits, as
        `scheduled`, for the next slot (never dropped). See `fusee_runtime.engine.bursts`.

        `update=(name, arg)` or `(name, arg, update_id)` is an update with its start: the
        id's open run, or else a new one, gets the update (`RunHandle.update`), and the
        handle returned holds its result as `update_result`. Concurrent calls for one id
        make one run, and apply every update once.

        Raises:
            NotFound: no workflow of that name (the message lists the known ones).
            CodecError: the input cannot be encoded as JSON, is too large, or does
                not decode into the workflow's input annotation (`fusee_runtime.typed`).
            Rejected: a bad id, `on_conflict`, `traceparent`, `start_delay`, `start_at`,
                queue, key, priority, debounce or throttle; an `update` without an id
                or with a delay or a queue; a debounce with a delay or a throttle; what
                `RunHandle.update` raises.
            IdConflict: the id has a run and `on_conflict` is `"fail"`, or its run
                is one of another workflow (and `on_conflict` is not `"new_run"`).
        """
        parts = None if update is None else (*update, None)[:3]  # (name, arg, update_id)
        ids = await self.commands.start(
            workflow,
            input,
            id,
            on_conflict,
            timeout,
            signal,
            traceparent,
            start_delay=start_delay,
            start_at=start_at,
            use_open=parts is not None,
            update_id=parts[2] if parts is not None else None,
            queue=(queue, queue_key, priority),
            debounce=(debounce, debounce_key, debounce_max),
            throttle=throttle,
        )
        handle = RunHandle(self, *ids)
        if parts is not None:
            handle.update_result = await handle.update(*parts)
        return handle

    async def signal(
        self, id: str, name: str, value: object = None, *, run_id: str | None = None
    ) -> None:
        """Delivers signal `name` to the newest run of `id` (or to run `run_id` of it, as a
        pinned handle does); returns once it is durable. The other calls on a run take
        `run_id` the same way.

        Raises:
            NotFound: no run of that id.
            Rejected: the run is closed (the message says how).
            CodecError: the value cannot be encoded as JSON.
        """
        await self.commands.signal(id, name, value, run_id)

    async def cancel(
        self, id: str, reason: str = "cancelled", *, run_id: str | None = None
    ) -> None:
        """Cancels the newest run of `id`; returns once the request is durable.

        `Cancelled` is raised in the run's code at its current await (the code
        may catch it to clean up); registered compensations run, newest
        first; the run closes as `cancelled`.
        """
        await self.commands.cancel(id, reason, run_id)

    async def terminate(
        self, id: str, reason: str = "terminated", *, run_id: str | None = None
    ) -> None:
        """Closes the newest run of `id` at once, running nothing more; returns once durable."""
        await self.commands.terminate(id, reason, run_id)

    async def resume(self, id: str, *, run_id: str | None = None) -> None:
        """Resumes a paused run (its paused step runs again with a fresh budget, on
        the code loaded now) or retries a stuck run's replay with the code loaded now."""
        await self.commands.resume(id, run_id)

    async def reset(self, id: str, to: int | str, *, run_id: str | None = None) -> RunHandle:
        """Closes the newest run of `id` as `reset` and starts a new run of the id that
        keeps the journal before `to`; the rest runs again. Returns a handle pinned to
        the new run once its start is durable. With `run_id`, that run must be the newest.

        `to`: an operation number; a position inside one, as `fusee history` shows it
        ("2.0.1"), which resets to its top-level operation (#2), run again whole; or
        the name of a step, wait, sleep, child (its id) or completion: its first
        occurrence. A reset child stays its parent's child, and the parent gets the
        new run's result (`fusee_runtime.engine.resets`).

        Raises:
            NotFound: no such run, or no such point in it (the message lists what `to` takes).
            Rejected: a number out of range, or `run_id` not the newest.
        """
        return RunHandle(self, id, await self.commands.reset(id, to, run_id))

    async def batch(
        self,
        action: Action,
        *,
        where: dict[str, Any] | None = None,
        workflow: str | None = None,
        status: Status | str | None = None,
        reason: str | None = None,
        signal: str | None = None,
        value: object = None,
        to: int | str | None = None,
        rate: float | None = None,
        id: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Does `action` ("cancel", "terminate", "signal", "reset", "resume") once to each
        run matching `where`, `workflow` and `status` (as `list`), in a batch: a durable run
        of workflow `fusee.batch` of id `id` (`fusee_runtime.engine.batches`). A signal
        batch sends `signal` with `value`; a reset batch starts again at `to` (as `reset`
        takes it); `rate` caps the runs a second. Returns the batch as `describe_batch`
        does once its start is durable; `dry_run` starts nothing and counts the matches.

        Raises:
            Rejected: a bad action, status, filter, rate or id, no `signal` or `to`.
        """
        status = status.value if isinstance(status, Status) else status
        spec = batch_spec(action, status, workflow, where, reason, signal, value, to, rate)
        return await self.batches.start(spec, id, dry_run)

    def describe_batch(self, id: str) -> dict[str, Any]:
        """Batch `id`: its spec, status, `total` matched, `acted`, `outcomes` by kind
        and each run's (`runs`). Raises `NotFound` if there is no such batch."""
        return self.batches.describe(id)

    def handle(self, id: str, run_id: str | None = None) -> RunHandle:
        """A handle on the newest run of `id`, looked up at each call (or, with `run_id`,
        pinned to that run); its methods raise `NotFound` if there is none."""
        return RunHandle(self, id, run_id)

    async def list(
        self,
        status: Status | str | None = None,
        workflow: str | None = None,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        parent: str | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        """Runs, open and closed, newest first; at most `limit` (1 to `LIST_LIMIT_MAX`).

        `status` is a `Status` (or its value), or "open" for every run not closed
        (running, parked, paused or stuck); None for every status. `parent` keeps
        the children (`ctx.child`) of the runs of that workflow id. `where` keeps the
        runs whose search attributes (`ctx.set_attributes`) meet every condition:
        `{"customer": "c-7", "amount": (">", 100)}`, a list of pairs for more than one
        condition on a key (`fusee_runtime.search` has the rules). `before` (a run id,
        the last of a page) lists the runs that began before it: the next page.

        Raises:
            Rejected: an unknown status, a limit out of range, a `where` that is not
                one, or a `before` that is no run.
        """
        conditions = search.conditions(where)
        want = wanted(status, limit, LIST_LIMIT_MAX)
        return self.runs.listed(want, workflow, limit, parent, conditions, before)

    async def history(self, id: str) -> builtins.list[dict[str, Any]]:
        """Every record of every run of `id`, oldest first, as mappings."""
        return [records.as_dict(lsn, rec) for lsn, rec in self.runs.records_of(id)]

    def workflow(self, workflow: str | WorkflowDef) -> WorkflowDef:
        """The registered workflow of that name.

        Raises:
            NotFound: unknown, with the known names in the message.
        """
        name = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        return self.driver.workflow(name)

    def counters(self) -> dict[str, float]:
        """Journal counters (records, syncs, bytes, ...), counted, not timed."""
        c = self.durability.counters()
        c.update(steps=self.driver.workers.steps_done, runs_open=self.runs.open_count())
        c.update(runs_in_memory=len(self.runs.by_run_id), checkpoint_lsn=self.checkpoints.lsn)
        if self.runs.store is not None:
            c["history_rows_written"] = self.runs.store.rows_written
        return c

    # -- storage ---------------------------------------------------------------------

    async def checkpoint(self) -> int:
        """Writes a checkpoint of what is durable now, then compacts; returns its lsn.

        Runs by itself as the journal grows (`Config.checkpoint_bytes`) and on a clean
        close. The work (encoding, writing, fsync, deleting segments) is done on a thread;
        only the snapshot of memory is taken on the loop. A failure is logged and changes
        nothing: the journal still holds every record."""
        return await self.checkpoints.checkpoint()

    async def prune(self, older_than: float | timedelta) -> int:
        """Deletes closed runs that closed more than `older_than` ago from the history
        store; returns how many. Open runs are never pruned."""
        self.driver.check_accepting()
        return await self.checkpoints.prune(older_than, self.clock.now())

    def _stored(self, run_ids: builtins.list[str]) -> None:
        """On the loop: these closed runs are in the history store; memory lets them go."""
        self.runs.evict(run_ids)
        self.durability.progressed()

    def _closed(self, run: Run) -> None:
        """A run's close is durable: it goes to the history store."""
        self.checkpoints.to_history(run)
        if run.origin is not None and "schedule" in run.origin:
            self.schedules.poke()
