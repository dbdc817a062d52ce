"""What the web UI gained in issue 42, in headless Chromium: the header's figures shown
once they are numbers, starting a run, bulk actions with their progress, and a
completion done from a run's page.

As in test_ui_browser.py, each test waits for what the page shows (Playwright's
`expect`), never for the engine by the clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import expect
from ui_helpers import Served

pytestmark = pytest.mark.xdist_group("ui-browser")


def test_the_header_shows_its_figures_once_they_are_numbers_never_a_dash(
    served: Served, page: Any
) -> None:
    page.route("**/metrics?*", lambda route: route.abort())  # no reading yet
    page.goto(served.url + "/")
    expect(page.locator("table.runs")).to_be_visible()
    expect(page.locator("#stats span:visible")).to_have_count(0)
    expect(page.locator("#stats")).not_to_contain_text("–")

    page.unroute("**/metrics?*")
    expect(page.locator('[data-stat="runs_open"]')).to_have_text(re.compile(r"^\d+$"))
    # A rate needs two readings; then it is a number.
    expect(page.locator('[data-stat="steps_s"]')).to_have_text(re.compile(r"^\d+$"))
    expect(page.locator('[data-stat="syncs_s"]')).to_have_text(re.compile(r"^\d+$"))
    expect(page.locator("#stats")).not_to_contain_text("–")


def test_a_run_starts_from_the_ui_with_the_shape_of_its_input_shown(
    served: Served, page: Any
) -> None:
    page.goto(served.url + "/")
    page.get_by_role("link", name="Start a run").click()
    form = page.locator("form[data-start]")
    options = form.locator("select[name=workflow] option").all_text_contents()
    assert {"ui_quick", "ui_gated", "ui_typed", "ui_nightly"} <= set(options)
    form.locator("select[name=workflow]").select_option("ui_typed")
    about = page.locator('.wf-about[data-workflow="ui_typed"]')
    expect(about).to_be_visible()
    expect(page.locator('.wf-about[data-workflow="ui_quick"]')).to_be_hidden()
    expect(about).to_contain_text("ui_typed(UiOrder) -> int")
    expect(about).to_contain_text("Counts the items of an order.")
    expect(about.locator("code.shape")).to_have_text(
        '{"customer": str, "lines": [{"sku": str, "qty": int}, ...], '
        '"at": datetime (ISO 8601 string)}'
    )
    field = form.locator("textarea[name=input]")
    assert orjson.loads(field.input_value()) == {  # an example of that shape, to edit
        "customer": "",
        "lines": [{"sku": "", "qty": 0}],
        "at": "2026-01-01T00:00:00+00:00",
    }
    order = {"customer": "c-1", "lines": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 3}]}
    field.fill(orjson.dumps(order | {"at": "2026-12-05T12:00:00+00:00"}).decode())
    form.locator("input[name=id]").fill("typed-1")
    form.locator("button[type=submit]").click()
    expect(page.locator("h1.run-id")).to_have_text("typed-1")
    expect(page.locator("dl.facts .status").first).to_have_text("completed")
    expect(page.locator(".io section").nth(1)).to_contain_text("5")

    # An input that is not of the shape is refused, in the engine's words.
    page.goto(served.url + "/start?workflow=ui_typed")
    form.locator("textarea[name=input]").fill('{"customer": "c-2", "lines": 7}')
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("start refused")
    expect(page.locator("#flash")).to_contain_text("lines")
    form.locator("textarea[name=input]").fill("{not json")
    form.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("the input is not JSON")


def test_a_batch_signal_goes_to_every_run_the_filter_matches_and_shows_its_progress(
    served: Served, page: Any
) -> None:
    for i in range(2):
        answer = httpx.post(
            f"{served.url}/v1/runs",
            json={"workflow": "ui_gated", "input": i, "id": f"bulk-{i}"},
        )
        assert answer.status_code == 201, answer.text
    page.goto(served.url + "/?workflow=ui_gated&where=customer%3Dnone")
    expect(page.locator("table.runs")).to_contain_text("No runs match")
    page.goto(served.url + "/?workflow=ui_gated&status=parked")
    expect(page.locator('table.runs tr[data-id="bulk-1"]')).to_be_visible()
    form = page.locator("form[data-batch]")
    expect(form.locator("input[name=signal]")).to_be_hidden()
    form.locator("select[name=action]").select_option("signal")
    form.locator("input[name=signal]").fill("next")
    form.locator("input[name=value]").fill('{"by": "ui"}')
    parked = len(
        httpx.get(
            f"{served.url}/v1/runs", params={"workflow": "ui_gated", "status": "parked"}
        ).json()
    )
    form.locator("button[type=submit]").click()
    expect(page.locator("span[data-progress]")).to_have_text(f"{parked} of {parked}")
    expect(page.locator("dd[data-outcomes]")).to_have_text(f"signalled: {parked}")
    for i in range(2):
        page.goto(f"{served.url}/runs/bulk-{i}")
        expect(page.locator("dl.facts")).to_contain_text("signal finish")


def test_a_completion_s_token_shows_behind_the_login_and_the_page_completes_it(
    serve: Callable[..., Served], page: Any
) -> None:
    secret = "ui-build-token-0123456789"
    guarded = serve("--token", secret)
    bearer = {"Authorization": f"Bearer {secret}"}
    answer = httpx.post(
        f"{guarded.url}/v1/runs",
        json={"workflow": "ui_approval", "input": 1, "id": "approve-1"},
        headers=bearer,
    )
    assert answer.status_code == 201, answer.text
    page.goto(guarded.url + "/runs/approve-1")
    page.fill("input[name=token]", secret)
    page.click("form.login button")
    panel = page.locator('section.completions .completion[data-step="pick"]')
    expect(panel).to_be_visible()
    (awaited,) = httpx.get(f"{guarded.url}/v1/runs/approve-1/completions", headers=bearer).json()
    expect(panel.locator("code.token")).to_have_text(awaited["token"])
    expect(panel).to_contain_text(awaited["url"])
    # Without the login, the page (and the token on it) is not served.
    unlogged = httpx.get(f"{guarded.url}/runs/approve-1", follow_redirects=False)
    assert unlogged.status_code == 303 and awaited["token"] not in unlogged.text

    field = panel.locator("input[name=value]")
    field.fill('{"size": "L"}')
    # What is typed stays, focused, when the live part is swapped (an open run's is).
    page.evaluate("document.getElementById('run-state').dataset.mark = 'before'")
    expect(page.locator("#run-state[data-mark]")).to_have_count(0)
    expect(field).to_have_value('{"size": "L"}')
    expect(field).to_be_focused()
    panel.locator("button[type=submit]").click()
    expect(page.locator("#flash")).to_contain_text("complete: done")
    expect(page.locator("dl.facts .status").first).to_have_text("completed")
    expect(page.locator("section.completions")).to_have_count(0)
    result = httpx.get(f"{guarded.url}/v1/runs/approve-1/result", headers=bearer).json()
    assert result["result"] == {"picked": {"size": "L"}}
