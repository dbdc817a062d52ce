"""The workload of the takeover test: runs of a few slow steps that wait for signals.

Each step execution appends `{"key", "nonce", "pid", "t"}` to the side ledger
(`TAKEOVER_LEDGER`, one `write(2)` with O_APPEND: a SIGKILL cannot take it back)
and returns its nonce, so the test can tell which execution the journal recorded.
It also writes the line to `TAKEOVER_PROGRESS`, a FIFO the test reads to know how
far the work went (never blocking: a full pipe only drops the hint).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import orjson

from fusee_runtime import Ctx, current_ctx, step, workflow

STEP_S = 0.02


@step
async def takeover_work(i: int) -> dict:
    nonce = uuid.uuid4().hex
    line = orjson.dumps(
        {"key": current_ctx().key(), "nonce": nonce, "pid": os.getpid(), "t": time.time()}
    )
    fd = os.open(os.environ["TAKEOVER_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)
    try:
        progress = os.open(os.environ["TAKEOVER_PROGRESS"], os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(progress, line + b"\n")
        finally:
            os.close(progress)
    except OSError:
        pass
    await asyncio.sleep(STEP_S)
    return {"i": i, "nonce": nonce}


@workflow
async def takeover(ctx: Ctx, steps: int) -> int:
    total = 0
    for i in range(steps):
        total += (await takeover_work(i))["i"]
    go = int(await ctx.wait_for("go"))
    ctx.log.info(f"went with {go}")
    total += go
    for i in range(steps):
        total += (await takeover_work(steps + i))["i"]
    return total + int(await ctx.wait_for("end"))
