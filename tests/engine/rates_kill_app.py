"""The app of `test_rates_kill.py`: runs whose steps share a rate of `PER_SECOND` a
second. Each attempt writes the time it starts to a ledger (`RATES_LEDGER`) and a hint
line to the FIFO `RATES_PROGRESS` (the test kills the process after some);
`note_slots()` makes each engine opened after it write the instant of each slot it
takes to `RATES_SLOTS` once its record is durable."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from fusee_runtime import Ctx, Rate, step, workflow
from fusee_runtime.engine import rates
from fusee_runtime.model.records import RateTaken, Record

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


def note_slots() -> None:
    """Each slot a `Rates` takes is noted once its record is durable (inside: wraps what
    it appends and waits with); a slot whose record a kill lost, used by no attempt, is
    not."""
    made = rates.Rates.__init__

    def init(
        self: rates.Rates,
        now: Any,
        sleep: Any,
        append: Callable[[Record], int],
        durable: Callable[[int], Awaitable[None]],
        *rest: Any,
    ) -> None:
        taken: dict[int, float] = {}

        def noting(rec: Record) -> int:
            lsn = append(rec)
            if isinstance(rec, RateTaken):
                taken[lsn] = rec.taken_at
            return lsn

        async def noted(lsn: int) -> None:
            await durable(lsn)
            at = taken.pop(lsn, None)
            if at is not None:
                with _lock, open(os.environ["RATES_SLOTS"], "ab") as f:
                    f.write(orjson.dumps({"t": at}) + b"\n")

        made(self, now, sleep, noting, noted, *rest)

    rates.Rates.__init__ = init  # type: ignore[method-assign]
