"""The web UI's timeline: a run's history folded into operations, events and streams."""

from __future__ import annotations

from typing import Any

from fusee_runtime.control.ui import html
from fusee_runtime.control.ui.timeline import fold

T0 = "2026-12-05T12:00:00+00:00"


def at(ms: int) -> str:
    return f"2026-12-05T12:00:00.{ms:03d}000+00:00"


def failure(message: str) -> dict[str, Any]:
    return {"kind": "ValueError", "message": message, "traceback": "...", "cause": None}


def started(run_id: str, input: int) -> dict[str, Any]:
    fields = {"workflow_id": "r", "workflow": "wf", "deadline": None, "origin": None}
    return {"type": "RunStarted", "run_id": run_id, "input": input, "started_at": T0} | fields


# Records as `history()` gives them (`records.as_json`), numbered by their position below.
RECORDS: list[dict[str, Any]] = [
    started("old", 0),
    {"type": "RunReset", "run_id": "old", "reason": "reset", "closed_at": T0},
    started("r", 3),
    {
        "type": "StepCompleted",
        "run_id": "r",
        "op": "1",
        "seq": 1,
        "name": "prepare",
        "value": 4,
        "started_at": at(1),
        "ended_at": at(2),
    },
    {"type": "TimerStarted", "run_id": "r", "op": "2", "seq": 2, "name": "nap", "fire_at": at(50)},
    {"type": "TimerFired", "run_id": "r", "op": "2", "seq": 2, "fired_at": at(51)},
    {
        "type": "AttemptFailed",
        "run_id": "r",
        "op": "3",
        "seq": 3,
        "name": "flaky",
        "attempt": 1,
        "failure": failure("not yet"),
        "failed_at": at(60),
        "retry_at": at(70),
        "delay": 0.01,
        "started_at": at(55),
    },
    {
        "type": "StepCompleted",
        "run_id": "r",
        "op": "3",
        "seq": 3,
        "name": "flaky",
        "value": 4,
        "started_at": at(71),
        "ended_at": at(72),
    },
    {
        "type": "ChildStarted",
        "run_id": "r",
        "op": "4",
        "seq": 4,
        "workflow_id": "r-kid",
        "child_run_id": "kid-run",
        "workflow": "kid",
        "input": 4,
        "deadline": None,
        "parent_close": "terminate",
        "error": None,
        "started_at": at(73),
    },
    {
        "type": "ChildClosed",
        "run_id": "r",
        "op": "4",
        "seq": 4,
        "child_run_id": "kid-run",
        "status": "completed",
        "result": 5,
        "failure": None,
        "closed_at": at(74),
    },
    {
        "type": "StreamAppended",
        "run_id": "r",
        "op": "5",
        "seq": 5,
        "name": "progress",
        "item": {"done": 1},
    },
    {"type": "WaitStarted", "run_id": "r", "op": "6", "seq": 6, "name": "go", "deadline": None},
    {
        "type": "SignalReceived",
        "run_id": "r",
        "signal_id": 1,
        "name": "go",
        "value": "<b>",
        "received_at": at(80),
    },
    {
        "type": "WaitCompleted",
        "run_id": "r",
        "op": "6",
        "seq": 6,
        "signal_id": 1,
        "value": "<b>",
        "at": at(80),
    },
    {"type": "RunCompleted", "run_id": "r", "result": {"ok": True}, "closed_at": at(81)},
]
for lsn, rec in enumerate(RECORDS, 1):
    rec["lsn"] = lsn


def test_a_history_folds_into_operations_with_attempts() -> None:
    timeline = fold(RECORDS, "r")
    assert timeline.input == 3
    assert timeline.result == {"ok": True}
    assert timeline.closed == "completed"
    assert timeline.other_runs == 1
    ops = {o.op: o for o in timeline.operations}
    assert [(o.kind, o.name, o.state) for o in timeline.operations] == [
        ("step", "prepare", "completed"),
        ("sleep", "nap", "fired"),
        ("step", "flaky", "completed"),
        ("child", "kid", "completed"),
        ("stream", "progress", ""),
        ("signal", "go", "received"),
    ]
    flaky = ops["3"]
    assert [a.number for a in flaky.attempts] == [1, 2]
    assert flaky.attempts[0].failure == failure("not yet")
    assert html.duration(flaky.started_at, flaky.ended_at) == "17.0 ms"
    assert ops["4"].child == "r-kid"
    assert timeline.streams == {"progress": [{"done": 1}]}
    assert [e.type for e in timeline.events] == ["RunStarted", "SignalReceived", "RunCompleted"]


def test_values_from_a_run_are_shown_as_text_never_as_markup() -> None:
    assert html.value("<script>alert(1)</script>") == (
        '<pre class="value"><bdi>&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;</bdi></pre>'
    )
    assert 'href="/runs/%3Cb%3E%2Fx"' in html.run_link("<b>/x")
    assert "&lt;b&gt;/x" in html.run_link("<b>/x")
