"""`order`: reserve stock, charge the card, ship. A complete first run.

    fusee start order --input workflows/order.json --id o-1
    fusee logs o-1                                  # the lines the run logged
    fusee history o-1                               # its journal, step by step
    fusee list --where customer=c-7 --where 'cents>1000'   # found by its attributes

It needs no signal and no timer, so it runs straight to completion. Each
step's result is journaled: after a crash the workflow runs again from the
top, the journal answers the steps that finished, and only the rest run.
The payment service below takes idempotency keys, the way real ones do, so
a charge that runs again after a crash (its function ran, its result was
not yet durable) is still made once.
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import Ctx, RetryPolicy, current_ctx, step, workflow

# Stand-in for a payment provider: charges by idempotency key.
_charges: dict[str, dict[str, Any]] = {}


@step
def reserve(sku: str, quantity: int) -> str:
    """Holds stock. A plain `def` step: it runs in the engine's thread pool."""
    if quantity < 1:
        raise ValueError(f"cannot reserve {quantity} of {sku}")
    current_ctx().log.info(f"holding {quantity} of {sku}")  # tagged with the step and attempt
    return f"hold-{sku}-{quantity}"


@step(retry=RetryPolicy(attempts=5, initial=0.2), timeout=10)
async def charge(order_id: str, cents: int) -> dict[str, Any]:
    """Charges the card once, however often the step runs (retries, recovery)."""
    key = current_ctx().key()  # stable for this step across retries and crashes
    return _charges.setdefault(
        key, {"charge": f"ch-{order_id}-{len(_charges) + 1}", "cents": cents, "key": key}
    )


@step
async def ship(order_id: str, address: str) -> str:
    """Books the parcel and returns its tracking number."""
    return f"trk-{order_id}-{sum(map(ord, address)) % 10_000:04d}"


@workflow
async def order(ctx: Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """Places an order: reserve, charge, ship, in that order, each step durable."""
    placed_at = ctx.now()  # recorded: a replay sees the same instant
    # Not written again when a recovery replays this code: `fusee logs o-1` shows it once.
    ctx.log.info(f"order {request['id']}: {request['quantity']} of {request['sku']}")
    # Search attributes: what the order is found by (`fusee list --where`), kept
    # apart from its payloads.
    ctx.set_attributes({"customer": request.get("customer"), "cents": request["cents"]})
    hold = await reserve(request["sku"], request["quantity"])
    payment = await charge(request["id"], request["cents"])
    tracking = await ship(request["id"], request["address"])
    ctx.log.info(f"shipped with tracking number {tracking}")
    return {
        "order": request["id"],
        "placed_at": placed_at.isoformat(),
        "hold": hold,
        "payment": payment,
        "tracking": tracking,
    }
