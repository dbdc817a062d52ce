"""A run's page in headless Chromium (issue 42, items 3 to 6): what a reset run kept,
an address for every run of an id and links between them, the attempt that paused a
step and a patch marker in the CLI's words, and only the actions that apply.

As in test_ui_browser.py, each test waits for what the page shows (Playwright's
`expect`); the workflows (tests/ui/ui_helpers.py) wait on signals.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from playwright.sync_api import expect
from processes import fusee_script
from ui_helpers import REPO, Served

pytestmark = pytest.mark.xdist_group("ui-browser")


def start(served: Served, workflow: str, input: Any, id: str) -> None:
    answer = httpx.post(
        f"{served.url}/v1/runs", json={"workflow": workflow, "input": input, "id": id}
    )
    assert answer.status_code == 201, answer.text


def shown_run(page: Any) -> str:
    return page.locator("h1.run-id").get_attribute("data-run")


def test_a_reset_run_shows_the_operations_and_stream_items_it_kept(
    served: Served, page: Any
) -> None:
    start(served, "ui_kept", 1, "kept-1")
    page.goto(served.url + "/runs/kept-1")
    expect(page.locator("dl.facts")).to_contain_text("signal go")
    before = shown_run(page)
    # ui_charge is operation 4: the reset keeps 1-3 (an item, ui_first, an item).
    page.locator('table.timeline tr[data-op="4"] button[data-action=reset]').click()
    expect(page.locator("dl.facts")).to_contain_text("Reset from")
    expect(page.locator("dl.facts")).to_contain_text("signal go")

    ops = page.locator("table.timeline tr.op")
    expect(ops).to_have_count(6)
    assert ops.evaluate_all("rows => rows.map(r => r.dataset.op)") == [str(n) for n in range(1, 7)]
    kept = page.locator("table.timeline tr.op.kept")
    assert kept.evaluate_all("rows => rows.map(r => r.dataset.op)") == ["1", "2", "3"]
    expect(kept.nth(1)).to_contain_text("ui_first")
    expect(kept.nth(1)).to_contain_text("kept from before the reset")
    expect(page.locator('table.timeline tr[data-op="4"]')).not_to_contain_text("kept")

    items = page.locator("ol.stream li")
    assert items.all_text_contents() == ['"queued"', '"first"', '"charged"']
    expect(page.locator("ol.stream li.kept")).to_have_count(2)
    heading = page.locator('h3[data-stream="progress"]')
    expect(heading).to_contain_text("3 items, 2 kept from before the reset")
    # Drawn too, as kept.
    expect(page.locator(".bars .bar-row.kept")).to_have_count(3)
    # What tail-stream gives, the page gives: the same items, in order.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    home = ["--home", str(served.home)]
    tail = subprocess.run(
        [fusee_script(), "tail-stream", "kept-1", "progress", "--no-follow", *home],
        capture_output=True,
        env=env,
        check=True,
        text=True,
    )
    streamed = [orjson.loads(line) for line in tail.stdout.splitlines()]
    shown = [orjson.loads(text) for text in items.all_text_contents()]
    assert streamed == shown == ["queued", "first", "charged"]
    assert before != shown_run(page)


def test_every_run_of_an_id_has_its_own_page_and_the_chain_links_them(
    served: Served, page: Any
) -> None:
    start(served, "ui_kept", 2, "chain-1")
    page.goto(served.url + "/runs/chain-1")
    expect(page.locator("dl.facts")).to_contain_text("signal go")
    old = shown_run(page)
    reset = httpx.post(f"{served.url}/v1/runs/chain-1/reset", json={"to": 4})
    assert reset.status_code == 200, reset.text
    new = reset.json()["run_id"]
    assert new != old

    page.goto(served.url + "/?id=chain-")
    rows = page.locator('table.runs tr[data-id="chain-1"]')
    expect(rows).to_have_count(2)
    links = rows.locator("td.id a").evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert links == [f"/runs/chain-1?run={new}", f"/runs/chain-1?run={old}"]

    rows.nth(1).locator("td.id a").click()  # the earlier run, on a page of its own
    expect(page.locator("dl.facts .status").first).to_have_text("reset")
    assert shown_run(page) == old
    facts = page.locator("dl.facts")
    expect(facts).to_contain_text("Reset as")
    # A run that is not the newest acts on nothing: the API's acts go to the newest.
    expect(page.locator("button[data-action]")).to_have_count(0)
    facts.locator(f'dd a[href="/runs/chain-1?run={new}"]').first.click()
    expect(facts).to_contain_text("Reset from")
    assert shown_run(page) == new
    expect(facts.locator(f'dd a[href="/runs/chain-1?run={old}"]').first).to_be_visible()
    expect(facts).to_contain_text("1 other run of this id")

    start(served, "ui_looping", 0, "loop-1")
    page.goto(served.url + "/runs/loop-1")
    expect(facts).to_contain_text("signal go")
    expect(facts).to_contain_text("Continued from")
    newest = shown_run(page)
    facts.locator("dt:text-is('Continued from') + dd a").click()
    expect(page.locator("dl.facts .status").first).to_have_text("continued_as_new")
    expect(facts.locator("dt:text-is('Continued as') + dd a")).to_have_attribute(
        "href", f"/runs/loop-1?run={newest}"
    )


def test_a_paused_step_shows_the_attempt_that_paused_it_and_a_patch_in_words(
    served: Served, page: Any
) -> None:
    start(served, "ui_paused", 1, "paused-1")
    page.goto(served.url + "/runs/paused-1")
    expect(page.locator("dl.facts .status").first).to_have_text("paused")
    attempts = page.locator('table.timeline tr.op-step:has-text("ui_flaky") ol.attempts li')
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_contain_text("attempt 1")
    expect(attempts.nth(1)).to_contain_text("attempt 2")
    expect(attempts.nth(1)).to_contain_text("ValueError: not yet 2")
    expect(attempts.nth(1)).to_contain_text("paused, waits for resume")
    patch = page.locator("table.timeline tr.op-patch")
    expect(patch).to_contain_text("patch gift-wrap: this run takes the patched branch")
    expect(page.locator("#live")).not_to_contain_text("PatchMarked")
    expect(page.locator(".bars .bar-row.kind-step rect.paused")).to_have_count(1)

    # A paused run is the one run Resume is offered on; it runs the step again.
    page.click("button[data-action=resume]")
    expect(attempts).to_have_count(4)  # a fresh budget: 1, 2 again, paused again
    expect(attempts.nth(1)).to_contain_text("resumed at")
    expect(attempts.nth(2)).to_contain_text("attempt 1")


def test_a_run_shows_only_the_actions_that_apply(served: Served, page: Any) -> None:
    def buttons() -> list[str]:
        return page.locator("button[data-action]:visible").evaluate_all(
            "bs => bs.map(b => b.dataset.action)"
        )

    start(served, "ui_quick", 3, "closed-1")
    page.goto(served.url + "/runs/closed-1")
    expect(page.locator("dl.facts .status").first).to_have_text("completed")
    # Reset is all a completed run takes (its step, the newest run's).
    assert buttons() == ["reset"]
    expect(page.locator("form[data-action=signal]")).to_be_hidden()
    expect(page.get_by_role("link", name="Its children")).to_have_count(0)

    start(served, "ui_gated", 4, "open-1")
    page.goto(served.url + "/runs/open-1")
    expect(page.locator("dl.facts")).to_contain_text("signal next")
    assert buttons() == ["cancel", "terminate", "reset"]
    expect(page.get_by_role("link", name="Its children")).to_have_count(0)
    # Once it closes, live, the acts on an open run go, the signal form with them.
    httpx.post(f"{served.url}/v1/runs/open-1/signals/next", json=None).raise_for_status()
    page.fill("form[data-action=signal] input[name=name]", "finish")
    page.click("form[data-action=signal] button")
    expect(page.locator("dl.facts .status").first).to_have_text("completed")
    expect(page.locator("button[data-action=cancel]")).to_have_count(0)
    expect(page.locator("form[data-action=signal]")).to_be_hidden()

    start(served, "ui_parent", 5, "parent-1")
    page.goto(served.url + "/runs/parent-1")
    expect(page.locator("dl.facts .status").first).to_have_text("completed")
    page.get_by_role("link", name="Its children").click()
    expect(page.locator('table.runs tr[data-id="parent-1-kid"]')).to_be_visible()


def test_the_event_history_shows_every_record_and_downloads_the_export(
    served: Served, page: Any, tmp_path: Path
) -> None:
    start(served, "ui_gated", 6, "hist-1")
    page.goto(served.url + "/runs/hist-1")
    expect(page.locator("dl.facts")).to_contain_text("signal next")
    page.get_by_role("link", name="Event history").click()
    records = httpx.get(f"{served.url}/v1/runs/hist-1/history").json()
    rows = page.locator("table.history tbody tr")
    expect(rows).to_have_count(len(records))
    assert rows.evaluate_all("rs => rs.map(r => Number(r.dataset.lsn))") == [
        r["lsn"] for r in records
    ]
    step = page.locator("table.history tr:has-text('StepCompleted')")
    expect(step).to_contain_text("ui_first")
    expect(step.locator("td").last).to_have_text("7")  # its value, as `fusee history` has it
    expect(page.locator("table.history tr:has-text('WaitStarted')")).to_contain_text("no timeout")
    # It follows the run live, as the timeline does.
    httpx.post(f"{served.url}/v1/runs/hist-1/signals/next", json=None).raise_for_status()
    expect(page.locator("table.history tr:has-text('ui_second')")).to_have_count(1)

    with page.expect_download() as download:
        page.click("nav.tabs a.download")
    saved = tmp_path / "history.json"
    download.value.save_as(saved)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cli = subprocess.run(
        [fusee_script(), "history", "hist-1", "--home", str(served.home), "--export", "-"],
        capture_output=True,
        env=env,
        check=True,
    )
    assert saved.read_bytes() == cli.stdout  # `fusee history --export`, byte for byte
    assert orjson.loads(saved.read_bytes())["run_id"] == shown_run(page)


def test_an_act_confirmed_after_another_client_reset_the_run_is_refused(
    served: Served, page: Any
) -> None:
    """With the confirmation open, another client resets the run: accepting acts on
    nothing (the act names the run shown), not on the new run. And on `/runs/ID` the
    heading follows the live part to the new run."""
    from ui_helpers import accept

    start(served, "ui_gated", 7, "race-1")
    page.goto(served.url + "/runs/race-1")
    expect(page.locator("dl.facts")).to_contain_text("signal next")
    page.remove_listener("dialog", accept)
    shown = [shown_run(page)]

    def reset_then_accept(dialog: Any) -> None:
        answer = httpx.post(f"{served.url}/v1/runs/race-1/reset", json={"to": 1})
        assert answer.status_code == 200, answer.text
        shown.append(answer.json()["run_id"])
        dialog.accept()

    page.on("dialog", reset_then_accept)
    flash = page.locator("#flash")
    for act in ("cancel", "terminate", "reset"):
        page.locator(f"button[data-action={act}]").first.click()
        expect(flash).to_contain_text(f"{act} refused")
        expect(flash).to_contain_text(shown[-2])
        # The live part, and the heading with it, names the new run.
        expect(page.locator("#run-state")).to_have_attribute("data-run", shown[-1])
        expect(page.locator("h1.run-id")).to_have_attribute("data-run", shown[-1])
    page.fill("form[data-action=signal] input[name=name]", "next")
    page.click("form[data-action=signal] button")
    expect(flash).to_contain_text("signal refused")
    newest = httpx.get(f"{served.url}/v1/runs/race-1").json()
    assert (newest["run_id"], newest["status"]) == (shown[-1], "parked")
    history = httpx.get(f"{served.url}/v1/runs/race-1/history?run_id={shown[-1]}").json()
    assert not [r for r in history if r["run_id"] == shown[-1] and r["type"] == "SignalReceived"]
