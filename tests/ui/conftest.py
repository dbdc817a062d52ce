"""Fixtures for the web UI's browser tests: a `fusee serve` child with the UI's
workflows, and a headless Chromium driven by Playwright (tests/ui/ui_helpers.py).

Without the `chromium` binary or the `playwright` package the tests are skipped, with
the reason; CI installs both (.ci/run, the `test` extra), and there (CI set) a missing
one stops the run instead.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ui_helpers import (
    BROWSER_WAIT_MS,
    Served,
    accept,
    browser,
    chromium,
    start_serving,
    stop,
    write_app,
)

MISSING = [
    what
    for what, found in (
        ("the chromium binary (apt-get install chromium)", chromium() is not None),
        (
            "the playwright package (pip install playwright)",
            importlib.util.find_spec("playwright") is not None,
        ),
    )
    if not found
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if MISSING:
        reason = "no browser to drive: missing " + " and ".join(MISSING)
        if os.environ.get("CI"):
            # .ci/run installs both: in CI a missing browser is a broken setup, not a skip.
            raise pytest.UsageError(reason)
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if "tests/ui/" in str(item.fspath).replace("\\", "/"):
                item.add_marker(skip)


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Served]]:
    """Starts `fusee serve --http 127.0.0.1:0 [ARGS...]` on a fresh home with the UI's
    workflows; children still running when the module's tests end are stopped."""
    app_dir = write_app(tmp_path_factory.mktemp("ui-app"))
    children: list[Served] = []

    def start(*args: str) -> Served:
        served = start_serving(tmp_path_factory.mktemp("ui-home"), app_dir, *args)
        children.append(served)
        return served

    yield start
    for served in children:
        stop(served)


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    """One headless Chromium for the module's tests."""
    with browser() as launched:
        yield launched


@pytest.fixture
def page(chrome: Any) -> Iterator[Any]:
    """A fresh page (its own cookies) that accepts every confirmation it is asked."""
    from playwright.sync_api import expect

    expect.set_options(timeout=BROWSER_WAIT_MS)
    context = chrome.new_context(viewport={"width": 1366, "height": 860})
    context.set_default_timeout(BROWSER_WAIT_MS)
    opened = context.new_page()
    opened.on("dialog", accept)
    yield opened
    context.close()


@pytest.fixture(scope="module")
def served(serve: Callable[..., Served]) -> Served:
    """One server, without a token, for the module's tests."""
    return serve()
