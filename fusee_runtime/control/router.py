"""The control API of a database of several journals (`journal/shards.py`).

A command given `--store URL` on a database laid out as N journals reaches
each journal's driver through the database (`control/remote.py`), and
`ShardRouter` sends each call where it belongs:

- a call about a workflow id goes to the journal the id belongs to (a child
  runs in its parent's journal: an id found in none there is asked of the
  others before it is `NotFound`); a start without an id goes to any;
- `list`, `run_ids` and `prune` ask every journal and merge the answers
  (newest first, cut to the limit); `limit` sets a concurrency limit in each
  (`limits` shows journal 0's);
- a completion token is tried on each journal until one knows it;
- schedules live in journal 0 (they fire there alone).

Every journal needs a worker driving it (`fusee serve --store URL`): one
with none is said at once (`OwnerGone`), and nothing is done anywhere.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from fusee_runtime.control.client import ControlClient, OwnerGone
from fusee_runtime.control.remote import StoreClient
from fusee_runtime.errors import NotFound, Rejected
from fusee_runtime.journal.postgres import PgJournal
from fusee_runtime.journal.shards import Layout

_EVERY = {"list", "run_ids", "prune", "limit"}
_TOKEN = {"complete", "fail"}
_FIRST = {"ping", "schedules", "schedule", "limits"}


class ShardRouter(ControlClient):
    """The control API of every journal of a sharded database (see the module)."""

    def __init__(self, layout: Layout, clients: list[StoreClient]) -> None:
        super().__init__(Path(clients[0].store.name), clients[0].owner)
        self.layout = layout
        self.clients = clients
        self.where = clients[0].where

    @property
    def driver(self) -> str:
        drivers = dict.fromkeys(c.driver for c in self.clients)
        return ", ".join(drivers) + f" ({self.layout.shards} journals)"

    @classmethod
    async def reach(cls, layout: Layout, lease: float) -> ShardRouter:
        """The drivers of every journal.

        Raises:
            OwnerGone: a journal has no worker driving it.
        """
        journals = [PgJournal(layout.url_of(k), lease) for k in range(layout.shards)]
        clients = await asyncio.gather(*(StoreClient.reach(j) for j in journals))
        undriven = [k for k, client in enumerate(clients) if client is None]
        if undriven:
            which = ", ".join(map(str, undriven))
            raise OwnerGone(
                f"journal {which} of the {layout.shards} in {journals[0].name} has no worker "
                "driving it: start one (fusee --store URL serve) and run the command again"
            )
        return cls(layout, [c for c in clients if c is not None])

    async def call(self, op: str, **args: Any) -> Any:
        if op in _FIRST:
            return await self.clients[0].call(op, **args)
        if op in _EVERY:
            return await self._every(op, args)
        if op in _TOKEN:
            return await self._first_that_knows(self.clients, op, args)
        id = args.get("id")
        if id is None:
            if op != "start":
                raise Rejected(f"the control API has no operation {op!r} without an id")
            return await random.choice(self.clients).call(op, **args)
        home = self.clients[self.layout.shard_of(id)]
        if op == "start":  # a new run's id belongs to its journal, whatever its parent's
            return await home.call(op, **args)
        others = [c for c in self.clients if c is not home]
        return await self._first_that_knows([home, *others], op, args)

    async def events(self, op: str, **args: Any) -> AsyncGenerator[Any, None]:
        id = args["id"]
        home = self.clients[self.layout.shard_of(id)]
        client = home
        try:
            await home.call("describe", id=id)
        except NotFound:  # a child, in its parent's journal
            for other in self.clients:
                if other is not home:
                    try:
                        await other.call("describe", id=id)
                    except NotFound:
                        continue
                    client = other
                    break
        async for event in client.events(op, **args):
            yield event

    async def _first_that_knows(
        self, clients: list[StoreClient], op: str, args: dict[str, Any]
    ) -> Any:
        first: NotFound | None = None
        for client in clients:
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
