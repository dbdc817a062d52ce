"""A child process for the stream crash tests: runs `streamer` and follows its stream.

Usage: python stream_child.py HOME WORKFLOW_ID N  (env LEDGER, CRASH_AT)

`streamer` appends N items to the stream `items`, each made by a step that
stamps it with the process id it ran in, so an item that was lost in a
crash and made again is told apart from the first one. The child follows
the stream with `handle.stream` and prints `ITEM <json>` for each item it
sees, `ENDED` when the stream ends, then `RESULT <json>`. The workflow
prints `APPENDED <i>` right after each append (durable or not).

`CRASH_AT=in-p<i>` freezes step i's function; `CRASH_AT=hold-p<i>` lets step
i return but freezes every journal write from then on, so its result and
item i are appended in memory and never reach the disk. `READ_AFTER=<i>`
starts the reader only once item i is appended (in memory), so a reader
that did not wait for the disk would print it at once.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))

from crash_app import emit, freeze, ledger

from fusee_runtime import Config, Ctx, Engine, step, workflow
from fusee_runtime.journal.storage import Storage

HOLD = threading.Event()
"""Set by a step: from then on the child's storage freezes every write."""

READ_NOW: asyncio.Event | None = None
"""Set by the workflow once item READ_AFTER is appended."""


class HoldingStorage(Storage):
    """Freezes every write once `HOLD` is set: nothing more reaches the file."""

    loop_safe = False  # a held write must not hold the loop that releases it

    def write(self, fd: int, offset: int, data: bytes | memoryview) -> None:
        if HOLD.is_set():
            emit("AT", "hold")
            threading.Event().wait()
        super().write(fd, offset, data)


@step
async def produce(i: int) -> dict[str, Any]:
    ledger(f"p{i}")
    await freeze(f"in-p{i}")
    if os.environ.get("CRASH_AT") == f"hold-p{i}":
        HOLD.set()
    return {"i": i, "pid": os.getpid()}


@workflow(name="streamer")
async def streamer(ctx: Ctx, n: int) -> int:
    items = ctx.stream("items")
    for i in range(n):
        items.append(await produce(i))
        emit("APPENDED", i)
        if READ_NOW is not None and os.environ.get("READ_AFTER") == str(i):
            READ_NOW.set()
    items.close()
    return n


async def main(home: str, workflow_id: str, n: int) -> None:
    global READ_NOW
    READ_NOW = asyncio.Event()
    config = Config(storage=HoldingStorage(), segment_bytes=8 << 20)
    engine = Engine(home, app=None, config=config)
    await engine.open()
    try:
        h = await engine.start(streamer, n, id=workflow_id)
        emit("STARTED", h.id)
        if os.environ.get("READ_AFTER"):
            await READ_NOW.wait()
        async for item in h.stream("items"):
            emit("ITEM", orjson.dumps(item).decode())
        emit("ENDED")
        emit("RESULT", orjson.dumps(await h.result()).decode())
    except BaseException:
        # Shown before closing: a close waits for writes a frozen disk never finishes.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    await engine.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
