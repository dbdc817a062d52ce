"""The web UI's drawing of a timeline: a bar per attempt of a step and its backoff, a
sleep, a wait and a child from when the code got to them to their end, a tick for an
item; placed in percent of the run's time, without an inline style."""

from __future__ import annotations

import re
from datetime import datetime

from test_ui_timeline import RECORDS, at

from fusee_runtime.control.ui.bars import bars
from fusee_runtime.control.ui.timeline import fold
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
    assert 'href="/runs/r-kid"' in drawn  # the child's row links to it
    ((_, width, cls, _),) = rects(drawn, "5")
    assert (width, cls) == (0.25, "mark")  # an item: a tick


def test_an_open_wait_runs_to_the_page_s_instant() -> None:
    open_records = RECORDS[:-3]  # the wait started, no signal yet, the run open
    run = info()
    still = RunInfo(run.id, run.run_id, run.workflow, Status.PARKED, run.started_at, None, None, {})
    drawn = bars(fold(open_records, "r"), still, datetime.fromisoformat(at(200)))
    ((x, width, cls, title),) = rects(drawn, "6")
    assert (x, width, cls, title) == (37.0, 63.0, "wait signal open", "signal go: waiting")
