"""`Engine`: open and recover a home, start runs, hand out their handles.

Opening a home takes its lock, reads the journal (cutting a torn tail),
syncs what it read (the process that wrote it may have died before its
`fdatasync`), rebuilds every run in memory and resumes each open run by
running its code again from the top against its journal. One asyncio loop
owns all of this state; the journal writer thread only ever reports back to
it through `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import logging
import os
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import orjson

from fusee_runtime.clock import Clock, SystemClock
from fusee_runtime.context import Ctx, Halt, _ctx_var
from fusee_runtime.dsl import RetryPolicy, WorkflowDef, registry, seconds
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.engine.registry import load_app
from fusee_runtime.engine.state import Run, RunInfo, Status
from fusee_runtime.errors import (
    Cancelled,
    CodecError,
    Failure,
    JournalFailed,
    NotFound,
    Rejected,
    RunFailed,
    Terminated,
    TimedOut,
)
from fusee_runtime.journal import records
from fusee_runtime.journal.reader import recover
from fusee_runtime.journal.records import R
from fusee_runtime.journal.storage import Storage
from fusee_runtime.journal.writer import JournalWriter

log = logging.getLogger("fusee")

ID_BYTES_MAX = 256
_ID_BAD = re.compile(r"[\x00-\x1f\x7f/]")


@dataclass
class Config:
    """Engine settings. The defaults are what production wants.

    `durability="none"` skips `fdatasync` altogether: it is UNSAFE, for
    measuring the engine's own cost only, and a crash loses acknowledged work.
    """

    clock: Clock = field(default_factory=SystemClock)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    durability: Literal["fdatasync", "none"] = "fdatasync"
    storage: Storage = field(default_factory=Storage)
    segment_bytes: int = 64 << 20
    payload_bytes_max: int = 4 << 20
    step_threads: int = 32

    def __post_init__(self) -> None:
        if self.durability not in ("fdatasync", "none"):
            raise ValueError("Config.durability is 'fdatasync' or 'none'")
        if self.durability == "none":
            log.warning("fusee: durability='none' is UNSAFE: a crash loses acknowledged work")


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
        self._lock: HomeLock | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._workflows: dict[str, WorkflowDef] = registry()

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
            scan = recover(journal, self.config.storage)
            self._durable_lsn = scan.tail.next_lsn - 1
            for lsn, payload in scan.records:
                self._replay_record(lsn, records.decode(payload))
            loop = self._loop
            self._writer = JournalWriter(
                journal,
                self.config.storage,
                scan.tail,
                self.config.segment_bytes,
                on_durable=lambda lsn: loop.call_soon_threadsafe(self._durable_to, lsn),
                on_failed=lambda e: loop.call_soon_threadsafe(self._journal_failed, e),
                sync=self.config.durability == "fdatasync",
                record_bytes_max=self.config.payload_bytes_max + 4096,
            )
        except BaseException:
            self._lock.release()
            raise
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.config.step_threads, thread_name_prefix="fusee-step"
        )
        self._opened = True
        for run in sorted(self._runs.values(), key=lambda r: r.start_lsn):
            if run.is_open:
                self._spawn(run)

    async def close(self) -> None:
        """Stops running code (open runs resume on the next open) and syncs the journal."""
        if not self._opened or self._closing:
            return
        self._closing = True
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._writer is not None:
            await asyncio.to_thread(self._writer.close)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(Rejected("the engine closed"))
        self._waiters.clear()
        for run in self._runs.values():
            if run.closed is not None and not run.closed.done():
                run.closed.set_exception(
                    Rejected(
                        f"the engine closed before run {run.workflow_id!r} finished; "
                        "it resumes when the home is opened again"
                    )
                )
        if self._lock is not None:
            self._lock.release()

    # -- public API ----------------------------------------------------------------

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: Any = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
    ) -> RunHandle:
        """Starts a run of `workflow`; returns once the start is durable.

        Idempotent on `id`: with `on_conflict="return"` an existing run of the
        id (open or closed) is returned; `"fail"` raises `Rejected` if one
        exists; `"new_run"` terminates an open run of the id and starts anew.

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
        workflow_id = check_id(id) if id is not None else uuid.uuid4().hex
        existing = self._latest.get(workflow_id)
        if existing is not None:
            if on_conflict == "return":
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
        run_id = uuid.uuid4().hex
        now = self.clock.now()
        rec = [R.RunStarted, run_id, workflow_id, wf.name, orjson.loads(encoded), now]
        wire = (int(R.RunStarted), run_id, workflow_id, wf.name, orjson.Fragment(encoded), now)
        lsn = self._writer_append(wire)
        run = self._replay_record(lsn, rec)
        self._spawn(run)
        await self._wait_durable(lsn)
        return RunHandle(self, workflow_id)

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
        out = []
        for run in sorted(self._runs.values(), key=lambda r: r.start_lsn, reverse=True):
            if want is not None and run.status != want:
                continue
            if workflow is not None and run.workflow != workflow:
                continue
            out.append(run.info())
            if limit is not None and len(out) >= limit:
                break
        return out

    async def history(self, id: str) -> list[dict[str, Any]]:
        """Every record of every run of `id`, oldest first, as mappings."""
        runs = [r for r in self._runs.values() if r.workflow_id == id]
        if not runs:
            raise NotFound(f"no run with id {id!r}")
        recs = sorted((lsn, rec) for r in runs for lsn, rec in r.records)
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
        return c

    # -- runs ----------------------------------------------------------------------

    def _latest_run(self, id: str) -> Run:
        run = self._latest.get(id)
        if run is None:
            raise NotFound(f"no run with id {id!r}")
        return run

    def _spawn(self, run: Run) -> None:
        run.task = asyncio.get_running_loop().create_task(
            self._drive(run), name=f"fusee:{run.workflow_id}"
        )

    async def _drive(self, run: Run) -> None:
        """Runs a run's code (again) from the top until it returns, fails or halts."""
        wf = self._workflows.get(run.workflow)
        if wf is None:
            self._mark_stuck(
                run, f"workflow {run.workflow!r} is not registered by the app {self.app!r}"
            )
            return
        ctx = Ctx(self, run)
        _ctx_var.set(ctx)
        try:
            result = await wf.fn(ctx, run.input)
            ctx._finished()
        except (Halt, JournalFailed):
            return
        except asyncio.CancelledError:
            if self._closing or not run.is_open:
                return
            raise
        except Exception as e:
            if ctx._halted is not None or not run.is_open:
                return
            failure = Failure.of(e)
            self._close_run(run, R.RunFailed, failure.to_json())
            return
        try:
            encoded = self._encode(result, f"the result of workflow {run.workflow!r}")
        except CodecError as e:
            failure = Failure(str(e), kind="CodecError", retryable=False)
            self._close_run(run, R.RunFailed, failure.to_json())
            return
        self._close_run(run, R.RunCompleted, orjson.loads(encoded), orjson.Fragment(encoded))

    def _close_run(self, run: Run, kind: R, value: Any, wire_value: Any = None) -> None:
        now = self.clock.now()
        rec = [kind, run.run_id, value, now]
        wire = (int(kind), run.run_id, value if wire_value is None else wire_value, now)
        self._append(run, rec, wire)
        run.current = None
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

    def _mark_stuck(self, run: Run, message: str) -> None:
        run.status = Status.STUCK
        run.error = message
        run.current = None
        log.error("fusee: run %s (%s) is stuck: %s", run.workflow_id, run.run_id, message)

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

    # -- journal ---------------------------------------------------------------------

    def _replay_record(self, lsn: int, rec: list[Any]) -> Run:
        """Folds one record into memory; returns its run."""
        if rec[0] == R.RunStarted:
            _, run_id, workflow_id, workflow, input, started_at = rec
            run = Run(run_id, workflow_id, workflow, input, started_at, lsn)
            self._runs[run_id] = run
            self._latest[workflow_id] = run
            run.apply(lsn, rec)
            return run
        run = self._runs[rec[1]]
        run.apply(lsn, rec)
        if run.closing is not None and lsn <= self._durable_lsn:
            run.status = run.closing
        return run

    def _append(self, run: Run, rec: list[Any], wire: tuple[Any, ...] | None = None) -> int:
        """Appends a record of `run` (not yet durable) and folds it into memory."""
        lsn = self._writer_append(wire if wire is not None else rec)
        run.apply(lsn, rec)
        return lsn

    def _writer_append(self, wire: Any) -> int:
        if self._failed is not None:
            raise self._failed
        if self._writer is None:
            raise Rejected("the engine is not open")
        return self._writer.append(orjson.dumps(wire))

    def _durable_to(self, lsn: int) -> None:
        """Called on the loop when the writer made everything up to `lsn` durable."""
        self._durable_lsn = lsn
        waiters = self._waiters
        while waiters and waiters[0][0] <= lsn:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(None)

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
        await self._durable_future(lsn)

    def _check_accepting(self) -> None:
        if not self._opened:
            raise Rejected("the engine is not open: use `async with Engine(...)`")
        if self._failed is not None:
            raise self._failed
        if self._closing:
            raise Rejected("the engine is closing")

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


