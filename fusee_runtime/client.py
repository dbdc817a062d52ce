"""`Client`: how a program reaches the runs of a home that another process drives.

An `Engine` owns its home (it takes the lock) and runs the workflows' code.
A web application, a script or a cron job that only starts runs, signals
them and reads their results needs neither: it connects, and asks whoever
drives them.

    async with await Client.connect(home="/srv/orders/.fusee") as client:
        handle = await client.start("order", {"sku": "A-1"}, id="order-7")
        print(await handle.result(timeout=60))

`Client.connect` takes exactly one of:

- `home`: a local home, through the socket of the process that owns it
  (`fusee serve`, `fusee start`); with no owner, the client opens the home
  itself, as the CLI does (driving its runs when given the `app`, else
  passively: what it records waits for a driver);
- `store`: a PostgreSQL database, through it to whichever worker drives a
  run's journal (a takeover moves a run; the next call finds its new worker);
  with no worker, opened here as with a home;
- `url`: the HTTP(S) API of `fusee serve --http` (its `token`, if it has one).

`repr(client)` says which way it went. The run API is the engine's: `start`,
`handle(id, run_id=None)` with the methods of `RunHandle`, `list`, and the
completion tokens' `complete` and `fail`. Errors are the engine's whatever
carries the call (`NotFound`, `Rejected`, `IdConflict`, `RunFailed`,
`TimedOut`, ...); a connection lost during a call is `ConnectionLost` (the
call may have been done: the client never sends it again on its own).
`fusee_runtime.sync.Client` is the same client for code that is not async.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import tempfile
from collections.abc import AsyncGenerator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from fusee_runtime.control.operations import BatchAction
from fusee_runtime.dsl import Rate, WorkflowDef, seconds
from fusee_runtime.errors import Rejected
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.run import RunInfo
from fusee_runtime.objects import STATE, object_id
from fusee_runtime.typed import decode, shape_of

if TYPE_CHECKING:  # (imported when a client connects: an engine alone does not need them)
    from fusee_runtime.control.client import Client as Transport

OnConflict = Literal["return", "fail", "new_run"]
T = TypeVar("T")

FOLLOW_S = 0.5
"""How often `ClientHandle.follow_log` asks for new lines."""
FOLLOW_LAST = 1000
"""The lines `follow_log` asks for each time: more than come between two asks."""

READ_RETRY_S = 30.0
"""How long a read (`describe`, `result`, `query`, `list`, ...) keeps asking while the
process that drives the runs changes (a PostgreSQL takeover takes about a lease; a
`fusee serve` restarted, a moment). An act is never sent again on its own."""


class ConnectionLost(Rejected):
    """The process that drives the runs could not be reached, or went away during a call:
    an act may or may not have been done (look at the run before doing it again)."""


class Client:
    """A connection to the runs of one home or database (see the module).

    Make one with `await Client.connect(...)`; close it with `await client.close()`
    or `async with`.
    """

    def __init__(self, transport: Transport, stack: contextlib.AsyncExitStack, how: str) -> None:
        self._transport = transport
        self._stack = stack
        self._how = how

    @classmethod
    async def connect(
        cls,
        home: str | Path | None = None,
        *,
        store: str | None = None,
        url: str | None = None,
        token: str | None = None,
        app: str | ModuleType | None = None,
    ) -> Client:
        """Connects to the runs of `home`, or of the database at `store` (see the module).

        `app` (a module, or its name) is used only when nobody drives the runs and the
        client opens them itself: with it, their code runs in this process while the
        client is open; without, it records what it is asked and a driver does the rest.

        Raises:
            ValueError: not exactly one of `home`, `store` and `url`; a `token` without
                `url`.
            ConnectionLost: the owner holds the home and does not answer; nothing
                answers at `url`.
            Rejected: the server at `url` refused the token (or wants one).
            HomeLocked, JournalCorrupt, AppImportError, OSError: as `Engine.open`,
                when the client opens the home itself.
        """
        if sum(place is not None for place in (home, store, url)) != 1:
            raise ValueError("Client.connect takes exactly one of home=, store= and url=")
        if token is not None and url is None:
            raise ValueError("Client.connect: token= is for an HTTP server (url=)")
        from fusee_runtime.control.client import Client as Transport
        from fusee_runtime.control.connect import EachCall, connect
        from fusee_runtime.control.router import LocalClient

        stack = contextlib.AsyncExitStack()
        try:
            if url is not None:
                from fusee_runtime.control.http_client import HttpClient

                async with _lost():
                    http = await HttpClient.reach(url, token)
                stack.push_async_callback(http.aclose)
                return cls(http, stack, f"{url}, driven by {http.driver}")
            if store is not None:
                # An engine opened here keeps its local files (its lock, the socket) apart.
                where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fusee-")))
                config: dict[str, Any] = {"store": store}
            else:
                where, config = Path(home or "."), {}
            if app is None:  # reached anew for each call: no lock held between calls
                probe = EachCall(where, config)
                async with _lost():
                    pong = await probe.ping()
                if pong["pid"] == os.getpid():
                    return cls(probe, stack, f"{store or where}, opened here for each call")
            opening = connect(where, app, drive=app is not None, **config)
            async with _lost():
                reached = await stack.enter_async_context(opening)
            if isinstance(reached, Transport):
                how = f"{store or where}, driven by {reached.driver}"
                return cls(reached, stack, how)
            how = f"{store or where}, opened here (driving its runs)"
            return cls(LocalClient(reached), stack, how)
        except BaseException:
            await stack.aclose()
            raise

    async def close(self) -> None:
        """Closes the connection (and the home, if the client opened it)."""
        await self._stack.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<fusee Client: {self._how}>"

    async def start(
        self,
        workflow: str | WorkflowDef,
        input: object = None,
        id: str | None = None,
        on_conflict: OnConflict = "return",
        traceparent: str | None = None,
        start_delay: float | timedelta | None = None,
        start_at: datetime | None = None,
        update: tuple[str, Any] | tuple[str, Any, str | None] | None = None,
        *,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        debounce: float | timedelta | None = None,
        debounce_key: str | None = None,
        debounce_max: float | timedelta | None = None,
        throttle: Rate | None = None,
    ) -> ClientHandle:
        """Starts a run of `workflow` (its name, or its function); returns once the start is
        durable, with a handle pinned to the run. `start_delay` or `start_at` begins it
        later; `update=(name, arg[, update_id])` applies an update to the id's open run,
        started first if it has none, and the handle holds its result as
        `update_result`. `queue`, `queue_key` and `priority` make it wait its turn in a
        queue; `debounce`, `debounce_key` and `debounce_max` make a burst of starts one
        run (a start that joins a burst gets the handle of the burst's run, whatever id
        it gave); `throttle` (a `Rate` with a string key, or none) delays it to a free
        slot of its window: `Engine.start` says the rest."""
        name = workflow.name if isinstance(workflow, WorkflowDef) else workflow
        flow: dict[str, object] = {"queue": queue, "queue_key": queue_key, "debounce": debounce}
        flow.update(debounce_key=debounce_key, debounce_max=debounce_max, throttle=throttle)
        if update is not None:
            if id is None or start_delay is not None or start_at is not None:
                raise Rejected("an update with its start takes an id, and no delay")
            if priority != 0 or any(value is not None for value in flow.values()):
                raise Rejected(
                    "an update with its start runs its code now: no queue, debounce or throttle"
                )
            if on_conflict != "return":
                raise Rejected(
                    "an update with its start uses the id's open run: on_conflict 'return'"
                )
            update_name, arg, update_id = (*update, None)[:3]
            async with _lost():
                info, result = await self._transport.update_with_start(
                    name, id, update_name, input, arg, update_id, traceparent
                )
            handle = ClientHandle(self._transport, info.id, info.run_id)
            handle.update_result = result
            return handle
        if start_at is not None and (not isinstance(start_at, datetime) or not start_at.tzinfo):
            raise Rejected(f"start_at is an aware datetime, not {start_at!r}")
        from fusee_runtime.control.wire import duration_s, throttle_json

        async with _lost():
            info, _ = await self._transport.start(
                name,
                input,
                id=id,
                on_conflict=on_conflict,
                traceparent=traceparent,
                start_delay=seconds(start_delay),
                start_at=None if start_at is None else start_at.isoformat(),
                queue=queue,
                queue_key=queue_key,
                priority=priority,
                debounce=duration_s("debounce", debounce),
                debounce_key=debounce_key,
                debounce_max=duration_s("debounce_max", debounce_max),
                throttle=None if throttle is None else throttle_json(throttle),
            )
        return ClientHandle(self._transport, info.id, info.run_id)

    def handle(self, id: str, run_id: str | None = None) -> ClientHandle:
        """The runs of `id`: its newest at each call, or the run `run_id` (pinned)."""
        return ClientHandle(self._transport, id, run_id)

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        parent: str | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        """Runs, newest first, as `Engine.list` finds them."""
        return await _read(
            lambda: self._transport.list(
                status=status,
                workflow=workflow,
                limit=limit,
                parent=parent,
                where=where,
                before=before,
            )
        )

    async def complete(self, token: str, value: object = None) -> None:
        """Finishes the `ctx.await_completion` that issued `token` with `value`."""
        async with _lost():
            await self._transport.complete(token, value)

    async def fail(self, token: str, message: str) -> None:
        """Fails the `ctx.await_completion` that issued `token`."""
        async with _lost():
            await self._transport.fail(token, message)

    # -- batches -------------------------------------------------------------------------

    async def batch(
        self,
        action: BatchAction,
        *,
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
        """Does `action` once to every run the filter matches, in a durable batch
        (`Engine.batch`, which says what each argument does); returns the batch as
        `describe_batch` shows it. Sent again with the same `id`: the same batch."""
        async with _lost():
            return await self._transport.batch(
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

    async def describe_batch(self, id: str) -> JsonObject:
        """Batch `id`: its progress, outcomes by kind and each run's (`runs`)."""
        return await _read(lambda: self._transport.batch_describe(id))

    # -- cron schedules ------------------------------------------------------------------

    async def schedules(self) -> builtins.list[JsonObject]:
        """Every cron schedule, declared by the app or made at run time, with its state."""
        return await _read(self._transport.schedules)

    async def create_schedule(
        self,
        name: str,
        workflow: str,
        cron: str,
        *,
        timezone: str | None = None,
        overlap: str | None = None,
        catchup: str | None = None,
        input: object = None,
    ) -> JsonObject:
        """Makes cron schedule `name`, which starts runs of `workflow` (with `input`, else
        the instant) at each instant of `cron` in `timezone` (UTC), by its `overlap`
        ("skip") and `catchup` ("one"), as `@workflow(cron=...)` does; durable, it fires
        from now on wherever the home is driven (what comes due while nothing drives it
        is caught up by its `catchup`). Returns it as `schedules` lists it.

        Raises:
            Rejected: the name is taken or a workflow's, or a field is not valid.
            NotFound: no workflow of that name where the runs are driven.
        """
        async with _lost():
            return await self._transport.schedule_set(
                name, True, workflow, cron, timezone, overlap, catchup, input
            )

    async def update_schedule(
        self,
        name: str,
        *,
        workflow: str | None = None,
        cron: str | None = None,
        timezone: str | None = None,
        overlap: str | None = None,
        catchup: str | None = None,
        input: object = None,
    ) -> JsonObject:
        """Changes the fields given of schedule `name` (made at run time)."""
        async with _lost():
            return await self._transport.schedule_set(
                name, False, workflow, cron, timezone, overlap, catchup, input
            )

    async def pause_schedule(self, name: str) -> JsonObject:
        """Pauses schedule `name`: it fires nothing until unpaused (nor catches up after)."""
        async with _lost():
            return await self._transport.schedule(name, "pause")

    async def unpause_schedule(self, name: str) -> JsonObject:
        async with _lost():
            return await self._transport.schedule(name, "unpause")

    async def trigger_schedule(self, name: str) -> ClientHandle:
        """Starts a run of schedule `name` now, whatever its overlap."""
        async with _lost():
            info = await self._transport.schedule(name, "trigger")
        return ClientHandle(self._transport, info.id, info.run_id)

    async def delete_schedule(self, name: str) -> None:
        """Deletes schedule `name` (made at run time): it fires no more."""
        async with _lost():
            await self._transport.schedule_delete(name)

    async def backfill_schedule(
        self, name: str, start: datetime, end: datetime
    ) -> builtins.list[tuple[str, str]]:
        """Starts the runs schedule `name` should have started for its instants in
        [`start`, `end`) (aware datetimes, `end` not after now), by its overlap; returns
        each instant's run id and "started", "existed" (started before: a backfill run
        twice starts each run once) or "skipped"."""
        async with _lost():
            pairs = await self._transport.schedule_backfill(
                name, start.isoformat(), end.isoformat()
            )
        return [(id, outcome) for id, outcome in pairs]

    def object(self, name: str, key: str) -> ClientObject:
        """Key `key` of virtual object `name` (`@object`), as `Engine.object` gives it:
        `call`, `get`, `describe`. Its open keys are the open runs of workflow
        `fusee.object.<name>`: `list(workflow=..., status="open")`."""
        return ClientObject(self._transport, name, key)


