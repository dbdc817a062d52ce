"""The workload of the deposed-driver test: steps that write to a fenced system.

Each step execution appends `{"key", "kind", "pid", "fence", "at": "start"}` to
the side ledger (`DEPOSED_LEDGER`) when it begins and `"at": "done"` when it has
done its work, and writes its key to `fenced`, a stand-in for a service that takes
fencing tokens (`current_ctx().fence`): it refuses a token lower than the highest
it has seen, as a database with a `WHERE fence >= ...` guard or Kafka's epochs
would. How long a step works comes from `DEPOSED_SLOW` (seconds by kind), so the
first driver's steps are slow and its successor's quick.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time

import orjson

from fusee_runtime import Ctx, current_ctx, step, workflow


def _append(path: str, entry: dict) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, orjson.dumps(entry) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def fenced(key: str, fence: int) -> bool:
    """Writes `key` under `fence`, unless a higher fence wrote before; whether it took it.
    Its log (`DEPOSED_FENCED`) has every write tried, taken or refused."""
    path = os.environ["DEPOSED_FENCED"]
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        seen = 0
        if os.path.exists(path):
            with open(path, "rb") as f:
                seen = max((orjson.loads(line)["fence"] for line in f), default=0)
        taken = fence >= seen
        entry = {"key": key, "fence": fence, "pid": os.getpid(), "taken": taken}
        _append(path, {**entry, "t": time.time()})
    return taken


def _ledger(kind: str, at: str) -> dict:
    ctx = current_ctx()
    entry = {"key": ctx.key(), "kind": kind, "pid": os.getpid(), "fence": ctx.fence, "at": at}
    _append(os.environ["DEPOSED_LEDGER"], {**entry, "t": time.time()})
    return entry


def _slow(kind: str) -> float:
    return float(orjson.loads(os.environ.get("DEPOSED_SLOW", "{}")).get(kind, 0.01))


@step
async def deposed_async(kind: str) -> bool:
    entry = _ledger(kind, "start")
    await asyncio.sleep(_slow(kind))
    taken = fenced(entry["key"], entry["fence"])
    _ledger(kind, "done")
    return taken


@step
def deposed_thread(kind: str) -> bool:
    entry = _ledger(kind, "start")
    time.sleep(_slow(kind))
    taken = fenced(entry["key"], entry["fence"])
    _ledger(kind, "done")
    return taken


@workflow
async def deposed(ctx: Ctx, kind: str) -> bool:
    if kind == "thread":
        return await deposed_thread(kind)
    return await deposed_async(kind)
