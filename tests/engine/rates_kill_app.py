"""The app of `test_rates_kill.py`: runs whose steps share a rate of `PER_SECOND` a
second. Each attempt writes the time it starts to a ledger (`RATES_LEDGER`) and a hint
line to the FIFO `RATES_PROGRESS` (the test kills the process after some)."""

from __future__ import annotations

import os
import threading
import time

import orjson

from fusee_runtime import Ctx, Rate, step, workflow

PER_SECOND = 10
_lock = threading.Lock()


@step(name="rk.call", rate=Rate(PER_SECOND, per=1))
def call(i: int) -> int:
    began = time.time()  # (before the ledger's lock: what the rate let through, when)
    with _lock, open(os.environ["RATES_LEDGER"], "ab") as f:
        f.write(orjson.dumps({"t": began, "pid": os.getpid()}) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    with open(os.environ["RATES_PROGRESS"], "wb", buffering=0) as hint:
        hint.write(b"+\n")
    return i


@workflow(name="rk.many")
async def many(ctx: Ctx, n: int) -> list[int]:
    return [await call(i) for i in range(n)]
