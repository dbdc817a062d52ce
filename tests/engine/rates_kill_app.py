"""The app of `test_rates_kill.py`: runs whose steps share a rate of `PER_SECOND` a
second. Each attempt writes the time it starts to a ledger (`RATES_LEDGER`) and a hint
line to the FIFO `RATES_PROGRESS` (the test kills the process after some);
`note_slots()` makes each engine opened after it write the instant of each slot it
takes to `RATES_SLOTS` as it records it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
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
    """Each slot a `Rates` records is noted (inside: wraps what it appends with)."""
    made = rates.Rates.__init__

    def init(
        self: rates.Rates, now: Any, sleep: Any, append: Callable[[Record], int], *a: Any
    ) -> None:
        def noted(rec: Record) -> int:
            if isinstance(rec, RateTaken):
                with _lock, open(os.environ["RATES_SLOTS"], "ab") as f:
                    f.write(orjson.dumps({"t": rec.taken_at}) + b"\n")
            return append(rec)

        made(self, now, sleep, noted, *a)

    rates.Rates.__init__ = init  # type: ignore[method-assign]
