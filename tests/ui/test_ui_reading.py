"""A new user's first read of the web UI, in headless Chromium: a run's page reads in
order (where it is, the run's name and facts, then the forms to talk to it, which keep
what is typed while the page follows the run), the event history breaks no record type
or name inside a word, a reset's banner states no status the page may have left behind,
and counts say `1 run`, `2 runs`.

As in test_ui_browser.py, each test waits for what the page shows (Playwright's
`expect`); the workflows (tests/ui/ui_helpers.py) wait on signals.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from playwright.sync_api import expect
from ui_helpers import Served

pytestmark = pytest.mark.xdist_group("ui-browser")

WIDTHS = (1400, 1700)
"""The widths the report came from."""

LINE_TOPS = """cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size;
}"""
"""How many lines a table cell's text takes (the distinct tops of its boxes)."""


def start(served: Served, workflow: str, input: Any, id: str) -> None:
    answer = httpx.post(
        f"{served.url}/v1/runs", json={"workflow": workflow, "input": input, "id": id}
    )
    assert answer.status_code == 201, answer.text


def box(page: Any, selector: str) -> dict[str, float]:
    found = page.locator(selector).first.bounding_box()
    assert found is not None, selector
    return found


def swapped(page: Any) -> None:
    """Returns once the live part was swapped for a fresh one (an open run's bars grow,
    so its part changes every second)."""
    page.evaluate("document.querySelector('#live dl.facts').dataset.before = 'swap'")
    expect(page.locator("#live dl.facts[data-before]")).to_have_count(0)


def test_the_run_page_names_the_run_first_and_the_forms_keep_what_is_typed(
    served: Served, page: Any
) -> None:
    start(served, "ui_gated", 3, "read-1")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(served.url + "/runs/read-1")
        talk = page.locator("section.actions:has-text('Talk to this run')")
        expect(talk).to_be_visible()
        forms = box(page, "section.actions:has-text('Talk to this run')")
        for first in ("p.crumbs", "h1.run-id", "dl.facts"):
            above = box(page, first)
            assert above["y"] + above["height"] <= forms["y"], (width, first, above, forms)

    name = page.locator("form[data-action=signal] input[name=name]")
    name.fill("nex")
    name.press("End")
    swapped(page)
    swapped(page)
    expect(name).to_have_value("nex")
    expect(name).to_be_focused()
    name.press("t")  # the caret is where it was
    page.fill("form[data-action=signal] input[name=value]", "null")
    page.click("form[data-action=signal] button")
    expect(page.locator("dl.facts")).to_contain_text("signal finish")
    page.fill("form[data-action=query] input[name=name]", "x")
    page.click("form[data-action=query] button")
    expect(page.locator("#flash")).to_have_text("x = 3")


def test_the_event_history_breaks_no_record_type_or_name_inside_a_word(
    served: Served, page: Any
) -> None:
    start(served, "ui_paused", 4, "words-1")
    for width in (*WIDTHS, 900):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(served.url + "/runs/words-1?view=history")
        expect(page.locator("dl.facts .status").first).to_have_text("paused")
        failed = page.locator("table.history tr:has-text('AttemptFailed')")
        expect(failed.first).to_contain_text("ui_flaky")
        # Record (4th column) and Name (6th): one line each, whatever the detail's length.
        for column in (4, 6):
            cells = page.locator(f"table.history tbody td:nth-child({column})")
            lines = cells.evaluate_all(f"cells => cells.map({LINE_TOPS})")
            texts = cells.all_text_contents()
            broken = [text for text, n in zip(texts, lines, strict=True) if n > 1]
            assert broken == [], (width, column, broken)


def test_the_reset_banner_names_the_new_run_and_no_status(served: Served, page: Any) -> None:
    start(served, "ui_kept", 5, "banner-1")
    page.goto(served.url + "/runs/banner-1")
    expect(page.locator("dl.facts")).to_contain_text("signal go")
    before = page.locator("#run-state").get_attribute("data-run")
    page.locator('table.timeline tr[data-op="4"] button[data-action=reset]').click()
    expect(page.locator("#run-state")).not_to_have_attribute("data-run", before)
    new = page.locator("#run-state").get_attribute("data-run")
    flash = page.locator("#flash")
    expect(flash).to_have_text(f"reset: done; the new run is {new}")
    expect(flash.locator("a")).to_have_attribute("href", f"/runs/banner-1?run={new}")


def test_the_header_counts_one_run_and_two_runs(served: Served, page: Any) -> None:
    """The header's figure of open runs comes from /metrics: here answered by the test,
    1 then 2."""
    open_ = {"running": 1}

    def metrics(route: Any) -> None:
        lines = "".join(f'fusee_runs_open{{status="{s}"}} {n}\n' for s, n in open_.items())
        route.fulfill(status=200, content_type="text/plain", body=lines)

    page.route("**/metrics?*", metrics)
    page.goto(served.url + "/")
    figure = page.locator("#stats > span").first
    expect(figure).to_have_text("1 run open")
    open_["parked"] = 1
    expect(figure).to_have_text("2 runs open")
    open_.clear()
    expect(figure).to_have_text("0 runs open")
