"""Workflows for the batch tests (`--app batch_app`), driven by `fusee serve` children.

`BATCH_FIXED` names a file: while it does not exist, `bt.charge` fails for good; a
reset of a failed run once it exists completes.
"""

from __future__ import annotations

import os
from pathlib import Path

from fusee_runtime import Ctx, RetryPolicy, step, workflow


@workflow(name="bt.wait")
async def bt_wait(ctx: Ctx, n: int) -> int:
    """Waits for signal "go"; returns `n` and what it said."""
    said = await ctx.wait_for("go")
    return n + int(said or 0)


@step(retry=RetryPolicy(attempts=1))
def bt_charge(n: int) -> int:
    if not Path(os.environ["BATCH_FIXED"]).exists():
        raise ConnectionError("the payment service is down")
    return n


@workflow(name="bt.charge")
async def bt_charge_run(ctx: Ctx, n: int) -> int:
    """Charges `n` once: it fails while the service is down."""
    return await bt_charge(n)