class ClientObject:
    """A key of a virtual object, through a client (`Client.object`)."""

    def __init__(self, transport: Transport, name: str, key: str) -> None:
        self._transport = transport
        self.name, self.key = name, key
        self.id = object_id(name, key)

    def __repr__(self) -> str:
        return f"<ClientObject {self.name}:{self.key}>"

    async def call(self, handler: str, arg: object = None, call_id: str | None = None) -> Json:
        """Calls `handler` (the key's run is started by its first call): an exclusive one
        waits its turn and answers once recorded; the same `call_id` sent again (after a
        `ConnectionLost`, say) reaches the object once and gets the first answer."""
        async with _lost():
            return await self._transport.object_call(self.id, handler, arg, call_id)

    async def get(self) -> JsonObject:
        """The key's state (`NotFound` until a call reached it)."""
        state = await _read(lambda: self._transport.query(self.id, STATE))
        return cast(JsonObject, state)

    async def describe(self) -> JsonObject:
        """Its run, state, queue of calls waiting their turn (`ObjectHandle.describe`)."""
        return await _read(lambda: self._transport.object_describe(self.id))


class ClientHandle:
    """One run of a workflow id (`run_id` given: pinned), or its newest: the methods of
    `RunHandle`, asked of whoever drives the run."""

    def __init__(self, transport: Transport, id: str, run_id: str | None = None) -> None:
        self._transport = transport
        self.id = id
        self.run_id = run_id
        """The run this handle is pinned to (None: the id's newest, at each call)."""
        self.update_result: Json = None
        """What the update given to `Client.start(update=...)` answered (else None)."""

    def __repr__(self) -> str:
        return f"<fusee ClientHandle {self.id!r}{f' run {self.run_id}' if self.run_id else ''}>"

    async def describe(self) -> RunInfo:
        return await _read(lambda: self._transport.describe(self.id, run_id=self.run_id))

    async def history(self) -> builtins.list[dict[str, Any]]:
        """Every record of every run of this id, oldest first, as JSON mappings."""
        return await _read(lambda: self._transport.history(self.id))

    async def completions(self) -> builtins.list[JsonObject]:
        """The `ctx.await_completion`s the run waits for, each with the token that finishes
        it now and its URL: `{"step", "seq", "op", "token", "url"}` (`fusee describe`)."""
        return await _read(lambda: self._transport.completions(self.id, run_id=self.run_id))

    async def log(self, last: int = 200) -> builtins.list[JsonObject]:
        """The last `last` lines the runs of this id logged (`ctx.log`), oldest first."""
        return await _read(lambda: self._transport.log(self.id, last))

    async def follow_log(self) -> AsyncGenerator[JsonObject, None]:
        """The lines the runs of this id log (`ctx.log`), the last `FOLLOW_LAST` first,
        then each new one as it comes, until the newest run closes for good (not
        continued as new, not reset); asked for every `FOLLOW_S`, whatever carries the
        calls. A line is told apart from those seen by its fields (its instant in them):
        two lines alike in every field show once."""
        seen: builtins.list[JsonObject] = []
        while True:
            info = await self.describe()
            lines = await self.log(FOLLOW_LAST)
            for line in _after(seen, lines):
                yield line
            seen = lines
            if not info.status.is_open and str(info.status) not in ("continued_as_new", "reset"):
                return
            await asyncio.sleep(FOLLOW_S)

    async def signal(self, name: str, value: object = None) -> None:
        async with _lost():
            await self._transport.signal(self.id, name, value, run_id=self.run_id)

    async def cancel(self, reason: str = "cancelled") -> None:
        async with _lost():
            await self._transport.cancel(self.id, reason, run_id=self.run_id)

    async def terminate(self, reason: str = "terminated") -> None:
        async with _lost():
            await self._transport.terminate(self.id, reason, run_id=self.run_id)

    async def resume(self) -> None:
        async with _lost():
            await self._transport.resume(self.id, run_id=self.run_id)

    async def reset(self, to: int | str) -> ClientHandle:
        """Resets the run (`Engine.reset`); returns a handle pinned to the new run."""
        async with _lost():
            info = await self._transport.reset(self.id, to, run_id=self.run_id)
        return ClientHandle(self._transport, info.id, info.run_id)

    async def query(self, name: str, arg: object = None) -> Json:
        return await _read(lambda: self._transport.query(self.id, name, arg, run_id=self.run_id))

    async def update(self, name: str, arg: object = None, update_id: str | None = None) -> Json:
        """Applies update `name`; returns its handler's result once durable. The same
        `update_id` is applied once, however often it is sent."""
        async with _lost():
            return await self._transport.update(
                self.id, name, arg, update_id=update_id, run_id=self.run_id
            )

    async def result(self, timeout: float | timedelta | None = None, *, type: Any = None) -> Any:
        """The run's result once durable, as `RunHandle.result` (with `type`, read back into
        that type).

        A read: when the process driving the run changes while it waits (a takeover,
        a restart), it asks the next one, within its `timeout`.

        Raises:
            RunFailed, Cancelled, Terminated, TimedOut: as `RunHandle.result`.
        """
        limit = seconds(timeout)
        deadline = None if limit is None else asyncio.get_running_loop().time() + limit

        def asked() -> Awaitable[Json]:
            left = (
                None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())
            )
            return self._transport.result(self.id, self.run_id, left)

        value = await _read(asked)
        if type is None:
            return value
        return decode(shape_of(type), value, f"the result of run {self.id!r}")

    async def watch(self, timeout: float | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """Follows the run as `fusee start` shows it: `{"progress": {"status", "current"}}`
        each time either changes, then one `{"outcome": ...}` once it closes or stops
        (paused, stuck), or after `timeout` seconds: its `code` ("ok" with the `result`,
        "failed" or "timed_out", with a `message`) and the `run` as `describe` shows it."""
        async with _lost():
            events = self._transport.watch(self.id, timeout)
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event

    async def stream(self, name: str, follow: bool = True) -> AsyncGenerator[Json, None]:
        """The durable items of stream `name`, as `RunHandle.stream` yields them."""
        async with _lost():
            items = self._transport.stream(self.id, name, follow, run_id=self.run_id)
            async with contextlib.aclosing(items):
                async for item in items:
                    yield item


async def _read(ask: Callable[[], Awaitable[T]]) -> T:
    """A read's answer (it records nothing, so asking again is safe): when the process
    that drives the runs is lost on the way, asked again, of the one that drives them
    next, until it has been out of reach for `READ_RETRY_S`."""
    loop = asyncio.get_running_loop()
    lost_since: float | None = None
    pause = 0.05
    while True:
        began = loop.time()
        try:
            async with _lost():
                return await ask()
        except ConnectionLost:
            now = loop.time()
            if lost_since is None or now - began > 1.0:  # it had answered: lost anew
                lost_since, pause = now, 0.05
            if now + pause - lost_since > READ_RETRY_S:
                raise
        await asyncio.sleep(pause)  # a takeover takes about a lease; a restart, a moment
        pause = min(pause * 2, 1.0)


@contextlib.asynccontextmanager
async def _lost() -> AsyncGenerator[None, None]:
    """The transport's ways of losing the driver, said as one error."""
    from fusee_runtime.control.client import OwnerGone, OwnerLost, OwnerUnanswered

    try:
        yield
    except (OwnerGone, OwnerLost, OwnerUnanswered) as e:
        raise ConnectionLost(str(e)) from None


def _after(
    seen: builtins.list[JsonObject], lines: builtins.list[JsonObject]
) -> builtins.list[JsonObject]:
    """The lines of `lines` (the newest, oldest first) that come after those `seen` (the
    newest the time before): after the longest end of `seen` that `lines` begins with."""
    for k in range(min(len(seen), len(lines)), 0, -1):
        if seen[-k:] == lines[:k]:
            return lines[k:]
    return lines
