"""`flaky`: a step whose retries run out pauses the run until someone resumes it.

    fusee start flaky --id fx-1                  # exits 1: the run is paused
    FUSEE_FLAKY_FIXED=1 fusee resume fx-1
    FUSEE_FLAKY_FIXED=1 fusee result fx-1 --wait

The step calls a service that is down until `FUSEE_FLAKY_FIXED=1` is set.
With `on_exhausted=Exhausted.PAUSE`, running out of attempts does not fail
the run: it pauses, open and durable, and `fusee resume` runs the step
again with a fresh budget once the cause is fixed.
"""

from __future__ import annotations

import os
from typing import Any

from fusee_runtime import Ctx, Exhausted, RetryPolicy, step, workflow

FIXED_ENV = "FUSEE_FLAKY_FIXED"
"""Set it to 1 and the rates service answers."""


@step(retry=RetryPolicy(attempts=2, initial=0.01, on_exhausted=Exhausted.PAUSE))
async def fetch_rate(currency: str) -> float:
    """Asks the (stand-in) rates service for a rate."""
    if os.environ.get(FIXED_ENV) != "1":
        raise ConnectionError(f"rates service unavailable (set {FIXED_ENV}=1 to bring it back)")
    return {"EUR": 1.0, "USD": 1.08}.get(currency, 1.0)


@workflow
async def flaky(ctx: Ctx, request: dict[str, Any] | None) -> dict[str, Any]:
    """Converts an amount with a rate from a service that is sometimes down."""
    request = request or {"cents": 1000, "currency": "USD"}
    rate = await fetch_rate(request["currency"])
    return {"rate": rate, "cents": round(request["cents"] * rate)}
