"""The control API through the store: `StoreClient` asks, the driver's relay answers.

With a PostgreSQL store the process driving the journal may be on another
host, and a home's control socket is local. So a command given `--store`
makes its request in the store (`SharedStore.ask`: in the database, where
the driver's relay, `JournalStore.relay`, started with its control server,
takes it), and the driver answers it as if it came from its socket
(`ControlServer.answer`: the same operations, errors, events and beats).
How the lines travel is the store's (`store/pg_requests.py`); what they
mean is the control protocol's, as on a socket.

A request that no process takes within the store's wait is withdrawn: the
journal is held by a process that does not serve it (a command reading it,
an engine opened passively), and the asker sees `OwnerGone`, nothing done,
and tries again, as it does when a home's socket has no server. A request
that was taken behaves as one sent on a socket: the asker waits for its
answer, and a driver silent for `ANSWER_S` is `OwnerUnanswered`; an asker
waiting on a driver whose session is gone (killed: its sessions end with
it) stops at once, as on a socket that a killed owner closed (`OwnerLost`:
a follower follows on).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from fusee_runtime.control import protocol
from fusee_runtime.control.client import ControlClient, OwnerGone

if TYPE_CHECKING:
    from fusee_runtime.store.shared import Asking, SharedStore


def _is_final(line: bytes) -> bool:
    doc = orjson.loads(line)
    return "ok" in doc or "error" in doc


class StoreClient(ControlClient):
    """The control API of the process that drives a journal in a shared store, through
    the store (see the module)."""

    def __init__(self, store: SharedStore, pid: int | None = None) -> None:
        super().__init__(Path(store.name), pid)
        self.store = store
        self.host: str | None = None
        self.where = f"{store.name} (its control requests)"

    @property
    def driver(self) -> str:
        who = f"fusee pid {self.owner}" if self.owner else "a fusee process"
        return f"{who} on {self.host}" if self.host else who

    @classmethod
    async def reach(cls, store: SharedStore) -> StoreClient | None:
        """The driver's control API, or None when no process serving it holds the
        journal (none holds it, or one that does not serve it: a command).

        Raises:
            StoreUnavailable: the store cannot be reached.
        """
        if not await store.driven():
            return None
        try:
            pong = await cls(store).ping()
        except OwnerGone:
            return None
        client = cls(store, pong["pid"])
        client.host = pong.get("host")
        return client

    async def open_stream(self) -> tuple[asyncio.StreamReader, Asking]:
        return await self.store.ask(protocol.LINE_BYTES_MAX, _is_final, OwnerGone)
