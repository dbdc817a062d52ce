"""`Client` for code that is not async (Flask, Django, scripts): the methods of
`fusee_runtime.Client`, blocking.

    from fusee_runtime.sync import Client

    with Client.connect(home="/srv/orders/.fusee") as client:
        handle = client.start("order", {"sku": "A-1"}, id="order-7")
        print(handle.result(timeout=60))

Each client runs the async client on an event loop of its own, in a thread
of its own, so it works the same from a thread of a web server, a script, or
code under another event loop. Its errors are the async client's.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncGenerator, Coroutine, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

from fusee_runtime import client as aio
from fusee_runtime.control.operations import BatchAction
from fusee_runtime.dsl import Rate, WorkflowDef
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.run import RunInfo

T = TypeVar("T")


class _Loop:
    """An event loop running in a daemon thread, until `stop`."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fusee-client")
        self._thread.daemon = True
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the loop; blocks until it returns (or raises)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, items: AsyncGenerator[T, None]) -> Iterator[T]:
        """`items`, one at a time, pulled from the loop."""

        async def pull() -> T:
            return await anext(items)

        try:
            while True:
                try:
                    yield self.run(pull())
                except StopAsyncIteration:
                    return
        finally:
            self.run(items.aclose())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


class Client:
    """`fusee_runtime.Client`, blocking (see the module)."""

    def __init__(self, client: aio.Client, loop: _Loop) -> None:
        self._client = client
        self._loop = loop

    @classmethod
    def connect(
        cls,
        home: str | Path | None = None,
        *,
        store: str | None = None,
        url: str | None = None,
        token: str | None = None,
        app: str | ModuleType | None = None,
    ) -> Client:
        """As `fusee_runtime.Client.connect`."""
        loop = _Loop()
        try:
            connected = loop.run(
                aio.Client.connect(home, store=store, url=url, token=token, app=app)
            )
        except BaseException:
            loop.stop()
            raise
        return cls(connected, loop)

    def close(self) -> None:
        """Closes the client (a second close does nothing)."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._client.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._client)

    def start(
        self,
        workflow: str | WorkflowDef,
        input: object = None,
        id: str | None = None,
        on_conflict: aio.OnConflict = "return",
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
        started = self._client.start(
            workflow,
            input,
            id,
            on_conflict,
            traceparent,
            start_delay,
            start_at,
            update,
            queue=queue,
            queue_key=queue_key,
            priority=priority,
            debounce=debounce,
            debounce_key=debounce_key,
            debounce_max=debounce_max,
            throttle=throttle,
        )
        return ClientHandle(self._loop.run(started), self._loop)

    def handle(self, id: str, run_id: str | None = None) -> ClientHandle:
        return ClientHandle(self._client.handle(id, run_id), self._loop)

    def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        where: dict[str, Any] | None = None,
        limit: int | None = None,
        parent: str | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        return self._loop.run(self._client.list(status, workflow, where, limit, parent, before))

    def complete(self, token: str, value: object = None) -> None:
        self._loop.run(self._client.complete(token, value))

    def fail(self, token: str, message: str) -> None:
        self._loop.run(self._client.fail(token, message))

    def batch(self, action: BatchAction, **options: Any) -> JsonObject:
        return self._loop.run(self._client.batch(action, **options))

    def describe_batch(self, id: str) -> JsonObject:
        return self._loop.run(self._client.describe_batch(id))

    def schedules(self) -> builtins.list[JsonObject]:
        return self._loop.run(self._client.schedules())

    def create_schedule(
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
        made = self._client.create_schedule(
            name,
            workflow,
            cron,
            timezone=timezone,
            overlap=overlap,
            catchup=catchup,
            input=input,
        )
        return self._loop.run(made)

    def update_schedule(self, name: str, **changes: Any) -> JsonObject:
        return self._loop.run(self._client.update_schedule(name, **changes))

    def pause_schedule(self, name: str) -> JsonObject:
        return self._loop.run(self._client.pause_schedule(name))

    def unpause_schedule(self, name: str) -> JsonObject:
        return self._loop.run(self._client.unpause_schedule(name))

    def trigger_schedule(self, name: str) -> ClientHandle:
        return ClientHandle(self._loop.run(self._client.trigger_schedule(name)), self._loop)

    def delete_schedule(self, name: str) -> None:
        self._loop.run(self._client.delete_schedule(name))

    def backfill_schedule(
        self, name: str, start: datetime, end: datetime
    ) -> builtins.list[tuple[str, str]]:
        return self._loop.run(self._client.backfill_schedule(name, start, end))

    def object(self, name: str, key: str) -> ClientObject:
        return ClientObject(self._client.object(name, key), self._loop)


class ClientObject:
    """`fusee_runtime.client.ClientObject`, blocking."""

    def __init__(self, obj: aio.ClientObject, loop: _Loop) -> None:
        self._object = obj
        self._loop = loop
        self.name, self.key, self.id = obj.name, obj.key, obj.id

    def __repr__(self) -> str:
        return repr(self._object)

    def call(self, handler: str, arg: object = None, call_id: str | None = None) -> Json:
        return self._loop.run(self._object.call(handler, arg, call_id))

    def get(self) -> JsonObject:
        return self._loop.run(self._object.get())

    def describe(self) -> JsonObject:
        return self._loop.run(self._object.describe())


class ClientHandle:
    """`fusee_runtime.client.ClientHandle`, blocking."""

    def __init__(self, handle: aio.ClientHandle, loop: _Loop) -> None:
        self._handle = handle
        self._loop = loop
        self.id = handle.id
        self.run_id = handle.run_id
        self.update_result = handle.update_result

    def __repr__(self) -> str:
        return repr(self._handle)

    def describe(self) -> RunInfo:
        return self._loop.run(self._handle.describe())

    def history(self) -> builtins.list[dict[str, Any]]:
        return self._loop.run(self._handle.history())

    def completions(self) -> builtins.list[JsonObject]:
        return self._loop.run(self._handle.completions())

    def follow_log(self) -> Iterator[JsonObject]:
        return self._loop.iterate(self._handle.follow_log())

    def log(self, last: int = 200) -> builtins.list[JsonObject]:
        return self._loop.run(self._handle.log(last))

    def signal(self, name: str, value: object = None) -> None:
        self._loop.run(self._handle.signal(name, value))

    def cancel(self, reason: str = "cancelled") -> None:
        self._loop.run(self._handle.cancel(reason))

    def terminate(self, reason: str = "terminated") -> None:
        self._loop.run(self._handle.terminate(reason))

    def resume(self) -> None:
        self._loop.run(self._handle.resume())

    def reset(self, to: int | str) -> ClientHandle:
        return ClientHandle(self._loop.run(self._handle.reset(to)), self._loop)

    def query(self, name: str, arg: object = None) -> Json:
        return self._loop.run(self._handle.query(name, arg))

    def update(self, name: str, arg: object = None, update_id: str | None = None) -> Json:
        return self._loop.run(self._handle.update(name, arg, update_id))

    def result(self, timeout: float | timedelta | None = None, *, type: Any = None) -> Any:
        return self._loop.run(self._handle.result(timeout, type=type))

    def watch(self, timeout: float | None = None) -> Iterator[dict[str, Any]]:
        return self._loop.iterate(self._handle.watch(timeout))

    def stream(self, name: str, follow: bool = True) -> Iterator[Json]:
        return self._loop.iterate(self._handle.stream(name, follow))
