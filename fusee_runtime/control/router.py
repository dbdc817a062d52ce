"""The control API of a database of several journals (`store/shards.py`).

A command given `--store URL` on a database laid out as N journals reaches
each journal's driver through the database (`control/remote.py`), and
`ShardRouter` sends each call where its declaration says (`ops.Route`, the
descriptor's `route`):

- a call about a workflow id goes to the journal the id belongs to (where
  every run of that id is: a child's id belongs to its parent's journal, a
  cron run's to journal 0: `ID`); a start without an id goes to any (`ANY`);
- `list`, `run_ids` and `prune` ask every journal and merge the answers
  (newest first, cut to the limit); `limit` sets a concurrency limit in each
  (`EVERY`, merged by the descriptor's `merge`; `limits` shows journal 0's);
  `queue` sets a queue's sizes in each alike (a queue is its journal's), and
  `queues` adds up each journal's runs of a queue;
- a completion token is tried on each journal until one knows it (`TOKEN`);
- schedules live in journal 0 (they fire there alone: `FIRST`).

A journal that no worker drives is opened by the command itself, as a home
with no owner is (`connect`'s `open_shard`): its calls then run here
(`LocalClient`), and nothing else changes.

`WorkerRouter` routes the same way for the HTTP API of a worker (`fusee serve
--store URL --http`, a standby too): a journal the worker drives is called on
its own engine, another through the database, whichever process drives it
by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import random
import socket
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fusee_runtime.control import ops
from fusee_runtime.control.api import Control
from fusee_runtime.control.client import Client, OwnerGone, OwnerLost, OwnerUnanswered
from fusee_runtime.control.ops import Route
from fusee_runtime.control.remote import StoreClient
from fusee_runtime.control.wire import as_json
from fusee_runtime.errors import (
    EngineClosed,
    JournalFailed,
    NotFound,
    Rejected,
    StoreUnavailable,
    UpdatePending,
)
from fusee_runtime.model.json import Json
from fusee_runtime.store.shards import Layout
from fusee_runtime.store.shared import open_shared

if TYPE_CHECKING:
    from fusee_runtime.engine.engine import Engine

T = TypeVar("T")

REMOTE_CALLS_MAX = 16
"""Most calls a `WorkerRouter` passes on to other processes at once, each holding a
session of the server while it lasts; more queue."""
REMOTE_WATCHES_MAX = 16
"""The same for watches and streams (a result's long poll holds one for its wait), with
a budget of their own: a full house of long polls does not hold up a signal."""


class ShardRouter(Client):
    """The control API of every journal of a sharded database (see the module): each
    call goes where its descriptor's `route` says (`ops.Route`)."""

    def __init__(self, layout: Layout, clients: list[Client], pid: int | None = None) -> None:
        """`clients[k]` is journal k's driver's API (`pid` the owner's without them)."""
        self.layout = layout
        self.clients = clients
        self._pid = clients[0].owner if clients else pid
        self._last = 0  # the journal of the last call about an id

    @property
    def owner(self) -> int | None:
        """The pid of the process that drives the journal of the last call about an id
        (journal 0's before one): the one that answered it."""
        return self.clients[self._last].owner if self.clients else self._pid

    @property
    def driver(self) -> str:
        """As `owner`, for people."""
        return self.clients[self._last].driver

    @property
    def pages_by_cursor(self) -> bool:
        return self.layout.shards == 1

    @classmethod
    async def reach(
        cls,
        layout: Layout,
        lease: float,
        open_shard: Callable[[int], Awaitable[Client]] | None = None,
    ) -> ShardRouter:
        """The drivers of every journal; `open_shard(k)` opens one no worker drives
        (in this process).

        Raises:
            OwnerGone: a journal has no worker driving it, and no `open_shard`.
            HomeLocked: as `open_shard` (a process took the journal meanwhile).
        """
        journals = [open_shared(layout.url_of(k), lease) for k in range(layout.shards)]
        found = await asyncio.gather(*(StoreClient.reach(j) for j in journals))
        clients: list[Client] = []
        for k, driven in enumerate(found):
            client: Client | None = driven
            if client is None:
                if open_shard is None:
                    raise OwnerGone(
                        f"journal {k} of the {layout.shards} in {journals[0].name} has no "
                        "worker driving it: start one (fusee --store URL serve) and run the "
                        "command again"
                    )
                client = await open_shard(k)
            clients.append(client)
        return cls(layout, clients)

    async def client(self, k: int) -> Client:
        """The control API of journal k's driver."""
        return self.clients[k]

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        if op.route is Route.FIRST or self.layout.shards == 1:
            return await (await self.client(0)).call(op, args)
        if op.route is Route.EVERY:
            return await self._every(op, args)
        if op.route is Route.TOKEN:
            return await self._first_that_knows(op, args)
        id = args.get("id")
        if id is None:
            if op.route is not Route.ANY:
                raise Rejected(f"the control API has no operation {op.name!r} without an id")
            return await self._any_driven(op, args)
        self._last = self.layout.shard_of(id)
        return await (await self.client(self._last)).call(op, args)

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        assert op.route is Route.ID, op.name
        self._last = self.layout.shard_of(args["id"])
        client = await self.client(self._last)
        async with contextlib.aclosing(client.events(op, args)) as events:
            async for event in events:
                yield event

    async def _any_driven(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        """`op` on a journal picked at random among those a process drives now."""
        order = random.sample(range(self.layout.shards), self.layout.shards)
        for k in order:
            try:
                self._last = k
                return await (await self.client(k)).call(op, args)
            except OwnerGone:  # none drives it now: nothing was done there
                if k == order[-1]:
                    raise
        raise AssertionError("unreachable: the last journal answers or raises")

    async def _first_that_knows(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        first: NotFound | OwnerGone | None = None
        for k in range(self.layout.shards):
            try:
                return await (await self.client(k)).call(op, args)
            except NotFound as e:
                first = first or e
            except OwnerGone as e:  # the token may be that journal's: say so, if none knows it
                first = e if not isinstance(first, OwnerGone) else first
        assert first is not None
        raise first

    async def _every(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        """`op` on every journal, its answers merged as it declares (`ops.Call.merge`)."""
        if args.get("before"):  # (list's cursor: the journals' pages do not line up)
            raise Rejected(
                f"paging (before) across the {self.layout.shards} journals of a database is "
                "not there yet: narrow the list with a status, workflow or where instead"
            )
        assert op.merge is not None, op.name
        clients = [await self.client(k) for k in range(self.layout.shards)]
        answers = await asyncio.gather(*(c.call(op, args) for c in clients))
        return op.merge(answers, args)


class WorkerRouter(ShardRouter):
    """The control API of a database as one of its workers serves it over HTTP, the
    same whichever worker a request reaches: a call about a journal that `local(k)`
    says this process drives runs on its engine; one about another journal goes to
    that journal's driver through the database (`StoreClient`, whichever process it
    is now); one about a journal that no process drives now is `OwnerGone` (HTTP 503:
    a worker takes it within a round or two). `ping` answers for this process."""

    def __init__(
        self,
        layout: Layout,
        lease: float,
        local: Callable[[int], Engine | None],
        home: Path,
        remote_calls_max: int = REMOTE_CALLS_MAX,
        remote_watches_max: int = REMOTE_WATCHES_MAX,
    ) -> None:
        super().__init__(layout, [], os.getpid())
        self._local = local
        self._lease = lease
        self._serving = home
        self._calls = asyncio.Semaphore(remote_calls_max)
        self._watches = asyncio.Semaphore(remote_watches_max)
        self._remote: dict[int, Client] = {}  # a journal's, whichever process drives it

    @property
    def driver(self) -> str:
        return "this worker, or the worker that drives the journal"

    def local_control(self, id: str) -> Control | None:
        engine = self._local(self.layout.shard_of(id))
        return Control(engine) if engine is not None else None

    async def client(self, k: int) -> Client:
        engine = self._local(k)
        if engine is not None:
            return LocalClient(Control(engine))
        remote = self._remote.get(k)
        if remote is None:
            journal = open_shared(self.layout.url_of(k), self._lease)
            async with self._calls:
                try:
                    reached = await StoreClient.reach(journal)
                except (OwnerLost, OwnerUnanswered) as e:
                    # Its ping was cut or unanswered: the call itself was not sent.
                    raise OwnerGone(
                        f"journal {k} of the {self.layout.shards} in {journal.name}: its driver "
                        f"did not answer ({e}); nothing was asked of it: try again in a moment"
                    ) from None
            if reached is None:
                raise OwnerGone(
                    f"journal {k} of the {self.layout.shards} in {journal.name} has no worker "
                    "driving it now: try again in a moment"
                )
            forget = functools.partial(self._remote.pop, k, None)
            remote = self._remote[k] = _Bounded(reached, self._calls, self._watches, forget)
        return remote

    async def ping(self) -> ops.Pong:
        """This process, and the journals it drives now."""
        driven = [k for k in range(self.layout.shards) if self._local(k) is not None]
        ping: ops.Pong = {
            "pid": os.getpid(),
            "home": str(self._serving),
            "host": socket.gethostname(),
        }
        return ping | {"journals": driven}


class _Bounded(Client):
    """A driver's control API through the database, as many calls and watches at a time
    as `calls` and `watches` let through. A request no process took (`OwnerGone`: the
    journal has no driver now) calls `forget`, so that the next call looks for one
    again instead of waiting `TAKE_S` for nobody."""

    def __init__(
        self,
        client: Client,
        calls: asyncio.Semaphore,
        watches: asyncio.Semaphore,
        forget: Callable[[], object],
    ) -> None:
        self._client = client
        self._calls = calls
        self._watches = watches
        self._forget = forget

    @property
    def owner(self) -> int | None:
        return self._client.owner

    @property
    def driver(self) -> str:
        return self._client.driver

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        async with self._calls:
            try:
                return await self._client.call(op, args)
            except OwnerGone:
                self._forget()
                raise

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        async with self._watches, contextlib.aclosing(self._client.events(op, args)) as events:
            try:
                async for event in events:
                    yield event
            except OwnerGone:
                self._forget()
                raise


class LocalClient(Client):
    """The control API of an engine opened in this process, asked as a driver's is (its
    answers as JSON, as a driver sends them): a journal no worker drives, opened by the
    command that asks it, or one a worker drives itself."""

    def __init__(self, control: Control) -> None:
        self.control = control

    @property
    def owner(self) -> int | None:
        return None

    @property
    def driver(self) -> str:
        return "this command"

    async def call(self, op: ops.Call[..., object], args: ops.Args) -> Json:
        return as_json(await op.call(self.control, args))

    async def events(
        self, op: ops.Stream[..., object], args: ops.Args
    ) -> AsyncGenerator[Json, None]:
        async with contextlib.aclosing(op.call(self.control, args)) as events:
            async for event in events:
                yield as_json(event)


AGAIN_S = 0.2
"""How soon `relay` asks again when a journal's driver went away under a call or none
drives it yet (a worker takes it over within a round or two)."""


async def relay(
    router: ShardRouter,
    k: int,
    ask: Callable[[ops.Operations], Awaitable[T]],
    closing: Callable[[], bool],
) -> T:
    """What `ask` answers of journal k's driver, asked again while none answers for sure
    (none drives it, it went away or stopped under the call, its journal failed) and
    `closing()` is false: for calls that are applied once however often they are sent
    (an object's call with its id: `engine/objects.py`) and for reads."""
    while True:
        try:
            return await ask(await router.client(k))
        except (
            OwnerGone,
            OwnerLost,
            OwnerUnanswered,
            EngineClosed,
            UpdatePending,
            JournalFailed,
            StoreUnavailable,
        ):
            if closing():
                raise
        await asyncio.sleep(AGAIN_S)
