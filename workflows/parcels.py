"""`shipment`: an order shipped in parcels, one child workflow per parcel.

    fusee start shipment --input '{"order": "o-7", "parcels": ["books", "lamp", "rug"]}' --id o-7
    fusee describe o-7                  # the parent, and each child with its status
    fusee list --parent o-7             # the children: o-7-books, o-7-lamp, o-7-rug
    fusee history o-7                   # ChildStarted, ChildClosed: what the parent recorded

The parent starts one `parcel` child per parcel (`ctx.start_child`, all at
once inside `ctx.all`: their starts share one fdatasync), then gathers their
results. Each child is a workflow of its own, with its own journal of steps,
its own id (`o-7-books`) and its own line in `fusee list`. A child that
fails (a parcel named "fragile-glass" breaks here, on purpose) raises
`ChildFailed` in the parent, which refunds that parcel and goes on. If the
parent were cancelled or terminated, its children would be terminated too
(`parent_close="terminate"`, the default).
"""

from __future__ import annotations

from typing import Any

from fusee_runtime import ChildFailed, Ctx, step, workflow


@step
async def pack(order: str, item: str) -> str:
    """Packs one parcel; returns its label."""
    if "fragile" in item:
        raise ValueError(f"{item} broke while packing")
    return f"{order}/{item}"


@step
async def send(label: str) -> str:
    """Hands a parcel to the carrier; returns its tracking number."""
    return f"trk-{sum(map(ord, label)) % 100_000:05d}"


@step
async def refund(order: str, item: str) -> str:
    return f"refunded {item} of {order}"


@workflow
async def parcel(ctx: Ctx, job: dict[str, str]) -> dict[str, str]:
    """One parcel: pack it, send it."""
    label = await pack(job["order"], job["item"])
    return {"item": job["item"], "tracking": await send(label)}


@workflow
async def shipment(ctx: Ctx, request: dict[str, Any]) -> dict[str, Any]:
    """Ships each parcel of an order as a child workflow, then gathers them."""
    order, items = request["order"], request["parcels"]
    children = await ctx.all(
        [
            ctx.start_child(parcel, f"{order}-{item}", {"order": order, "item": item})
            for item in items
        ]
    )
    shipped, refunded = [], []
    for item, child in zip(items, children, strict=True):
        try:
            shipped.append(await child.result())
        except ChildFailed as e:
            ctx.log.warn(f"parcel {item} did not ship ({e.status}): {e.failure}")
            refunded.append(await refund(order, item))
    return {"order": order, "shipped": shipped, "refunded": refunded}
