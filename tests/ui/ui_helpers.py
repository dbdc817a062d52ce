"""What the web UI's browser tests and the screenshot script share: a `fusee serve
--http 127.0.0.1:0` child on a temp home with a small workflow module, and a headless
Chromium (Debian's `chromium`) driven by Playwright through `executable_path`.

The workflows wait on signals between their steps, so a test decides when a run goes
on: it never waits for the engine by the clock, only for the page to show something.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from processes import serve_http, stop_child  # noqa: E402  (tests/processes.py)

APP = "fusee_ui_testapp"
APP_SOURCE = '''
"""Workflows for the web UI's browser tests (tests/ui)."""

from dataclasses import dataclass
from datetime import datetime

from fusee_runtime import Ctx, Exhausted, RetryPolicy, step, workflow


@step
async def ui_first(x: int) -> int:
    return x + 1


@step
async def ui_second(x: int) -> int:
    return x * 10


@workflow
async def ui_quick(ctx: Ctx, x: int) -> int:
    ctx.set_attributes({"customer": f"c-{x}"})
    return await ui_first(x)


@workflow
async def ui_gated(ctx: Ctx, x: int) -> dict:
    ctx.on_query("x", lambda arg: x)
    a = await ui_first(x)
    await ctx.wait_for("next")
    b = await ui_second(a)
    got = await ctx.wait_for("finish")
    return {"b": b, "got": got}


@workflow(cron="0 4 * * *")
async def ui_nightly(ctx: Ctx, at: str) -> str:
    return at


@step
async def ui_charge(x: int) -> int:
    return x * 2


@workflow
async def ui_kept(ctx: Ctx, x: int) -> int:
    """Streams an item before and after each step, then waits for `go`."""
    progress = ctx.stream("progress")
    progress.append("queued")
    a = await ui_first(x)
    progress.append("first")
    b = await ui_charge(a)
    progress.append("charged")
    await ctx.wait_for("go")
    return b


@step(retry=RetryPolicy(attempts=2, initial=0.01, jitter=False, on_exhausted=Exhausted.PAUSE))
async def ui_flaky(x: int) -> int:
    raise ValueError(f"not yet {x}")


@workflow
async def ui_paused(ctx: Ctx, x: int) -> int:
    """Takes the gift-wrap patch, then pauses on a step that always fails."""
    if ctx.patched("gift-wrap"):
        x += 1
    return await ui_flaky(x)


@workflow
async def ui_looping(ctx: Ctx, n: int) -> int:
    """Continues as new once, then waits for `go`."""
    if n < 1:
        await ctx.continue_as_new(n + 1)
    await ctx.wait_for("go")
    return n


@dataclass
class UiLine:
    sku: str
    qty: int


@dataclass
class UiOrder:
    customer: str
    lines: list[UiLine]
    at: datetime


@workflow
async def ui_typed(ctx: Ctx, order: UiOrder) -> int:
    """Counts the items of an order."""
    return sum(line.qty for line in order.lines)


@workflow
async def ui_approval(ctx: Ctx, x: int) -> dict:
    """Waits for step `pick` to be completed from outside."""
    got = await ctx.await_completion("pick", lambda completion: None)
    return {"picked": got}


@workflow
async def ui_parent(ctx: Ctx, x: int) -> int:
    """Starts one child and returns its result."""
    return await ctx.child(ui_quick, f"{ctx.workflow_id}-kid", x)
'''

BROWSER_WAIT_MS = 120_000
"""A hang guard, not a time limit: how long a page may take to show what a test waits
for before the test fails with what the page shows (Playwright's default is 5 s,
too short for a loaded CI machine)."""


def chromium() -> str | None:
    """Debian's chromium binary, if installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def accept(dialog: Any) -> None:
    """Says yes to a page's `confirm()` (a dialog handler of Playwright's)."""
    dialog.accept()


@dataclass(frozen=True)
class Served:
    """A `fusee serve` child: its base URL, home and process."""

    url: str
    home: Path
    child: subprocess.Popen[str]


def write_app(directory: Path, source: str = APP_SOURCE, name: str = APP) -> Path:
    """Writes the workflow module into `directory`; returns the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    return directory


def start_serving(home: Path, app_dir: Path, *args: str, app: str = APP) -> Served:
    """Starts `fusee serve --http 127.0.0.1:0 ARGS` on `home`; returns once it serves."""
    child, serving = serve_http(home, app_dir, app, *args)
    return Served(serving["http"], home, child)


def stop(served: Served) -> None:
    """Stops the child (SIGTERM: it stops cleanly), killing it if it hangs."""
    stop_child(served.child)


@contextmanager
def browser() -> Iterator[object]:
    """A headless Chromium (the system's), as a Playwright `Browser`."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    if executable is None:
        raise RuntimeError("no chromium on PATH: apt-get install chromium")
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox does not start. The
        # rest keep it off the network, which this machine's closed network refuses.
        quiet = [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ]
        launched = p.chromium.launch(executable_path=executable, headless=True, args=quiet)
        try:
            yield launched
        finally:
            launched.close()
