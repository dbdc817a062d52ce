"""The control API: what a command asks of the process that owns a home.

One process owns a home at a time (`<home>/LOCK`). While its engine drives
runs it serves this API on the Unix socket `<home>/control.sock` (mode
0600), so `fusee signal` in a second terminal reaches the run that `fusee
start` is driving in the first. `Control` holds the operations; the owner
calls them for the requests it serves, and a command that finds no owner
calls them on an engine of its own. `ControlClient` offers the same
operations over the socket. Either way the caller sees the same values and
the same exceptions.

The protocol is one request a connection, in JSON lines. The client sends
`{"op": NAME, "args": {...}}`; the owner answers with any number of
`{"event": ...}` lines (for `watch` and `stream`) and then one final line,
`{"ok": VALUE}` or `{"error": {"type": NAME, "message": TEXT}}`. Between
events the owner sends `{"beat": true}` every `BEAT_S`, so a client can
tell an owner that stopped answering from a run that is merely slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from fusee_runtime import errors
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.engine.state import RunInfo, Status
from fusee_runtime.errors import FuseeError, Rejected

log = logging.getLogger("fusee")

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine

SOCKET_NAME = "control.sock"
ANSWER_S = 5.0
"""How long a client waits for the owner's next line before it gives up on it."""
BEAT_S = 1.0
"""Longest silence of the owner during a watch or a stream."""
POLL_S = 0.1
"""How often a watch looks at the run's status and progress."""
CLOSE_GRACE_S = 1.0
"""How long a closing owner lets calls in progress finish their answer."""
LINE_BYTES_MAX = 64 << 20
"""Longest request or answer line: payloads are at most a few MiB."""


class OwnerUnanswered(Rejected):
    """The process that owns the home does not answer on its control socket."""

    def __init__(self, home: Path, pid: int | None, why: str) -> None:
        who = f"pid {pid}" if pid else "another process"
        super().__init__(
            f"the home {home} is owned by {who}, which {why} on {home / SOCKET_NAME}; "
            "wait for it, or stop it"
        )
        self.pid = pid


class OwnerGone(Rejected):
    """Nobody serves the home's socket (any more): nothing was sent, so a retry is safe."""


class OwnerLost(Rejected):
    """The owner closed the connection after the request was sent: it may have acted."""


def run_json(info: RunInfo) -> dict[str, Any]:
    """A `RunInfo` as a JSON object."""
    return {
        "id": info.id,
        "run_id": info.run_id,
        "workflow": info.workflow,
        "status": str(info.status),
        "started_at": info.started_at.isoformat(),
        "closed_at": info.closed_at.isoformat() if info.closed_at else None,
        "error": info.error,
        "attributes": info.attributes,
    }


def run_info(doc: dict[str, Any]) -> RunInfo:
    """The `RunInfo` that `run_json` wrote."""
    closed = doc["closed_at"]
    return RunInfo(
        id=doc["id"],
        run_id=doc["run_id"],
        workflow=doc["workflow"],
        status=Status(doc["status"]),
        started_at=datetime.fromisoformat(doc["started_at"]),
        closed_at=datetime.fromisoformat(closed) if closed else None,
        error=doc["error"],
        attributes=doc["attributes"],
    )


