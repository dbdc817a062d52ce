"""Takes the README's screenshots of the web UI: docs/ui-runs.png, docs/ui-run.png,
docs/ui-history.png and docs/ui-start.png.

    python tests/ui/ui_screenshots.py

Serves a temp home with a few runs (one retried a step, slept, started a child and
waits for a signal; one failed; some completed), opens the runs page, that run's page
(its timeline drawn in time) and its event history, and the start page with a typed
input, in headless Chromium, and writes the screenshots.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx
from ui_helpers import REPO, browser, start_serving, stop, write_app

DEMO = "fusee_ui_demo"
DEMO_SOURCE = '''
"""A small shop, for the web UI's screenshots."""

from dataclasses import dataclass
from datetime import date

from fusee_runtime import Ctx, RetryPolicy, step, workflow

tries = {}


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Restock:
    warehouse: str
    lines: list[Line]
    by: date


@step
async def reserve(order: str) -> str:
    return f"stock-{order}"


@step(retry=RetryPolicy(attempts=4, initial=0.05, jitter=False))
async def charge(order: str) -> str:
    tries[order] = tries.get(order, 0) + 1
    if order.endswith("7"):
        raise ValueError("card declined")
    if tries[order] < 3:
        raise ConnectionError("payment service timed out")
    return f"charge-{order}"


@step
async def ship(order: str) -> str:
    return f"parcel-{order}"


@workflow
async def invoice(ctx: Ctx, order: str) -> str:
    return f"invoice-{order}"


@workflow
async def restock(ctx: Ctx, order: Restock) -> int:
    """Orders stock for a warehouse, by a date."""
    return sum(line.qty for line in order.lines)


@workflow
async def checkout(ctx: Ctx, order: str) -> dict:
    """Reserves, charges (retrying), invoices and ships an order once approved."""
    ctx.set_attributes({"customer": f"c-{order[-1]}"})
    stock = await reserve(order)
    await ctx.sleep("settle", 0.2)
    paid = await charge(order)
    bill = await ctx.child(invoice, f"{ctx.workflow_id}-invoice", order)
    approval = await ctx.wait_for("approve")
    return {"stock": stock, "paid": paid, "invoice": bill, "approval": approval,
            "parcel": await ship(order)}
'''


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        app_dir = write_app(Path(scratch) / "app", DEMO_SOURCE, DEMO)
        served = start_serving(Path(scratch) / "home", app_dir, app=DEMO)
        try:
            take(served.url)
        finally:
            stop(served)


def take(url: str) -> None:
    for n in range(1, 9):
        order = f"order-100{n}"
        httpx.post(f"{url}/v1/runs", json={"workflow": "checkout", "input": order, "id": order})
    # Each waits for its approval but the one whose card is declined: approve some.
    for n in (1, 2, 4, 5):
        run = f"{url}/v1/runs/order-100{n}"
        while "approve" not in str(httpx.get(run).json()["waiting"]):
            time.sleep(0.05)  # a script, not a test: waiting for the demo to get there
        httpx.post(f"{run}/signals/approve", json={"by": "ana"})
    figures = '#stats span:has([data-stat="steps_s"]):visible'
    with browser() as chrome:
        page = chrome.new_page(viewport={"width": 1366, "height": 860})  # type: ignore[attr-defined]
        page.goto(url + "/")
        page.wait_for_selector(figures)
        page.screenshot(path=str(REPO / "docs" / "ui-runs.png"))
        page.goto(url + "/runs/order-1006")
        page.wait_for_selector('table.timeline tr:has-text("invoice")')
        page.wait_for_selector(figures)
        page.screenshot(path=str(REPO / "docs" / "ui-run.png"), full_page=True)
        page.goto(url + "/runs/order-1006?view=history")
        page.wait_for_selector('table.history tr:has-text("WaitStarted")')
        page.wait_for_selector(figures)
        page.screenshot(path=str(REPO / "docs" / "ui-history.png"))
        page.goto(url + "/start?workflow=restock")
        page.wait_for_selector(".wf-about code.shape")
        page.wait_for_selector(figures)
        page.screenshot(path=str(REPO / "docs" / "ui-start.png"))


if __name__ == "__main__":
    main()
