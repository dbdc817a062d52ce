"""The one way into a home's control API: ask its owner, else open it yourself.

One process owns a home at a time. `connect` asks that process on the
home's socket; when none serves it, it opens the home in this process
(`open_home`), driving its runs or passively, and offers the same
operations on that engine. A process can hold the lock without serving
yet (it is recovering the journal) or without ever serving (a passive
command, for a moment; twenty shells sending signals at once queue up
behind one another): `connect` keeps trying both ways, and waits its turn
for up to `LOCK_WAIT_S`, then names the holder's pid. An owner that serves
the socket but does not answer on it is named after `ANSWER_S`: that one
is stuck, not busy.

Errors are the library's: what `Engine.open` raises (`HomeLocked`,
`JournalCorrupt`, `AppImportError`, an `OSError` for a home that cannot
be a directory of ours) and `OwnerUnanswered`. Saying them to a person
(and with which exit code) is the caller's business.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from fusee_runtime.control import ops
from fusee_runtime.control.api import Control
from fusee_runtime.control.client import Client, ControlApi, ControlClient, OwnerUnanswered
from fusee_runtime.engine.config import Config
from fusee_runtime.engine.engine import Engine
from fusee_runtime.engine.home import HomeLock
from fusee_runtime.errors import HomeLocked, TimedOut
from fusee_runtime.model.json import Json

if TYPE_CHECKING:
    from fusee_runtime.store.shards import Layout

RETRY_OPEN_S = 0.05
"""Pause between two tries to reach the owner or take the home, while another process has it
(give or take half, so that commands waiting together do not try in step)."""
LOCK_WAIT_S = 60.0
"""How long a command waits for a process that holds the home without serving it: a passive
command holds it for well under a second, but a queue of them, or an owner recovering a long
journal, takes longer."""
SAY_WAITING_S = 1.0
"""After how long of waiting `connect` calls its `waiting` callback (once)."""


@contextlib.asynccontextmanager
async def open_home(
    home: Path,
    app: str | ModuleType | Iterable[str] | None,
    *,
    drive: bool = True,
    grace: float = 0.0,
    **config: Any,
) -> AsyncIterator[Engine]:
    """Opens the home in this process for the duration of the block.

    Opening recovers the journal. With `drive`, the open runs resume while
    the block runs, and stop, durable, when it ends; the engine serves the
    control API meanwhile, so commands from other processes reach it.
    Without `drive` the home is opened passively (`Config(drive=False)`):
    what the block appends is durable when its call returns, but no run's
    code runs and no timer fires. `grace` is what step functions running
    at the end get to finish; `config` goes to `Config`.

    Raises:
        AppImportError: the app fails to import.
        HomeLocked: another process owns the home.
        JournalCorrupt: the journal is damaged before its tail.
        OSError: the home cannot be a directory of ours (a file, a dangling link...).
    """
    engine = Engine(home, app, config=Config(drive=drive, **config))
    await engine.open()
    try:
        yield engine
    finally:
        await engine.close(grace)


@contextlib.asynccontextmanager
async def connect(
    home: Path,
    app: str | ModuleType | Iterable[str] | None,
    *,
    drive: bool,
    grace: float = 0.0,
    waiting: Callable[[int | None], None] | None = None,
    **config: Any,
) -> AsyncIterator[ControlApi]:
    """The home's control API: its owner's, over the socket, or else this process's own.

    With no owner the home is opened here, driving its runs (`drive`) or
    passively, as `open_home` says (`grace` and `config` go to it). While
    another process holds the lock without serving (another command, or an
    owner still opening the home), both ways are tried again about every
    `RETRY_OPEN_S`, for up to `LOCK_WAIT_S`. Once it has waited
    `SAY_WAITING_S`, it calls `waiting(pid)` (once, with the holder's pid),
    so that the caller can say why it waits.

    Raises:
        OwnerUnanswered: the owner does not answer on its socket within
            `ANSWER_S`, or the lock's holder has not served it for `LOCK_WAIT_S`.
        AppImportError, JournalCorrupt, OSError: as `open_home`.
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    said = False
    reach = _reach(home, config)
    async with contextlib.AsyncExitStack() as stack:
        while True:
            # The journals of a sharded database that no worker drives open here.
            try:
                async with contextlib.AsyncExitStack() as shards:
                    client = await reach(_opener(shards, home, app, drive, grace, config))
                    stack.push_async_exit(shards.pop_all())  # kept open once all are reached
                if client is not None:
                    ctl: ControlApi = client
                    break
                opening = open_home(home, app, drive=drive, grace=grace, **config)
                ctl = Control(await stack.enter_async_context(opening))
                break
            except HomeLocked:
                # With a store, the holder may be on another host: no pid to name.
                pid = HomeLock(home).owner() if config.get("store") is None else None
                waited = loop.time() - began
                if waited >= LOCK_WAIT_S:
                    why = f"has held it for {LOCK_WAIT_S:g} s without serving it"
                    raise OwnerUnanswered(home, pid, why) from None
                if waiting is not None and not said and waited >= SAY_WAITING_S:
                    said = True
                    waiting(pid)
            await asyncio.sleep(RETRY_OPEN_S * random.uniform(0.5, 1.5))
        yield ctl


Opener = Callable[[int, str], Awaitable[Client]]
"""Opens journal k of a sharded database (at its URL) in this process."""
Reach = Callable[[Opener], Awaitable[Client | None]]
"""Reaches the owner (None: no process serves it), opening what it must with an `Opener`."""


def _opener(
    stack: contextlib.AsyncExitStack,
    home: Path,
    app: str | ModuleType | Iterable[str] | None,
    drive: bool,
    grace: float,
    config: dict[str, Any],
) -> Opener:
    """Opens a journal no worker drives as `open_home` would, in `<home>/shard-<k>`
    (as a worker's), into `stack`."""

    async def open_shard(k: int, url: str) -> Client:
        from fusee_runtime.control.router import LocalClient

        where = home / f"shard-{k}"
        opening = open_home(where, app, drive=drive, grace=grace, **{**config, "store": url})
        return LocalClient(Control(await stack.enter_async_context(opening)))

    return open_shard


def _reach(home: Path, config: dict[str, Any]) -> Reach:
    """How to reach the owner: the home's socket, or with a PostgreSQL store the
    database, whichever host drives the journal (`control/remote.py`); for a
    sharded database every journal's (`control/router.py`), opening those none
    drives with the `Opener` it is given."""
    url = config.get("store")
    if url is None:
        return lambda _: ControlClient.connect(home)
    Config(store=url)  # a URL of another kind is said before anything connects
    from fusee_runtime.control.remote import StoreClient
    from fusee_runtime.store.shared import open_shared

    lease = config.get("lease", Config.lease)
    journal = open_shared(url, lease)
    layouts: list[Layout] = []

    async def reach(open_shard: Opener) -> Client | None:
        if not layouts:
            layouts.append(await asyncio.to_thread(journal.layout))
        layout = layouts[0]
        if layout.shards == 1:
            return await StoreClient.reach(journal)
        from fusee_runtime.control.router import ShardRouter

        async def open_undriven(k: int) -> Client:
            await asyncio.to_thread(journal.prepare, layout, k)  # as a worker would
            return await open_shard(k, layout.url_of(k))

        return await ShardRouter.reach(layout, lease, open_undriven)

    return reach


class EachCall(Client):
    """The control API of a home (or database) that no process drives now, reached anew
    for each call: its owner's if one serves it by then, else the home opened passively
    for the call alone, as a command does. A program's long-lived client holds no lock
    between its calls, so a driver (`fusee serve`) can take the home between them.

    A `result` that waits, with nothing driving the run, looks at the run every
    `POLL_S` and lets the home go between two looks: nothing finishes a run while
    nothing drives it, and a driver that starts meanwhile takes the home and finishes
    it (the next look reaches that driver, and waits there). A `watch` or a followed
    `stream` holds the home while it follows."""

    POLL_S = 0.5
    """How often a waiting `result` looks at a run nothing drives."""

    def __init__(self, home: Path, config: dict[str, Any]) -> None:
        self.home = home
        self._config = config

    @property
    def owner(self) -> int | None:
        return None

    @property
    def driver(self) -> str:
        return "no process: each call opens the home, recording only"

    @contextlib.asynccontextmanager
    async def _reached(self) -> AsyncIterator[Client]:
        from fusee_runtime.control.router import LocalClient

        async with connect(self.home, None, drive=False, **self._config) as reached:
            yield reached if isinstance(reached, Client) else LocalClient(reached)

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        if op is ops.RESULT:
            return await self._result(op, args)
        async with self._reached() as client:
            return await client.call(op, args)

    async def _result(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        from fusee_runtime.control.router import LocalClient

        loop = asyncio.get_running_loop()
        limit = args.get("timeout")
        deadline = None if limit is None else loop.time() + limit
        while True:
            left = None if deadline is None else max(0.0, deadline - loop.time())
            async with self._reached() as client:
                if not isinstance(client, LocalClient):  # a driver serves it now: its wait
                    return await client.call(op, {**args, "timeout": left})
                try:
                    return await client.call(op, {**args, "timeout": 0.0})  # a look
                except TimedOut:
                    if left is not None and left <= self.POLL_S:
                        raise TimedOut(
                            f"run {args['id']!r} did not finish within {limit:g} s "
                            "(no process drives its home)"
                        ) from None
            await asyncio.sleep(self.POLL_S)  # the home let go: a driver may take it

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        async with (
            self._reached() as client,
            contextlib.aclosing(client.events(op, args)) as events,
        ):
            async for event in events:
                yield event
