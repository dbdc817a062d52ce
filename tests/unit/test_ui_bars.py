"""The web UI's drawing of a timeline: a bar per attempt of a step and its backoff, a
sleep, a wait and a child from when the code got to them to their end, a tick for an
item; placed in percent of the run's time, without an inline style."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from test_ui_timeline import RECORDS, at

from fusee_runtime.control.ui.bars import KEPT_PERCENT, SPANS_PER_ROW_MAX, bars
from fusee_runtime.control.ui.timeline import Operation, OpKind, Timeline, fold
from fusee_runtime.model.run import RunInfo, Status


def info() -> RunInfo:
    started = datetime.fromisoformat("2026-12-05T12:00:00+00:00")
    closed = datetime.fromisoformat(at(100))
    return RunInfo("r", "r", "wf", Status.COMPLETED, started, closed, None, {})


def rects(drawn: str, op: str) -> list[tuple[float, float, str, str]]:
    row = re.search(rf'data-op="{op}" data-count="1">(.*?)</div>', drawn)
    assert row, op
    return [
        (float(x), float(w), cls, title)
        for x, w, cls, title in re.findall(
            r'<rect x="([\d.]+)%" y="2" width="([\d.]+)%" height="12" class="([^"]+)">'
            r"<title>([^<]*)</title>",
            row.group(1),
        )
    ]


def test_each_attempt_its_backoff_and_each_wait_is_a_bar_in_time() -> None:
    drawn = bars(fold(RECORDS, "r"), info(), datetime.fromisoformat(at(100)))
    assert "style=" not in drawn
    # The run spans 100 ms: 1 ms is 1 %.
    (first, backoff, second) = rects(drawn, "3")
    assert first[:3] == (55.0, 5.0, "attempt fail")
    assert "attempt 1: 5.0 ms — ValueError: not yet" in first[3]
    assert backoff[:3] == (60.0, 11.0, "backoff")  # till the next attempt began
    assert second[:3] == (71.0, 1.0, "attempt ok")
    # The sleep's records say when it fired, not when it began: from the record before.
    ((x, width, cls, title),) = rects(drawn, "2")
    assert (x, width, cls, title) == (2.0, 49.0, "wait sleep", "sleep nap: fired")
    ((x, width, cls, _),) = rects(drawn, "4")
    assert (x, width, cls) == (73.0, 1.0, "wait child")
    assert 'href="/runs/r-kid?run=kid-run"' in drawn  # the child's row links to its run
    ((_, width, cls, _),) = rects(drawn, "5")
    assert (width, cls) == (0.25, "mark")  # an item: a tick


def test_an_open_wait_runs_to_the_page_s_instant() -> None:
    open_records = RECORDS[:-3]  # the wait started, no signal yet, the run open
    run = info()
    still = RunInfo(run.id, run.run_id, run.workflow, Status.PARKED, run.started_at, None, None, {})
    drawn = bars(fold(open_records, "r"), still, datetime.fromisoformat(at(200)))
    ((x, width, cls, title),) = rects(drawn, "6")
    assert (x, width, cls, title) == (37.0, 63.0, "wait signal open", "signal go: waiting")


def loop(kinds: list[tuple[OpKind, str]], times: int, kept_from: str | None = None) -> list:
    """Operations of a loop of `kinds`, `times` over, one a millisecond."""
    t0 = datetime.fromisoformat("2026-12-05T12:00:00+00:00")
    ops = []
    for n in range(times * len(kinds)):
        kind, name = kinds[n % len(kinds)]
        began = t0 + timedelta(milliseconds=n)
        o = Operation(str(len(ops) + 1), kind, name, "done", began, began, kept_from=kept_from)
        ops.append(o)
    return ops


def drawn_rows(drawn: str) -> list[tuple[str, str, str]]:
    return re.findall(
        r'<div class="bar-row kind-([a-z-]+)[^"]*" data-op="([^"]+)" data-count="(\d+)"', drawn
    )


def test_a_loop_of_a_step_and_ctx_now_is_one_row() -> None:
    ops = loop([(OpKind.STEP, "tick"), (OpKind.VALUE, "now")], 3000)
    drawn = bars(Timeline(operations=ops), info(), datetime.fromisoformat(at(100)))
    assert "not drawn" not in drawn
    # The values between the steps do not end the stretch: counted in it.
    assert drawn_rows(drawn) == [("step", "1–5999", "3000"), ("value", "6000", "1")]
    assert '×3,000</span> <span class="muted">(and 2,999 value)' in drawn


def test_a_loop_of_two_steps_is_a_row_for_each() -> None:
    ops = loop([(OpKind.STEP, "a"), (OpKind.VALUE, "now"), (OpKind.STEP, "b")], 2000)
    drawn = bars(Timeline(operations=ops), info(), datetime.fromisoformat(at(100)))
    assert "not drawn" not in drawn
    rows = drawn_rows(drawn)
    # A row for each step and one for the values between them, each across the run.
    assert [(kind, count) for kind, _, count in rows] == [
        ("step", "2000"),
        ("value", "2000"),
        ("step", "2000"),
    ]
    assert len(re.findall(r"<rect ", drawn)) <= 3 * SPANS_PER_ROW_MAX


def test_what_a_reset_kept_is_drawn_apart_before_the_run_s_own_start() -> None:
    # Kept from a run of two days before; this run began at 12:00 and ran 100 ms.
    kept = loop([(OpKind.STEP, "old")], 3, kept_from="source")
    for o in kept:
        o.started_at = o.ended_at = o.started_at - timedelta(days=2)  # type: ignore[operator]
    own = loop([(OpKind.STEP, "new")], 1)
    own[0].op = "4"
    own[0].started_at = own[0].ended_at = datetime.fromisoformat(at(50))
    drawn = bars(Timeline(operations=[*kept, *own]), info(), datetime.fromisoformat(at(100)))
    xs = [float(x) for x in re.findall(r'<rect x="([\d.]+)%"', drawn)]
    assert all(x <= KEPT_PERCENT for x in xs[:3])
    # The run's own time is the rest of the width, from its start: 50 ms of 100 ms.
    assert xs[3] == KEPT_PERCENT + (100 - KEPT_PERCENT) / 2
    assert '<text x="0%" y="12" class="tick kept">kept</text>' in drawn
