"""A journal that processes on several hosts share, as they reach it without taking it.

A home's journal is taken by one process (`JournalStore.open`, `store/seam.py`).
A journal in a database (`Config.store = "postgresql://..."`) is also reached
by the processes that do not drive it: a command asking its driver, a
standby waiting for it, the workers of a database laid out as several
journals (`store/shards.py`), a follower of its run log. They reach it
through a `SharedStore`, which `open_shared(url)` makes without connecting;
each call connects as it needs (and says a server it cannot reach as
`StoreUnavailable`). The control surface and the commands use these, never
a store kind: `control/remote.py` (`driven`, `ask`), `control/router.py` and
`control/connect.py` (`layout`, `prepare`), `control/worker.py` (`seat`),
`fusee serve` (`layout`, `wait_for_journal`), `fusee logs` (`log_lines`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from fusee_runtime.store.seam import Tasks
from fusee_runtime.store.shards import Layout


class Probe(Protocol):
    """The server's commit latency (`store/pg_scratch.py`'s `CommitProbe`): `sample`
    times as many commits again, `close` gives their median and 99th percentile (µs)."""

    def sample(self) -> None: ...
    def close(self) -> dict[str, float]: ...


class Asking(Protocol):
    """The asker's side of one request to a journal's driver, as a socket's writer:
    `write` the request's line, then `drain` sends it."""

    def write(self, data: bytes) -> None: ...
    async def drain(self) -> None: ...
    def close(self) -> None: ...
    async def wait_closed(self) -> None: ...


class Seat(Protocol):
    """A worker's place among the workers of a database of several journals, on a
    session of its own. A call the server fails raises `SharedStore.error`:
    the session is lost, and the worker takes a new seat."""

    def register(self) -> None:
        """Counts this worker in (for as long as its session lives)."""
        ...

    def look(self) -> tuple[int, set[int]]:
        """How many workers there are (this one too), and the journals no process holds."""
        ...

    def prepare(self, shard: int) -> None:
        """Makes journal `shard`'s place if it is not there, before it first opens."""
        ...

    def close(self) -> None: ...


class LogLines(Protocol):
    """The run log's lines of one workflow id in the store, read on one session held
    from the first read to `close`."""

    def read(self, after: int = 0, last: int | None = None) -> list[tuple[int, bytes]]:
        """The lines after position `after` (0: all), oldest first, with their
        positions: the last `last` of them only, when given.

        Raises:
            StoreUnavailable: the server cannot be reached.
        """
        ...

    def close(self) -> None: ...


class SharedStore(Protocol):
    """One journal in a database, as the processes that share it reach it (see the
    module)."""

    url: str
    name: str
    """Where it is, for messages (never a password)."""

    @property
    def error(self) -> type[Exception]:
        """The class of what its driver raises for a call the server failed (a lost
        session, a refusal), besides `StoreUnavailable`."""
        ...

    def said(self, e: BaseException) -> str:
        """What the server or its driver said, on one line, without the URL."""
        ...

    def layout(self, wanted: int | None = None) -> Layout:
        """How many journals the database holds (laid out as `wanted` if nothing is yet;
        one where nothing is and `wanted` is None). Blocks: call it off the loop.

        Raises:
            StoreUnavailable: the server cannot be reached, or the database is laid out
                otherwise than `wanted`.
        """
        ...

    def prepare(self, layout: Layout, shard: int) -> None:
        """Makes journal `shard`'s place, if it is not there, before it first opens
        (as a worker does). Blocks."""
        ...

    async def driven(self) -> bool:
        """Whether a process holds the journal (one that serves it, or a command)."""
        ...

    async def ask(
        self, limit: int, final: Callable[[bytes], bool], untaken: Callable[[str], Exception]
    ) -> tuple[asyncio.StreamReader, Asking]:
        """A request to the journal's driver: its answer's lines come to the reader
        (each up to `limit` bytes) until one that `final` says ends it; a request no
        process takes is withdrawn, and the reader raises `untaken(message)`."""
        ...

    def seat(self, layout: Layout) -> Seat:
        """A worker's seat among the workers of the database laid out as `layout`
        (connected: `StoreUnavailable` if it cannot be). Blocks."""
        ...

    def log_lines(self, id: str) -> LogLines: ...

    def tasks(self) -> Tasks:
        """The labelled steps' attempts offered to the workers (`store/pg_tasks.py`)."""
        ...

    async def wait_for_journal(self, stop: asyncio.Event, waiting: Callable[[str], None]) -> bool:
        """Waits, as a standby, until no process holds the journal: True then, False if
        `stop` was set first; `waiting(holder)` is called once if it has to wait."""
        ...


class Scratch(Protocol):
    """Schemas made in a database for one bench, dropped when it ends."""

    def __enter__(self) -> Scratch: ...
    def __exit__(self, *exc: object) -> None: ...
    def make(self, name: str) -> str:
        """A new, empty place for a journal; returns its URL."""
        ...

    def lay_out(self, name: str, shards: int) -> Layout:
        """A new place laid out as `shards` journals."""
        ...

    def probe(self, count: int) -> Probe:
        """The server's commit latency, `count` commits at a time (`sample`, `close`)."""
        ...


def open_shared(url: str, lease: float = 10.0) -> SharedStore:
    """The journal in the database at `url` (`Config.store`), as processes sharing it
    reach it; their sessions give up on a silent server within `lease` seconds.
    Nothing connects until a call needs to."""
    from fusee_runtime.store.pg_shared import PgShared

    return PgShared(url, lease)


def describe(url: str) -> str:
    """The store at `url` for messages: where it is, never a password."""
    from fusee_runtime.store.postgres import describe as said

    return said(url)


def open_scratch(url: str) -> Scratch:
    """Scratch places in the database at `url` for a bench, dropped when it ends."""
    from fusee_runtime.store.pg_scratch import Schemas

    return Schemas(url)
