"""`workflows/webshop.py`: a Starlette application that starts orders through
`fusee_runtime.Client` and answers with their result, in front of a `fusee serve`
child process that drives the runs (issue 38)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from processes import REPO, serve_http, stop_child

ORDER = json.loads((REPO / "workflows" / "order.json").read_text())


@pytest.fixture
async def shop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[httpx.AsyncClient]:
    """The web application (its lifespan connects its client), beside `fusee serve`."""
    home = tmp_path / "home"
    child, _ = serve_http(home, REPO, "workflows")
    monkeypatch.setenv("FUSEE_HOME", str(home))
    from workflows.webshop import app, lifespan

    try:
        async with lifespan(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
                yield client
    finally:
        stop_child(child)


async def test_the_web_shop_places_an_order_through_the_client_and_answers_its_result(
    shop: httpx.AsyncClient,
) -> None:
    placed = await shop.post("/orders/o-1", json=ORDER)
    assert placed.status_code == 200, placed.text
    result = placed.json()["result"]
    assert result["payment"]["cents"] == ORDER["cents"]
    assert result["tracking"].startswith("trk-o-1-")
    again = await shop.post("/orders/o-1", json={**ORDER, "cents": 1})  # the same id: the same run
    assert again.json() == placed.json()
    looked = await shop.get("/orders/o-1")
    assert looked.json() == {"id": "o-1", "status": "completed", "error": None}
    assert (await shop.get("/orders/o-9")).status_code == 404


async def test_an_order_that_fails_is_answered_as_failed(shop: httpx.AsyncClient) -> None:
    refused = await shop.post("/orders/o-2", json={**ORDER, "quantity": 0})
    assert refused.status_code == 422, refused.text
    assert "cannot reserve 0" in refused.json()["failed"]
    assert (await shop.get("/orders/o-2")).json()["status"] == "failed"
