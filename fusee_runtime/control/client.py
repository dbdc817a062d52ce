"""A command's side of the control socket: `ControlClient`.

`ControlClient` offers the operations of `Control` to another process,
over the socket of the process that owns the home (`protocol` says what
goes over the wire); the caller sees the same values and the same
exceptions as in process. When the owner does not answer, the client
says how, so the caller knows whether a retry is safe: `OwnerGone`
(nothing was sent), `OwnerLost` (the request was sent, the owner may have
acted), `OwnerUnanswered` (it is there, but silent for `ANSWER_S`).
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import socket
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, Literal

import orjson

from fusee_runtime import errors, search
from fusee_runtime.control import protocol
from fusee_runtime.control.api import Control, OutcomeUnknown, run_info
from fusee_runtime.engine.home import HomeLock, check_reachable
from fusee_runtime.errors import FuseeError, Rejected
from fusee_runtime.model.run import RunInfo


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
        errors.StoreUnavailable,
        OutcomeUnknown,
    )
}


class ControlClient:
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
            pong = await client.call("ping")
        except OwnerGone:
            return None
        client._pid = pong["pid"]
        return client

    @property
    def pages_by_cursor(self) -> bool:
        """Whether `list` takes `before` (a database of several journals does not)."""
        return True

    def local_control(self, id: str) -> Control | None:
        """The engine of this process that drives the runs of `id`, if one does (a worker
        of a database serving HTTP: `WorkerRouter`); None: they are driven elsewhere."""
        return None

    async def ping(self) -> dict[str, Any]:
        """Who serves the calls: `pid`, `home`, `host`."""
        return await self.call("ping")

    async def start(
        self,
        workflow: str,
        input: Any = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
        traceparent: str | None = None,
    ) -> tuple[RunInfo, bool]:
        args: dict[str, Any] = {"traceparent": traceparent} if traceparent else {}
        info, existed = await self.call(
            "start", workflow=workflow, input=input, id=id, on_conflict=on_conflict, **args
        )
        return run_info(info), existed

    async def describe(self, id: str) -> RunInfo:
        return run_info(await self.call("describe", id=id))

    async def list(
        self,
        status: str | None = None,
        workflow: str | None = None,
        limit: int | None = None,
        parent: str | None = None,
        where: dict[str, Any] | None = None,
        before: str | None = None,
    ) -> builtins.list[RunInfo]:
        args: dict[str, Any] = {"status": status, "workflow": workflow, "limit": limit}
        # Asked only when given: an owner of an older version takes none of these.
        if parent:
            args["parent"] = parent
        if before:
            args["before"] = before
        if where:
            # Checked and normalized here (a datetime becomes its UTC text), as pairs.
            pairs: dict[str, Any] = {}
            for key, op, value in search.conditions(where):
                pairs.setdefault(key, []).append([op, value])
            args["where"] = pairs
        docs = await self.call("list", **args)
        return [run_info(d) for d in docs]

    async def history(self, id: str) -> builtins.list[dict[str, Any]]:
        return await self.call("history", id=id)

    async def log(self, id: str, last: int = 200) -> builtins.list[dict[str, Any]]:
        return await self.call("log", id=id, last=last)

    async def journal(self, id: str, run_id: str | None = None) -> dict[str, Any]:
        return await self.call("journal", id=id, **({"run_id": run_id} if run_id else {}))

    async def run_ids(
        self, workflow: str | None = None, open: bool = False
    ) -> builtins.list[builtins.list[str]]:
        args: dict[str, Any] = {"workflow": workflow} if workflow else {}
        return await self.call("run_ids", **args, **({"open": True} if open else {}))

    async def signal(self, id: str, name: str, value: Any = None) -> RunInfo:
        return await self._acted(id, await self.call("signal", id=id, name=name, value=value))

    async def cancel(self, id: str, reason: str = "cancelled") -> RunInfo:
        return await self._acted(id, await self.call("cancel", id=id, reason=reason))

    async def terminate(self, id: str, reason: str = "terminated") -> RunInfo:
        return await self._acted(id, await self.call("terminate", id=id, reason=reason))

    async def resume(self, id: str) -> RunInfo:
        return await self._acted(id, await self.call("resume", id=id))

    async def _acted(self, id: str, answer: Any) -> RunInfo:
        """The run an act answered with. An owner of an older version answers null: then
        the run as `describe` finds it (its error, if it fails, says nothing of the act,
        which is durable)."""
        return run_info(answer) if answer is not None else await self.describe(id)

    async def reset(self, id: str, to: int | str) -> RunInfo:
        return run_info(await self.call("reset", id=id, to=to))

    async def complete(self, token: str, value: Any = None) -> dict[str, Any]:
        return await self.call("complete", token=token, value=value)

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        return await self.call("fail", token=token, message=message)

    async def query(self, id: str, name: str, arg: Any = None) -> Any:
        return await self.call("query", id=id, name=name, arg=arg)

    async def update(
        self, id: str, name: str, arg: Any = None, update_id: str | None = None
    ) -> Any:
        return await self.call("update", id=id, name=name, arg=arg, update_id=update_id)

    async def schedules(self) -> builtins.list[dict[str, Any]]:
        return await self.call("schedules")

    async def schedule(self, name: str, action: Literal["pause", "unpause", "trigger"]) -> Any:
        value = await self.call("schedule", name=name, action=action)
        return run_info(value) if action == "trigger" else value

    async def prune(self, older_than: float) -> int:
        return await self.call("prune", older_than=older_than)

    async def limits(self) -> builtins.list[dict[str, Any]]:
        return await self.call("limits")

    async def limit(self, name: str, permits: int) -> dict[str, Any]:
        return await self.call("limit", name=name, permits=permits)

    def watch(self, id: str, timeout: float | None = None) -> AsyncGenerator[dict[str, Any], None]:
        return self.events("watch", id=id, timeout=timeout)

    def stream(self, id: str, name: str, follow: bool = True) -> AsyncGenerator[Any, None]:
        return self.events("stream", id=id, name=name, follow=follow)

    async def call(self, op: str, **args: Any) -> Any:
        """Operation `op` of the protocol (`control/protocol.py`), by name, with its
        arguments as JSON: its answer as JSON."""
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if not is_event:
                    return value
        raise AssertionError("unreachable: an exchange ends with its value or an error")

    async def events(self, op: str, **args: Any) -> AsyncGenerator[Any, None]:
        """As `call`, for an operation that answers with events (`watch`, `stream`)."""
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if is_event:
                    yield value

    async def _exchange(
        self, op: str, args: dict[str, Any]
    ) -> AsyncGenerator[tuple[bool, Any], None]:
        """Sends one request; yields `(True, event)` for each event, then `(False, value)`.

        Raises:
            FuseeError: the error the owner answered, as its own type where it is known.
            OwnerUnanswered: the owner stayed silent for `ANSWER_S`.
        """
        reader, writer = await self.open_stream()
        lost = OwnerLost(
            f"the owner of {self.home} (pid {self._pid}) closed the connection "
            f"before answering {op!r}; it may have stopped"
        )
        try:
            try:
                writer.write(
                    orjson.dumps({"op": op, "args": args}, option=orjson.OPT_APPEND_NEWLINE)
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
                        f"the answer to {op!r} is over {protocol.LINE_BYTES_MAX} bytes; "
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
                    raise _RAISED.get(err["type"], FuseeError)(err["message"])
                else:
                    yield False, doc["ok"]
                    return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def open_stream(self) -> tuple[asyncio.StreamReader, Any]:
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


Operations = Control | ControlClient
"""The control API, whoever answers it: an engine in this process (`Control`), or the
process that drives the journal (`ControlClient` and its kinds). They take the same calls."""
