"""HTTP connections: how many may be open, and how long each may take to send its request.

uvicorn keeps a connection until its client closes it. One that never
finishes its request holds a descriptor for ever, and enough of them take
the process's last one: then neither the HTTP API nor the control socket
can accept anyone (1,100 such connections did it at a limit of 1,024).
`Connections` bounds their number and their time:

- At most `connections_max` are open at once: `limits.CONNECTIONS_MAX`, or
  a quarter of the process's descriptor limit if that is less, so that the
  rest stays for the control socket, the journal, the history store and
  the steps' own files. A connection past the bound takes the place of the
  one that has been waiting longest for its client (idle, still sending a
  request or its body, or not reading its answer); when every connection
  is serving a request, the new one is answered 503 and closed. Those on
  their way in or out count too: the listening socket takes no more than
  `limits.CONNECTIONS_TURNOVER_MAX` past the bound (`listening.Listener`),
  the rest wait in the kernel's queue.
- A request's headers must arrive within `limits.REQUEST_HEAD_S` of the
  connection opening, or of the previous answer on a kept-alive
  connection (an idle one is closed sooner, after uvicorn's
  `limits.KEEP_ALIVE_S`); its body within `limits.REQUEST_BODY_S` of the
  headers, plus a second for every `limits.BODY_BYTES_PER_S_MIN` bytes that
  arrive. A client that is late gets 408 (if it sent anything) and the
  connection is closed.
- A request that has arrived whole is never cut by these bounds: a long
  poll waits its `wait` out.

Two halves meet per connection. `_Guard` wraps uvicorn's own protocol: it
sees the connection open and close, bytes arrive and writes stall, and
keeps the deadline. `_Deadlines`, the outermost ASGI app, tells it when a
request reaches the app and when the app is done with it, and bounds the
wait for the body. They find each other by the client's address, which is
unique among the open connections (uvicorn's proxy headers are off, so the
address is the socket's peer).
"""

from __future__ import annotations

import asyncio
import itertools
import resource
from http import HTTPStatus
from typing import Any, ClassVar, cast

import orjson
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from fusee_runtime.control import limits

Peer = tuple[str, int]

_numbers = itertools.count()
"""Connections in the order they opened: the older of two that began waiting at once goes first."""


def connections_max() -> int:
    """`limits.CONNECTIONS_MAX`, or a quarter of this process's descriptor limit if less."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return limits.CONNECTIONS_MAX
    return max(1, min(limits.CONNECTIONS_MAX, soft // 4))


class Connections:
    """The open connections of one HTTP server, and their bounds.

    Args:
        connections_max: the most open at once.
    """

    def __init__(self, connections_max: int) -> None:
        self.connections_max = connections_max
        self._open: set[_Guard] = set()
        self._by_peer: dict[Peer, _Guard] = {}

    def protocol(self) -> type[asyncio.Protocol]:
        """What uvicorn makes each connection's protocol with (`uvicorn.Config(http=...)`)."""

        class Guard(_Guard):
            connections = self

        return Guard

    def app(self, app: ASGIApp) -> ASGIApp:
        """`app` behind the request deadlines: the app uvicorn serves."""
        return _Deadlines(app, self)

    def _admit(self, guard: _Guard) -> bool:
        if len(self._open) >= self.connections_max:
            waiting = [g for g in self._open if g.evictable]
            if not waiting:
                return False
            min(waiting, key=lambda g: (g.since, g.number)).evict(self.connections_max)
        self._open.add(guard)
        if guard.peer is not None:
            self._by_peer[guard.peer] = guard
        return True

    def _forget(self, guard: _Guard) -> None:
        self._open.discard(guard)
        if guard.peer is not None and self._by_peer.get(guard.peer) is guard:
            del self._by_peer[guard.peer]

    def _find(self, client: object) -> _Guard | None:
        if not isinstance(client, tuple | list) or len(client) < 2:
            return None
        return self._by_peer.get((str(client[0]), int(client[1])))


def _answer(status: int, type: str, message: str) -> bytes:
    """A whole HTTP answer that closes the connection, with the API's JSON error body."""
    body = orjson.dumps({"error": {"type": type, "message": message}})
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


