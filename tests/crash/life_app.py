"""Workflows for the lifecycle crash tests (timers, signals, pause, reset, race).

Step functions append to the side ledger of `crash_app` (with their key and
pid); `CRASH_AT=<point>` freezes a step function at that point.
"""

from __future__ import annotations

import os
from typing import Any

from crash_app import freeze, ledger

from fusee_runtime import Ctx, Exhausted, RetryPolicy, step, workflow


@step
async def note(what: str, value: Any = None) -> Any:
    ledger(what)
    await freeze(f"in-{what}")
    return value


@workflow
async def napper(ctx: Ctx, seconds: float) -> str:
    await note("before")
    await ctx.sleep("nap", seconds)
    await note("after")
    return "rested"


@workflow
async def approver(ctx: Ctx, _: None) -> Any:
    value = await ctx.wait_for("approve")
    return await note("approved", value)


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
async def fragile() -> str:
    ledger("fragile")
    if not os.environ.get("FIXED"):
        raise ConnectionError("the service is down")
    return "fixed"


@workflow
async def pauser(ctx: Ctx, _: None) -> str:
    return await fragile()


@workflow
async def three(ctx: Ctx, _: None) -> list[str]:
    words = ("one", "two", "three")
    return [await ctx.step(f"s{i}", note, f"s{i}", w) for i, w in enumerate(words, 1)]


@workflow
async def racer(ctx: Ctx, _: None) -> list[Any]:
    index, value = await ctx.race([ctx.sleep("slow", 3600), ctx.wait_for("go")])
    return [index, await note("raced", value)]


@workflow
async def versioned(ctx: Ctx, _: None) -> int:
    """A fee added under running runs: APP_VERSION 1 has none, 2 guards it with
    `ctx.patched`, 3 has only the new branch (`ctx.deprecate_patch`)."""
    await ctx.wait_for("begin")
    charged = 0
    code = os.environ.get("APP_VERSION", "1")
    if code == "2" and ctx.patched("fee"):
        charged = await note("fee", 5)
    elif code == "3":
        ctx.deprecate_patch("fee")
        charged = await note("fee", 5)
    await ctx.wait_for("go")
    return charged
