"""The web UI shows a queued run (`start(queue=...)`) in headless Chromium: its status
badge, its place in its queue on the runs page and on its own page, and the run let in,
live, once its queue is sized to take it (`PUT /v1/queues/{name}`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from ui_helpers import Served

pytestmark = pytest.mark.xdist_group("ui-browser")


def start(served: Served, id: str, **flow: Any) -> None:
    body = {"workflow": "ui_gated", "input": 1, "id": id, **flow}
    answer = httpx.post(f"{served.url}/v1/runs", json=body)
    assert answer.status_code == 201, answer.text


def row(page: Any, id: str) -> Any:
    return page.locator(f'table.runs tr[data-id="{id}"]')


def test_a_queued_run_shows_its_place_and_goes_in_live(served: Served, page: Any) -> None:
    sized = httpx.put(f"{served.url}/v1/queues/ui.q", json={"concurrency": 0, "per_key": None})
    assert sized.status_code == 200, sized.text
    start(served, "queued-1", queue="ui.q", queue_key="acme")

    page.goto(served.url + "/?status=queued")
    badge = row(page, "queued-1").locator(".status")
    expect(badge).to_have_text("queued")
    expect(badge).to_have_class("status muted")
    expect(row(page, "queued-1").locator(".why")).to_have_text("queue ui.q: 1st of 1 in key 'acme'")

    page.goto(served.url + "/runs/queued-1")
    expect(page.locator("dl.facts")).to_contain_text("queue ui.q: 1st of 1 in key 'acme'")
    page.evaluate("window.fuseeMark = 'not reloaded'")
    grown = httpx.put(f"{served.url}/v1/queues/ui.q", json={"concurrency": 1, "per_key": None})
    assert grown.status_code == 200, grown.text
    expect(page.locator("dl.facts .status")).to_have_text("parked")  # let in, it waits
    assert page.evaluate("window.fuseeMark") == "not reloaded"
