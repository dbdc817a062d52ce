"""The app of `test_objects_kill.py`: an object whose handler runs a step that writes a
ledger line (`OBJECTS_LEDGER`) as it starts and ends, and blocks on item "block" while
`OBJECTS_BLOCK` is set (the child process is killed there)."""

from __future__ import annotations

import asyncio
import os

import orjson

from fusee_runtime import Ctx, handler, object, step, workflow


def _note(what: str, item: str) -> None:
    with open(os.environ["OBJECTS_LEDGER"], "ab") as f:
        f.write(orjson.dumps({"what": what, "item": item}) + b"\n")
        f.flush()
        os.fsync(f.fileno())


@step(name="objk.put")
async def put(item: str) -> str:
    _note("start", item)
    if item == "block" and os.environ.get("OBJECTS_BLOCK"):
        print("blocked", flush=True)  # (the parent kills the process once it reads it)
        await asyncio.Event().wait()
    _note("end", item)
    return item


@object(name="tally")
class Tally:
    def __init__(self) -> None:
        self.items: list[str] = []

    @handler
    async def add(self, ctx: Ctx, item: str) -> int:
        self.items.append(await put(item))
        return len(self.items)


@workflow(name="objk.caller")
async def caller(ctx: Ctx, items: list[str]) -> list[int]:
    return [await ctx.object("tally", "t").call("add", item) for item in items]
