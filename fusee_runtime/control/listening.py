"""Listening sockets that run out of descriptors without flooding the log.

When a process reaches its descriptor limit, `accept` fails with EMFILE
(or ENFILE, ENOBUFS, ENOMEM) and leaves the connection queued, so the
socket stays readable. asyncio's answer is to log the error, stop watching
the socket and look again a second later; but up to Python 3.14 it then
goes on calling `accept` in the same turn of the loop, up to `backlog`
times, logging the error and scheduling a restart each time (CPython
gh-151615). With uvicorn's backlog of 2,048, that was 173,270 log lines in
40 s. `Listener.accept` raises such an error once, then says "nothing to
accept" (`BlockingIOError`, which ends asyncio's turn quietly) until
`ACCEPT_QUIET_S` has passed: the loop logs once and pauses, as it means to.
Both the control socket and the HTTP server listen through one.

uvloop accepts in C, without calling this method; it has its own answer.
"""

from __future__ import annotations

import errno
import socket
import time

ACCEPT_QUIET_S = 1.0
"""After an accept fails for want of a descriptor, how long the next failures go unlogged."""

_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Listener(socket.socket):
    """A listening socket whose `accept` reports running out of descriptors once a second,
    and takes no more than `open_max` connections at a time.

    The bound is counted here, where a descriptor is taken, because the loop
    accepts a whole batch before the server sees the first connection of it,
    and a connection closed to make room gives its descriptor back a few
    turns later: a bound counted only by the server would be passed by a
    batch or two. At `open_max`, `accept` says "nothing to accept" and the
    connections wait in the kernel's queue until one of ours is closed.
    """

    open_max: int | None = None
    """The most accepted connections open at once; None: no bound."""
    open = 0
    """Accepted connections not yet closed."""
    _quiet_until = 0.0

    def accept(self) -> tuple[socket.socket, object]:
        if self.open_max is not None and self.open >= self.open_max:
            raise BlockingIOError(errno.EAGAIN, "accepting paused: connections at their bound")
        try:
            conn, address = super().accept()
        except OSError as e:
            if e.errno not in _OUT_OF_RESOURCES:
                raise
            now = time.monotonic()
            if now < self._quiet_until:
                raise BlockingIOError(errno.EAGAIN, "accepting paused: no descriptor") from None
            self._quiet_until = now + ACCEPT_QUIET_S
            raise
        blocking = conn.getblocking()
        counted = _Counted(self, conn.detach())
        counted.setblocking(blocking)
        self.open += 1
        return counted, address

    @classmethod
    def adopt(cls, sock: socket.socket) -> Listener:
        """`sock` as a `Listener` (the same descriptor; `sock` is detached)."""
        if isinstance(sock, Listener):
            return sock
        return cls(sock.family, sock.type, sock.proto, fileno=sock.detach())


class _Counted(socket.socket):
    """An accepted connection that gives its place back to its `Listener` when closed."""

    def __init__(self, listener: Listener, fileno: int) -> None:
        super().__init__(fileno=fileno)
        self._listener: Listener | None = listener

    def _give_back(self) -> None:
        if self._listener is not None:
            self._listener.open -= 1
            self._listener = None

    def close(self) -> None:
        self._give_back()
        super().close()

    def detach(self) -> int:
        self._give_back()
        return super().detach()
