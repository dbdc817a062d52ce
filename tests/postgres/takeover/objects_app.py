"""The app of `test_pg_objects_shards.py`: a caller whose calls go to an object's key in
another journal of the database.

The handler's step writes a ledger line (`OBJECTS_LEDGER`) as it starts and ends, and
a hint line to the FIFO `OBJECTS_PROGRESS` as it starts. On two items it stops, so
that the test kills a worker there:

- "hang" and "term": the first time it runs, it never returns (its process is killed,
  or stopped with a short grace; the next driver of the key runs it again, and it goes
  on);
- "held": it waits for a line on the FIFO `OBJECTS_RELEASE` (the test kills the
  caller's driver meanwhile, then writes it).
"""

from __future__ import annotations

import os
import threading

import orjson

from fusee_runtime import Ctx, handler, object, step, workflow

_lock = threading.Lock()


def _note(what: str, item: str) -> None:
    with _lock, open(os.environ["OBJECTS_LEDGER"], "ab") as f:
        f.write(orjson.dumps({"what": what, "item": item, "pid": os.getpid()}) + b"\n")
        f.flush()
        os.fsync(f.fileno())


def _started_before(item: str) -> bool:
    with open(os.environ["OBJECTS_LEDGER"], "rb") as f:
        lines = [orjson.loads(line) for line in f.read().splitlines() if line.strip()]
    return sum(1 for e in lines if e["what"] == "start" and e["item"] == item) > 1


@step(name="ko.put")
def put(item: str) -> str:
    _note("start", item)
    with open(os.environ["OBJECTS_PROGRESS"], "wb", buffering=0) as hint:
        hint.write(f"{item}\n".encode())
    if item in ("hang", "term") and not _started_before(item):
        threading.Event().wait()  # (until the process is killed)
    if item == "held":
        with open(os.environ["OBJECTS_RELEASE"], "rb") as release:
            release.readline()
    _note("end", item)
    return item


@object(name="ko.tally")
class Tally:
    def __init__(self) -> None:
        self.items: list[str] = []

    @handler
    async def add(self, ctx: Ctx, item: str) -> int:
        self.items.append(await put(item))
        return len(self.items)


@workflow(name="ko.caller")
async def caller(ctx: Ctx, job: dict[str, object]) -> list[int]:
    key, items = job["key"], job["items"]
    assert isinstance(key, str) and isinstance(items, list)
    return [await ctx.object("ko.tally", key).call("add", item) for item in items]
