"""The control socket's wire protocol, shared by its server and its client.

One process owns a home at a time (`<home>/LOCK`). While its engine drives
runs it serves the control API on the Unix socket `<home>/control.sock`
(mode 0600), so `fusee signal` in a second terminal reaches the run that
`fusee start` is driving in the first.

The protocol is one request a connection, in JSON lines. The client sends
`{"op": NAME, "args": {...}}`; the owner answers with any number of
`{"event": ...}` lines (for `watch` and `stream`) and then one final line,
`{"ok": VALUE}` or `{"error": {"type": NAME, "message": TEXT}}`. Between
events the owner sends `{"beat": true}` every `BEAT_S`, so a client can
tell an owner that stopped answering from a run that is merely slow.

The server, the client and `connect` read these limits from this module
when they use them (`protocol.ANSWER_S`), so a test can shorten them here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

SOCKET_NAME = "control.sock"
ANSWER_S = 5.0
"""How long a client waits for the owner's next line before it gives up on it."""
BEAT_S = 1.0
"""Longest silence of the owner during a watch or a stream."""
CLOSE_GRACE_S = 1.0
"""How long a closing owner lets calls in progress finish their answer."""
LINE_BYTES_MAX = 64 << 20
"""Longest request or answer line: payloads are at most a few MiB."""

BEAT_LINE = b'{"beat":true}\n'
"""What the owner sends while a call or a watch has nothing to say yet."""


class LineWriter(Protocol):
    """Where the owner writes an answer's lines: the socket's writer, or an answer
    that goes through the database (`store/pg_requests.py`); `drain` sends them."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...


@contextlib.contextmanager
def socket_address(path: Path) -> Iterator[str]:
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