class Control:
    """The operations of the control API, on an open engine.

    `watch` and `stream` are async iterators of JSON values; the other
    operations are coroutines.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def owner(self) -> int | None:
        """The pid of the owner serving the calls, or None when they run in this process."""
        return None

    async def ping(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "home": str(self.engine.home)}

    async def start(
        self,
        workflow: str,
        input: Any = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
    ) -> tuple[RunInfo, bool]:
        """Starts a run (once durable); returns it and whether the id already had a run."""
        existed = id is not None and self.engine._find_latest(id) is not None
        handle = await self.engine.start(workflow, input, id=id, on_conflict=on_conflict)
        return await handle.describe(), existed

    async def describe(self, id: str) -> RunInfo:
        return await self.engine.handle(id).describe()

    async def list(
        self, status: str | None = None, workflow: str | None = None, limit: int | None = None
    ) -> list[RunInfo]:
        return await self.engine.list(status=status, workflow=workflow, limit=limit)

    async def history(self, id: str) -> list[dict[str, Any]]:
        return await self.engine.history(id)

    async def signal(self, id: str, name: str, value: Any = None) -> None:
        await self.engine.signal(id, name, value)

    async def cancel(self, id: str, reason: str = "cancelled") -> None:
        await self.engine.cancel(id, reason)

    async def terminate(self, id: str, reason: str = "terminated") -> None:
        await self.engine.terminate(id, reason)

    async def resume(self, id: str) -> None:
        await self.engine.resume(id)

    async def reset(self, id: str, to: int | str) -> RunInfo:
        return await (await self.engine.reset(id, to)).describe()

    async def complete(self, token: str, value: Any = None) -> dict[str, Any]:
        """Finishes the `await_completion` step that issued `token` with `value`;
        returns the run's id and the step's name."""
        return self._finished(*await self.engine._finish(token, value, None))

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        """Fails the `await_completion` step that issued `token`; returns as `complete`."""
        return self._finished(*await self.engine._finish(token, None, message))

    @staticmethod
    def _finished(run: Any, seq: str) -> dict[str, Any]:
        return {"id": run.workflow_id, "completion": run.ops[seq].name}

    async def query(self, id: str, name: str, arg: Any = None) -> Any:
        return await self.engine.handle(id).query(name, arg)

    async def update(
        self, id: str, name: str, arg: Any = None, update_id: str | None = None
    ) -> Any:
        return await self.engine.handle(id).update(name, arg, update_id=update_id)

    async def schedules(self) -> list[dict[str, Any]]:
        """Every cron schedule: workflow, cron, timezone, overlap, catchup, paused,
        last (the last instant fired or skipped) and next (the next instant due)."""
        return self.engine.schedules.list()

    async def schedule(self, name: str, action: Literal["pause", "unpause", "trigger"]) -> Any:
        """Pauses or unpauses the schedule of workflow `name` (returns the schedule), or
        triggers a run of it now (returns the run)."""
        return await self.engine.schedules.act(name, action)

    async def prune(self, older_than: float) -> int:
        """Deletes the runs that closed more than `older_than` seconds ago from the history
        store; returns how many. Open runs are never pruned."""
        return await self.engine.prune(older_than)

    async def watch(self, id: str, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
        """Follows the newest run of `id` until it closes, stops, or `timeout` seconds pass.

        Yields `{"progress": {"status", "current"}}` when either changes,
        then one `{"outcome": ...}`: `code` is "ok" with the durable
        `result`, or "failed" (the run failed, was cancelled or terminated,
        timed out, or is stuck or paused) or "timed_out" (the wait ran out)
        with a `message`; `run` is the run as `describe` shows it then.

        Raises:
            NotFound: no run of that id.
        """
        from fusee_runtime.errors import Cancelled, RunFailed, Terminated, TimedOut

        engine = self.engine
        engine._latest_run(id)
        waiter = asyncio.ensure_future(engine.handle(id).result(timeout=timeout))
        shown: tuple[str, str | None] | None = None
        outcome: dict[str, Any]
        try:
            while not waiter.done():
                run = engine._latest_run(id)
                if run.status in (Status.STUCK, Status.PAUSED):
                    why = run.error or "no reason recorded"
                    outcome = {"code": "failed", "message": f"run {id} is {run.status}: {why}"}
                    break
                now = (str(run.status), run.current)
                if now != shown:
                    shown = now
                    yield {"progress": {"status": now[0], "current": now[1]}}
                await asyncio.wait({waiter}, timeout=POLL_S)
            else:
                try:
                    outcome = {"code": "ok", "result": waiter.result()}
                except RunFailed as e:
                    outcome = {
                        "code": "failed",
                        "message": f"run {id} failed: {e.failure}",
                        "failure": e.failure.to_json(),
                    }
                except (Cancelled, Terminated) as e:
                    outcome = {"code": "failed", "message": str(e)}
                except TimedOut as e:
                    status = engine._latest_run(id).status
                    if status == Status.TIMED_OUT:
                        outcome = {"code": "failed", "message": str(e)}
                    else:
                        outcome = {
                            "code": "timed_out",
                            "message": f"run {id} has not finished (status {status}); "
                            f"keep waiting with `fusee result {id} --wait`",
                        }
        finally:
            if not waiter.done():
                waiter.cancel()
                await asyncio.gather(waiter, return_exceptions=True)
            # The engine fails a run's `closed` future when it closes before
            # the run does; with this waiter gone nobody would retrieve that,
            # and asyncio would log "Future exception was never retrieved".
            closed = engine._latest_run(id).closed
            if closed is not None:
                closed.add_done_callback(_retrieve)
        outcome["run"] = run_json(engine._latest_run(id).info())
        yield {"outcome": outcome}

    async def stream(self, id: str, name: str, follow: bool = True) -> AsyncIterator[Any]:
        """The durable items of stream `name` of the newest run of `id`, until it closes.

        Without `follow`, only the items durable now.
        """
        async with contextlib.aclosing(self.engine.handle(id).stream(name, follow)) as items:
            async for item in items:
                yield item


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


# -- the owner's side ---------------------------------------------------------------

_CALLS = frozenset(
    {"ping", "start", "describe", "list", "history", "signal"}
    | {"cancel", "terminate", "resume", "reset", "complete", "fail", "query", "update"}
    | {"schedules", "schedule", "prune"}
)
_ITERATORS = frozenset({"watch", "stream"})


def _to_json(value: Any) -> Any:
    if isinstance(value, RunInfo):
        return run_json(value)
    raise TypeError(f"cannot send a {type(value).__name__}")


def _line(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, default=_to_json, option=orjson.OPT_APPEND_NEWLINE)


def _error_line(e: Exception) -> bytes:
    return _line({"error": {"type": type(e).__name__, "message": str(e)}})


class ControlServer:
    """Serves `Control` on the home's socket while the engine is open."""

    def __init__(self, engine: Engine) -> None:
        self._control = Control(engine)
        self._path = engine.home / SOCKET_NAME
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Binds the socket; the caller holds the home's lock, so a socket left there is stale."""
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Created 0600 (the umask is process-wide, but only for this call).
            umask = os.umask(0o177)
            try:
                with _address(self._path) as address:
                    sock.bind(address)
            finally:
                os.umask(umask)
            os.chmod(self._path, 0o600)
            self._server = await asyncio.start_unix_server(
                self._accept, sock=sock, limit=LINE_BYTES_MAX
            )
        except BaseException:
            sock.close()
            raise

    def stop_accepting(self) -> None:
        """Refuses new connections; calls in progress go on."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()

    async def close(self) -> None:
        """Lets calls in progress write their last line for up to `CLOSE_GRACE_S`, then cuts them.

        The engine calls it once it failed its result waiters, so a watch
        from another process ends with the reason rather than a cut.
        """
        self.stop_accepting()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=CLOSE_GRACE_S)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(ANSWER_S):
                line = await reader.readline()
            request = orjson.loads(line)
            op, args = request["op"], request.get("args") or {}
            if op not in _CALLS | _ITERATORS or not isinstance(args, dict):
                raise Rejected(f"the control API has no operation {op!r}")
            method: Callable[..., Any] = getattr(self._control, op)
            if op in _ITERATORS:
                async with contextlib.aclosing(method(**args)) as events:
                    await _pump(events, writer)
                value = None
            else:
                value = await _beating(asyncio.ensure_future(method(**args)), writer)
            writer.write(_line({"ok": value}))
        except FuseeError as e:
            writer.write(_error_line(e))
        except TimeoutError:
            return  # no whole request in time: drop the connection
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            writer.write(_error_line(Rejected(f"a malformed control request: {e}")))
        except Exception as e:  # a bug: the client gets one line, the owner's log the rest
            log.exception("fusee: control request failed")
            writer.write(_error_line(FuseeError(f"the owner failed to answer: {e!r}")))
        await writer.drain()


async def _beating(call: asyncio.Future[Any], writer: asyncio.StreamWriter) -> Any:
    """The call's value; a beat line every `BEAT_S` until it comes.

    A call waits for its records to be durable; on a slow disk that can
    take longer than a client waits for a silent owner, and a client that
    gave up would have the user retry what was already recorded.
    """
    try:
        while True:
            done, _ = await asyncio.wait({call}, timeout=BEAT_S)
            if done:
                return call.result()
            writer.write(_BEAT)
            await writer.drain()
    finally:
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)


async def _pump(events: AsyncIterator[Any], writer: asyncio.StreamWriter) -> None:
    """Writes each event as a line, and a beat line after `BEAT_S` without one."""
    while True:
        try:
            event = await _beating(asyncio.ensure_future(anext(events)), writer)
        except StopAsyncIteration:
            return
        writer.write(_line({"event": event}))
        await writer.drain()


_BEAT = b'{"beat":true}\n'


@contextlib.contextmanager
def _address(path: Path) -> Any:
    """An address for `path` that fits a socket address (108 bytes on Linux).

    A long path is reached through a descriptor of its directory.
    """
    if len(os.fsencode(path)) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


# -- the command's side -------------------------------------------------------------

_RAISED: dict[str, type[FuseeError]] = {
    cls.__name__: cls
    for cls in (
        errors.NotFound,
        errors.Rejected,
        errors.CodecError,
        errors.TimedOut,
        errors.Cancelled,
        errors.Terminated,
        errors.NonDeterminism,
        errors.JournalFailed,
        errors.EngineClosed,
    )
}


class ControlClient:
    """The control API of the process that owns a home, over its socket."""

    def __init__(self, home: Path, pid: int | None) -> None:
        self.home = home
        self._path = home / SOCKET_NAME
        self._pid = pid

    @property
    def owner(self) -> int | None:
        """The pid of the process that serves the calls."""
        return self._pid

    @classmethod
    async def connect(cls, home: Path) -> ControlClient | None:
        """The owner's control API, or None when no process serves it.

        Raises:
            OwnerUnanswered: something accepts connections on the socket
                but does not answer within `ANSWER_S`.
        """
        # The pid in the lock file names the owner if it does not answer.
        client = cls(home, HomeLock(home).owner())
        try:
            pong = await client._call("ping")
        except OwnerGone:
            return None
        client._pid = pong["pid"]
        return client

    async def start(
        self,
        workflow: str,
        input: Any = None,
        id: str | None = None,
        on_conflict: Literal["return", "fail", "new_run"] = "return",
    ) -> tuple[RunInfo, bool]:
        info, existed = await self._call(
            "start", workflow=workflow, input=input, id=id, on_conflict=on_conflict
        )
        return run_info(info), existed

    async def describe(self, id: str) -> RunInfo:
        return run_info(await self._call("describe", id=id))

    async def list(
        self, status: str | None = None, workflow: str | None = None, limit: int | None = None
    ) -> list[RunInfo]:
        docs = await self._call("list", status=status, workflow=workflow, limit=limit)
        return [run_info(d) for d in docs]

    async def history(self, id: str) -> list[dict[str, Any]]:
        return await self._call("history", id=id)

    async def signal(self, id: str, name: str, value: Any = None) -> None:
        await self._call("signal", id=id, name=name, value=value)

    async def cancel(self, id: str, reason: str = "cancelled") -> None:
        await self._call("cancel", id=id, reason=reason)

    async def terminate(self, id: str, reason: str = "terminated") -> None:
        await self._call("terminate", id=id, reason=reason)

    async def resume(self, id: str) -> None:
        await self._call("resume", id=id)

    async def reset(self, id: str, to: int | str) -> RunInfo:
        return run_info(await self._call("reset", id=id, to=to))

    async def complete(self, token: str, value: Any = None) -> dict[str, Any]:
        return await self._call("complete", token=token, value=value)

    async def fail(self, token: str, message: str) -> dict[str, Any]:
        return await self._call("fail", token=token, message=message)

    async def query(self, id: str, name: str, arg: Any = None) -> Any:
        return await self._call("query", id=id, name=name, arg=arg)

    async def update(
        self, id: str, name: str, arg: Any = None, update_id: str | None = None
    ) -> Any:
        return await self._call("update", id=id, name=name, arg=arg, update_id=update_id)

    async def schedules(self) -> list[dict[str, Any]]:
        return await self._call("schedules")

    async def schedule(self, name: str, action: Literal["pause", "unpause", "trigger"]) -> Any:
        value = await self._call("schedule", name=name, action=action)
        return run_info(value) if action == "trigger" else value

    async def prune(self, older_than: float) -> int:
        return await self._call("prune", older_than=older_than)

    def watch(self, id: str, timeout: float | None = None) -> AsyncIterator[dict[str, Any]]:
        return self._events("watch", id=id, timeout=timeout)

    def stream(self, id: str, name: str, follow: bool = True) -> AsyncIterator[Any]:
        return self._events("stream", id=id, name=name, follow=follow)

    async def _call(self, op: str, **args: Any) -> Any:
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if not is_event:
                    return value
        raise AssertionError("unreachable: an exchange ends with its value or an error")

    async def _events(self, op: str, **args: Any) -> AsyncIterator[Any]:
        async with contextlib.aclosing(self._exchange(op, args)) as lines:
            async for is_event, value in lines:
                if is_event:
                    yield value

    async def _exchange(self, op: str, args: dict[str, Any]) -> AsyncIterator[tuple[bool, Any]]:
        """Sends one request; yields `(True, event)` for each event, then `(False, value)`.

        Raises:
            FuseeError: the error the owner answered, as its own type where it is known.
            OwnerUnanswered: the owner stayed silent for `ANSWER_S`.
        """
        reader, writer = await self._open()
        try:
            writer.write(orjson.dumps({"op": op, "args": args}, option=orjson.OPT_APPEND_NEWLINE))
            await writer.drain()
            while True:
                try:
                    # Not asyncio.wait_for: on 3.11 it swallows a cancel (Ctrl-C)
                    # that lands as a line arrives, and the command follows on.
                    async with asyncio.timeout(ANSWER_S):
                        line = await reader.readline()
                except TimeoutError:
                    raise OwnerUnanswered(self.home, self._pid, "stopped answering") from None
                except ValueError:  # a line over LINE_BYTES_MAX
                    raise Rejected(
                        f"the answer to {op!r} is over {LINE_BYTES_MAX} bytes; "
                        "run the command when no process owns the home"
                    ) from None
                if not line:
                    raise OwnerLost(
                        f"the owner of {self.home} (pid {self._pid}) closed the connection "
                        f"before answering {op!r}; it may have stopped"
                    )
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

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            with _address(self._path) as address:
                async with asyncio.timeout(ANSWER_S):
                    await asyncio.get_running_loop().sock_connect(sock, address)
            return await asyncio.open_unix_connection(sock=sock, limit=LINE_BYTES_MAX)
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
