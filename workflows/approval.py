"""`approval`: wait for a person's decision, then act on it.

    fusee start approval --id expense-7 --detach
    fusee signal expense-7 approve true
    fusee result expense-7 --wait

The run waits for the signal `approve` (for up to a week) without holding
anything: it is parked, and costs only its record in the journal. The
signal is durable once `fusee signal` returns, whether or not a process
is running the workflow then; the run takes it the next time one does.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fusee_runtime import Ctx, step, workflow

DECISION_WAIT = timedelta(days=7)
"""How long a request waits for its decision before it lapses."""


@step
async def settle(request: dict[str, Any], approved: bool) -> dict[str, Any]:
    """Acts on the decision (here: says what would be paid out)."""
    cents = request.get("cents", 0) if approved else 0
    return {"request": request.get("id"), "approved": approved, "paid_cents": cents}


@workflow
async def approval(ctx: Ctx, request: dict[str, Any] | None) -> dict[str, Any]:
    """Waits for `approve` (any JSON; true approves), then settles the request."""
    request = request or {"id": ctx.workflow_id}
    decision = await ctx.wait_for("approve", timeout=DECISION_WAIT)  # None once it lapses
    return await settle(request, decision is True)
