"""The control API in process: `Control`, what a command asks of the owner of a home.

One process owns a home at a time (`<home>/LOCK`). `Control` holds the
operations of the control API on that process's open engine: the owner
calls them for the requests it serves (on its socket: `server`; over
HTTP: `http`), and a command that finds no owner calls them on an engine
of its own. `ControlClient` (`client`) offers the same operations from
another process. Either way the caller sees the same values and the same
exceptions.

An operation that acts answers only once what it recorded is durable, and
says so even if nothing else can be read then: `signal`, `cancel`,
`terminate` and `resume` return the run as they left it (from memory, not
a second call that a failure in between could turn into an error). When
the journal fails during an act, its record may have reached the journal
before (a PostgreSQL `COMMIT` whose answer a server restart cut off, an
`fdatasync` that failed after its write): that is `OutcomeUnknown`, "it
may have acted, look before trying again", never the `JournalFailed` of a
journal that had failed before the call, which recorded nothing.

`history` sends records as `records.as_json` shapes them (ISO 8601
instants, integer operation numbers); `wire` has a run as JSON and back
(`run_json`, `run_info`, still importable from here).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import dataclasses
import os
import socket
from collections.abc import AsyncGenerator, Awaitable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from fusee_runtime.control import watching
from fusee_runtime.control.ops import BatchAction, Operations, Pong, Throttle
from fusee_runtime.control.wire import rate_of
from fusee_runtime.control.wire import run_info as run_info  # (re-exported: its old home)
from fusee_runtime.control.wire import run_json as run_json  # (re-exported too)
from fusee_runtime.errors import (
    JournalFailed,
    NotFound,
    Rejected,
)
from fusee_runtime.journal import records
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.records import Record, RunStarted
from fusee_runtime.model.run import RunInfo, top
from fusee_runtime.objects import object_key

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine
    from fusee_runtime.engine.handle import RunHandle
    from fusee_runtime.engine.rates import RateInfo
    from fusee_runtime.engine.state import Run

RESET_SOURCES_MAX = 1000
"""`history(id, run_id)` follows a reset run back through at most this many resets."""
LOG_SCAN_LINES_MAX = 20_000
"""`log(id, run_id=...)` looks for the run's lines among the id's newest this many."""

T = TypeVar("T")


class OutcomeUnknown(JournalFailed):
    """The journal failed while an act's record was on its way to it: the record may be
    durable or not (a `COMMIT` whose answer was lost, a failed `fdatasync` after the
    write). The next driver of the journal knows: look at the run before trying again
    (HTTP 502). A journal that had failed before the call is a plain `JournalFailed`:
    nothing was recorded."""


class Control(Operations):
    """The operations of the control API (`ops.Operations`), on an open engine.

    `watch` and `stream` are async iterators of JSON values; the other
    operations are coroutines.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def gave_way(self) -> bool:
        """The engine closes (or closed) for a server that asked (`give_way`)."""
        return self.engine.giving_way is not None

    @property
    def owner(self) -> int | None:
        """The pid of the owner serving the calls, or None when they run in this process."""
        return None

    @property
    def driver(self) -> str | None:
        """The process that serves the calls, for people: None, this one."""
        return None

    @property
    def pages_by_cursor(self) -> bool:
        """Whether `list` takes `before`: it does."""
        return True

    async def ping(self) -> Pong:
        return {"pid": os.getpid(), "home": str(self.engine.home), "host": socket.gethostname()}

    async def give_way(self) -> dict[str, Any]:
        engine = self.engine
        if not engine.gives_way:
            raise Rejected(
                f"process {os.getpid()} drives the home for more than following a run: "
                "it does not give way"
            )
        if engine.giving_way is None:
            engine.giving_way = asyncio.get_running_loop().create_task(self._give_way())
        return {"pid": os.getpid()}

    async def _give_way(self) -> None:
        await asyncio.sleep(0)  # (this answer goes out first: the close stops the server)
        await self.engine.close()

    async def given_way(self) -> None:
        """Returns once the close `give_way` began is done (the home is let go)."""
        if self.engine.giving_way is not None:
            await asyncio.shield(self.engine.giving_way)

    async def start(
        self,
        workflow: str,
        input: object = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
        traceparent: str | None = None,
        start_delay: float | None = None,
        start_at: str | None = None,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        debounce: float | None = None,
        debounce_key: str | None = None,
        debounce_max: float | None = None,
        throttle: Throttle | None = None,
    ) -> tuple[RunInfo, bool]:
        """Starts a run (once durable); returns it and whether the id already had a run,
        or (a debounced start that joined its burst) the run returned began before."""
        existed = id is not None and self.engine.runs.find_latest(id) is not None
        writer = self.engine.durability.writer
        taken_before = writer.next_lsn if writer is not None else None
        begin = None
        if start_at is not None:
            try:
                begin = datetime.fromisoformat(start_at)
            except (TypeError, ValueError):
                raise Rejected(f"start_at is an ISO 8601 instant, not {start_at!r}") from None
        handle = await self._recorded(
            self.engine.start(
                workflow,
                input,
                id=id,
                on_conflict=on_conflict,
                traceparent=traceparent,
                start_delay=start_delay,
                start_at=begin,
                queue=queue,
                queue_key=queue_key,
                priority=priority,
                debounce=debounce,
                debounce_key=debounce_key,
                debounce_max=debounce_max,
                throttle=None if throttle is None else rate_of(throttle),
            )
        )
        if debounce is not None and not existed and taken_before is not None:
            # Joined: the burst's run, whatever id this start gave, began before it.
            began = self.engine.runs.start_lsn(handle.run_id)
            existed = began is not None and began < taken_before
        return await handle.describe(), existed

    async def update_with_start(
        self,
        workflow: str,
        id: str,
        name: str,
        input: object = None,
        arg: object = None,
        update_id: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[RunInfo, object]:
        """Applies update `name` to the open run of `id`, started first if none is open;
        returns the run and the update's result."""
        started = self.engine.start(
            workflow, input, id=id, traceparent=traceparent, update=(name, arg, update_id)
        )
        handle = await self._recorded(started)
        return await handle.describe(), handle.update_result

    async def describe(self, id: str, run_id: str | None = None) -> RunInfo:
        return await self.engine.handle(id, run_id).describe()

    def _exactly(self, id: str, run_id: str) -> None:
        """Refuses an act on run `run_id` alone once that run closed, naming it: the act
        goes to no other run (the engine checks again, in the same step of the loop)."""
        run = self.engine.runs.get(id, run_id)
        if not run.is_open:
            newest = self.engine.runs.latest(id).run_id
            later = f"; the newest run of {id!r} is {newest!r}" if newest != run_id else ""
            raise Rejected(
                f"run {run_id!r} of {id!r} is {run.closing or run.status}: nothing done, "
                f"the act was for that run alone{later}"
            )

    def _acting_on(self, id: str, run_id: str | None) -> RunHandle:
        """The handle an act goes through: pinned to `run_id` (an act follows its
        `continue_as_new` chain), or else to the newest run of `id` now, so that the run
        acted on is the run answered with."""
        return self.engine.handle(id, run_id or self.engine.runs.latest(id).run_id)

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        parent: str | None = None,
        where: dict[str, Any] | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        return await self.engine.list(
            status=status, workflow=workflow, limit=limit, parent=parent, where=where, before=before
        )

    async def history(
        self, id: str, run_id: str | None = None, after: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """The records of every run of `id` as JSON (`records.as_json`), oldest first. With
        `run_id`, those of that run and of the runs it kept operations from by a reset
        (whole: the reader cuts them at the reset point, `RunStarted.origin["before"]`),
        read from that run and those alone, not from every run of the id. With `after`,
        only the records past that lsn (what a reader that has the rest asks for)."""
        if run_id is None:
            every = await self.engine.history(id)
            return [records.as_json(r) for r in every if after is None or r["lsn"] > after]
        runs = self.engine.runs
        run = runs.get(id, run_id)
        recs = list(run.records)
        seen = {run.run_id}
        for _ in range(RESET_SOURCES_MAX):
            source = _reset_from(run.records)
            if source is None or source in seen:
                break  # (a loop cannot happen; a damaged history must not hang a read)
            seen.add(source)
            found = runs.by_id(source)
            if found is None or found.workflow_id != id:
                break  # pruned: the reader says the kept operations are missing
            run = found
            recs.extend(run.records)
        if len(seen) > 1:
            recs.sort(key=lambda r: r[0])
        if after is not None:
            recs = recs[bisect.bisect_right(recs, after, key=lambda r: r[0]) :]
        return [records.as_json(records.as_dict(lsn, rec)) for lsn, rec in recs]

    async def log(
        self, id: str, last: int = 200, run_id: str | None = None
    ) -> builtins.list[JsonObject]:
        """The last `last` `ctx.log` lines of the runs of `id`, oldest first (from
        `<home>/logs`, or in PostgreSQL `fusee_logs`, on a thread: `engine/runlog.py`).
        With `run_id`, the last `last` lines of that run among the id's newest
        `LOG_SCAN_LINES_MAX`."""
        engine = self.engine
        run_log = engine.run_log or engine.journal.run_log(engine.home)
        if run_id is None:
            return await asyncio.to_thread(run_log.lines, id, last)
        lines = await asyncio.to_thread(run_log.lines, id, LOG_SCAN_LINES_MAX)
        return [line for line in lines if line.get("run_id") == run_id][-last:]

    async def journal(self, id: str, run_id: str | None = None) -> dict[str, Any]:
        """The newest run of `id` (or its run `run_id`) as a history document
        (`replayer.history_document`): what `fusee replay` replays."""
        from fusee_runtime.replayer import history_document

        runs = self.engine.runs
        run = runs.find_latest(id) if run_id is None else runs.by_id(run_id)
        if run is None or run.workflow_id != id:
            which = f"run {run_id!r} of {id!r}" if run_id else f"run with id {id!r}"
            raise NotFound(f"no {which}")
        return history_document(run)

    async def run_ids(
        self, workflow: str | None = None, open: bool = False
    ) -> builtins.list[builtins.list[str]]:
        """Every run, open and closed (of `workflow` only, if given; the open ones only,
        with `open`), oldest first, as `[id, run_id]` pairs."""
        runs = self.engine.runs.listed("open" if open else None, workflow, None)
        return [[info.id, info.run_id] for info in reversed(runs)]

    async def signal(
        self,
        id: str,
        name: str,
        value: object = None,
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        """Delivers signal `name` to the newest run of `id` (or `run_id`'s); returns that run
        as it stands once the signal is durable. `exact`: run `run_id` alone (`Operations`)."""
        if exact and run_id is not None:
            self._exactly(id, run_id)
            await self._recorded(self.engine.signal(id, name, value, run_id=run_id))
            return await self.describe(id, run_id)
        handle = self._acting_on(id, run_id)
        await self._recorded(handle.signal(name, value))
        return await handle.describe()

    async def cancel(
        self, id: str, reason: str = "cancelled", run_id: str | None = None, exact: bool = False
    ) -> RunInfo:
        """Cancels the newest run of `id`; returns it as it stands once that is durable."""
        if exact and run_id is not None:
            self._exactly(id, run_id)
            await self._recorded(self.engine.cancel(id, reason, run_id=run_id))
            return await self.describe(id, run_id)
        handle = self._acting_on(id, run_id)
        await self._recorded(handle.cancel(reason))
        return await handle.describe()

    async def terminate(
        self,
        id: str,
        reason: str = "terminated",
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        """Terminates the newest run of `id`; returns it once closed and durable."""
        if exact and run_id is not None:
            self._exactly(id, run_id)
            await self._recorded(self.engine.terminate(id, reason, run_id=run_id))
            return await self.describe(id, run_id)
        handle = self._acting_on(id, run_id)
        await self._recorded(handle.terminate(reason))
        return await handle.describe()

    async def resume(self, id: str, run_id: str | None = None, exact: bool = False) -> RunInfo:
        """Resumes the newest run of `id`; returns it as it stands once that is durable."""
        if exact and run_id is not None:
            self._exactly(id, run_id)
            await self._recorded(self.engine.resume(id, run_id=run_id))
            return await self.describe(id, run_id)
        handle = self._acting_on(id, run_id)
        await self._recorded(handle.resume())
        return await handle.describe()

    async def reset(self, id: str, to: int | str, run_id: str | None = None) -> RunInfo:
        return await (await self._recorded(self.engine.reset(id, to, run_id=run_id))).describe()

    async def complete(self, token: str, value: object = None) -> dict[str, Any]:
        """Finishes the `await_completion` step that issued `token` with `value`;
        returns the run's id and the step's name."""
        finished = self.engine.handlers.finish(token, value, None)
        return self._finished(*await self._recorded(finished))

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        """Fails the `await_completion` step that issued `token`; returns as `complete`."""
        finished = self.engine.handlers.finish(token, None, message)
        return self._finished(*await self._recorded(finished))

    async def completions(self, id: str, run_id: str | None = None) -> builtins.list[JsonObject]:
        """The completions the run waits for (`Engine.completions`), as JSON: the step, its
        operation (`seq` the top-level number, `op` its position, as `history` gives
        them), its token and the URL that completes it (null without the HTTP API)."""
        return [
            {
                "step": awaited.step,
                "seq": top(awaited.op),
                "op": awaited.op,
                "token": awaited.completion.token,
                "url": awaited.completion.url,
            }
            for awaited in await self.engine.completions(id, run_id=run_id)
        ]

    @staticmethod
    def _finished(run: Run, seq: str) -> dict[str, str]:
        return {"id": run.workflow_id, "completion": run.ops[seq].name}

    async def query(
        self, id: str, name: str, arg: object = None, run_id: str | None = None
    ) -> object:
        return await self.engine.handle(id, run_id).query(name, arg)

    async def update(
        self,
        id: str,
        name: str,
        arg: object = None,
        update_id: str | None = None,
        run_id: str | None = None,
    ) -> object:
        handle = self.engine.handle(id, run_id)
        return await self._recorded(handle.update(name, arg, update_id=update_id))

    async def object_call(
        self, id: str, handler: str, arg: object = None, call_id: str | None = None
    ) -> object:
        name, key = _object_of(id)
        return await self._recorded(self.engine.objects.call(name, key, handler, arg, call_id))

    async def object_describe(self, id: str) -> JsonObject:
        return await self.engine.objects.describe(*_object_of(id))

    async def result(
        self, id: str, run_id: str | None = None, timeout: float | None = None
    ) -> object:
        """The run's result once durable (`RunHandle.result`), as its JSON."""
        return await self.engine.handle(id, run_id).result(timeout)

    async def batch(
        self,
        action: BatchAction,
        where: dict[str, Any] | None = None,
        workflow: str | None = None,
        status: str | None = None,
        reason: str | None = None,
        signal: str | None = None,
        value: object = None,
        to: int | str | None = None,
        rate: float | None = None,
        id: str | None = None,
        dry_run: bool = False,
    ) -> JsonObject:
        """Starts a batch (`Engine.batch`); returns it, or with `dry_run` the count."""
        batch = self.engine.batch(
            action,
            where=where,
            workflow=workflow,
            status=status,
            reason=reason,
            signal=signal,
            value=value,
            to=to,
            rate=rate,
            id=id,
            dry_run=dry_run,
        )
        return await self._recorded(batch)

    async def batch_describe(self, id: str) -> JsonObject:
        """Batch `id`'s progress and each run's outcome (`Engine.describe_batch`)."""
        return self.engine.describe_batch(id)

    async def schedules(self) -> builtins.list[JsonObject]:
        """Every cron schedule: workflow, cron, timezone, overlap, catchup, paused,
        last (the last instant fired or skipped) and next (the next instant due)."""
        return self.engine.schedules.list()

    async def schedule(self, name: str, action: Literal["pause", "unpause", "trigger"]) -> Any:
        """Pauses or unpauses the schedule of workflow `name` (returns the schedule), or
        triggers a run of it now (returns the run)."""
        return await self._recorded(self.engine.schedules.act(name, action))

    async def schedule_set(
        self,
        name: str,
        create: bool,
        workflow: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        catchup: str | None = None,
        input: object = None,
    ) -> JsonObject:
        changes = {
            "workflow": workflow,
            "cron": cron,
            "timezone": timezone,
            "overlap": overlap,
            "catchup": catchup,
            "input": input,
        }
        return await self._recorded(self.engine.schedules.set(name, changes, create=create))

    async def schedule_delete(self, name: str) -> JsonObject:
        await self._recorded(self.engine.schedules.delete(name))
        return {"name": name}

    async def schedule_backfill(
        self, name: str, start: str, end: str
    ) -> builtins.list[builtins.list[str]]:
        try:
            began, ended = datetime.fromisoformat(start), datetime.fromisoformat(end)
        except (TypeError, ValueError):
            why = f"a backfill's range is two ISO 8601 instants, not {start!r} and {end!r}"
            raise Rejected(why) from None
        if began.tzinfo is None or ended.tzinfo is None:
            raise Rejected("a backfill's range is two instants with their UTC offset")
        backfill = self.engine.schedules.backfill(name, began.timestamp(), ended.timestamp())
        return await self._recorded(backfill)

    async def prune(self, older_than: float) -> int:
        """Deletes the runs that closed more than `older_than` seconds ago from the history
        store; returns how many. Open runs are never pruned."""
        return await self.engine.prune(older_than)

    async def limits(self) -> builtins.list[JsonObject]:
        """Every limit set or in use (`LimitInfo` as a mapping), by name; then every rate
        over time in use (`RateInfo`: with `per_s`)."""
        limits = [dataclasses.asdict(info) for info in self.engine.limits()]
        return limits + [_rate_json(info) for info in self.engine.rates()]

    async def limit(self, name: str, permits: int, per_s: float | None = None) -> JsonObject:
        """Sets limit `name`'s size (durably); returns the limit as `limits` shows it.
        With `per_s`: rate `name`'s (`Engine.rate`), answered as a rate's row."""
        if per_s is not None:
            await self._recorded(self.engine.rate(name, permits, per_s))
            shown = [i for i in self.engine.rates() if i.name == name]
            if shown:
                return _rate_json(shown[0])
            return {"name": name, "permits": permits, "per_s": float(per_s), "taken": 0}
        await self._recorded(self.engine.limit(name, permits))
        (info,) = [info for info in self.engine.limits() if info.name == name]
        return dataclasses.asdict(info)

    async def queues(self) -> builtins.list[JsonObject]:
        """Every queue of runs set or in use (`QueueInfo` as a mapping), by name."""
        return [dataclasses.asdict(info) for info in self.engine.queues()]

    async def queue(
        self, name: str, concurrency: int | None = None, per_key: int | None = None
    ) -> JsonObject:
        """Sets queue `name`'s sizes (durably; `Engine.queue`); returns the queue as
        `queues` shows it."""
        await self._recorded(self.engine.queue(name, concurrency, per_key))
        (info,) = [info for info in self.engine.queues() if info.name == name]
        return dataclasses.asdict(info)

    async def _recorded(self, act: Awaitable[T]) -> T:
        """What `act` returns. A `JournalFailed` it raises is `OutcomeUnknown` when the
        journal took records during the act (the act's, perhaps): they may have been
        committed. When it took none (it had failed before, or its writer refused the
        act's first record), nothing was recorded, and the error says so as it is."""
        durability = self.engine.durability
        taken_before = durability.writer.next_lsn if durability.writer is not None else 0
        try:
            return await act
        except JournalFailed as e:
            writer = durability.writer
            if writer is None or writer.next_lsn == taken_before or isinstance(e, OutcomeUnknown):
                raise
            raise OutcomeUnknown(
                f"{e}. This call may have been recorded before the failure: look at the "
                "run (its status, its history) before trying again"
            ) from None

    async def watch(
        self, id: str, timeout: float | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Follows the newest run of `id` until it closes, stops, or `timeout` seconds pass
        (`watching.watch` says what it yields; `NotFound`: no run of that id)."""
        async with contextlib.aclosing(watching.watch(self.engine, id, timeout)) as events:
            async for event in events:
                yield event

    async def stream(
        self, id: str, name: str, follow: bool = True, run_id: str | None = None
    ) -> AsyncGenerator[Json, None]:
        """The durable items of stream `name` of the newest run of `id` (or of `run_id`),
        until it closes. Without `follow`, only the items durable now.
        """
        handle = self.engine.handle(id, run_id)
        async with contextlib.aclosing(handle.stream(name, follow)) as items:
            async for item in items:
                yield item


def _reset_from(recs: builtins.list[tuple[int, Record]]) -> str | None:
    """The run a run was reset from, as its `RunStarted` says (None: it was not)."""
    for _, rec in recs[:1]:
        if isinstance(rec, RunStarted) and rec.origin and "reset" in rec.origin:
            return str(rec.origin["reset"])
    return None


def _object_of(id: str) -> tuple[str, str]:
    found = object_key(id)
    if found is None:
        raise Rejected(f"{id!r} is not the id of an object's key (object:<name>:<key>)")
    return found


def _rate_json(info: RateInfo) -> JsonObject:
    """A rate's row as the control API answers it: its next free slot in ISO 8601."""
    doc = dataclasses.asdict(info)
    if info.next_at is not None:
        doc["next_at"] = datetime.fromtimestamp(info.next_at, UTC).isoformat()
    return doc
