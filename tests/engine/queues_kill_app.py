"""The app of `test_queues_kill.py`: runs in queue `tenants` (one at a time per key).
Each run's code writes a line when it begins and one when it ends to a ledger
(`QUEUES_LEDGER`, fsynced, in the order things happened across both lives), sleeps a
little between (a durable timer: the run parks), and writes a hint line to the FIFO
`QUEUES_PROGRESS` (the test kills the process after some)."""

from __future__ import annotations

import os
import threading

import orjson

from fusee_runtime import Ctx, step, workflow

_lock = threading.Lock()


def _note(what: str, key: str, id: str) -> None:
    with _lock, open(os.environ["QUEUES_LEDGER"], "ab") as f:
        f.write(orjson.dumps({"what": what, "key": key, "id": id, "pid": os.getpid()}) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    with open(os.environ["QUEUES_PROGRESS"], "wb", buffering=0) as hint:
        hint.write(b"+\n")


@step(name="qk.begin")
def begin(key: str, id: str) -> None:
    _note("begin", key, id)


@step(name="qk.end")
def end(key: str, id: str) -> None:
    _note("end", key, id)


@workflow(name="qk.job", queue="tenants")
async def job(ctx: Ctx, key: str) -> str:
    await begin(key, ctx.workflow_id)
    await ctx.sleep("between", 0.005)
    await end(key, ctx.workflow_id)
    return ctx.workflow_id