def check_id(id: str) -> str:
    """A workflow id as given, or `Rejected` saying what is wrong with it."""
    if not isinstance(id, str) or not id:
        raise Rejected("a workflow id is a non-empty string")
    if len(id.encode()) > ID_BYTES_MAX:
        raise Rejected(f"a workflow id is at most {ID_BYTES_MAX} bytes")
    if _ID_BAD.search(id):
        raise Rejected(f"a workflow id may not contain '/' or control characters: {id!r}")
    return id


class RunHandle:
    """The newest run of a workflow id, as the caller sees it."""

    def __init__(self, engine: Engine, id: str) -> None:
        self._engine = engine
        self.id = id

    @property
    def run_id(self) -> str:
        return self._engine._latest_run(self.id).run_id

    async def describe(self) -> RunInfo:
        """The run's state now (closed states only once durable)."""
        return self._engine._latest_run(self.id).info()

    async def history(self) -> list[dict[str, Any]]:
        """Every record of every run of this id, oldest first."""
        return await self._engine.history(self.id)

    async def terminate(self, reason: str = "terminated") -> None:
        """Closes the open run at once, running nothing more; returns once that is durable.

        Raises:
            NotFound: no run of this id.
            Rejected: the run is already closed.
        """
        engine = self._engine
        engine._check_accepting()
        run = engine._latest_run(self.id)
        if not run.is_open:
            raise Rejected(f"run {self.id!r} is already closed ({run.closing})")
        engine._close_run(run, R.RunTerminated, reason)
        await engine._wait_durable(run.close_lsn or 0)

    async def result(self, timeout: float | Any | None = None) -> Any:
        """The run's result, once durable.

        A `stuck` run is still open: this keeps waiting for it.

        Raises:
            RunFailed: the run failed (`.failure` says how).
            Terminated: the run was terminated.
            Cancelled: the run was cancelled.
            TimedOut: the wait passed `timeout` seconds.
        """
        run = self._engine._latest_run(self.id)
        if run.status.is_open:
            if run.closed is None:
                run.closed = asyncio.get_running_loop().create_future()
            try:
                await asyncio.wait_for(asyncio.shield(run.closed), seconds(timeout))
            except TimeoutError:
                raise TimedOut(
                    f"run {self.id!r} did not finish within {seconds(timeout):g} s "
                    f"(status {run.status})"
                ) from None
        return outcome(run)


def outcome(run: Run) -> Any:
    """A closed run's result, or the error that says how it ended."""
    if run.status == Status.COMPLETED:
        return run.result
    if run.status == Status.FAILED:
        raise RunFailed(run.workflow_id, run.failure or Failure("unknown failure"))
    if run.status == Status.TERMINATED:
        raise Terminated(f"run {run.workflow_id!r} was terminated: {run.reason}")
    if run.status == Status.CANCELLED:
        raise Cancelled(f"run {run.workflow_id!r} was cancelled: {run.reason}")
    if run.status == Status.TIMED_OUT:
        raise TimedOut(f"run {run.workflow_id!r} passed its deadline")
    raise Rejected(f"run {run.workflow_id!r} is {run.status}")
