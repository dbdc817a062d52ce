"""Workflows for tests/client (`--app client_app`), driven by `fusee serve` children.

`CLIENT_FIXED` names a file: while it does not exist, `cl_flaky` fails and its run
pauses (`fusee resume` runs it again once the file is there).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fusee_runtime import (
    Completion,
    Ctx,
    Exhausted,
    RetryPolicy,
    current_ctx,
    handler,
    object,
    step,
    workflow,
)


@step
def cl_add(a: int, b: int) -> int:
    return a + b


@workflow(name="cl.counter")
async def cl_counter(ctx: Ctx, start: int) -> dict[str, Any]:
    """Counts from `start`: update "add" adds, query "total" reads; signal "done" ends
    it with the total and the signal's note. It logs where it starts, and streams the
    first and the last total."""
    total = {"n": start}

    def add(by: int) -> int:
        total["n"] += by
        return total["n"]

    ctx.on_query("total", lambda _: total["n"])
    ctx.on_update("add", add)
    ctx.log.info(f"counting from {start}")
    changes = ctx.stream("changes")
    changes.append(start)
    note = await ctx.wait_for("done")
    changes.append(total["n"])
    changes.close()
    return {"total": await cl_add(total["n"], 0), "note": note}


@workflow(name="cl.fails")
async def cl_fails(ctx: Ctx, why: str) -> None:
    raise ValueError(why)


@workflow(name="cl.waits")
async def cl_waits(ctx: Ctx, _: Any) -> str:
    await ctx.wait_for("never")
    return "signalled"


@step(retry=RetryPolicy(attempts=1, on_exhausted=Exhausted.PAUSE))
def cl_flaky() -> str:
    if not Path(os.environ["CLIENT_FIXED"]).exists():
        raise ConnectionError("the flaky service is down")
    return "steady"


@workflow(name="cl.pauses")
async def cl_pauses(ctx: Ctx, _: Any) -> str:
    return await cl_flaky()


def _hand_out(completion: Completion) -> None:
    """Hands the token out on the run's stream "tokens" (a test follows it)."""
    current_ctx().stream("tokens").append(completion.token)


@workflow(name="cl.approval")
async def cl_approval(ctx: Ctx, _: Any) -> Any:
    return await ctx.await_completion("approve", _hand_out)


@workflow(name="cl.steps")
async def cl_steps(ctx: Ctx, n: int) -> int:
    """Three steps, for a reset to an operation number."""
    a = await cl_add(n, 1)
    b = await cl_add(a, 1)
    return await cl_add(b, 1)


@workflow(name="cl.chatty")
async def cl_chatty(ctx: Ctx, _: Any) -> Any:
    """Logs, waits for signal "go", logs what it said."""
    ctx.log.info("before")
    said = await ctx.wait_for("go")
    ctx.log.info(f"after {said}")
    return said


@object(name="cl.tally")
class ClTally:
    """A virtual object: "add" (exclusive) adds, "total" (shared) reads."""

    def __init__(self) -> None:
        self.n = 0

    @handler
    async def add(self, ctx: Ctx, by: int) -> int:
        self.n = await cl_add(self.n, by)
        return self.n

    @handler(shared=True)
    def total(self, ctx: Ctx) -> int:
        return self.n
