"""`expenses`: an expense report that stays open while people add to it.

    fusee serve &                                   # drives the run: answers its handlers
    fusee start expenses --id trip-9 --detach
    fusee update trip-9 add '{"what": "train", "cents": 4200}'
    fusee update trip-9 set-limit 50000 --update-id raise-1
    fusee query trip-9 total
    fusee signal trip-9 submit
    fusee result trip-9 --wait

The run's own code answers queries and applies updates, through the
handlers it registers. The query `total` reads the report and records
nothing. The updates `add` and `set-limit` change it, each checked first by
its validator: a refused update is not recorded, and `fusee update` exits 2
with the validator's message. An accepted update is recorded with its id
and answered once that is durable; sent again with the same `--update-id`,
it is applied once. A replay (after a crash, or when the parked run wakes)
applies the recorded updates again where they were applied, so the code
sees the same report. Only a run that some process drives answers (`fusee
serve`, or the `fusee start` that follows it): with none, both commands exit
2 saying so.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fusee_runtime import Ctx, step, workflow

LIMIT_CENTS = 20_000
"""What a report may add up to until someone raises its limit with `set-limit`."""

SUBMIT_WAIT = timedelta(days=30)
"""How long a report stays open for additions before it is filed as it is."""


@step
async def file_report(report: dict[str, Any]) -> dict[str, Any]:
    """Files the report (a stand-in for the accounting system)."""
    return {**report, "filed": True}


@workflow
async def expenses(ctx: Ctx, request: dict[str, Any] | None) -> dict[str, Any]:
    """Takes expenses by update until the signal `submit`, then files the report."""
    limit = (request or {}).get("limit_cents", LIMIT_CENTS)
    report: dict[str, Any] = {"id": ctx.workflow_id, "limit_cents": limit, "items": []}

    def total() -> int:
        return sum(item["cents"] for item in report["items"])

    def check_item(item: Any) -> None:
        # Validators run before anything is recorded: raising refuses the update.
        if not (
            isinstance(item, dict)
            and isinstance(item.get("what"), str)
            and type(item.get("cents")) is int
            and item["cents"] > 0
        ):
            raise ValueError('an expense is {"what": TEXT, "cents": A POSITIVE WHOLE NUMBER}')
        if total() + item["cents"] > report["limit_cents"]:
            raise ValueError(
                f"over the limit: {total()} + {item['cents']} > {report['limit_cents']} cents "
                "(raise it with set-limit)"
            )

    def add(item: dict[str, Any]) -> int:
        report["items"].append({"what": item["what"], "cents": item["cents"]})
        return total()

    def check_limit(cents: Any) -> None:
        if type(cents) is not int or cents < total():
            raise ValueError(
                f"the limit is a whole number of cents, at least the total ({total()})"
            )

    def set_limit(cents: int) -> int:
        report["limit_cents"] = cents
        return cents

    def summary(_: Any) -> dict[str, Any]:
        return {
            "cents": total(),
            "items": len(report["items"]),
            "limit_cents": report["limit_cents"],
        }

    ctx.on_query("total", summary)
    ctx.on_update("add", add, validate=check_item)
    ctx.on_update("set-limit", set_limit, validate=check_limit)
    await ctx.wait_for("submit", timeout=SUBMIT_WAIT)  # filed as it is once that lapses
    return await file_report({**report, "total_cents": total()})
