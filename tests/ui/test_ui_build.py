"""What the web UI gained in issue 42, in headless Chromium: the header's figures shown
once they are numbers, starting a run, bulk actions with their progress, and a
completion done from a run's page.

As in test_ui_browser.py, each test waits for what the page shows (Playwright's
`expect`), never for the engine by the clock.
"""

from __future__ import annotations

import re
from typing import Any

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
