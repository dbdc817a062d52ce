"""The owner's side of the control socket: `ControlServer`.

While its engine is open, the process that owns a home serves `Control`
on `<home>/control.sock` (mode 0600), so commands from other processes
reach the runs it drives. `protocol` says what goes over the wire. A
request's `op` is looked up among the declared operations (`ops.OPS`) and
called through its descriptor; no other name is served. Every answer is
one line, errors included; a bug in a call costs the client one line and
the owner a log entry, never the connection of another call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson

from fusee_runtime.control import protocol
from fusee_runtime.control.api import Control
from fusee_runtime.control.listening import Listener
from fusee_runtime.control.ops import OPS, Operations, Stream
from fusee_runtime.control.wire import answer_line
from fusee_runtime.errors import FuseeError, Rejected, RunFailed

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine
    from fusee_runtime.store.seam import AnswerWriter, Relay

log = logging.getLogger("fusee")


def _error_line(e: Exception) -> bytes:
    error: dict[str, object] = {"type": type(e).__name__, "message": str(e)}
    if isinstance(e, RunFailed):  # the client raises it again with how the run failed
        error.update(id=e.id, failure=e.failure.to_json())
    return answer_line({"error": error})


async def serve_control(engine: Engine) -> ControlServer | None:
    """Starts serving `engine`'s control API on its home's socket; None if it cannot (the
    runs go on, and commands from other processes will say the owner does not answer)."""
    server = ControlServer(engine)
    try:
        await server.start()
    except OSError as e:
        log.warning("fusee: cannot serve the control API in %s: %s", engine.home, e)
        return None
    return server


class ControlServer:
    """Serves `Control` on the home's socket while the engine is open."""

    def __init__(self, engine: Engine) -> None:
        self._control = Control(engine)
        self._path = engine.home / protocol.SOCKET_NAME
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._journal = engine.journal
        self._relay: Relay | None = None

    async def start(self) -> None:
        """Binds the socket; the caller holds the home's lock, so a socket left there is stale."""
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        sock = Listener(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Created 0600 (the umask is process-wide, but only for this call).
            umask = os.umask(0o177)
            try:
                with protocol.socket_address(self._path) as address:
                    sock.bind(address)
            finally:
                os.umask(umask)
            os.chmod(self._path, 0o600)
            self._server = await asyncio.start_unix_server(
                self._accept, sock=sock, limit=protocol.LINE_BYTES_MAX
            )
        except BaseException:
            sock.close()
            raise
        # Commands on other hosts ask through the store (`control/remote.py`), if they may.
        relay = self._journal.relay(self._accept)
        if relay is not None:
            try:
                await relay.start()
            except Exception as e:
                await relay.close()
                log.warning(
                    "fusee: cannot take control requests from %s: %s", self._journal.name, e
                )
            else:
                self._relay = relay

    def stop_accepting(self) -> None:
        """Refuses new connections; calls in progress go on."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
        if self._relay is not None:
            self._relay.stop_taking()

    async def close(self) -> None:
        """Lets calls in progress write their last line for up to `CLOSE_GRACE_S`, then cuts them.

        The engine calls it once it failed its result waiters, so a watch
        from another process ends with the reason rather than a cut.
        """
        self.stop_accepting()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=protocol.CLOSE_GRACE_S)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._relay is not None:
            await self._relay.close()

    async def idle(self) -> None:
        """Returns once no call is in progress (one that starts meanwhile included)."""
        while self._tasks:
            await asyncio.wait(set(self._tasks))

    async def _accept(self, reader: asyncio.StreamReader, writer: AnswerWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.answer(reader, writer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def answer(self, reader: asyncio.StreamReader, writer: protocol.LineWriter) -> None:
        """Reads one request from `reader` and writes its answer's lines to `writer`
        (`write` and `drain`): a socket's, or a request made in the database
        (`control/remote.py`)."""
        await answer(self._control, reader, writer)


async def answer(
    operations: Operations, reader: asyncio.StreamReader, writer: protocol.LineWriter
) -> None:
    """Reads one request (`protocol`) from `reader`, asks it of `operations`, and writes
    its answer's lines to `writer`: the socket's server, the database's relay, and the
    HTTP API's `/v1/control` all answer so."""
    try:
        async with asyncio.timeout(protocol.ANSWER_S):
            line = await reader.readline()
        request = orjson.loads(line)
        name, args = request["op"], request.get("args") or {}
        op = OPS.get(name)
        if op is None or not isinstance(args, dict):
            raise Rejected(f"the control API has no operation {name!r}")
        if isinstance(op, Stream):
            async with contextlib.aclosing(op.call(operations, args)) as events:
                await _pump(events, writer)
            value = None
        else:
            value = await _beating(asyncio.ensure_future(op.call(operations, args)), writer)
        writer.write(answer_line({"ok": value}))
    except FuseeError as e:
        writer.write(_error_line(e))
    except TimeoutError:
        return  # no whole request in time: drop the connection
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        writer.write(_error_line(Rejected(f"a malformed control request: {e}")))
    except ConnectionError:
        # The reader went away (a follower stopped with Ctrl-C) while a line was
        # on its way: not an error, and nobody is left to answer.
        raise
    except Exception as e:  # a bug: the client gets one line, the owner's log the rest
        log.exception("fusee: control request failed")
        writer.write(_error_line(FuseeError(f"the owner failed to answer: {e!r}")))
    await writer.drain()


async def _beating(call: asyncio.Future[object], writer: protocol.LineWriter) -> object:
    """The call's value; a beat line every `BEAT_S` until it comes.

    A call waits for its records to be durable; on a slow disk that can
    take longer than a client waits for a silent owner, and a client that
    gave up would have the user retry what was already recorded.
    """
    try:
        while True:
            done, _ = await asyncio.wait({call}, timeout=protocol.BEAT_S)
            if done:
                return call.result()
            writer.write(protocol.BEAT_LINE)
            await writer.drain()
    finally:
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)


async def _pump(events: AsyncIterator[object], writer: protocol.LineWriter) -> None:
    """Writes each event as a line, and a beat line after `BEAT_S` without one."""
    while True:
        try:
            event = await _beating(asyncio.ensure_future(anext(events)), writer)
        except StopAsyncIteration:
            return
        writer.write(answer_line({"event": event}))
        await writer.drain()
