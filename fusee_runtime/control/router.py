"""The control API of a database of several journals (`journal/shards.py`).

A command given `--store URL` on a database laid out as N journals reaches
each journal's driver through the database (`control/remote.py`), and
`ShardRouter` sends each call where it belongs:

- a call about a workflow id goes to the journal the id belongs to (where
  every run of that id is: a child's id belongs to its parent's journal, a
  cron run's to journal 0); a start without an id goes to any;
- `list`, `run_ids` and `prune` ask every journal and merge the answers
  (newest first, cut to the limit); `limit` sets a concurrency limit in each
  (`limits` shows journal 0's);
- a completion token is tried on each journal until one knows it;
- schedules live in journal 0 (they fire there alone).

A journal that no worker drives is opened by the command itself, as a home
with no owner is (`connect`'s `open_shard`): its calls then run here
(`LocalClient`), and nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncGenerator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson

from fusee_runtime.control.api import Control
from fusee_runtime.control.client import ControlClient, OwnerGone
from fusee_runtime.control.remote import StoreClient
from fusee_runtime.control.server import to_json
from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.journal.postgres import PgJournal, describe
from fusee_runtime.journal.shards import Layout

_EVERY = {"list", "run_ids", "prune", "limit"}
_TOKEN = {"complete", "fail"}
_FIRST = {"ping", "schedules", "schedule", "limits"}


class ShardRouter(ControlClient):
    """The control API of every journal of a sharded database (see the module)."""

    def __init__(self, layout: Layout, clients: list[ControlClient]) -> None:
        super().__init__(Path(describe(layout.url)), clients[0].owner)
        self.layout = layout
        self.clients = clients
        self.where = clients[0].where

    @property
    def driver(self) -> str:
        drivers = dict.fromkeys(c.driver for c in self.clients)
        return ", ".join(drivers) + f" ({self.layout.shards} journals)"

    @classmethod
    async def reach(
        cls,
        layout: Layout,
        lease: float,
        open_shard: Callable[[int], Awaitable[ControlClient]] | None = None,
    ) -> ShardRouter:
        """The drivers of every journal; `open_shard(k)` opens one no worker drives
        (in this process).

        Raises:
            OwnerGone: a journal has no worker driving it, and no `open_shard`.
            HomeLocked: as `open_shard` (a process took the journal meanwhile).
        """
        journals = [PgJournal(layout.url_of(k), lease) for k in range(layout.shards)]
        found = await asyncio.gather(*(StoreClient.reach(j) for j in journals))
        clients: list[ControlClient] = []
        for k, driven in enumerate(found):
            client: ControlClient | None = driven
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

    async def call(self, op: str, **args: Any) -> Any:
        if op in _FIRST:
            return await self.clients[0].call(op, **args)
        if op in _EVERY:
            return await self._every(op, args)
        if op in _TOKEN:
            return await self._first_that_knows(op, args)
        id = args.get("id")
        if id is None:
            if op != "start":
                raise Rejected(f"the control API has no operation {op!r} without an id")
            return await random.choice(self.clients).call(op, **args)
        return await self.clients[self.layout.shard_of(id)].call(op, **args)

    async def events(self, op: str, **args: Any) -> AsyncGenerator[Any, None]:
        async for event in self.clients[self.layout.shard_of(args["id"])].events(op, **args):
            yield event

    async def _first_that_knows(self, op: str, args: dict[str, Any]) -> Any:
        first: NotFound | None = None
        for client in self.clients:
            try:
                return await client.call(op, **args)
            except NotFound as e:
                first = first or e
        assert first is not None
        raise first

    async def _every(self, op: str, args: dict[str, Any]) -> Any:
        if op == "list" and args.get("before"):
            raise Rejected(
                f"paging (before) across the {self.layout.shards} journals of a database is "
                "not there yet: narrow the list with a status, workflow or where instead"
            )
        answers = await asyncio.gather(*(c.call(op, **args) for c in self.clients))
        if op == "prune":
            return sum(answers)
        if op == "limit":  # each journal's engine has the limit's permits: set on every one
            return answers[0]
        merged = [item for answer in answers for item in answer]
        if op == "list":
            merged.sort(key=lambda doc: doc["started_at"], reverse=True)
            return merged[: args["limit"]] if args.get("limit") else merged
        return merged


class LocalClient(ControlClient):
    """The control API of an engine opened in this process, called by operation name
    as a driver's is (the answers as JSON, as it sends them): a journal no worker
    drives, opened by the command that asks it."""

    def __init__(self, control: Control) -> None:
        super().__init__(control.engine.home, None)
        self.control = control

    @property
    def driver(self) -> str:
        return "this command"

    async def call(self, op: str, **args: Any) -> Any:
        return _as_json(await getattr(self.control, op)(**args))

    async def events(self, op: str, **args: Any) -> AsyncGenerator[Any, None]:
        async with contextlib.aclosing(getattr(self.control, op)(**args)) as events:
            async for event in events:
                yield _as_json(event)


def _as_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value, default=to_json))
