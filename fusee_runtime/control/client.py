"""The asking side of the control API: `Client`, and `ControlClient` over the socket.

`Client` implements the declared operations (`ops.Operations`) over a
transport that carries an operation's descriptor and its arguments as
JSON to whoever drives the home, and its answer back. `ControlClient` is
the transport of the home's socket (`protocol` says what goes over the
wire); the caller sees the same values and the same exceptions as in
process. When the owner does not answer, the client says how, so the
caller knows whether a retry is safe: `OwnerGone` (nothing was sent),
`OwnerLost` (the request was sent, the owner may have acted),
`OwnerUnanswered` (it is there, but silent for `ANSWER_S`).
"""

from __future__ import annotations

import abc
import asyncio
import builtins
import contextlib
import socket
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, ParamSpec, TypeVar, cast

import orjson

from fusee_runtime import errors, search
from fusee_runtime.control import ops, protocol
from fusee_runtime.control.api import Control, OutcomeUnknown
from fusee_runtime.control.ops import Operations
from fusee_runtime.engine.home import HomeLock, check_reachable
from fusee_runtime.errors import Failure, FuseeError, Rejected
from fusee_runtime.model.json import Json, JsonObject
from fusee_runtime.model.run import RunInfo
from fusee_runtime.store.shared import Asking

P = ParamSpec("P")
R = TypeVar("R")
E = TypeVar("E")


class OwnerUnanswered(Rejected):
    """The process that owns the home does not answer on its control socket."""

    def __init__(self, home: Path, pid: int | None, why: str, where: str | None = None) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"the home {home} is owned by {who}, which {why} on "
            f"{where or home / protocol.SOCKET_NAME}; wait for it, or stop it"
        )
        self.pid = pid


class OwnerGone(Rejected):
    """Nobody serves the home's socket (any more): nothing was sent, so a retry is safe."""


class OwnerLost(Rejected):
    """The owner closed the connection after the request was sent: it may have acted."""


_RAISED: dict[str, type[FuseeError]] = {
    cls.__name__: cls
    for cls in (
        errors.NotFound,
        errors.Rejected,
        errors.IdConflict,
        errors.HistoryDamaged,
        errors.CodecError,
        errors.TimedOut,
        errors.Cancelled,
        errors.Terminated,
        errors.NonDeterminism,
        errors.JournalFailed,
        errors.EngineClosed,
        errors.UpdatePending,
        errors.StoreUnavailable,
        OutcomeUnknown,
    )
}


def raised(error: dict[str, Any]) -> FuseeError:
    """The engine's exception an error answer names (`FuseeError` for one it does not
    know): the same class whatever carried it, a `RunFailed` with its `Failure`."""
    raising, message = error["type"], error["message"]
    if raising == "RunFailed" and "failure" in error:
        return errors.RunFailed(error["id"], Failure.from_json(error["failure"]))
    # A relay (a worker asked over HTTP) that could not reach the driver: said as the
    # relay's own client says it (nothing sent, or the call may have been done).
    if raising == "OwnerGone":
        return OwnerGone(message)
    if raising in ("OwnerLost", "OwnerUnanswered"):
        return OwnerLost(message)
    return _RAISED.get(raising, FuseeError)(message)


