"""The web UI in a real headless Chromium, against a real `fusee serve --http`.

Each test waits for what the page shows (Playwright's `expect`), never for the
engine by the clock: the workflows wait on signals, and the test sends them.
A `window.fuseeMark` set before a change and still there after it shows the page
updated itself without a reload.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from ui_helpers import Served, accept

pytestmark = pytest.mark.xdist_group("ui-browser")


def start(served: Served, workflow: str, input: Any, id: str) -> None:
    answer = httpx.post(
        f"{served.url}/v1/runs", json={"workflow": workflow, "input": input, "id": id}
    )
    assert answer.status_code == 201, answer.text


def mark(page: Any) -> None:
    page.evaluate("window.fuseeMark = 'not reloaded'")


def still_marked(page: Any) -> bool:
    return page.evaluate("window.fuseeMark") == "not reloaded"


def row(page: Any, id: str) -> Any:
    return page.locator(f'table.runs tr[data-id="{id}"]')


def test_the_runs_page_filters_and_updates_live(served: Served, page: Any) -> None:
    start(served, "ui_quick", 1, "quick-1")
    start(served, "ui_quick", 2, "quick-2")
    start(served, "ui_gated", 3, "gated-1")
    page.goto(served.url + "/")
    for id in ("quick-1", "quick-2", "gated-1"):
        expect(row(page, id)).to_be_visible()
    expect(row(page, "gated-1").locator(".status")).to_have_text("parked")

    # Newest first.
    ids = page.locator("table.runs tbody tr").evaluate_all("rows => rows.map(r => r.dataset.id)")
    assert ids.index("gated-1") < ids.index("quick-2") < ids.index("quick-1")

    page.select_option("select[name=status]", "parked")
    page.click("form.filters button[type=submit]")
    expect(row(page, "gated-1")).to_be_visible()
    expect(row(page, "quick-1")).to_have_count(0)

    page.goto(served.url + "/")
    page.fill("input[name=id]", "quick-")
    page.click("form.filters button[type=submit]")
    expect(row(page, "quick-2")).to_be_visible()
    expect(row(page, "gated-1")).to_have_count(0)

    page.fill("input[name=where]", "customer=c-2")
    page.click("form.filters button[type=submit]")
    expect(row(page, "quick-2")).to_be_visible()
    expect(row(page, "quick-1")).to_have_count(0)

    page.goto(served.url + "/?workflow=ui_quick")
    expect(row(page, "quick-1")).to_be_visible()
    mark(page)
    start(served, "ui_quick", 4, "quick-4")  # from outside: the page shows it by itself
    expect(row(page, "quick-4")).to_be_visible()
    expect(row(page, "gated-1")).to_have_count(0)
    assert still_marked(page)
    # The status header reads /metrics.
    expect(page.locator('[data-stat="runs_open"]')).not_to_have_text("–")


def test_a_run_shows_a_step_appear_live_and_the_signal_button_completes_it(
    served: Served, page: Any
) -> None:
    start(served, "ui_gated", 5, "gated-2")
    page.goto(served.url + "/")
    row(page, "gated-2").locator("a").click()
    expect(page.locator("h1.run-id")).to_have_text("gated-2")
    first = page.locator('table.timeline tr.op-step:has-text("ui_first")')
    expect(first).to_be_visible()
    expect(first.locator(".status")).to_have_text("completed")
    expect(page.locator("dl.facts")).to_contain_text("signal next")
    second = page.locator('table.timeline tr.op-step:has-text("ui_second")')
    expect(second).to_have_count(0)

    mark(page)
    httpx.post(f"{served.url}/v1/runs/gated-2/signals/next", json=None).raise_for_status()
    expect(second).to_be_visible()  # appeared while the run executes, without a reload
    assert still_marked(page)

    page.fill("form[data-action=query] input[name=name]", "x")
    page.click("form[data-action=query] button")
    expect(page.locator("#flash")).to_contain_text("x = 5")

    page.fill("form[data-action=signal] input[name=name]", "finish")
    page.fill("form[data-action=signal] input[name=value]", '{"ok": true}')
    page.click("form[data-action=signal] button")
    expect(page.locator("dl.facts .status")).to_have_text("completed")
    expect(page.locator(".io")).to_contain_text('"got"')
    assert httpx.get(f"{served.url}/v1/runs/gated-2/result").json()["result"] == {
        "b": 60,
        "got": {"ok": True},
    }


def test_the_buttons_ask_first_and_act_through_the_api(served: Served, page: Any) -> None:
    start(served, "ui_gated", 7, "gated-3")
    page.goto(served.url + "/runs/gated-3")
    expect(page.locator("dl.facts")).to_contain_text("signal next")

    asked: list[str] = []
    page.remove_listener("dialog", accept)

    def decline(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", decline)
    page.click("button[data-action=terminate]")
    assert asked and "Terminate run gated-3" in asked[-1]
    assert httpx.get(f"{served.url}/v1/runs/gated-3").json()["status"] == "parked"
    page.remove_listener("dialog", decline)
    page.on("dialog", accept)
    page.click("button[data-action=terminate]")
    expect(page.locator("dl.facts .status")).to_have_text("terminated")


def test_the_schedules_page_pauses_unpauses_and_triggers(served: Served, page: Any) -> None:
    page.goto(served.url + "/schedules")
    schedule = page.locator('tr[data-schedule="ui_nightly"]')
    expect(schedule).to_contain_text("0 4 * * *")
    expect(schedule.locator("time").first).to_be_visible()  # the next firing
    schedule.locator("button[data-action=pause]").click()
    expect(schedule.locator(".status")).to_have_text("paused")
    schedule.locator("button[data-action=unpause]").click()
    expect(schedule.locator(".status")).to_have_text("active")
    schedule.locator("button[data-action=trigger]").click()
    expect(page.locator("#flash")).to_contain_text("trigger: done")
    runs = httpx.get(f"{served.url}/v1/runs", params={"workflow": "ui_nightly"}).json()
    assert len(runs) == 1


@pytest.fixture
def elsewhere() -> Iterator[str]:
    """A page of another origin (another port of 127.0.0.1), served from this process."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>another site</title><p>hello"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_page_of_another_origin_cannot_post(served: Served, page: Any, elsewhere: str) -> None:
    start(served, "ui_gated", 9, "gated-4")
    page.goto(elsewhere)
    target = f"{served.url}/v1/runs/gated-4/signals/next"
    # A "simple" request goes out without asking first; the server refuses it (403).
    page.evaluate(
        "url => fetch(url, {method: 'POST', mode: 'no-cors', body: '1',"
        " headers: {'Content-Type': 'text/plain'}})",
        target,
    )
    # A JSON post asks first (CORS preflight), is refused, and never goes out.
    failed = page.evaluate(
        "url => fetch(url, {method: 'POST', body: '1', headers: {'Content-Type':"
        " 'application/json'}}).then(() => 'sent', e => 'refused: ' + e.message)",
        target,
    )
    assert failed.startswith("refused")
    # A form posted from that page.
    page.set_content(
        f'<form method="post" action="{target}" enctype="text/plain">'
        '<input name="x" value="1"></form>'
    )
    with page.expect_navigation():
        page.evaluate("document.forms[0].submit()")
    assert "Forbidden" in page.content() or "other origins" in page.content()

    history = httpx.get(f"{served.url}/v1/runs/gated-4/history").json()
    assert [r for r in history if r["type"] == "SignalReceived"] == []
    described = httpx.get(f"{served.url}/v1/runs/gated-4").json()
    assert described["status"] == "parked"
    origin = elsewhere.rstrip("/")
    refused = httpx.post(target, content=b"1", headers={"Origin": origin})
    assert refused.status_code == 403