class _Guard(asyncio.Protocol):
    """One connection: uvicorn's h11 protocol inside, its deadline and its state outside."""

    connections: ClassVar[Connections]

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._inner = H11Protocol(config, server_state, app_state, _loop)
        self._loop = _loop or asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._requests = 0
        self.peer: Peer | None = None
        self.number = next(_numbers)
        self.since = self._loop.time()
        """When it began to wait for its client (or the request began, or writes stalled)."""
        self.waiting = True
        """No request is in the app: the client owes the next one."""
        self.heard = False
        """Bytes arrived since it began to wait."""
        self.reading_body = False
        self.writes_paused = False

    @property
    def evictable(self) -> bool:
        """Waiting for its client, to send or to read; not serving a request that arrived."""
        return self.waiting or self.reading_body or self.writes_paused

    # -- asyncio.Protocol, passed on to uvicorn's --------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        self._inner.connection_made(self._transport)
        if not self.connections._admit(self):
            self._close(
                _answer(
                    503,
                    "ServiceUnavailable",
                    f"the server is serving {self.connections.connections_max} connections, "
                    "its most; try again",
                )
            )
            return
        self._wait()

    def data_received(self, data: bytes) -> None:
        self.heard = True
        self._inner.data_received(data)

    def eof_received(self) -> None:
        self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.connections._forget(self)
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.writes_paused, self.since = True, self._loop.time()
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self.writes_paused = False
        self._inner.resume_writing()

    # -- what `_Deadlines` tells it ----------------------------------------------------

    def began(self) -> int:
        """A request reached the app; returns its number on this connection."""
        self._cancel_timer()
        self._requests += 1
        self.waiting, self.since = False, self._loop.time()
        return self._requests

    def ended(self, request: int) -> None:
        """The app is done with request number `request`: the client owes the next."""
        if request == self._requests:  # not when a pipelined request began meanwhile
            self._wait()

    # -- deadline and closing ----------------------------------------------------------

    def evict(self, connections_max: int) -> None:
        """Closes it to make room for a new connection."""
        self.connections._forget(self)
        if self.waiting and self.heard:
            message = (
                f"the server is at its bound of {connections_max} connections, and this one "
                "waited longest for its request"
            )
            self._close(_answer(503, "ServiceUnavailable", message))
        elif self.waiting:
            self._close(b"")
        elif self._transport is not None:
            self._transport.abort()  # it owes a body or does not read: nothing to say

    def _wait(self) -> None:
        self._cancel_timer()
        self.waiting, self.heard, self.since = True, False, self._loop.time()
        self._timer = self._loop.call_at(self.since + limits.REQUEST_HEAD_S, self._expired)

    def _expired(self) -> None:
        self._timer = None
        if not self.waiting:
            return
        if not self.heard:
            self._close(b"")
            return
        message = f"the request did not arrive whole within {limits.REQUEST_HEAD_S:g} s"
        self._close(_answer(408, "RequestTimeout", message))

    def _close(self, last: bytes) -> None:
        """Writes `last` and closes; a peer that does not read loses it (no descriptor
        waits on a client)."""
        transport = self._transport
        if transport is None:
            return
        if transport.is_closing():  # closed, or closing on an answer its peer does not read
            transport.abort()
            return
        if last:
            transport.write(last)
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Deadlines:
    """The ASGI side: marks where each request is, and bounds the wait for its body."""

    def __init__(self, app: ASGIApp, connections: Connections) -> None:
        self.app = app
        self.connections = connections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        guard = self.connections._find(scope.get("client")) if scope["type"] == "http" else None
        if guard is None:
            await self.app(scope, receive, send)
            return
        request = guard.began()
        try:
            body = _Body(guard, receive, send)
            await self.app(scope, body.receive, body.send)
        finally:
            guard.ended(request)


class _Body:
    """One request's body, awaited until a deadline; past it the answer is 408."""

    def __init__(self, guard: _Guard, receive: Receive, send: Send) -> None:
        self._guard = guard
        self._receive = receive
        self._send = send
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + limits.REQUEST_BODY_S
        self._size = 0
        self._whole = False
        self._late = False

    async def receive(self) -> Message:
        if self._late:
            return {"type": "http.disconnect"}
        if self._whole:  # the app waits for a disconnect: no deadline on that
            return await self._receive()
        self._guard.reading_body = True
        try:
            async with asyncio.timeout_at(self._deadline):
                message = await self._receive()
        except TimeoutError:
            self._late = True
            return {"type": "http.disconnect"}
        finally:
            self._guard.reading_body = False
        if message["type"] == "http.request":
            size = len(message.get("body", b""))
            self._size += size
            self._deadline += size / limits.BODY_BYTES_PER_S_MIN
            self._whole = not message.get("more_body", False)
        return message

    async def send(self, message: Message) -> None:
        if not self._late:
            await self._send(message)
            return
        if message["type"] != "http.response.start":
            return  # the app's answer to a body it never got whole: dropped
        took = self._loop.time() - self._guard.since
        said = f"the request's body did not arrive in time: {self._size} bytes in {took:.1f} s"
        body = orjson.dumps({"error": {"type": "RequestTimeout", "message": said}})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await self._send({"type": "http.response.start", "status": 408, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})
