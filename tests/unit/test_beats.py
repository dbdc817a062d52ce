"""`Beats` at its edges: a thread beating after the engine's loop closed, and a flush
after the journal failed, neither raising into the step function nor the loop."""

from __future__ import annotations

import asyncio
from typing import Any

from fusee_runtime.clock import FakeClock
from fusee_runtime.engine.beats import Beats
from fusee_runtime.engine.state import Run
from fusee_runtime.errors import JournalFailed
from fusee_runtime.journal.records import R
from fusee_runtime.model.codec import from_array


def a_run() -> Run:
    return Run("r-1", "w-1", "wf", None, started_at=0.0, start_lsn=1)


def test_a_beat_after_the_loop_closed_is_kept_and_does_not_raise() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    appended: list[Any] = []
    beats = Beats(
        FakeClock(), lambda: loop, lambda run, rec: appended.append(rec) or 1, lambda: True
    )
    run = a_run()
    beats.beat(run, "1", "copy", 1, {"row": 1})
    beats.beat(run, "1", "copy", 1, {"row": 2})
    assert beats.pending == 1
    beats.flush_now()
    assert [rec.details.value for rec in appended] == [{"row": 2}]


def test_a_flush_after_the_journal_failed_does_not_raise() -> None:
    def failing(run: Run, rec: list[Any]) -> int:
        raise JournalFailed("the disk is full")

    beats = Beats(FakeClock(), lambda: None, failing, lambda: False)
    run = a_run()
    beats.beat(run, "1", "copy", 1, {"row": 1})
    beats.flush_now()
    assert beats.pending == 0


def test_the_run_keeps_only_the_latest_heartbeat_of_each_step() -> None:
    run = a_run()
    lsn = 1
    for row in range(3):
        for seq in ("1", "2"):
            lsn += 1
            run.apply(
                lsn,
                from_array([R.StepHeartbeat, "r-1", seq, "copy", 1, {"row": row}, 0.0, row + 1]),
            )
    kept = [(rec.seq, rec.details.value) for _, rec in run.records if rec.code == R.StepHeartbeat]
    assert kept == [("1", {"row": 2}), ("2", {"row": 2})]
    assert [lsn for lsn, _ in run.records] == sorted(lsn for lsn, _ in run.records)


def test_a_replaced_heartbeat_leaves_the_list_a_checkpoint_holds_as_it_was() -> None:
    run = a_run()
    run.apply(2, from_array([R.StepHeartbeat, "r-1", "1", "copy", 1, {"row": 0}, 0.0, 1]))
    run.apply(3, from_array([R.TimerStarted, "r-1", "2", "nap", 10.0]))
    held, n = run.records, len(run.records)  # what a checkpoint's snapshot keeps
    before = list(held[:n])
    run.apply(4, from_array([R.StepHeartbeat, "r-1", "1", "copy", 1, {"row": 1}, 0.0, 2]))
    assert held[:n] == before
    assert [lsn for lsn, _ in run.records] == [3, 4]