def test_with_a_token_the_login_form_sets_a_strict_httponly_cookie(
    serve: Callable[..., Served], page: Any
) -> None:
    token = "ui-test-token-0123456789"
    guarded = serve("--token", token)
    assert httpx.get(f"{guarded.url}/v1/runs").status_code == 401
    headers = {"Authorization": f"Bearer {token}"}
    answer = httpx.post(
        f"{guarded.url}/v1/runs",
        json={"workflow": "ui_gated", "input": 1, "id": "guarded-1"},
        headers=headers,
    )
    assert answer.status_code == 201

    page.goto(guarded.url + "/runs/guarded-1")
    expect(page.locator("form.login")).to_be_visible()
    page.fill("input[name=token]", "not-the-token-at-all")
    page.click("form.login button")
    expect(page.locator("p.error")).to_contain_text("not the server's token")
    assert page.context.cookies() == []

    page.fill("input[name=token]", token)
    page.click("form.login button")
    expect(page.locator("h1.run-id")).to_have_text("guarded-1")  # back where it was going
    (cookie,) = page.context.cookies()
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert token not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # no script reads it

    page.fill("form[data-action=signal] input[name=name]", "next")
    page.click("form[data-action=signal] button")
    expect(page.locator('table.timeline tr:has-text("ui_second")')).to_be_visible()
    expect(page.locator('[data-stat="runs_open"]')).to_have_text("1")  # /metrics, by cookie

    page.click(".logout button")
    expect(page.locator("form.login")).to_be_visible()
    assert page.context.cookies() == []


def test_a_batch_acts_on_every_run_the_filter_matches_once_asked_how_many(
    served: Served, page: Any
) -> None:
    for i in range(3):
        start(served, "ui_gated", i, f"batch-ui-{i}")
    listed = httpx.get(
        f"{served.url}/v1/runs", params={"workflow": "ui_gated", "status": "open", "limit": 500}
    ).json()
    page.goto(served.url + "/?workflow=ui_gated&status=open")
    asked: list[str] = []
    page.remove_listener("dialog", accept)

    def yes(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", yes)
    page.select_option("form[data-batch] select[name=action]", "cancel")
    page.click("form[data-batch] button[type=submit]")
    # The batch's page follows its progress, live.
    expect(page.locator("span[data-progress]")).to_have_text(f"{len(listed)} of {len(listed)}")
    expect(page.locator("dd[data-outcomes]")).to_have_text(f"cancelled: {len(listed)}")
    expect(page.locator("dl.facts .status")).to_have_text("completed")
    assert asked == [f"cancel {len(listed)} runs matching this filter, each once?"]
    batch = page.locator("h1.run-id").get_attribute("data-run-id")
    doc = httpx.get(f"{served.url}/v1/batches/{batch}").json()
    assert doc["outcomes"] == {"cancelled": len(listed)}
    for i in range(3):
        status = httpx.get(f"{served.url}/v1/runs/batch-ui-{i}").json()["status"]
        assert status == "cancelled"
        expect(page.locator(f'table.batch-runs tr[data-id="batch-ui-{i}"]')).to_contain_text(
            "cancelled"
        )