class Client(Operations):
    """The operations of `ops.Operations` asked of whoever drives a home, through a
    transport: each method sends its operation's descriptor and its arguments as JSON
    (`call`, `events`), and reads the answer back as the descriptor says (`ops.Call.answer`),
    so a caller sees the values and the exceptions of an engine in process.

    A transport says how a request travels: the home's socket (`ControlClient`), the
    database (`remote.StoreClient`), the journal each call belongs to (`router.ShardRouter`),
    an engine of this process (`router.LocalClient`). It keeps the wire as it is: an
    argument left at its default is not sent where an owner of an older version would
    refuse it (`list`'s `parent`, `where`, `before`; `start`'s `traceparent`, ...).
    """

    @property
    @abc.abstractmethod
    def owner(self) -> int | None:
        """The pid of the process that serves the calls (None: this one)."""

    @property
    @abc.abstractmethod
    def driver(self) -> str:
        """The process that serves the calls, for people."""

    @property
    def pages_by_cursor(self) -> bool:
        """Whether `list` takes `before` (a database of several journals does not)."""
        return True

    def local_control(self, id: str) -> Control | None:
        """The engine of this process that drives the runs of `id`, if one does (a worker
        of a database serving HTTP: `WorkerRouter`); None: they are driven elsewhere."""
        return None

    @abc.abstractmethod
    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        """Operation `op` with its arguments as JSON: its answer as JSON."""

    @abc.abstractmethod
    def events(self, op: ops.Stream[..., object], args: ops.Args) -> AsyncGenerator[Json, None]:
        """As `call`, for an operation that answers with events (`watch`, `stream`)."""

    async def _ask(self, op: ops.Call[P, R], /, *by_position: P.args, **args: P.kwargs) -> R:
        """`op` with `args`, by name (mypy checks them against the operation's method in
        `Operations`): its answer, read back."""
        assert not by_position, "arguments go by name on the wire"
        return op.answer(await self.call(op, args), args)

    def _follow(
        self, op: ops.Stream[P, E], /, *by_position: P.args, **args: P.kwargs
    ) -> AsyncGenerator[E, None]:
        """As `_ask`, for an operation that answers with events."""
        assert not by_position, "arguments go by name on the wire"
        return cast(AsyncGenerator[E, None], self.events(op, args))  # `E`s, as JSON

    async def ping(self) -> ops.Pong:
        """Who serves the calls: `pid`, `home`, `host`."""
        return await self._ask(ops.PING)

    async def give_way(self) -> dict[str, Any]:
        return await self._ask(ops.GIVE_WAY)

    async def start(
        self,
        workflow: str,
        input: object = None,
        id: str | None = None,
        on_conflict: ops.OnConflict = "return",
        traceparent: str | None = None,
        start_delay: float | None = None,
        start_at: str | None = None,
        queue: str | None = None,
        queue_key: str | None = None,
        priority: int = 0,
        debounce: float | None = None,
        debounce_key: str | None = None,
        debounce_max: float | None = None,
        throttle: ops.Throttle | None = None,
    ) -> tuple[RunInfo, bool]:
        # Sent only when given: an owner of an older version takes none of these.
        args: dict[str, Any] = {"traceparent": traceparent} if traceparent else {}
        given: dict[str, Any] = {"start_delay": start_delay, "start_at": start_at}
        given.update(queue=queue, queue_key=queue_key, debounce=debounce)
        given.update(debounce_key=debounce_key, debounce_max=debounce_max, throttle=throttle)
        args.update((name, value) for name, value in given.items() if value is not None)
        if priority != 0:
            args["priority"] = priority
        return await self._ask(
            ops.START, workflow=workflow, input=input, id=id, on_conflict=on_conflict, **args
        )

    async def update_with_start(
        self,
        workflow: str,
        id: str,
        name: str,
        input: object = None,
        arg: object = None,
        update_id: str | None = None,
        traceparent: str | None = None,
    ) -> tuple[RunInfo, Json]:
        args: dict[str, str] = {"traceparent": traceparent} if traceparent else {}
        return await self._ask(
            ops.UPDATE_WITH_START,
            workflow=workflow,
            id=id,
            name=name,
            input=input,
            arg=arg,
            update_id=update_id,
            **args,
        )

    async def describe(self, id: str, run_id: str | None = None) -> RunInfo:
        return await self._ask(ops.DESCRIBE, id=id, **_pinned(run_id))

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        parent: str | None = None,
        where: dict[str, Any] | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        # Asked only when given: an owner of an older version takes none of these.
        args: dict[str, Any] = {"parent": parent} if parent else {}
        if before:
            args["before"] = before
        if where:
            # Checked and normalized here (a datetime becomes its UTC text), as pairs.
            pairs: dict[str, builtins.list[builtins.list[Json]]] = {}
            for key, op, value in search.conditions(where):
                pairs.setdefault(key, []).append([op, value])
            args["where"] = pairs
        return await self._ask(ops.LIST, status=status, workflow=workflow, limit=limit, **args)

    async def history(
        self, id: str, run_id: str | None = None, after: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        since: dict[str, Any] = {"after": after} if after is not None else {}
        return await self._ask(ops.HISTORY, id=id, **_pinned(run_id), **since)

    async def log(
        self, id: str, last: int = 200, run_id: str | None = None
    ) -> builtins.list[JsonObject]:
        return await self._ask(ops.LOG, id=id, last=last, **_pinned(run_id))

    async def journal(self, id: str, run_id: str | None = None) -> dict[str, Any]:
        return await self._ask(ops.JOURNAL, id=id, **({"run_id": run_id} if run_id else {}))

    async def run_ids(
        self, workflow: str | None = None, open: bool = False
    ) -> builtins.list[builtins.list[str]]:
        args: dict[str, Any] = {"workflow": workflow} if workflow else {}
        if open:
            args["open"] = True
        return await self._ask(ops.RUN_IDS, **args)

    async def signal(
        self,
        id: str,
        name: str,
        value: object = None,
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        args = _pinned(run_id, exact)
        answer = await self._ask(ops.SIGNAL, id=id, name=name, value=value, **args)
        return await self._acted(id, answer)

    async def cancel(
        self, id: str, reason: str = "cancelled", run_id: str | None = None, exact: bool = False
    ) -> RunInfo:
        answer = await self._ask(ops.CANCEL, id=id, reason=reason, **_pinned(run_id, exact))
        return await self._acted(id, answer)

    async def terminate(
        self,
        id: str,
        reason: str = "terminated",
        run_id: str | None = None,
        exact: bool = False,
    ) -> RunInfo:
        answer = await self._ask(ops.TERMINATE, id=id, reason=reason, **_pinned(run_id, exact))
        return await self._acted(id, answer)

    async def resume(self, id: str, run_id: str | None = None, exact: bool = False) -> RunInfo:
        answer = await self._ask(ops.RESUME, id=id, **_pinned(run_id, exact))
        return await self._acted(id, answer)

    async def _acted(self, id: str, answer: RunInfo | None) -> RunInfo:
        """The run an act answered with. An owner of an older version answers null: then
        the run as `describe` finds it (its error, if it fails, says nothing of the act,
        which is durable)."""
        return answer if answer is not None else await self.describe(id)

    async def reset(self, id: str, to: int | str, run_id: str | None = None) -> RunInfo:
        return await self._ask(ops.RESET, id=id, to=to, **_pinned(run_id))

    async def complete(self, token: str, value: object = None) -> dict[str, Any]:
        return await self._ask(ops.COMPLETE, token=token, value=value)

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        return await self._ask(ops.FAIL, token=token, message=message)

    async def completions(self, id: str, run_id: str | None = None) -> builtins.list[JsonObject]:
        return await self._ask(ops.COMPLETIONS, id=id, **_pinned(run_id))

    async def query(
        self, id: str, name: str, arg: object = None, run_id: str | None = None
    ) -> Json:
        return await self._ask(ops.QUERY, id=id, name=name, arg=arg, **_pinned(run_id))

    async def update(
        self,
        id: str,
        name: str,
        arg: object = None,
        update_id: str | None = None,
        run_id: str | None = None,
    ) -> Json:
        args = _pinned(run_id)
        return await self._ask(ops.UPDATE, id=id, name=name, arg=arg, update_id=update_id, **args)

    async def object_call(
        self, id: str, handler: str, arg: object = None, call_id: str | None = None
    ) -> Json:
        return await self._ask(ops.OBJECT_CALL, id=id, handler=handler, arg=arg, call_id=call_id)

    async def object_describe(self, id: str) -> JsonObject:
        return await self._ask(ops.OBJECT_DESCRIBE, id=id)

    async def result(
        self, id: str, run_id: str | None = None, timeout: float | None = None
    ) -> Json:
        args: dict[str, Any] = _pinned(run_id)
        if timeout is not None:
            args["timeout"] = timeout
        return await self._ask(ops.RESULT, id=id, **args)

    async def schedules(self) -> builtins.list[JsonObject]:
        return await self._ask(ops.SCHEDULES)

    async def schedule(self, name: str, action: ops.ScheduleAction) -> Any:
        return await self._ask(ops.SCHEDULE, name=name, action=action)

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
        given = {
            "workflow": workflow,
            "cron": cron,
            "timezone": timezone,
            "overlap": overlap,
            "catchup": catchup,
            "input": input,
        }
        args: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        return await self._ask(ops.SCHEDULE_SET, name=name, create=create, **args)

    async def batch(
        self,
        action: ops.BatchAction,
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
        given: dict[str, Any] = {"where": where, "workflow": workflow, "status": status}
        given.update(reason=reason, signal=signal, value=value, to=to, rate=rate, id=id)
        args: dict[str, Any] = {key: value for key, value in given.items() if value is not None}
        return await self._ask(ops.BATCH, action=action, dry_run=dry_run, **args)

    async def batch_describe(self, id: str) -> JsonObject:
        return await self._ask(ops.BATCH_DESCRIBE, id=id)

    async def schedule_delete(self, name: str) -> JsonObject:
        return await self._ask(ops.SCHEDULE_DELETE, name=name)

    async def schedule_backfill(
        self, name: str, start: str, end: str
    ) -> builtins.list[builtins.list[str]]:
        return await self._ask(ops.SCHEDULE_BACKFILL, name=name, start=start, end=end)

    async def prune(self, older_than: float) -> int:
        return await self._ask(ops.PRUNE, older_than=older_than)

    async def limits(self) -> builtins.list[JsonObject]:
        return await self._ask(ops.LIMITS)

    async def limit(self, name: str, permits: int, per_s: float | None = None) -> JsonObject:
        if per_s is None:  # (as an owner of an older version takes it)
            return await self._ask(ops.LIMIT, name=name, permits=permits)
        return await self._ask(ops.LIMIT, name=name, permits=permits, per_s=per_s)

    async def queues(self) -> builtins.list[JsonObject]:
        return await self._ask(ops.QUEUES)

    async def queue(
        self, name: str, concurrency: int | None = None, per_key: int | None = None
    ) -> JsonObject:
        return await self._ask(ops.QUEUE, name=name, concurrency=concurrency, per_key=per_key)

    def watch(self, id: str, timeout: float | None = None) -> AsyncGenerator[dict[str, Any], None]:
        return self._follow(ops.WATCH, id=id, timeout=timeout)

    def stream(
        self, id: str, name: str, follow: bool = True, run_id: str | None = None
    ) -> AsyncGenerator[Json, None]:
        return self._follow(ops.STREAM, id=id, name=name, follow=follow, **_pinned(run_id))


def _pinned(run_id: str | None, exact: bool = False) -> dict[str, Any]:
    """`run_id` as an argument, sent only when given: an owner of an older version
    takes none (and a handle that is not pinned never sends one); `exact` likewise,
    with a run id only."""
    if not run_id:
        return {}
    return {"run_id": run_id, "exact": True} if exact else {"run_id": run_id}


class ControlClient(Client):
    """The control API of the process that owns a home, over its socket."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home = home
        self._path = home / protocol.SOCKET_NAME
        self._pid = pid
        self.where: str | None = None
        """Where requests go, for messages (None: the home's socket)."""

    @property
    def owner(self) -> int | None:
        """The pid of the process that serves the calls."""
        return self._pid

    @property
    def driver(self) -> str:
        """The process that serves the calls, for people."""
        return f"pid {self._pid}" if self._pid else "another process"

    @classmethod
    async def connect(cls, home: Path) -> ControlClient | None:
        """The owner's control API, or None when no process serves it.

        Raises:
            HomeUnsafe: the home, or its socket, is not this account's alone.
            OwnerUnanswered: something accepts connections on the socket
                but does not answer within `ANSWER_S`.
        """
        check_reachable(home)
        # The pid in the lock file names the owner if it does not answer.
        client = cls(home, HomeLock(home).owner())
        try:
            pong = await client.ping()
        except (OwnerGone, OwnerLost):
            # Lost: it took the connection and closed it unanswered, as an owner that
            # is dying does (its socket accepts until the kernel closes it). A ping
            # does nothing: look again; the lock says whether it is still there.
            return None
        client._pid = pong["pid"]
        return client

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        """Operation `op` over the socket (`control/protocol.py`), with its arguments
        as JSON: its answer as JSON."""
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if not is_event:
                    return value
        raise AssertionError("unreachable: an exchange ends with its value or an error")

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        """As `call`, for an operation that answers with events (`watch`, `stream`)."""
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if is_event:
                    yield value

    async def _exchange(
        self, op: ops.Op, args: ops.Args
    ) -> AsyncGenerator[tuple[bool, Json], None]:
        """Sends one request; yields `(True, event)` for each event, then `(False, value)`.

        Raises:
            FuseeError: the error the owner answered, as its own type where it is known.
            OwnerUnanswered: the owner stayed silent for `ANSWER_S`.
        """
        reader, writer = await self.open_stream()
        lost = OwnerLost(
            f"the owner of {self.home} (pid {self._pid}) closed the connection "
            f"before answering {op.name!r}; it may have stopped"
        )
        try:
            try:
                writer.write(
                    orjson.dumps({"op": op.name, "args": args}, option=orjson.OPT_APPEND_NEWLINE)
                )
                await writer.drain()
            except ConnectionError:  # it went away as it was asked (a follower whose run closed)
                raise lost from None
            while True:
                try:
                    # Not asyncio.wait_for: on 3.11 it swallows a cancel (Ctrl-C)
                    # that lands as a line arrives, and the command follows on.
                    async with asyncio.timeout(protocol.ANSWER_S):
                        line = await reader.readline()
                except ConnectionError:
                    raise lost from None
                except TimeoutError:
                    raise OwnerUnanswered(
                        self.home, self._pid, "stopped answering", self.where
                    ) from None
                except ValueError:  # a line over LINE_BYTES_MAX
                    raise Rejected(
                        f"the answer to {op.name!r} is over {protocol.LINE_BYTES_MAX} bytes; "
                        "run the command when no process owns the home"
                    ) from None
                if not line:
                    raise lost
                doc = orjson.loads(line)
                if "event" in doc:
                    yield True, doc["event"]
                elif "beat" in doc:
                    continue
                elif "error" in doc:
                    err = doc["error"]
                    raise raised(err)
                else:
                    yield False, doc["ok"]
                    return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def open_stream(self) -> tuple[asyncio.StreamReader, Asking]:
        """A connection for one request: its lines are read from the reader and written
        to the writer (`write`, `drain`, `close`, `wait_closed`). The home's socket here;
        the database for a `StoreClient` (`control/remote.py`)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            with protocol.socket_address(self._path) as address:
                async with asyncio.timeout(protocol.ANSWER_S):
                    await asyncio.get_running_loop().sock_connect(sock, address)
            return await asyncio.open_unix_connection(sock=sock, limit=protocol.LINE_BYTES_MAX)
        except TimeoutError:
            sock.close()
            raise OwnerUnanswered(self.home, self._pid, "does not accept connections") from None
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise OwnerGone(
                f"the process that owned {self.home} (pid {self._pid}) stopped serving it; "
                "run the command again"
            ) from None
        except BaseException:
            sock.close()
            raise


ControlApi = Control | Client
"""The control API, whoever answers it: an engine in this process (`Control`), or the
process that drives the journal (a `Client`: over the socket, the database, a router).
They take the same calls (`ops.Operations`), and say who answers them (`owner`, `driver`)."""
