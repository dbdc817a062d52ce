"""Parents and children for the crash tests of child workflows (see family_child.py).

Every step function appends what it did to the side ledger (crash_app.ledger),
so the test counts executions across the child process's lives.
"""

from __future__ import annotations

import crash_app

from fusee_runtime import Cancelled, ChildFailed, Ctx, step, workflow


@step
async def kid_work(n: int) -> int:
    crash_app.ledger(f"kid_work-{n}")
    return n * 10


@step
async def total(values: list[int]) -> int:
    crash_app.ledger("total")
    return sum(values)


@workflow
async def kid(ctx: Ctx, n: int) -> int:
    return await kid_work(n)


@workflow
async def mom(ctx: Ctx, n: int) -> dict[str, object]:
    """Fans out to `n` children, gathers their results, adds them up in a step."""
    ids = [f"{ctx.workflow_id}-kid-{i}" for i in range(n)]
    handles = await ctx.all([ctx.start_child(kid, kid_id, i) for i, kid_id in enumerate(ids)])
    results = await ctx.all([h.result() for h in handles])
    return {"results": results, "total": await total(results)}


@workflow
async def sleeper(ctx: Ctx, _: None) -> str:
    """A child that runs until a signal or its parent's close ends it."""
    return await ctx.wait_for("wake")


@workflow
async def dad(ctx: Ctx, policy: str) -> str:
    """Starts a sleeper child with parent_close=`policy`, then closes without waiting."""
    await ctx.start_child(sleeper, f"{ctx.workflow_id}-sleeper", parent_close=policy)
    return await total([1])


@workflow
async def careful(ctx: Ctx, _: None) -> str:
    """Waits for a child's result, and takes its own cancel there."""
    child = await ctx.start_child(sleeper, f"{ctx.workflow_id}-sleeper")
    try:
        await child.result()
    except Cancelled:
        return "took the cancel where it waited"
    return "no cancel"


@workflow
async def guardian(ctx: Ctx, _: None) -> str:
    """Waits for a sleeper child's result; for a child that does not complete, its status."""
    try:
        return await ctx.child(sleeper, f"{ctx.workflow_id}-sleeper")
    except ChildFailed as e:
        return f"child {e.status}"


@workflow
async def broken(ctx: Ctx, _: None) -> int:
    raise RuntimeError("broken on purpose")


@workflow
async def caller(ctx: Ctx, target: str) -> str:
    """Signals `target` once, then waits for a child that fails."""
    await ctx.signal_workflow(target, "wake", "from caller")
    try:
        await ctx.child(broken, f"{ctx.workflow_id}-kid")
    except ChildFailed as e:
        return e.status
    return "no failure"
