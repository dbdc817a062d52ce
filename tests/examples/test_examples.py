"""The examples in `workflows/`, tested with the test kit as their users would test them
(issue 19): the `fusee_env` fixture, `fusee_runtime.testing` and fusee's public API
only. docs/testing.md walks through the same tests."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from fusee_runtime import Rejected, Status
from fusee_runtime.testing import Env, replay
from workflows.approval import approval
from workflows.digest import digest
from workflows.expenses import expenses
from workflows.flaky import fetch_rate, flaky
from workflows.order import charge, order, ship
from workflows.parcels import pack, shipment
from workflows.report import nightly_report
from workflows.review import review

ORDER = json.loads((Path(__file__).parents[2] / "workflows" / "order.json").read_text())


async def test_an_order_is_reserved_charged_and_shipped(fusee_env: Env) -> None:
    got = await (await fusee_env.start(order, ORDER, id="o-1")).result()
    assert got["payment"]["cents"] == ORDER["cents"]
    assert got["tracking"].startswith("trk-o-1-")
    assert got["placed_at"] == fusee_env.now.isoformat()
    info = await fusee_env.handle("o-1").describe()
    assert info.attributes == {"customer": "c-7", "cents": 1800}


async def test_a_charge_that_fails_twice_is_retried_and_made_once(fusee_env: Env) -> None:
    fusee_env.mock(charge, raises=ConnectionError("card network down"), attempts=[1, 2])
    run = await fusee_env.start(order, ORDER, id="o-2")
    assert (await run.describe()).waiting[0].kind == "retry"
    await fusee_env.skip(seconds=1)  # backoffs of about 0.2 s, then 0.4 s
    got = await run.result()
    assert got["payment"]["charge"].startswith(f"ch-{ORDER['id']}-"), "attempt 3: the real one"
    assert got["payment"]["cents"] == ORDER["cents"]


async def test_an_order_survives_a_crash_while_it_ships(fusee_env: Env) -> None:
    charged = fusee_env.mock(charge, call=lambda order_id, cents: {"charge": "ch-1"})
    carrier_down = asyncio.Event()  # the first call of ship never comes back

    async def ship_once(order_id: str, address: str) -> str:
        if len(shipped.calls) == 1:
            await carrier_down.wait()
        return "trk-1"

    shipped = fusee_env.mock(ship, call=ship_once)
    await fusee_env.start(order, ORDER, id="o-3")  # returns while ship waits
    assert (len(charged.calls), len(shipped.calls)) == (1, 1)
    await fusee_env.crash()  # ship's result was never recorded
    got = await fusee_env.handle("o-3").result()
    assert got["payment"] == {"charge": "ch-1"} and got["tracking"] == "trk-1"
    assert len(charged.calls) == 1, "the durable charge is not made again"
    assert len(shipped.calls) == 2, "ship, cut off by the crash, runs again"


async def test_an_approval_lapses_after_a_week_without_waiting_a_week(fusee_env: Env) -> None:
    run = await fusee_env.start(approval, {"id": "e-1", "cents": 4200}, id="e-1")
    await fusee_env.skip(days=6, hours=23)
    assert (await run.describe()).status == Status.PARKED
    await fusee_env.skip(hours=1)
    assert await run.result() == {"request": "e-1", "approved": False, "paid_cents": 0}


async def test_an_approved_request_is_paid(fusee_env: Env) -> None:
    run = await fusee_env.start(approval, {"id": "e-2", "cents": 4200}, id="e-2")
    await fusee_env.skip(days=2)
    await fusee_env.signal("e-2", "approve", True)
    assert await run.result() == {"request": "e-2", "approved": True, "paid_cents": 4200}


async def test_a_flaky_service_pauses_the_run_until_it_is_resumed(fusee_env: Env) -> None:
    run = await fusee_env.start(flaky, None, id="fx-1")
    await fusee_env.skip(seconds=1)  # its two attempts
    assert (await run.describe()).status == Status.PAUSED
    fusee_env.mock(fetch_rate, 1.25)  # the service is back
    await fusee_env.resume("fx-1")  # returns once the run has acted on it
    assert (await run.describe()).status == Status.COMPLETED
    assert await run.result() == {"rate": 1.25, "cents": 1250}


async def test_a_review_is_published_once_the_reviewer_completes_it(fusee_env: Env) -> None:
    run = await fusee_env.start(review, {"doc": "q3.pdf"}, id="doc-4")
    assert (await run.describe()).waiting[0].kind == "completion"
    await fusee_env.complete("doc-4", "review", {"ok": True})
    assert await run.result() == {"doc": "q3.pdf", "published": True}


async def test_expenses_take_updates_until_submitted(fusee_env: Env) -> None:
    run = await fusee_env.start(expenses, {"limit_cents": 5000}, id="trip-9")
    assert await run.update("add", {"what": "train", "cents": 4200}) == 4200
    with pytest.raises(Rejected, match="over the limit"):
        await run.update("add", {"what": "hotel", "cents": 900})
    await fusee_env.crash()  # the update is durable: the replay applies it again
    run = fusee_env.handle("trip-9")
    assert await run.query("total") == {"cents": 4200, "items": 1, "limit_cents": 5000}
    await fusee_env.skip(days=30)  # filed as it is once the month is over
    assert (await run.result())["total_cents"] == 4200


async def test_a_digest_streams_what_it_keeps(fusee_env: Env) -> None:
    run = await fusee_env.start(digest, {"feeds": ["engineering", "support"]}, id="dg-1")
    items = [item async for item in run.stream("entries")]
    assert [i["title"] for i in items] == [
        "journal v2 merged",
        "crash tests doubled",
        "customer asks for tail-stream",
    ]
    assert await run.result() == {"entries": 3, "by_feed": {"engineering": 2, "support": 1}}


async def test_a_nightly_report_covers_the_day_before(fusee_env: Env) -> None:
    run = await fusee_env.start(nightly_report, "2026-12-04T02:00:00+00:00")
    assert (await run.result())["day"] == "2026-12-03"


async def test_a_shipment_refunds_the_parcel_that_broke(fusee_env: Env) -> None:
    request = {"order": "o-7", "parcels": ["books", "fragile-glass"]}
    run = await fusee_env.start(shipment, request, id="o-7")
    await fusee_env.skip(seconds=1)  # the broken parcel's retries run out
    got = await run.result()
    assert [p["item"] for p in got["shipped"]] == ["books"]
    assert got["refunded"] == ["refunded fragile-glass of o-7"]
    kid = await fusee_env.handle("o-7-fragile-glass").describe()
    assert kid.status == Status.FAILED and kid.parent is not None


async def test_a_shipment_whose_packing_is_mocked(fusee_env: Env) -> None:
    packed = fusee_env.mock(pack, call=lambda order, item: f"{order}/{item}/mock")
    got = await (await fusee_env.start(shipment, {"order": "o-8", "parcels": ["rug"]})).result()
    assert got["shipped"][0]["item"] == "rug"
    assert [c.workflow for c in packed.calls] == ["parcel"]


async def test_a_golden_history_of_an_order(fusee_env: Env, tmp_path: Path) -> None:
    await (await fusee_env.start(order, ORDER, id="o-9")).result()
    golden = tmp_path / "o-9.json"
    await fusee_env.export("o-9", golden)
    got = await replay(golden)
    assert got.ok and got.message == "replays cleanly: 5 operations, then the code returns"


def test_each_example_has_a_test_here() -> None:
    import workflows

    tested = [order, approval, flaky, review, expenses, digest, nightly_report, shipment]
    examples = {
        value.name
        for module in (getattr(workflows, m) for m in workflows.__all__)
        for value in vars(module).values()
        if type(value).__name__ == "WorkflowDef"
    }
    assert examples - {wf.name for wf in tested} == {"parcel"}  # shipment's child
